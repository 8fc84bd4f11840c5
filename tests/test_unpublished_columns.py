"""Columns that describe records rather than hold their data are never published.

* a pandas index stored in a Parquet file (often an identifier: ``set_index("ssn")``) is row
  labels, not a column: it is not read unless a run names it (as a QI, a stratum, …);
* the per-record participation probabilities are an input of the run, not part of the release;
* the arrival times of an incremental survey (near-unique per record) schedule the stages only.

Each is checked on every kind of output (a Parquet file, a directory release, an in-memory frame).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daskmicro import anonymize, anonymize_file, anonymize_incremental
from daskmicro.errors import ParameterError


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n), "region": rng.choice(["n", "s"], n),
                         "ssn": [f"{100000 + i}-SECRET" for i in range(n)]})


@pytest.mark.parametrize("out", ["rel.parquet", "rel"])
@pytest.mark.parametrize("index", ["named", "range"])
def test_a_stored_index_is_never_published(tmp_path, out, index):
    df = _data()
    df = df.set_index("ssn") if index == "named" else df.drop(columns="ssn").set_axis(np.arange(500, 620))
    df.to_parquet(tmp_path / "in.parquet")   # the index is stored, with pandas metadata
    anonymize_file(tmp_path / "in.parquet", tmp_path / out, qi=["x", "y"], k=4)
    got = pd.read_parquet(tmp_path / out)
    assert sorted(got.columns) == ["region", "x", "y"]
    text = (tmp_path / out).read_bytes() if out.endswith(".parquet") else b"".join(
        p.read_bytes() for p in (tmp_path / out).rglob("*") if p.is_file())
    assert b"SECRET" not in text


def test_a_stored_index_named_by_the_run_is_read(tmp_path):
    df = _data().drop(columns="ssn").set_index("region")
    df.to_parquet(tmp_path / "in.parquet")
    anonymize_file(tmp_path / "in.parquet", tmp_path / "rel.parquet", qi=["x", "y"], k=4, strata=["region"])
    got = pd.read_parquet(tmp_path / "rel.parquet")
    assert sorted(got.columns) == ["region", "x", "y"]
    assert got.region.value_counts().to_dict() == df.index.value_counts().to_dict()


@pytest.mark.parametrize("out", [None, "rel.parquet", "rel"])
def test_participation_column_is_not_published(tmp_path, out):
    df = _data().drop(columns="ssn")
    df["pi"] = np.random.default_rng(1).uniform(0.8, 1.0, len(df))
    opts = dict(qi=["x", "y"], k=3, participation="pi", max_cell_failure=0.2)
    if out is None:
        got, _ = anonymize(df, **opts)
    else:
        df.to_parquet(tmp_path / "in.parquet", index=False)
        anonymize_file(tmp_path / "in.parquet", tmp_path / out, **opts)
        got = pd.read_parquet(tmp_path / out)
    assert "pi" not in got.columns and len(got) == len(df)


@pytest.mark.parametrize("role", ["strata", "partition_by"])
def test_participation_column_is_never_a_published_key(tmp_path, role):
    """Named as a stratum or a partition column the participation column is refused."""
    df = _data().drop(columns="ssn")
    df["pi"] = np.where(np.arange(len(df)) % 2 == 0, 0.9, 0.95)
    opts = dict(qi=["x", "y"], k=3, participation="pi", max_cell_failure=0.2, keep=["region"])
    df.to_parquet(tmp_path / "in.parquet", index=False)
    with pytest.raises(ParameterError, match="participation column"):
        anonymize_file(tmp_path / "in.parquet", tmp_path / "rel", **opts, **{role: ["pi"]})
    assert not (tmp_path / "rel").exists()


def test_arrival_times_of_a_survey_lake_are_not_published(tmp_path, client):
    """The arrival-time column a survey's files carry (named by its ``_arrivals.json``) is withheld
    as a frame's ``time_column`` is: not in the release as written, nor among the survey's columns."""
    import pyarrow.parquet as pq

    from daskmicro.io.arrivals import ArrivalSimulator

    df = _data(300).drop(columns="ssn")
    lake = tmp_path / "survey"
    sim = ArrivalSimulator(df, lake, n_files=6, duration=60, speed=60, mode="instant", timestamp_column="answered_at")
    sim.start()
    assert sim.join() is True
    assert "answered_at" in pq.read_schema(next(lake.glob("*.parquet"))).names   # the files carry it
    out = tmp_path / "release.parquet"
    _, report = anonymize_incremental(lake, ["x", "y"], 4, nu=0.5, output=out, seed=0, client=client)
    written = pq.read_table(out)
    assert "answered_at" not in written.column_names and written.num_rows == len(df)
    assert sorted(written.column_names) == sorted(["x", "y", "region"])
    assert report.verified
    with pytest.raises(ParameterError, match="answered_at"):   # not a column of the survey one may keep
        anonymize_incremental(lake, ["x", "y"], 4, nu=0.5, output=tmp_path / "again.parquet", keep=["answered_at"],
                              client=client)
    assert not (tmp_path / "again.parquet").exists()


def test_arrival_times_are_not_published():
    df = _data(200).drop(columns="ssn")
    df["ts"] = 1.0e9 + np.arange(len(df), dtype=float)   # a survey already over: stages run at once
    release, report = anonymize_incremental(df, ["x", "y"], 4, nu=0.25, time_column="ts", seed=0)
    release = release.compute() if hasattr(release, "compute") else release
    assert "ts" not in release.columns and len(release) == len(df)
    assert report.verified


def _numbers(doc):
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in _numbers(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v)]
    return [float(doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


@pytest.mark.parametrize("kind", ["seconds", "datetime"])
def test_no_arrival_time_reaches_the_published_report(tmp_path, client, kind):
    """A DataFrame survey's clock is its arrival-time column: its first and last times (the survey's
    opening and, without close_at, its close) are record values, absent from the published report
    as from the release; the exact report keeps the timeline."""
    import json

    df = _data(120).drop(columns="ssn")
    rng = np.random.default_rng(1)
    times = 1.7e9 + np.sort(rng.uniform(0.0, 50.0, len(df)))
    df["ts"] = pd.to_datetime(times, unit="s") if kind == "datetime" else times
    out = tmp_path / "release.parquet"
    _, report = anonymize_incremental(df, ["x", "y"], 4, nu=0.25, time_column="ts", seed=0, client=client, output=out)
    published = json.loads((tmp_path / "release.report.json").read_text())
    secret = {float(t) for t in pd.to_datetime(df["ts"], unit="s").astype("int64") / 1e9} if kind == "datetime" \
        else set(times.tolist())
    assert not secret & set(_numbers(published))
    assert not secret & set(_numbers(report.to_dict()))
    assert report.incremental["times"]["close"] == pytest.approx(times.max())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_participation_value_reaches_the_published_report(tmp_path, seed):
    """The smallest and largest π_j, and a cell of two's Σπ with its failure (which solve for both
    π), would give records' values of the withheld column: the published report has neither."""
    import json

    rng = np.random.default_rng(seed)
    df = _data(60, seed=seed).drop(columns="ssn")
    df["pi"] = np.round(rng.uniform(0.97, 0.999, len(df)), 4)
    df.to_parquet(tmp_path / "in.parquet", index=False)
    report = anonymize_file(tmp_path / "in.parquet", tmp_path / "rel.parquet", qi=["x", "y"], k=2, participation="pi",
                            max_cell_failure=0.06, keep=["region"], ledger=False)
    published = json.loads((tmp_path / "rel.report.json").read_text())
    values = set(df["pi"].tolist())
    assert not values & set(_numbers(published))
    for cell in published["probabilistic"]["worst_cells"]:
        assert "expected_active" not in cell
    assert report.probabilistic["participation_max"] == df["pi"].max()   # the exact report keeps them


@pytest.mark.parametrize("out,opts", [("rel.parquet", {}), ("rel", {}), ("rel", {"partition_by": ["region"]}),
                                      ("rel", {"table_format": "delta"})])
def test_the_inputs_arrow_metadata_is_never_published(tmp_path, out, opts):
    """The input's schema and field metadata are its own annotations (of its original values, of a
    QI's spread, anything a tool wrote there): no release file carries them, whatever the output."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if opts.get("table_format") == "delta":
        pytest.importorskip("deltalake")
    df = _data().drop(columns="ssn")
    df["w"] = np.random.default_rng(2).normal(size=len(df))
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**table.schema.metadata, b"note": b"SECRET-TABLE"})
    for c in ("x", "region", "w"):
        i = table.schema.get_field_index(c)
        table = table.set_column(i, table.schema.field(c).with_metadata({b"note": f"SECRET-{c}".encode()}),
                                 table.column(c))
    pq.write_table(table, tmp_path / "in.parquet")
    strata = [] if "partition_by" in opts else ["region"]
    anonymize_file(tmp_path / "in.parquet", tmp_path / out, qi=["x", "y"], k=4, strata=strata, **opts)
    written = [tmp_path / out] if out.endswith(".parquet") else [p for p in (tmp_path / out).rglob("*") if p.is_file()]
    for path in written:
        assert b"SECRET" not in path.read_bytes(), path.name
        if path.suffix == ".parquet":
            schema = pq.read_schema(path)
            assert all(not f.metadata for f in schema), path.name
