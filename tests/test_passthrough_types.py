"""Columns published as they are keep the input's Arrow type in every kind of release: a single
Parquet file (written from the in-memory frame, where pandas holds these types as Python objects)
as a directory release (written from Arrow pieces), their values unchanged."""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskmicro

N, K = 48, 3
TYPES = {
    "decimal256": (pa.decimal256(40, 2), lambda i: decimal.Decimal(f"{i % 4}.25")),
    "decimal128": (pa.decimal128(20, 5), lambda i: decimal.Decimal(f"-{i % 3}.5")),
    "large_binary": (pa.large_binary(), lambda i: b"v%d" % (i % 3)),
    "large_string": (pa.large_string(), lambda i: f"s{i % 4}"),
    "time32": (pa.time32("ms"), lambda i: datetime.time(1, 2, i % 4)),
    "map": (pa.map_(pa.string(), pa.int64()), lambda i: [("a", i % 2)]),
    "fixed_size_list": (pa.list_(pa.int64(), 2), lambda i: [i % 2, 7]),
    "large_list": (pa.large_list(pa.float64()), lambda i: [0.5, float(i % 3)]),
    "struct": (pa.struct([("u", pa.int32())]), lambda i: {"u": i % 2}),
    "timestamp_tz": (pa.timestamp("us", tz="Europe/Paris"), lambda i: datetime.datetime(2020, 1, 1 + i % 3,
                                                                                        tzinfo=datetime.timezone.utc)),
    # the view types: Arrow's take has no kernel for them (the directory release's shuffle takes rows)
    "string_view": (pa.string_view(), lambda i: None if i % 5 == 0 else f"t{i % 3}"),
    "binary_view": (pa.binary_view(), lambda i: b"b%d" % (i % 2)),
    "list_view": (pa.list_view(pa.int32()), lambda i: [i % 3]),
}


def _input(tmp_path):
    rng = np.random.default_rng(5)
    columns = {"x": rng.normal(size=N), "y": rng.normal(size=N)}
    for name, (t, value) in TYPES.items():
        columns[name] = pa.array([value(i) for i in range(N)], t)
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns), path)
    return path


def _published(path):
    return pq.ParquetDataset(path).read() if path.is_dir() else pq.read_table(path)


@pytest.mark.parametrize("output", ["rel.parquet", "rel"])
def test_columns_published_as_they_are_keep_their_arrow_type(tmp_path, output):
    src = _input(tmp_path)
    daskmicro.anonymize_file(src, tmp_path / output, ["x", "y"], K, ledger="off")
    written, given = _published(tmp_path / output), pq.read_table(src)
    assert written.num_rows == N
    for name in TYPES:
        assert written.schema.field(name).type == given.schema.field(name).type, name
        assert sorted(map(repr, written.column(name).to_pylist())) == sorted(map(repr, given.column(name).to_pylist()))
    assert written.to_pandas().groupby(["x", "y"]).size().min() >= K


def test_an_incremental_release_keeps_the_arrow_types_of_its_survey_lake(tmp_path, client):
    """A survey lake's passed-through columns keep their Arrow type in the single-file release of an
    incremental run (written from its in-memory frame, as a one-pass run's is)."""
    import pandas as pd

    from daskmicro import anonymize_incremental
    from daskmicro.io.arrivals import ArrivalSimulator

    rng = np.random.default_rng(9)
    lake = tmp_path / "survey"
    ArrivalSimulator(pd.DataFrame({"x": rng.normal(size=N), "y": rng.normal(size=N)}), lake, n_files=4,
                     duration=60, speed=60, mode="instant").start().join()
    for f in sorted(lake.glob("*.parquet")):   # the files given the exotic columns too, their metadata kept
        t = pq.read_table(f)
        for name, (typ, value) in TYPES.items():
            t = t.append_column(name, pa.array([value(i) for i in range(t.num_rows)], typ))
        pq.write_table(t, f)
    out = tmp_path / "release.parquet"
    _, report = anonymize_incremental(lake, ["x", "y"], K, nu=0.5, output=out, seed=0, client=client)
    written = pq.read_table(out)
    assert report.verified and written.num_rows == N
    for name, (typ, _) in TYPES.items():
        assert written.schema.field(name).type == typ, name
