"""Revised columns published as they are: the rows two releases of a series differ by stay whole
published cells of at least k records, or the re-release is refused and records nothing.

A record's columns that are neither QIs nor strata are published as they are next to its frozen
cell's values.  Were one of them revised between two releases, differencing the releases (the
rows each has that the other has not, over the columns both publish) would show that record's old
row and new row.  The ledger records, per published cell, keyed sums of those columns' values; a
re-release whose cells would publish other rows of them is refused, whatever the edit: one value
changed, two records of a cell swapping a value, two records sharing a fingerprint swapping one
column but not another, a column left out of one release and published again changed.  A new
column, and values read with another type (an integer column read as float), are no revision.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize, anonymize_file
from daskmicro.cli import main
from daskmicro.errors import ParameterError

QI = ["age", "income"]
DTYPES = ["int", "float", "Int64", "string", "bool"]
EDITS = ["change", "swap", "twin swap", "drop and re-add", "new column", "none"]


def _column(dtype, n, rng):
    if dtype == "int":
        return pd.Series(rng.integers(0, 6, n), dtype="int64")
    if dtype == "float":
        return pd.Series(rng.integers(0, 6, n) + 0.25, dtype="float64")
    if dtype == "Int64":
        s = pd.Series(rng.integers(0, 6, n), dtype="Int64")
        s.iloc[rng.integers(0, n)] = pd.NA
        return s
    if dtype == "string":
        return pd.Series([f"v{int(x)}" for x in rng.integers(0, 6, n)], dtype="string")
    return pd.Series(rng.integers(0, 2, n).astype(bool))


def _revised(value):
    """Another value of the same type."""
    if pd.isna(value):
        return 1
    if isinstance(value, (bool, np.bool_)):
        return not value
    if isinstance(value, str):
        return value + "z"
    return value + 1


def _records(n, dtype, seed):
    """Records with a published link ``pid``, two columns ``a`` and ``b`` of one type published as
    they are, and, in rows 0 and 1, two records sharing a fingerprint (equal QIs and ``rec``)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"rec": np.arange(n), "pid": np.arange(n), "age": rng.integers(18, 90, n).astype(np.int64),
                       "income": np.round(rng.lognormal(10.5, 0.6, n), 2)})
    df["a"], df["b"] = _column(dtype, n, rng), _column(dtype, n, rng)
    df.loc[1, QI + ["rec"]] = df.loc[0, QI + ["rec"]].to_numpy()
    for c in ("a", "b"):   # the two differ in both columns: swapping one column changes their rows
        if pd.isna(df.loc[0, c]):
            df.loc[0, c] = df[c].dropna().iloc[0]
        df.loc[1, c] = _revised(df.loc[0, c])
    return df


def _rows(rel, cols) -> Counter:
    """The rows of a release over ``cols``, repeats counted (every missing value one value)."""
    frame = rel[cols].astype(object)
    return Counter(tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False))


def _differencing(rel1, rel2, k) -> None:
    """The rows each release has that the other has not, over the columns both publish, are whole
    published cells (every row of their QI values in that release) of at least k rows."""
    cols = [c for c in rel1.columns if c in rel2.columns]
    a, b = _rows(rel1, cols), _rows(rel2, cols)
    q = [cols.index(c) for c in QI]
    for rows, rel in ((a - b, rel1), (b - a, rel2)):
        per_cell = Counter(tuple(row[j] for j in q) for row in rows.elements())
        sizes = _rows(rel, QI)
        for cell, count in per_cell.items():
            assert count >= k and count == sizes[cell], (cell, count, sizes[cell])


def _release_dirs(ledger) -> int:
    return sum(1 for p in ledger.rglob("r[0-9]*") if p.is_dir())


def _edited(df, r1, edit, seed):
    """The next releases' inputs and their columns published as they are, for ``edit``."""
    rng = np.random.default_rng(seed)
    at = int(rng.integers(2, len(df)))
    if edit == "change":
        out = df.copy()
        out.loc[at, "a"] = _revised(out.loc[at, "a"])
        return [(out, ["a", "b"])]
    if edit == "swap":   # two records of one published cell, with other values of a, swap them
        cell = r1.groupby(QI).ngroup().to_numpy()[np.argsort(r1["pid"].to_numpy())]   # rows are shuffled
        for i in range(len(df)):
            mates = [j for j in np.flatnonzero(cell == cell[i]) if _rows(df.iloc[[j]], ["a"]) != _rows(df.iloc[[i]], ["a"])]
            if mates:
                out = df.copy()
                out.loc[[i, mates[0]], "a"] = df.loc[[mates[0], i], "a"].to_numpy()
                return [(out, ["a", "b"])]
        return [(df, ["a", "b"])]
    if edit == "twin swap":   # rows 0 and 1 share a fingerprint: a swapped, b not
        out = df.copy()
        out.loc[[0, 1], "a"] = df.loc[[1, 0], "a"].to_numpy()
        return [(out, ["a", "b"])]
    if edit == "drop and re-add":
        out = df.copy()
        out.loc[at, "b"] = _revised(out.loc[at, "b"])
        return [(df.drop(columns="b"), ["a"]), (out, ["a", "b"])]
    if edit == "new column":
        return [(df.assign(c=np.arange(len(df)) % 3), ["a", "b", "c"])]
    return [(df, ["a", "b"])]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=st.sampled_from(EDITS), dtype=st.sampled_from(DTYPES), id_column=st.booleans(),
       n=st.integers(24, 40), k=st.integers(2, 4), seed=st.integers(0, 10 ** 6))
def test_revised_columns_never_single_a_row_out(tmp_path_factory, edit, dtype, id_column, n, k, seed):
    tmp = tmp_path_factory.mktemp("rev")
    ledger = tmp / "ledger"
    df = _records(n, dtype, seed)

    def release(frame, keep, name):
        frame.to_parquet(tmp / f"{name}.in.parquet", index=False)
        kw = dict(qi=QI, k=k, seed=1, ledger=ledger, keep=["pid", *keep],
                  **({"id_column": "rec"} if id_column else {"drop": ["rec"]}))
        anonymize_file(tmp / f"{name}.in.parquet", tmp / f"{name}.parquet", **kw)
        return pd.read_parquet(tmp / f"{name}.parquet")

    r1 = release(df, ["a", "b"], "r1")
    assert sorted(r1["pid"]) == list(df["pid"])
    published = [r1]
    for i, (frame, keep) in enumerate(_edited(df, r1, edit, seed)):
        before = _release_dirs(ledger)
        try:
            rel = release(frame, keep, f"r{i + 2}")
        except ParameterError as refused:
            assert "\n" not in str(refused) and "--new-series" in str(refused)
            assert _release_dirs(ledger) == before and not (tmp / f"r{i + 2}.parquet").exists()
            break
        for earlier in published:
            _differencing(earlier, rel, k)
        published.append(rel)


@pytest.mark.parametrize("id_column", [None, "rec"])
def test_the_same_release_re_released_passes_with_an_integer_column_read_as_float(tmp_path, id_column):
    df = _records(40, "int", seed=5).drop(index=1).reset_index(drop=True)   # no records sharing a fingerprint
    df["n"] = pd.Series(np.arange(len(df)) % 4, dtype="Int64")
    ledger = tmp_path / "ledger"
    kw = dict(qi=QI, k=3, seed=1, ledger=ledger, keep=["pid", "a", "b", "n"],
              **({"id_column": id_column} if id_column else {"drop": ["rec"]}))
    df.to_parquet(tmp_path / "in.parquet", index=False)
    anonymize_file(tmp_path / "in.parquet", tmp_path / "r1.parquet", **kw)
    as_float = df.astype({"a": "float64", "b": "float64", "n": "float64", "age": "float64"})
    as_float.to_parquet(tmp_path / "in2.parquet", index=False)
    anonymize_file(tmp_path / "in2.parquet", tmp_path / "r2.parquet", **kw)
    r1, r2 = pd.read_parquet(tmp_path / "r1.parquet"), pd.read_parquet(tmp_path / "r2.parquet")
    assert _rows(r1, list(r1.columns)) == _rows(r2, list(r1.columns))
    rep = json.loads((tmp_path / "r2.report.json").read_text())
    assert rep["series"]["republished"] == len(df) and rep["series"]["new"] == 0


def test_a_revised_value_is_refused_by_the_cli_in_one_line(tmp_path, capsys):
    df = _records(40, "float", seed=6).drop(columns="rec")
    ledger = tmp_path / "ledger"
    base = ["anonymize", "--qi", ",".join(QI), "--k", "3", "--ledger", str(ledger), "--keep", "pid,a,b", "--quiet"]
    df.to_parquet(tmp_path / "in.parquet", index=False)
    assert main([base[0], str(tmp_path / "in.parquet"), str(tmp_path / "r1.parquet"), *base[1:]]) == 0
    revised = df.copy()
    revised.loc[7, "b"] += 1000.0
    revised.to_parquet(tmp_path / "in2.parquet", index=False)
    capsys.readouterr()
    assert main([base[0], str(tmp_path / "in2.parquet"), str(tmp_path / "r2.parquet"), *base[1:]]) != 0
    err = capsys.readouterr().err.strip()
    assert "1 group(s) published before in this series" in err and "--new-series" in err
    assert len(err.splitlines()) == 1 and str(revised.loc[7, "b"]) not in err
    assert not (tmp_path / "r2.parquet").exists() and _release_dirs(ledger) == 1


def test_a_re_release_through_the_pipeline_on_a_cluster_compares_every_piece(tmp_path, client):
    rng = np.random.default_rng(12)
    n = 6000
    people = pd.DataFrame({"pid": np.arange(n), "age": rng.integers(18, 90, n).astype(np.int64),
                           "income": np.round(rng.lognormal(10.5, 0.6, n), 2),
                           "grade": rng.integers(0, 20, n), "city": rng.choice(["a", "b", "c"], n)})
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        people.iloc[i * 2000:(i + 1) * 2000].to_parquet(lake / f"p{i}.parquet", index=False)
    ledger = tmp_path / "ledger"
    opts = dict(qi=QI, k=5, method="partitioned", K=100, partition_size=1000, seed=2, ledger=ledger, client=client,
                keep=["pid", "grade"])
    anonymize_file(lake, tmp_path / "r1", **opts)
    revised = people.iloc[2000:4000].copy()
    revised.loc[revised.index[17], "grade"] += 1
    revised.to_parquet(lake / "p1.parquet", index=False)
    with pytest.raises(ParameterError, match=r"1 group\(s\) published before in this series \(\d+ record\(s\)\)"):
        anonymize_file(lake, tmp_path / "r2", **opts)
    assert not (tmp_path / "r2").exists() and _release_dirs(ledger) == 1
    # the same values, the integer column read as float, and a piece of new records
    as_float = people.astype({"grade": "float64"})
    for i in range(3):
        as_float.iloc[i * 2000:(i + 1) * 2000].to_parquet(lake / f"p{i}.parquet", index=False)
    more = as_float.iloc[:600].assign(pid=np.arange(n, n + 600), age=lambda d: d["age"] + 1)
    more.to_parquet(lake / "p3.parquet", index=False)
    anonymize_file(lake, tmp_path / "r3", **opts)
    r1, r3 = pd.read_parquet(tmp_path / "r1"), pd.read_parquet(tmp_path / "r3")
    rep = json.loads((tmp_path / "r3" / "_report.json").read_text())
    assert rep["series"]["republished"] == n and rep["series"]["new"] == 600
    _differencing(r1.astype({"grade": "float64"}), r3, 5)


def test_a_revision_after_an_incremental_survey_is_refused(tmp_path, client):
    from daskmicro import anonymize_incremental

    rng = np.random.default_rng(3)
    n = 400
    df = pd.DataFrame({"age": rng.integers(18, 90, n).astype(np.float64),
                       "income": np.round(rng.lognormal(10, 0.6, n), 2),
                       "region": rng.choice(["north", "south", "east"], n)})
    ledger = tmp_path / "ledger"
    frame = df.assign(ts=pd.Timestamp.now(tz="UTC").timestamp() - 60 + np.arange(n) * 0.01)
    anonymize_incremental(frame, QI, 5, nu=0.2, time_column="ts", client=client, seed=2, ledger=str(ledger))
    revised = df.copy()
    revised.loc[11, "region"] = "west"
    with pytest.raises(ParameterError, match="other values of their columns published as they are"):
        anonymize(revised, QI, 5, method="mdav", seed=2, ledger=str(ledger))
    rel, rep = anonymize(df, QI, 5, method="mdav", seed=2, ledger=str(ledger))   # the same values: published
    assert rep.series["republished"] == n


def test_a_ledger_without_a_trace_of_the_other_columns_refuses_them_until_a_new_series(tmp_path):
    """Releases recorded with no trace of their columns published as they are: comparing nothing would
    let a revised value through, so such columns are refused, now and after a release without them."""
    df = _records(40, "float", seed=8).drop(columns="rec").drop(index=1).reset_index(drop=True)
    ledger = tmp_path / "ledger"
    kw = dict(qi=QI, k=3, seed=1, ledger=ledger)
    anonymize(df, keep=["pid", "a", "b"], **kw)
    for p in list(ledger.rglob("content-*.parquet")) + list(ledger.rglob("columns.json")):
        p.unlink()   # as a ledger written before they were recorded
    with pytest.raises(ParameterError, match="holds no trace of their columns published as they are"):
        anonymize(df, keep=["pid", "a", "b"], **kw)
    anonymize(df[["age", "income"]], **kw)   # nothing published as it is: nothing to compare
    with pytest.raises(ParameterError, match="holds no trace of their columns published as they are"):
        anonymize(df, keep=["pid", "a", "b"], **kw)
    rel, rep = anonymize(df, keep=["pid", "a", "b"], new_series=True, **kw)
    assert rep.series["new_series"]
