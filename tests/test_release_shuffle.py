"""The lake release cut through the staging directory (daskmicro.io.shuffle, graph.release).

The class under test: whatever the layout (input files, rows per file, hive partitions, row ids)
and the dtypes of the passed-through and QI columns, the files of a directory release hold exactly
the rows, values and order of the same run's single-file release (made by another path: one
frame sorted in memory; stratified by the partition columns, which a partitioned release's are), cut at exactly ``rows_per_file`` rows; nothing of the exchange is left in
the committed directory; a fragment write after the staging directory was discarded fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize_file
from daskmicro.io import shuffle as sh
from daskmicro.io.layout import KEY_COLUMN, plan_files
from daskmicro.io.source import RID


_EXTRA = {
    "text": lambda rng, n: pd.Series(rng.choice(["u", "v", None], n), dtype=object),
    "category": lambda rng, n: pd.Categorical(rng.choice(["p", "q", "r"], n)),
    "int64": lambda rng, n: rng.integers(-5, 5, n),
    "nullable": lambda rng, n: pd.array(np.where(rng.random(n) < 0.2, None, rng.integers(0, 9, n)), dtype="Int64"),
    "time": lambda rng, n: pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 10 ** 6, n), unit="s"),
    "bool": lambda rng, n: rng.random(n) < 0.5,
}
_QI = {
    "float64": lambda rng, n: rng.normal(size=n) * 1e3,
    "float32": lambda rng, n: rng.normal(size=n).astype(np.float32),
    "int64": lambda rng, n: rng.integers(-10 ** 6, 10 ** 6, n),
}


def _frame(seed, n, qi_dtype, extra):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": _QI[qi_dtype](rng, n), "b": rng.normal(size=n), "region": rng.choice(["n", "s"], n)})
    df["extra"] = _EXTRA[extra](rng, n)
    return df


def _write(root: Path, df, files):
    root.mkdir(parents=True)
    for i, idx in enumerate(np.array_split(np.arange(len(df)), files)):
        df.iloc[idx].to_parquet(root / f"f{i}.parquet", index=False)
    return root


def _plain(df):
    out = df.copy()
    for c in out.columns:
        if isinstance(out[c].dtype, pd.CategoricalDtype):
            out[c] = out[c].astype(object)
    return out.reset_index(drop=True)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10 ** 6), n=st.integers(40, 700), files=st.integers(1, 5),
       rows_per_file=st.sampled_from([7, 60, 250, 10 ** 6]), hive=st.booleans(), keep_row_id=st.booleans(),
       qi_dtype=st.sampled_from(sorted(_QI)), extra=st.sampled_from(sorted(_EXTRA)))
def test_lake_files_are_the_single_file_release_cut(client, tmp_path_factory, seed, n, files, rows_per_file, hive,
                                                      keep_row_id, qi_dtype, extra):
    tmp = tmp_path_factory.mktemp("shuffle")
    df = _frame(seed, n, qi_dtype, extra)
    src = _write(tmp / "in", df, files)
    opts = dict(qi=["a", "b"], k=3, seed=seed, keep_row_id=keep_row_id, client=client, keep=["extra"])
    # hive partitions are strata: the partitioned release is the stratified single-file release, cut
    anonymize_file(src, tmp / "one.parquet", strata=["region"] if hive else None, **opts)
    lake = tmp / "lake"
    anonymize_file(src, lake, rows_per_file=rows_per_file, partition_by=["region"] if hive else None, **opts)

    names = sorted(str(p.relative_to(lake)) for p in lake.rglob("*"))
    assert not any(sh.SHUFFLE_DIR in x or sh.COUNTS_DIR in x or x.rsplit("/", 1)[-1].startswith(".") for x in names), names
    one = _plain(pd.read_parquet(tmp / "one.parquet"))
    groups = [(one, lake)] if not hive else [
        (one[one.region == r].drop(columns="region"), lake / f"region={r}") for r in sorted(set(df.region))]
    for expected, folder in groups:
        parts = sorted(folder.glob("part-*.parquet"))
        sizes = [pq.ParquetFile(p).metadata.num_rows for p in parts]
        assert all(s == rows_per_file for s in sizes[:-1]) and 0 < sizes[-1] <= rows_per_file
        got = _plain(pd.concat([pq.read_table(p).to_pandas() for p in parts], ignore_index=True))
        pd.testing.assert_frame_equal(got, _plain(expected), check_dtype=False)
    manifest = json.loads((lake / "_SUCCESS").read_text())
    assert manifest["rows"] == {"in": n, "out": n}


def _piece(n, seed=0, row0=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"v": rng.normal(size=n), "t": rng.choice(["x", "y"], n), RID: np.arange(row0, row0 + n)})


def _plan(n, rows_per_file, seed):
    from daskmicro.io.layout import cut_keys, cut_ranges, key_histogram, keys_in_ranges, merge_range_keys

    whole = _piece(n)
    wanted = cut_ranges(key_histogram(whole, seed, []), rows_per_file)
    cuts = cut_keys(wanted, merge_range_keys(keys_in_ranges(whole, seed, [], wanted)))
    return plan_files([], {(): n}, rows_per_file, cuts)


def test_fragments_rewritten_the_same_and_files_sorted(tmp_path):
    n, seed = 1000, 4
    files = _plan(n, 300, seed)
    schema = pa.schema([pa.field("v", pa.float64()), pa.field("t", pa.string())])
    fschema = sh.fragment_schema(schema, keep_row_id=False)
    folder = tmp_path / sh.SHUFFLE_DIR
    folder.mkdir()
    whole = _piece(n)
    chunks = [whole.iloc[:450], whole.iloc[450:]]
    target = sh.FragmentTarget(seed, [], files, {(): 0}, fschema, folder)
    counts = [sh.scatter_piece(c, i, target) for i, c in enumerate(chunks)]
    first = {p.name: p.read_bytes() for p in folder.iterdir()}
    again = sh.scatter_piece(chunks[0], 0, target)  # a task run twice
    assert again == counts[0] and {p.name: p.read_bytes() for p in folder.iterdir()} == first
    assert sorted(sum((list(c) for c in counts), [])) == sorted(j for c in counts for j in c)
    assert sum(sum(c.values()) for c in counts) == n
    out = []
    for j in range(files[()][1]):
        frags = [sh.fragment_path(folder, j, i) for i, c in enumerate(counts) if j in c]
        path = tmp_path / f"part-{j}.parquet"
        res = sh.write_file(str(path), schema, False, frags)
        table = pq.read_table(path)
        assert table.schema.remove_metadata().equals(schema) and res["rows"] == table.num_rows
        out.append(table.to_pandas())
    got = pd.concat(out, ignore_index=True)
    from daskmicro.release.publish import shuffle_keys

    order = np.argsort(shuffle_keys(seed, whole[RID].to_numpy()), kind="stable")
    pd.testing.assert_frame_equal(got, whole.iloc[order][["v", "t"]].reset_index(drop=True))
    assert [len(o) for o in out] == [300, 300, 300, 100]
    assert KEY_COLUMN not in got.columns and RID not in got.columns


def test_no_fragment_once_the_staging_directory_is_gone(tmp_path):
    seed = 1
    files = _plan(200, 50, seed)
    schema = pa.schema([pa.field("v", pa.float64()), pa.field("t", pa.string())])
    folder = tmp_path / "staging" / sh.SHUFFLE_DIR     # never created: as after discard_staging
    with pytest.raises(OSError):
        sh.scatter_piece(_piece(200), 0, sh.FragmentTarget(seed, [], files, {(): 0}, sh.fragment_schema(schema, False),
                                                           folder))
    assert not (tmp_path / "staging").exists()
