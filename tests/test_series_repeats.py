"""Records a re-release cannot tell apart, and records that moved: the rows two releases of a
series differ by stay cells of at least k, or the re-release is refused.

Records with equal stratum and QI values (no id column) share one fingerprint; so do records with
a repeated id.  Repeating one of them once more, leaving one out, repeating one for another, or
aggregating them into several cells, must not make one row the difference of two releases.  With
an id column, a record that moved to another stratum is refused like a record that left.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize
from daskmicro.errors import ParameterError

QI = ["age", "income"]


def _coarse(n, seed):
    """Few distinct QI tuples (many records share one), a published attribute that differs."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"grade": rng.integers(0, 40, n) + 0.5,
                         "age": rng.integers(18, 24, n).astype(np.int64),
                         "income": (rng.integers(1, 4, n) * 1000).astype(np.int64)})


def _differing(r1, r2):
    """The rows of each release the other has not (every published column, repeats counted)."""
    cols = list(r1.columns)
    a, b = r1.groupby(cols).size(), r2.groupby(cols).size()
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).fillna(0)
    d = both["a"] - both["b"]
    return d[d > 0], -d[d < 0]


def _edit(df, edit, at, rng):
    if edit == "same":
        return df
    if edit == "repeat":
        return pd.concat([df, df.iloc[[at]].assign(grade=99.5)], ignore_index=True)
    if edit == "drop":
        return df.drop(index=at).reset_index(drop=True)
    twin = df[(df[QI] == df.loc[at, QI]).all(axis=1)].index
    other = int(rng.choice(twin[twin != at])) if len(twin) > 1 else at
    return pd.concat([df.drop(index=other), df.loc[[at]].assign(grade=77.5)], ignore_index=True)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(20, 60), k=st.integers(2, 5), seed=st.integers(0, 10 ** 6),
       edit=st.sampled_from(["same", "repeat", "drop", "swap"]), at=st.integers(0, 19))
def test_records_sharing_a_fingerprint_never_single_a_row_out(tmp_path_factory, n, k, seed, edit, at):
    ledger = tmp_path_factory.mktemp("ledger")
    df = _coarse(n, seed)
    kw = dict(qi=QI, k=k, seed=3, ledger=ledger, keep=["grade"])
    r1, _ = anonymize(df, **kw)
    try:
        r2, _ = anonymize(_edit(df, edit, at, np.random.default_rng(seed)), **kw)
    except ParameterError as e:
        assert "\n" not in str(e)
        return
    for rows in _differing(r1, r2):
        if len(rows):
            assert rows.groupby(level=QI).sum().min() >= k


def test_a_record_that_moved_to_another_stratum_is_refused_with_an_id_column(tmp_path):
    rng = np.random.default_rng(0)
    n = 120
    df = pd.DataFrame({"rec": np.arange(n), "region": rng.choice(["n", "s"], n),
                       "grade": rng.integers(0, 50, n) + 0.5, "age": rng.integers(18, 90, n).astype(np.int64),
                       "income": np.round(rng.lognormal(10.5, 0.6, n), 2)})
    kw = dict(qi=QI, k=3, seed=1, ledger=tmp_path / "led", keep=["grade"], strata=["region"], id_column="rec")
    anonymize(df, **kw)
    moved = df.copy()
    moved.loc[7, "region"] = "s" if df.loc[7, "region"] == "n" else "n"
    with pytest.raises(ParameterError, match="missing from this release"):
        anonymize(moved, **kw)
    revised = df.copy()
    revised.loc[7, "age"] += 30   # a revised value keeps its frozen values: the same release
    anonymize(revised, **kw)


@pytest.mark.parametrize("change", ["same", "add", "drop", "add k"])
def test_records_with_every_qi_missing_join_or_leave_only_as_k(tmp_path, change):
    """Records with every QI missing are published as they are; one more or one fewer of them would
    be the one row two releases differ by."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"rec": np.arange(60), "grade": rng.integers(0, 50, 60) + 0.5,
                       "age": rng.integers(18, 90, 60).astype(float),
                       "income": np.round(rng.lognormal(10.5, 0.6, 60), 2)})
    df.loc[:4, QI] = np.nan
    k = 3
    for id_column in (None, "rec"):
        kw = dict(qi=QI, k=k, seed=1, ledger=tmp_path / f"led-{id_column}", keep=["grade"], missing="separate",
                  id_column=id_column, drop=None if id_column else ["rec"])
        r1, _ = anonymize(df, **kw)
        more = pd.DataFrame({"rec": 100 + np.arange(k), "grade": 40.5 + np.arange(k), "age": np.nan, "income": np.nan})
        edited = {"same": df, "drop": df.drop(index=2), "add": pd.concat([df, more[:1]], ignore_index=True),
                  "add k": pd.concat([df, more], ignore_index=True)}[change]
        if change in ("add", "drop") or (change == "add k" and id_column is None):
            with pytest.raises(ParameterError):
                anonymize(edited, **kw)
            continue
        r2, _ = anonymize(edited, **kw)
        for rows in _differing(r1, r2):
            if len(rows):
                assert rows.groupby(level=QI, dropna=False).sum().min() >= k


@pytest.mark.parametrize("id_column", [None, "rec"])
def test_a_record_that_moved_to_another_partition_is_refused(tmp_path, id_column):
    """A partition column is published as a stratum: a record whose partition changed would be the
    one row the two releases differ by, in its new partition."""
    from daskmicro import anonymize_file

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"rec": np.arange(120), "year": rng.choice([2020, 2021], 120),
                       "grade": rng.integers(0, 50, 120) + 0.5, "age": rng.integers(18, 90, 120).astype(float),
                       "income": np.round(rng.lognormal(10.5, 0.6, 120), 2)})
    kw = dict(qi=QI, k=3, seed=1, ledger=tmp_path / "led", keep=["grade"], partition_by=["year"],
              id_column=id_column, drop=None if id_column else ["rec"])
    df.to_parquet(tmp_path / "in.parquet")
    anonymize_file(tmp_path / "in.parquet", tmp_path / "r1", **kw)
    anonymize_file(tmp_path / "in.parquet", tmp_path / "r2", **kw)   # the same records: the same release
    r1, r2 = pd.read_parquet(tmp_path / "r1"), pd.read_parquet(tmp_path / "r2")
    assert all(len(rows) == 0 for rows in _differing(r1.astype({"year": int}), r2.astype({"year": int})))
    moved = df.copy()
    moved.loc[7, "year"] = 4041 - df.loc[7, "year"]
    moved.to_parquet(tmp_path / "moved.parquet")
    with pytest.raises(ParameterError, match="missing from this release"):
        anonymize_file(tmp_path / "moved.parquet", tmp_path / "r3", **kw)
    assert not (tmp_path / "r3").exists()
