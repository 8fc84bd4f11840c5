"""Records that come back with every QI revised, linked to their earlier rows.

Without an id column a record is its stratum and QI values: when every record of a published cell
comes back with its QIs revised, the cell counts as withdrawn whole and its records as new ones,
aggregated afresh.  Anyone holding both releases links each record's old and new rows by the
columns published as they are (a kept key, an exact amount) and intersects its old and new cells:
single records.  Such a re-release is refused in one line, before any work, when a new record's
row of the columns published as they are equals a missing record's; re-releases whose new records
cannot be linked so (an id column, no column published as it is, other rows) go on.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize
from daskmicro.cli import main
from daskmicro.errors import ParameterError

QI = ["age", "income"]
K = 4


def _people(n, seed, start=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"pid": np.arange(start, start + n), "age": rng.integers(18, 90, n).astype(np.int64),
                         "income": np.round(rng.normal(50, 10, n), 1) + start,   # later people: other QIs
                         "amount": rng.choice(100_000, n, replace=False) / 100 + start * 1000,   # distinct
                         "sex": rng.integers(0, 2, n)})


def _release(df, ledger, **kw):
    out = anonymize(df, qi=QI, k=K, seed=1, ledger=ledger, **kw)
    return out[0] if isinstance(out, tuple) else out


def _ledger_files(ledger) -> list:
    return sorted(str(p.relative_to(ledger)) for p in ledger.rglob("*") if p.is_file())


def _revise(df, pids, seed):
    """Every QI of the records ``pids`` revised."""
    rng = np.random.default_rng(seed)
    out = df.copy()
    rows = out["pid"].isin(pids).to_numpy()
    out.loc[rows, "age"] = out.loc[rows, "age"] + rng.integers(1, 30, rows.sum())
    out.loc[rows, "income"] = np.round(out.loc[rows, "income"] + rng.uniform(5, 20, rows.sum()), 1)
    return out


def _cells(rel, df) -> list:
    """The pids of each published cell of a first release (linked by its distinct ``amount``)."""
    both = df[["pid", "amount"]].merge(rel[["amount", *QI]], on="amount")
    return sorted((list(g["pid"]) for _, g in both.groupby(QI)), key=lambda c: c[0])


def _pairs(rel1, rel2, on) -> Counter:
    both = rel1.merge(rel2, on=on, suffixes=("_1", "_2"))
    keys = [f"{c}_{i}" for i in (1, 2) for c in QI]
    return Counter(map(tuple, both[keys].to_numpy().tolist()))


def test_revised_whole_cells_linked_by_a_kept_key_are_refused(tmp_path):
    ledger = tmp_path / "ledger"
    df = _people(40, 0)[["pid", *QI]]
    r1 = _release(df, ledger, keep=["pid"])
    revised = df.copy()
    revised["age"] = np.random.default_rng(5).integers(18, 90, len(df))
    before = _ledger_files(ledger)
    with pytest.raises(ParameterError, match="--id-column") as err:
        _release(revised, ledger, keep=["pid"])
    assert "share their row of the columns published as they are" in str(err.value)
    assert _ledger_files(ledger) == before
    assert _pairs(r1, _release(revised, tmp_path / "trial", keep=["pid"]), "pid")   # what it would have given


def test_revised_whole_cells_are_refused_by_the_cli_in_one_line(tmp_path, capsys):
    ledger = tmp_path / "ledger"
    df = _people(40, 1)[["pid", *QI]]
    base = ["--qi", ",".join(QI), "--k", str(K), "--ledger", str(ledger), "--keep", "pid", "--quiet"]
    df.to_parquet(tmp_path / "in.parquet", index=False)
    assert main(["anonymize", str(tmp_path / "in.parquet"), str(tmp_path / "r1.parquet"), *base]) == 0
    revised = df.copy()
    revised["age"] = revised["age"] + 1000
    revised.to_parquet(tmp_path / "in2.parquet", index=False)
    before = _ledger_files(ledger)
    capsys.readouterr()
    assert main(["anonymize", str(tmp_path / "in2.parquet"), str(tmp_path / "r2.parquet"), *base]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--id-column" in err and "40 record(s)" in err
    assert not (tmp_path / "r2.parquet").exists() and _ledger_files(ledger) == before


def test_re_releases_whose_new_records_cannot_be_linked_go_on(tmp_path):
    df = _people(40, 2)
    keep = dict(keep=["amount"], drop=["pid", "sex"])
    r1 = _release(df, tmp_path / "a", **keep)
    again = _release(df, tmp_path / "a", **keep)   # unchanged
    assert (again["amount"].sort_values().to_numpy() == r1["amount"].sort_values().to_numpy()).all()
    gone = _cells(r1, df)[0]
    grown = pd.concat([df[~df["pid"].isin(gone)], _people(6, 3, start=100)], ignore_index=True)
    _release(grown, tmp_path / "a", **keep)   # whole cell withdrawn, other people added: other rows
    ids = dict(keep=["amount"], drop=["sex"], id_column="pid")
    s1 = _release(df, tmp_path / "b", **ids)
    s2 = _release(_revise(df, df["pid"], 4), tmp_path / "b", **ids)   # revised QIs keep their values
    assert min(_pairs(s1, s2, "amount").values()) >= K
    _release(df, tmp_path / "c", drop=["pid", "sex", "amount"])
    _release(_revise(df, df["pid"], 5), tmp_path / "c", drop=["pid", "sex", "amount"])   # nothing to link by


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(change=st.sampled_from(["revised", "withdrawn and added", "both", "neither"]),
       column=st.sampled_from(["distinct", "low", "absent"]), with_id=st.booleans(), seed=st.integers(0, 10**6))
def test_an_attacker_linking_rows_finds_no_tuple_of_fewer_than_k(tmp_path_factory, change, column, with_id, seed):
    ledger = tmp_path_factory.mktemp("ledger")
    df = _people(48, seed)
    published = {"distinct": ["amount"], "low": ["sex"], "absent": []}[column]
    drop = [c for c in ("amount", "sex") if c not in published] + ([] if with_id else ["pid"])
    kw = dict(keep=published, drop=drop, id_column="pid" if with_id else None)
    r1 = _release(df, ledger, **kw)
    # by whole published cells where a distinct column tells them; else every record
    cells = _cells(r1, df) if column == "distinct" else [list(df["pid"])] * 2
    now = df
    if change in ("revised", "both"):
        now = _revise(now, cells[0], seed + 1)
    if change in ("withdrawn and added", "both"):
        now = pd.concat([now[~now["pid"].isin(cells[-1])], _people(6, seed + 2, start=100)], ignore_index=True)
    try:
        r2 = _release(now, ledger, **kw)
    except ParameterError as exc:
        assert "--id-column" in str(exc)
        assert not with_id and column != "absent" and change in ("revised", "both", "withdrawn and added")
        assert column == "low" or change != "withdrawn and added"   # other people's rows are no link
        return
    if column == "distinct":
        assert min(_pairs(r1, r2, "amount").values()) >= K


def _strip_links(ledger) -> None:
    """The ledger as an earlier version wrote it: no link hash in its records files."""
    import pyarrow.parquet as pq

    for f in ledger.rglob("records-*.parquet"):
        pq.write_table(pq.read_table(f).drop(["link"]), f)


def test_a_ledger_without_link_hashes_refuses_new_records_next_to_withdrawn_cells(tmp_path):
    df = _people(40, 6)
    keep = dict(keep=["amount"], drop=["pid", "sex"])
    r1 = _release(df, tmp_path / "a", **keep)
    _strip_links(tmp_path / "a")
    gone = _cells(r1, df)[0]
    grown = pd.concat([df[~df["pid"].isin(gone)], _people(6, 7, start=100)], ignore_index=True)
    with pytest.raises(ParameterError, match="holds no trace"):
        _release(grown, tmp_path / "a", **keep)
    _release(df, tmp_path / "a", **keep)   # nothing withdrawn: goes on
    _release(pd.concat([df, _people(6, 7, start=100)], ignore_index=True), tmp_path / "a", **keep)   # only added


def test_new_records_next_to_withdrawn_cells_published_with_a_column_left_out_now_are_refused(tmp_path):
    """The missing records' rows were recorded whole over columns this release leaves one of out:
    they cannot be compared with the new records' rows, and the re-release is refused."""
    df = _people(40, 8)
    r1 = _release(df, tmp_path / "a", keep=["amount", "sex"], drop=["pid"])
    gone = _cells(r1, df)[0]
    grown = pd.concat([df[~df["pid"].isin(gone)], _people(6, 9, start=100)], ignore_index=True)
    with pytest.raises(ParameterError, match="columns this release leaves out"):
        _release(grown, tmp_path / "a", keep=["amount"], drop=["pid", "sex"])
