"""Lake runs (daskmicro.plan, daskmicro.graph.executor): bad-input matrix, hive lakes, filters, strata, missing values,
manifest and no-op re-runs, determinism across input files and worker counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster

from daskmicro import cli as lake_cli
from daskmicro.graph import executor
from daskmicro.cli import build_parser
from daskmicro.errors import InputError, ParameterError, VerificationError
from daskmicro.io.filters import parse_filter
from daskmicro.privacy import verify_k_anonymity

SECRET = 123456.789  # a raw QI value that must never appear in a message


def frame(n=120, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "x": rng.normal(size=n), "y": rng.integers(0, 1000, n).astype(np.int64),
        "s": np.array(["a", "b", "c"])[np.arange(n) % 3], "year": 2018 + np.arange(n) % 4,
        "id": np.arange(n, dtype=np.int64),
    })


def write_files(root: Path, df: pd.DataFrame, files: int = 3) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        df.iloc[part].to_parquet(root / f"f{i}.parquet", index=False)
    return root


def run(argv, client):
    """Like ``daskmicro.cli.main`` but on the shared test cluster: (exit code, stdout-free error)."""
    args = build_parser().parse_args(["anonymize", *map(str, argv)])
    try:
        return lake_cli.run_anonymize(args, client=client), ""
    except (InputError, ParameterError, VerificationError, ValueError, OSError) as exc:
        return 2, str(exc)


def listing(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --------------------------------------------------------------------------- bad-input matrix


def _nan(d, df):
    df = df.copy(); df.loc[5, "x"] = np.nan; df.loc[9, "x"] = SECRET
    return write_files(d, df)


def _null_int(d, df):
    t = pa.Table.from_pandas(df.astype({"y": "Int64"}).assign(y=lambda f: f.y.mask(f.index == 4)), preserve_index=False)
    d.mkdir(); pq.write_table(t, d / "f.parquet")
    return d


def _inf(sign):
    def make(d, df):
        df = df.copy(); df.loc[3, "x"] = sign * np.inf; df.loc[4, "x"] = SECRET
        return write_files(d, df)
    return make


def _strings(d, df):
    return write_files(d, df.assign(y=[f"v{i}" for i in range(len(df))]))


def _categorical(d, df):
    # Parquet has no categorical type: integer categories come back as plain integers (accepted);
    # text categories come back as dictionary-encoded strings, refused like any text column
    return write_files(d, df.assign(y=df.y.astype(str).astype("category")), files=1)


def _huge(d, df):
    return write_files(d, df.assign(x=df.x * 1e300))


def _dup_names(d, df):
    d.mkdir()
    pq.write_table(pa.table([df.x.to_numpy(), df.y.to_numpy(), df.x.to_numpy()], names=["x", "y", "x"]), d / "f.parquet")
    return d


def _empty_dataset(d, df):
    return write_files(d, df.iloc[:0], files=2)


def _empty_file(d, df):
    write_files(d, df); (d / "f9.parquet").write_bytes(b"")
    return d


def _corrupt(d, df):
    write_files(d, df); (d / "f1.parquet").write_bytes(b"PAR1 not really parquet")
    return d


def _mixed(d, df):
    write_files(d, df); df.iloc[:10].astype({"y": float}).to_parquet(d / "f2.parquet", index=False)
    return d


def _same(d, df):
    return write_files(d, df)


def _missing_path(d, df):
    return d / "nope"


BAD = {
    "nan": (_nan, [], ["'x' (1)", "missing"]),
    "nullable-int-with-NA": (_null_int, [], ["'y' (1)", "missing"]),
    "+inf": (_inf(1), [], ["'x'", "+inf 1"]),
    "-inf": (_inf(-1), [], ["'x'", "-inf 1"]),
    "strings": (_strings, [], ["'y'", "not numeric"]),
    "categorical": (_categorical, [], ["'y'", "not numeric"]),
    "huge": (_huge, [], ["'x'", "overflow"]),
    "duplicate-names": (_dup_names, [], ["duplicate column", "'x'", "f.parquet"]),
    "qi-is-stratum": (_same, ["--strata", "x"], ["strata", "'x'", "quasi-identifiers"]),
    "k<2": (_same, ["--k", "1"], ["k must be"]),
    "k>n": (_same, ["--k", "121"], ["k = 121", "n = 120"]),
    "empty-dataset": (_empty_dataset, [], ["no rows"]),
    "filter-leaves-nothing": (_same, ["--filter", "year>3000"], ["no rows"]),
    "empty-file": (_empty_file, [], ["empty file", "f9.parquet"]),
    "corrupt": (_corrupt, [], ["cannot read", "f1.parquet"]),
    "mixed-schemas": (_mixed, [], ["schema of", "f2.parquet", "'y'"]),
    "missing-path": (_missing_path, [], ["not found", "nope"]),
    "unknown-qi": (_same, ["--qi", "x,zz"], ["'zz'"]),
    "small-stratum": (_same, ["--strata", "s", "--k", "41"], ["stratum 1 of", "(column s)", "fewer than k = 41", "--merge-small-strata"]),
    "bad-filter": (_same, ["--filter", "year >> 3"], ["--filter"]),
    "filter-unknown-column": (_same, ["--filter", "zz=1"], ["'zz'"]),
    "drop-a-qi": (_same, ["--drop", "x"], ["--drop", "'x'"]),
    "partition-by-qi": (_same, ["--partition-by", "y"], ["--partition-by", "'y'"]),
    "memory": (_same, ["--method", "mdav"], ["needs about", "partitioned"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(case, tmp_path, client, monkeypatch):
    make, extra, needles = BAD[case]
    if case == "memory":
        monkeypatch.setattr(executor, "worker_memory", lambda c: 10_000)
    src = make(tmp_path / "in", frame())
    before = listing(tmp_path)
    argv = [src, tmp_path / "out", "--qi", "x,y", "--k", "3", "--keep", "id", *extra]
    if "--qi" in extra:
        argv = [src, tmp_path / "out", "--k", "3", "--keep", "id", *extra]
    code, err = run(argv, client)
    assert code == 2 and err and "\n" not in err, err
    for needle in needles:
        assert needle in err, err
    assert "123456" not in err and "e+300" not in err          # columns and counts, never values
    assert listing(tmp_path) == before                          # nothing written, no staging left


def test_output_inside_input(tmp_path, client):
    src = write_files(tmp_path / "in", frame())
    code, err = run([src, src / "out", "--qi", "x,y", "--k", "3"], client)
    assert code == 2 and "inside" in err and not (src / "out").exists()


def test_constant_column_is_published_unchanged(tmp_path, client):
    src = write_files(tmp_path / "in", frame().assign(y=7))
    assert run([src, tmp_path / "out", "--qi", "x,y", "--k", "3", "--seed", "0", "--keep", "id"], client)[0] == 0
    rel = pd.read_parquet(tmp_path / "out")
    assert (rel.y == 7).all() and json.loads((tmp_path / "out/_report.json").read_text())["constant_columns"] == ["y"]


def _private_report(capsys) -> dict:
    """The exact report of the run just made, from its private run record (its path on stderr)."""
    import re

    found = re.findall(r"private run record .*: (\S+)\s*$", capsys.readouterr().err, re.M)
    assert found
    return json.loads(Path(found[-1]).read_text())["report"]


def test_reference_is_exact_mdav_on_the_released_records(tmp_path, client, capsys):
    df = frame(600, seed=4)
    src = write_files(tmp_path / "in", df)
    argv = [src, tmp_path / "out", "--qi", "x,y", "--k", "3", "--method", "partitioned", "--K", "20",
            "--partition-size", "60", "--task-rows", "200", "--seed", "1", "--no-dask-report", "--keep", "id"]
    assert run(argv, client)[0] == 0
    rep = json.loads((tmp_path / "out/_report.json").read_text())
    from daskmicro import information_loss, mdav, standardize

    X = df[["x", "y"]].to_numpy(np.float64)
    exact = information_loss(X, mdav(standardize(X)[0], 3))
    # the reference's kind is published, its value (a figure of the original spread) is private
    exact_rep = _private_report(capsys)
    assert rep["reference"]["kind"] == "exact" and "reference_information_loss" not in rep
    assert exact_rep["reference_information_loss"] == pytest.approx(exact)
    # the pipeline's improvement stage may go below exact MDAV, not far below it
    assert exact_rep["information_loss"] >= exact * 0.75
    # stratified: each stratum is z-scored and anonymized on its own and the run reports the
    # record-weighted mean IL; the reference is the same mean over exact MDAV on each stratum
    argv = [src, tmp_path / "out2", "--qi", "x,y", "--k", "3", "--strata", "s", "--method", "partitioned",
            "--K", "20", "--partition-size", "60", "--task-rows", "100", "--seed", "1", "--no-dask-report",
            "--keep", "id"]
    assert run(argv, client)[0] == 0
    rep = json.loads((tmp_path / "out2/_report.json").read_text())
    per = {}
    for s, part in df.groupby("s"):
        Xs = part[["x", "y"]].to_numpy(np.float64)
        per[s] = (len(part), information_loss(Xs, mdav(standardize(Xs)[0], 3)))
    want = sum(n * il for n, il in per.values()) / len(df)
    exact_rep = _private_report(capsys)
    assert rep["reference"]["kind"] == "exact" and exact_rep["reference_information_loss"] == pytest.approx(want)
    assert sorted(g["n"] for g in rep["reference"]["groups"]) == sorted(n for n, _ in per.values())
    assert all(g["kind"] == "exact" for g in rep["reference"]["groups"])
    assert all("information_loss" not in g for g in rep["reference"]["groups"] + rep["strata"]["groups"])
    assert exact_rep["information_loss"] >= want * 0.75


# --------------------------------------------------------------------------- lake features


def test_hive_lake_filter_projection_manifest_noop(tmp_path, client, capsys):
    df = frame(240)
    root = tmp_path / "lake"
    for (year, s), g in df.groupby(["year", "s"]):
        d = root / f"year={year}" / f"s={s}"
        d.mkdir(parents=True)
        g.drop(columns=["year", "s"]).to_parquet(d / "p.parquet", index=False)
    out = tmp_path / "rel"
    argv = [root, out, "--qi", "x,y", "--k", "3", "--filter", "year>=2019 and s in (a,b)",
            "--columns", "x,y,year,s", "--seed", "3"]
    assert run(argv, client)[0] == 0
    keep = df[(df.year >= 2019) & df.s.isin(["a", "b"])]
    parts = sorted({str(p.parent.relative_to(out)) for p in out.rglob("*.parquet")})
    assert parts == sorted(f"year={y}/s={s}" for y in (2019, 2020, 2021) for s in "ab")   # like the input
    rel = pd.read_parquet(out)
    assert len(rel) == len(keep) and "id" not in rel.columns
    assert verify_k_anonymity(rel, ["x", "y"], 3)
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["rows"] == {"in": len(keep), "out": len(keep)}
    assert manifest["configuration"]["k"] == 3
    # the seed and the input's files (paths, sizes, times) never ship with the release
    assert "seed" not in manifest and "seed" not in manifest["configuration"] and "input" not in manifest
    assert {"fingerprint", "daskmicro_version", "metrics", "files"} <= set(manifest)
    stamp = (out / "_SUCCESS").stat().st_mtime_ns
    capsys.readouterr()
    assert run(argv, client)[0] == 0 and "nothing to do" in capsys.readouterr().out
    assert (out / "_SUCCESS").stat().st_mtime_ns == stamp
    assert run(argv + ["--force"], client)[0] == 0 and (out / "_SUCCESS").stat().st_mtime_ns != stamp
    code, err = run(argv[:-1] + ["4"], client)                 # other seed: a different run
    assert code == 2 and "already exists" in err
    assert run(argv[:-1] + ["4", "--overwrite"], client)[0] == 0
    assert json.loads((out / "_SUCCESS").read_text())["fingerprint"] != manifest["fingerprint"]  # another run


def test_strata_drop_keep_row_id(tmp_path, client):
    df = frame(150)
    src = write_files(tmp_path / "in", df)
    out = tmp_path / "out"
    assert run([src, out, "--qi", "x,y", "--k", "4", "--strata", "s", "--drop", "id", "--keep-row-id",
                "--seed", "1", "--partition-by", "s"], client)[0] == 0
    rel = pd.read_parquet(out)
    assert "id" not in rel.columns and sorted(rel.row_id) == list(range(150))
    rel = rel.sort_values("row_id").reset_index(drop=True)
    assert (rel.s.astype(str).to_numpy() == df.s.to_numpy()).all()
    for _, g in rel.groupby(["x", "y"]):                      # no cell crosses a stratum
        assert len(g) >= 4 and g.s.nunique() == 1
    assert len(json.loads((out / "_report.json").read_text())["strata"]["groups"]) == 3


def test_merge_small_strata(tmp_path, client):
    df = frame(100).assign(s=["a"] * 60 + ["b"] * 2 + ["c"] * 38)
    src = write_files(tmp_path / "in", df)
    code, err = run([src, tmp_path / "o1", "--qi", "x,y", "--k", "3", "--strata", "s", "--keep", "id"], client)
    assert code == 2 and "stratum 2 of 3 (column s) in key order has 2 record(s)" in err
    assert "s=b" not in err                                    # a stratum's value is data: never in a message
    assert run([src, tmp_path / "o2", "--qi", "x,y", "--k", "3", "--strata", "s", "--merge-small-strata",
                "--keep", "id"], client)[0] == 0
    groups = json.loads((tmp_path / "o2/_report.json").read_text())["strata"]["groups"]
    assert [g["group"] for g in groups] == ["stratum 1 of 3 (column s)", "strata 2+3 of 3 (column s)"]


def test_missing_separate_keeps_gaps(tmp_path, client):
    df = frame(90)
    df.loc[:11, "x"] = np.nan
    src = write_files(tmp_path / "in", df)
    out = tmp_path / "out"
    assert run([src, out, "--qi", "x,y", "--k", "3", "--missing", "separate", "--keep-row-id", "--keep", "id"],
               client)[0] == 0
    rel = pd.read_parquet(out).sort_values("row_id").reset_index(drop=True)
    assert rel.x.isna().sum() == 12 and (rel.x.isna() == df.x.isna()).all()
    assert verify_k_anonymity(rel, ["x", "y"], 3)
    df.loc[:1, "y"] = np.nan
    src2 = write_files(tmp_path / "in2", df.astype({"y": "Int64"}))
    code, err = run([src2, tmp_path / "o2", "--qi", "x,y", "--k", "3", "--missing", "separate", "--keep", "id"], client)
    assert code == 2 and "missing 'x', 'y'" in err and "fewer than k = 3" in err


def test_single_file_output_with_strata(tmp_path, client):
    src = write_files(tmp_path / "in", frame())
    out = tmp_path / "r.parquet"
    assert run([src, out, "--qi", "x,y", "--k", "3", "--strata", "s", "--keep", "id"], client)[0] == 0
    rel = pd.read_parquet(out)
    assert len(rel) == 120 and verify_k_anonymity(rel, ["x", "y"], 3)
    assert out.with_suffix(".report.json").exists()


def test_release_bytes_do_not_depend_on_files_or_workers(tmp_path, client, monkeypatch):
    monkeypatch.setattr(executor, "SMALL_GROUP_ROWS", 500)   # strata of 1000 rows go through the pipeline
    df = frame(3000, seed=5)
    opts = ["--qi", "x,y", "--k", "5", "--strata", "s", "--seed", "9", "--rows-per-file", "700",
            "--partition-size", "400", "--K", "100", "--keep", "id"]
    outs = []
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as lc, \
            Client(lc, set_as_default=False) as one:
        for files, c in ((1, one), (4, client)):
            src = write_files(tmp_path / f"in{files}", df, files=files)
            out = tmp_path / f"out{files}"
            assert run([src, out, *opts], c)[0] == 0
            outs.append({str(p.relative_to(out)): p.read_bytes() for p in out.rglob("part-*.parquet")})
    assert len(outs[0]) == 5 and outs[0] == outs[1]


def test_filter_syntax():
    schema = pa.schema([("year", pa.int64()), ("region", pa.string()), ("x", pa.float64())])
    t = pa.table({"year": [2019, 2020, 2021], "region": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]})
    for text, rows in (("year>=2020", 2), ("region in (a, 'c')", 2), ("region not in (a)", 2),
                       ("year = 2020 and x < 2.5", 1), ("year!=2019; region == \"c\"", 1)):
        assert t.filter(parse_filter(text, schema)).num_rows == rows, text
    for bad in ("year", "year >= ", "region in (a", "x = abc", "year > 1 or x < 2", "__import__('os')"):
        with pytest.raises(ParameterError):
            parse_filter(bad, schema)


def test_memory_estimate():
    assert executor.estimate_task_bytes("mdav", 10**6, 10) > executor.estimate_task_bytes("partitioned", 10**6, 10)
    executor.check_memory("partitioned", 10**7, 5, 4 * 2**30)
    with pytest.raises(ParameterError, match="use --method partitioned"):
        executor.check_memory("mdav", 10**7, 5, 2 * 2**30)
