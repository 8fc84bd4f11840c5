"""A series of releases of the same people gives no record back (the release ledger).

The attacks are run on the tool's own outputs, with every linking aid an intruder could have:
a published pass-through column that follows each record from release to release.  Each attack
is first shown to work on trial runs (``ledger="off"``: every run aggregates afresh), then to
recover nothing from the recorded series.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize, anonymize_file
from daskmicro.cli import main
from daskmicro.errors import InputError, ParameterError

QI = ["age", "income", "savings"]


def _people(n, seed=0, start=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "pid": np.arange(start, start + n),                      # published pass-through: links releases
        "region": rng.choice(["north", "south", "east"], n),
        "age": rng.integers(18, 90, n).astype(np.int64),
        "income": np.round(rng.lognormal(10.5, 0.6, n), 2),
        "savings": np.round(rng.normal(2e4, 8e3, n), 2),
    })


def _tuples(rel):
    return set(map(tuple, rel[QI].to_numpy(np.float64)))


def _smallest(rel, cols):
    return int(rel.groupby(cols, dropna=False).size().min())


# --------------------------------------------------------------------------- the attacks


def differencing(rel1, rel2, new_record, by="region"):
    """Totals of rel2 minus rel1, overall and per value of a pass-through column: does any equal
    the appended record (1e-3 relative)?"""
    target = np.asarray(new_record, dtype=np.float64)
    diffs = [rel2[QI].sum().to_numpy(np.float64) - rel1[QI].sum().to_numpy(np.float64)]
    for value in set(rel2[by]):
        diffs.append(rel2.loc[rel2[by] == value, QI].sum().to_numpy(np.float64)
                     - rel1.loc[rel1[by] == value, QI].sum().to_numpy(np.float64))
    return any(np.all(np.abs(d - target) <= 1e-3 * np.abs(target)) for d in diffs)


def intersection(releases, truth: pd.DataFrame):
    """Solve "cell mean = published value" over every release (cells: records sharing a
    published tuple, linked across releases by ``pid``); the records whose values the system
    determines, recovered within 1e-3 relative."""
    ids = truth["pid"].to_numpy()
    pos = {v: i for i, v in enumerate(ids)}
    rows, rhs = [], []
    for rel in releases:
        for _, cell in rel.groupby(QI, dropna=False):
            row = np.zeros(len(ids))
            row[[pos[v] for v in cell["pid"]]] = 1.0 / len(cell)
            rows.append(row)
            rhs.append(cell[QI].iloc[0].to_numpy(np.float64))
    A, B = np.array(rows), np.array(rhs)
    x, *_ = np.linalg.lstsq(A, B, rcond=None)
    _, s, vt = np.linalg.svd(A, full_matrices=False)
    basis = vt[s > 1e-9 * s[0]]
    determined = np.sum(basis ** 2, axis=0) > 1 - 1e-9
    true = truth[QI].to_numpy(np.float64)
    close = np.all(np.abs(x - true) <= 1e-3 * np.maximum(np.abs(true), 1e-9), axis=1)
    return int(np.sum(determined & close))


SIX_WAYS = [dict(k=5), dict(k=5, quality="high"), dict(k=6), dict(k=5, method="pca-mdav"), dict(k=7), dict(k=8)]


def test_intersection_attack_works_on_trial_runs_and_recovers_nothing_from_a_series(tmp_path):
    people = _people(1000, seed=4)
    trial = [anonymize(people, qi=QI, seed=i, ledger="off", keep=["pid"], **opts)[0] for i, opts in enumerate(SIX_WAYS)]
    assert intersection(trial, people) > 100          # the attack works: six fresh aggregations
    ledger = tmp_path / "ledger"
    series = [anonymize(people, qi=QI, seed=i, ledger=ledger, keep=["pid"], **opts)[0] for i, opts in enumerate(SIX_WAYS)]
    assert intersection(series, people) == 0
    first = _tuples(series[0])
    for rel, opts in zip(series, SIX_WAYS):
        assert _tuples(rel) <= first                   # only values the first release published
        assert _smallest(rel, QI) >= opts["k"]


def _added_rows(rel1, rel2):
    """The rows of rel2 that rel1 does not have (all columns compared, duplicates counted)."""
    from collections import Counter

    c1 = Counter(map(tuple, rel1.astype(object).to_numpy().tolist()))
    c2 = Counter(map(tuple, rel2.astype(object).to_numpy().tolist()))
    return pd.DataFrame(list((c2 - c1).elements()), columns=rel2.columns)


def test_differencing_an_appended_record(tmp_path):
    people = _people(2000, seed=1)
    new = pd.DataFrame({"pid": [99999], "region": ["north"], "age": [47], "income": [123457.0],
                        "savings": [31337.77000001]})
    grown = pd.concat([people, new], ignore_index=True)
    t1, _ = anonymize(people, qi=QI, k=5, seed=1, ledger="off", keep=["pid"])
    t2, _ = anonymize(grown, qi=QI, k=5, seed=1, ledger="off", keep=["pid"])
    # trial runs: the appended record is a cell of its own neighbours, re-formed; the totals give it
    assert differencing(t1, t2, new[QI].iloc[0])
    ledger = tmp_path / "ledger"
    r1, _ = anonymize(people, qi=QI, k=5, seed=1, ledger=ledger, keep=["pid"])
    # one new record: whatever values it took, it would be the one row the two releases differ by
    with pytest.raises(ParameterError, match=r"1 record\(s\) not published before in this series, fewer than k = 5"):
        anonymize(grown, qi=QI, k=5, seed=1, ledger=ledger, keep=["pid"])
    more = _people(6, seed=77, start=90_000)
    r2, rep = anonymize(pd.concat([people, more], ignore_index=True), qi=QI, k=5, seed=1, ledger=ledger, keep=["pid"])
    added = _added_rows(r1, r2)
    assert sorted(added["pid"]) == sorted(more["pid"])             # the refused release left no trace
    assert added.groupby(QI).size().min() >= 5                     # the added rows: cells of ≥ k of their own
    assert rep.series["republished"] == 2000 and rep.series["new"] == 6 and rep.series["new_cells"] >= 1
    # reading the ledger's frozen cells is part of the run's time, in the report's table and total
    assert 0 < rep.timings["release ledger"] <= rep.timings["total"]
    assert list(rep.timings)[0] == "release ledger"   # the first step of the run


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n0=st.integers(10, 40), n_new=st.integers(0, 12), k=st.integers(2, 5), seed=st.integers(0, 10 ** 6),
       strata=st.booleans())
def test_rows_a_re_release_adds_are_k_anonymous_among_themselves(tmp_path_factory, n0, n_new, k, seed, strata):
    """Whatever records a re-release adds, the rows by which it differs from the last release are
    cells of at least k among themselves (so the difference of the two singles nobody out), or
    the re-release is refused, in one line naming the group, and records nothing."""
    ledger = tmp_path_factory.mktemp("ledger")
    first = _people(n0, seed=seed)
    more = _people(n_new, seed=seed + 1, start=10_000)
    kw = dict(qi=QI, k=k, seed=2, ledger=ledger, keep=["pid"], **({"strata": ["region"]} if strata else {}))
    if strata:
        first = first.assign(region="north")
        more = more.assign(region=np.where(np.arange(n_new) % 3 == 0, "south", "north"))
    r1, _ = anonymize(first, **kw)
    grown = pd.concat([first, more], ignore_index=True)
    per_group = more.groupby("region").size() if strata else pd.Series([n_new])
    if ((per_group > 0) & (per_group < k)).any():   # refused by the growth rule, or as a stratum under k
        with pytest.raises(ParameterError, match="fewer than k"):
            anonymize(grown, **kw)
        again, _ = anonymize(first, **kw)
        pd.testing.assert_frame_equal(again, r1)
        return
    r2, _ = anonymize(grown, **kw)
    added = _added_rows(r1, r2)
    assert sorted(added["pid"]) == sorted(more["pid"])
    if len(added):
        assert added.groupby((["region"] if strata else []) + QI).size().min() >= k


def test_a_new_series_aggregates_afresh_and_says_so(tmp_path, capsys):
    people = _people(300, seed=2)
    people.to_parquet(tmp_path / "in.parquet", index=False)
    ledger = tmp_path / "ledger"
    base = ["anonymize", tmp_path / "in.parquet", "--qi", ",".join(QI), "--k", "4", "--ledger", ledger, "--keep", "pid"]
    assert main([str(a) for a in base + [tmp_path / "a.parquet", "--seed", "1"]]) == 0
    capsys.readouterr()
    assert main([str(a) for a in base + [tmp_path / "b.parquet", "--k", "6", "--new-series"]]) == 0
    err = capsys.readouterr().err
    assert "new series: 300 records published before are aggregated afresh" in err
    a, b = pd.read_parquet(tmp_path / "a.parquet"), pd.read_parquet(tmp_path / "b.parquet")
    assert not _tuples(b) <= _tuples(a)


def test_trial_run_says_it_must_not_be_published(tmp_path, capsys):
    _people(50).to_parquet(tmp_path / "in.parquet", index=False)
    rc = main([str(a) for a in ["anonymize", tmp_path / "in.parquet", tmp_path / "o.parquet", "--qi", "age,income",
                                "--k", "3", "--ledger", "off", "--keep", "pid"]])
    cap = capsys.readouterr()
    assert rc == 0
    assert "trial run, not recorded; its output must not be published" in cap.err
    assert "release ledger: off" in cap.out
    report = json.loads((tmp_path / "o.report.json").read_text())
    assert report["series"] == {"recorded": False}


def test_default_ledger_catches_a_re_release_into_another_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("DASKMICRO_LEDGER", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    people = _people(400, seed=3)
    people.to_parquet(tmp_path / "in.parquet", index=False)
    anonymize_file(tmp_path / "in.parquet", tmp_path / "one", qi=QI, k=4, seed=1, keep=["pid"])
    (tmp_path / "elsewhere").mkdir()
    anonymize_file(tmp_path / "in.parquet", tmp_path / "elsewhere" / "two.parquet", qi=QI, k=9, seed=2, keep=["pid"])
    one, two = pd.read_parquet(tmp_path / "one"), pd.read_parquet(tmp_path / "elsewhere" / "two.parquet")
    assert _tuples(two) <= _tuples(one) and _smallest(two, QI) >= 9
    ledger = tmp_path / "state" / "daskmicro" / "ledger"
    assert stat.S_IMODE(os.stat(ledger).st_mode) == 0o700
    for p in ledger.rglob("*"):
        assert stat.S_IMODE(os.stat(p).st_mode) == (0o700 if p.is_dir() else 0o600), p
    # the ledger's secret is in no file of the releases or their reports
    key = (ledger / "key").read_text().strip().encode()
    written = [p for p in tmp_path.rglob("*") if p.is_file() and ledger not in p.parents]
    assert written and not any(key in p.read_bytes() for p in written)


def test_deletions_only_of_whole_cells_and_merged_cells(tmp_path):
    """Records leave a series only as whole published cells: a third of the records deleted at
    random (parts of many cells) is refused and records nothing; a third of the cells withdrawn
    whole is released, at a larger k that merges cells, with values published before only."""
    people = _people(600, seed=5)
    ledger = tmp_path / "ledger"
    opts = dict(qi=QI, strata=["region"], seed=1, ledger=ledger, keep=["pid"])
    r1, _ = anonymize(people, k=4, **opts)
    with pytest.raises(ParameterError, match="record\\(s\\) published before in this series are missing from this"):
        anonymize(people[people.pid % 3 != 0], k=4, **opts)
    cell = r1.groupby(["region"] + QI, sort=True).ngroup()
    kept = people[people.pid.isin(r1.loc[cell % 3 != 0, "pid"])]
    r2, rep = anonymize(kept, k=6, **opts)
    assert rep.series["merged_cells"] > 0 and rep.series["new"] == 0 and rep.series["republished"] == len(kept)
    assert _smallest(r2, ["region"] + QI) >= 6 and len(r2) == len(kept)
    assert _tuples(r2) <= _tuples(r1)
    gone = _added_rows(r2, r1)                                  # the rows r1 has and r2 has not: whole cells
    assert gone.groupby(["region"] + QI).size().min() >= 4


def test_id_column_identifies_records_and_is_never_published(tmp_path):
    people = _people(300, seed=6).rename(columns={"pid": "person"})
    ledger = tmp_path / "ledger"
    r1, _ = anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, id_column="person")
    assert "person" not in r1.columns
    moved = people.copy()
    moved["income"] = moved["income"] * 1.01           # the same people, values revised
    r2, rep = anonymize(moved, qi=QI, k=4, seed=1, ledger=ledger, id_column="person")
    assert rep.series["republished"] == 300 and _tuples(r2) <= _tuples(r1)


@pytest.mark.parametrize("households", [4, 1])
def test_id_column_is_never_published_through_hive_directories(tmp_path, households):
    """An id column may be a key of the input's hive directories, or be asked for as a partition
    column: the release is partitioned like the input without it, and asking is refused."""
    people = _people(48, seed=2).drop(columns="pid")
    people["hh"] = [f"H{i // households:03d}" for i in range(len(people))]
    lake = tmp_path / "lake"
    people.to_parquet(lake, partition_cols=["hh"], index=False)
    out = tmp_path / "rel"
    anonymize_file(lake, out, qi=QI, k=3, seed=1, ledger=tmp_path / "led", id_column="hh", keep=["region"])
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not any("H0" in str(p.relative_to(out)) for p in files)
    assert "hh" not in pd.read_parquet(out).columns
    assert not any(b"H0" in p.read_bytes() for p in files)
    with pytest.raises(ParameterError, match="id_column"):
        anonymize_file(lake, tmp_path / "rel2", qi=QI, k=3, ledger=tmp_path / "led", id_column="hh",
                       partition_by=["hh"], merge_small_strata=True)
    assert not (tmp_path / "rel2").exists()


@pytest.mark.parametrize("bad, message", [
    (dict(new_series=True, ledger="off"), "new_series"),
    (dict(id_column="person", ledger="off"), "id_column"),
    (dict(id_column="age"), "id_column"),
    (dict(id_column="nope"), "'nope'"),
])
def test_bad_series_options_are_refused_in_one_line(tmp_path, bad, message):
    with pytest.raises(ParameterError, match=message) as err:
        anonymize(_people(30).rename(columns={"pid": "person"}), qi=QI, k=3, ledger=bad.pop("ledger", tmp_path / "l"),
                  **bad)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "l" / "series").exists() or not list((tmp_path / "l" / "series").rglob("r0*"))


def test_a_ledger_that_is_a_file_is_refused_by_the_cli(tmp_path, capsys):
    _people(40).to_parquet(tmp_path / "in.parquet", index=False)
    (tmp_path / "led").write_text("mine")
    rc = main([str(a) for a in ["anonymize", tmp_path / "in.parquet", tmp_path / "o.parquet", "--qi", "age,income",
                                "--k", "3", "--ledger", tmp_path / "led", "--keep", "pid"]])
    err = capsys.readouterr().err
    assert rc == 2 and "ledger" in err and len([ln for ln in err.splitlines() if "error" in ln]) == 1
    assert (tmp_path / "led").read_text() == "mine" and not (tmp_path / "o.parquet").exists()


# --------------------------------------------------------------------------- a refused run leaves no trace


def _tree(folder) -> dict:
    """Every entry under ``folder`` (itself included): its mode, and a file's bytes."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): (os.stat(p).st_mode, p.read_bytes() if p.is_file() else None)
            for p in [folder, *sorted(folder.rglob("*"))]}


def _refused(name, people):
    """A run refused after it opened its ledger, and the options it is refused with."""
    df = people.copy()
    if name == "identifier named":
        df["email"] = [f"p{i}@example.org" for i in range(len(df))]
    elif name == "identifier by its values":
        df["ticket"] = np.arange(len(df)) * 7 + 3
    elif name == "infinite QI value":
        df.loc[3, "income"] = np.inf
    elif name == "layout of the pipeline":
        return df, dict(method="partitioned", partition_size=500)   # below the method's default K
    return df, {}


REFUSALS = [("identifier named", "named like an identifier"), ("identifier by its values", "'ticket'"),
            ("infinite QI value", "infinite"), ("layout of the pipeline", "partition_size must be at least K")]


@pytest.mark.parametrize("name, message", REFUSALS)
def test_a_refused_run_makes_no_ledger(tmp_path, client, name, message):
    """A run refused after it opened a ledger that does not exist yet makes none (no key, no series),
    and a run after it records as any first release does."""
    ledger = tmp_path / "ledger"
    people = _people(300, seed=8)
    df, opts = _refused(name, people)
    with pytest.raises((ParameterError, InputError), match=message):
        anonymize(df, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"], client=client if opts else None, **opts)
    assert not ledger.exists()
    r1, rep = anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    assert rep.series["recorded"] and (ledger / "key").is_file()
    assert sorted(p.name for p in ledger.glob("series/*/*")) == ["r000001", "series.json"]
    r2, rep = anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    assert rep.series["republished"] == len(people)
    pd.testing.assert_frame_equal(r1, r2)   # the same release, in the same row order: keyed alike


def test_refused_runs_leave_a_ledger_with_releases_as_it_was(tmp_path, client):
    """A ledger holding a release is byte for byte as it was after runs refused at every step: a new
    series sharing its QIs, new series and re-releases refused by their input, a re-release
    refused by the records published before it misses; a release after them is recorded."""
    ledger = tmp_path / "ledger"
    people = _people(300, seed=9)
    r1, _ = anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    before = _tree(ledger)
    with pytest.raises(ParameterError, match="sharing QI columns"):
        anonymize(people, qi=QI[:2], k=4, seed=1, ledger=ledger, keep=["pid"])
    assert _tree(ledger) == before
    for name, message in REFUSALS:
        df, opts = _refused(name, people)
        for more in (dict(qi=QI[:2], new_series=True), dict(qi=QI)):
            with pytest.raises((ParameterError, InputError), match=message):
                anonymize(df, k=4, seed=1, ledger=ledger, keep=["pid"], client=client if opts else None, **opts, **more)
            assert _tree(ledger) == before, (name, more)
    with pytest.raises(ParameterError, match="published before in this series are missing"):
        anonymize(people.iloc[5:], qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    assert _tree(ledger) == before
    r2, rep = anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    assert rep.series["republished"] == len(people) and len(list(ledger.glob("series/*/r*"))) == 2
    pd.testing.assert_frame_equal(r1, r2)


def test_a_ledger_holding_releases_without_their_key_is_refused(tmp_path):
    """Without its key no record published before could be recognised (every one would be new,
    aggregated afresh): the run is refused in one line, and no other key is made."""
    ledger = tmp_path / "ledger"
    people = _people(100, seed=10)
    anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    (ledger / "key").unlink()
    before = _tree(ledger)
    with pytest.raises(ParameterError, match="holds releases but not their key") as err:
        anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    assert "\n" not in str(err.value) and _tree(ledger) == before


def test_a_run_refused_before_any_work_makes_no_ledger(tmp_path, capsys):
    """The command line refuses bad parameters and a bad input before anything is read: the ledger
    named, which does not exist, is not made."""
    _people(40).to_parquet(tmp_path / "in.parquet", index=False)
    (tmp_path / "bad.parquet").write_bytes(b"not a parquet file")
    ledger = tmp_path / "new" / "ledger"
    base = ["anonymize", "--qi", "age,income", "--keep", "pid", "--ledger", ledger]
    for argv in ([tmp_path / "in.parquet", tmp_path / "o.parquet", "--k", "0"],
                 [tmp_path / "in.parquet", tmp_path / "o.parquet", "--k", "3", "--method", "nope"],
                 [tmp_path / "missing.parquet", tmp_path / "o.parquet", "--k", "3"],
                 [tmp_path / "bad.parquet", tmp_path / "o.parquet", "--k", "3"],
                 [tmp_path / "in.parquet", tmp_path / "o.parquet", "--k", "3", "--id-column", "nope"]):
        assert main([str(a) for a in base + argv]) != 0
        assert "error" in capsys.readouterr().err
        assert not (tmp_path / "new").exists() and not (tmp_path / "o.parquet").exists()


def test_workflow_spec_series_section(tmp_path, capsys):
    people = _people(200, seed=7)
    people.to_parquet(tmp_path / "in.parquet", index=False)
    spec = tmp_path / "w.yaml"
    spec.write_text(f"name: s\ninput: {{path: {tmp_path / 'in.parquet'}, keep: [pid]}}\nqi: [age, income, savings]\n"
                    f"k: 4\noutput: {{path: {tmp_path / 'out.parquet'}}}\nseries: {{ledger: {tmp_path / 'led'}}}\n")
    assert main(["run", str(spec)]) == 0
    assert len(list((tmp_path / "led" / "series").glob("*/r000001"))) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace("series: {", "series: {colour: red, "))
    assert main(["run", str(bad)]) == 2
    assert "series" in capsys.readouterr().err


# --------------------------------------------------------------------------- the property


@st.composite
def _series_steps(draw):
    steps = []
    for _ in range(draw(st.integers(2, 4))):
        kind = draw(st.sampled_from(["append", "delete", "k"]))
        steps.append((kind, draw(st.integers(1, 25)), draw(st.integers(2, 7))))
    return steps


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_series_steps(), seed=st.integers(0, 10_000), strata=st.booleans())
def test_every_republished_value_was_published_before(tmp_path_factory, steps, seed, strata):
    ledger = tmp_path_factory.mktemp("ledger")
    people = _people(80, seed=seed)
    k, next_id = 3, 10_000
    opts = dict(qi=QI, strata=["region"] if strata else None, merge_small_strata=True, ledger=ledger, keep=["pid"])
    rel, _ = anonymize(people, k=k, seed=seed, **opts)
    published = {}                                   # pid → the values published for it so far
    all_values = set()

    def record(rel):
        for pid, values in zip(rel["pid"], map(tuple, rel[QI].to_numpy(np.float64))):
            published.setdefault(pid, set()).add(values)
            all_values.add(values)

    record(rel)
    for kind, m, new_k in steps:
        before = (people, k)
        if kind == "append":
            people = pd.concat([people, _people(m, seed=seed + m, start=next_id)], ignore_index=True)
            next_id += m
        elif kind == "delete" and len(people) - m >= 3 * 7:
            people = people.sample(len(people) - m, random_state=seed).reset_index(drop=True)
        else:
            k = new_k
        try:
            rel, _ = anonymize(people, k=k, seed=seed, **opts)
        except ParameterError as refused:   # a group would grow by fewer than k, or keep fewer than k
            assert "published before in this series" in str(refused)   # growth under k, or part of a cell gone
            people, k = before                                     # nothing was published
            continue
        cols = (["region"] if strata else []) + QI
        assert _smallest(rel, cols) >= k and len(rel) == len(people)
        for pid, values in zip(rel["pid"], map(tuple, rel[QI].to_numpy(np.float64))):
            if pid in published:
                assert values in all_values
        record(rel)


def test_a_re_release_of_the_same_records_is_the_same_release_with_the_same_figures(tmp_path):
    people = _people(700, seed=8)
    ledger = tmp_path / "ledger"
    r1, rep1 = anonymize(people, qi=QI, k=5, seed=3, ledger=ledger, keep=["pid"])
    r2, rep2 = anonymize(people, qi=QI, k=5, seed=3, ledger=ledger, method="pca-mdav", keep=["pid"])
    pd.testing.assert_frame_equal(r1, r2)
    assert rep2.information_loss == pytest.approx(rep1.information_loss, rel=1e-9)
    assert (rep2.cells, rep2.min_cell_size, rep2.max_cell_size) == (rep1.cells, rep1.min_cell_size, rep1.max_cell_size)
    assert rep2.series["republished"] == 700 and rep2.series["new"] == 0


def test_records_published_before_left_fewer_than_k_are_refused(tmp_path):
    """Part of a published cell gone is refused (its rows would be singled out of the first release);
    all of ten records again, with new ones, at k = 11 would keep their values in a tuple shared by
    ten: refused too, from the API and the CLI, nothing written."""
    first = _people(10, seed=9).assign(region="north")
    ledger = tmp_path / "ledger"
    anonymize(first, qi=QI, k=5, seed=1, ledger=ledger, keep=["pid"])
    later = pd.concat([first.iloc[:2], _people(20, seed=10, start=500).assign(region="north")], ignore_index=True)
    with pytest.raises(ParameterError, match="8 record\\(s\\) published before in this series are missing"):
        anonymize(later, qi=QI, k=5, seed=1, ledger=ledger, keep=["pid"])
    grown = pd.concat([first, _people(20, seed=11, start=900).assign(region="north")], ignore_index=True)
    with pytest.raises(ParameterError, match="only 10 of the records published before in this series are left"):
        anonymize(grown, qi=QI, k=11, seed=1, ledger=ledger, keep=["pid"])
    out = tmp_path / "out.parquet"
    later.to_parquet(tmp_path / "later.parquet", index=False)
    code = main(["anonymize", str(tmp_path / "later.parquet"), str(out), "--qi", ",".join(QI), "--k", "5",
                 "--ledger", str(ledger), "--keep", "pid", "--quiet"])
    assert code != 0 and not out.exists()


def test_a_re_release_of_a_lake_on_a_cluster_through_the_pipeline(tmp_path, client):
    people = _people(24_000, seed=11)
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(4):
        people.iloc[i * 6000:(i + 1) * 6000].to_parquet(lake / f"p{i}.parquet", index=False)
    ledger = tmp_path / "ledger"
    opts = dict(qi=QI, k=5, method="partitioned", K=200, partition_size=2000, seed=2, ledger=ledger, client=client,
                keep=["pid"])
    anonymize_file(lake, tmp_path / "r1", **opts)
    _people(1500, seed=12, start=50_000).to_parquet(lake / "p4.parquet", index=False)   # new records
    anonymize_file(lake, tmp_path / "r2", **{**opts, "k": 6})                           # … at a larger k
    r1, r2 = pd.read_parquet(tmp_path / "r1"), pd.read_parquet(tmp_path / "r2")
    rep = json.loads((tmp_path / "r2" / "_report.json").read_text())
    s = rep["series"]
    assert s["republished"] == 24_000 and s["new"] == 1500 and s["new_cells"] > 0 and s["merged_cells"] > 0
    assert _smallest(r2, QI) >= 6 and len(r2) == 25_500
    old = r2[r2.pid < 50_000]
    assert set(map(tuple, old[QI].to_numpy(np.float64))) <= _tuples(r1)
    assert rep["verification"]["passed"]


def _spec_total(path):
    s = json.loads(path.read_text())
    return s["model"]["n_records"] * np.array(s["standardization"]["mean"]), {tuple(c["value"]) for c in s["cells"]}


@pytest.mark.parametrize("participation", [[], ["--participation", "0.8", "--max-cell-failure", "0.01"]])
def test_differencing_two_specs(tmp_path, capsys, participation):
    model = _people(400, seed=13)[["age", "income"]].astype(float)
    new = pd.DataFrame({"age": [47.0], "income": [123457.0]})
    model.to_parquet(tmp_path / "m1.parquet", index=False)
    pd.concat([model, new], ignore_index=True).to_parquet(tmp_path / "m2.parquet", index=False)

    def spec(model, out, ledger):
        argv = ["spec", tmp_path / model, tmp_path / out, "--qi", "age,income", "--k", "5", "--ledger", ledger]
        assert main([str(a) for a in argv + participation]) == 0
        return _spec_total(tmp_path / out)

    (t1, _), (t2, _) = spec("m1.parquet", "t1.json", "off"), spec("m2.parquet", "t2.json", "off")
    assert "the spec must not be published" in capsys.readouterr().err
    assert np.allclose(t2 - t1, new.iloc[0].to_numpy(), rtol=1e-6)       # trial specs give the record
    led = tmp_path / "ledger"
    s1, v1 = spec("m1.parquet", "s1.json", led)
    argv = ["spec", tmp_path / "m2.parquet", tmp_path / "s2.json", "--qi", "age,income", "--k", "5", "--ledger", led]
    assert main([str(a) for a in argv + participation]) != 0                # one new model record: refused
    assert "1 record(s) not published before in this series" in capsys.readouterr().err
    more = _people(12, seed=31)[["age", "income"]].astype(float)   # ≥ the effective k of either run
    pd.concat([model, more], ignore_index=True).to_parquet(tmp_path / "m3.parquet", index=False)
    s3, v3 = spec("m3.parquet", "s3.json", led)
    assert not any(np.allclose(s3 - s1, r, rtol=1e-3) for r in more.to_numpy())
    cells = pd.concat([pd.read_parquet(f) for f in sorted((led / "series").glob("*/r*/cells-*.parquet"))])
    recorded = set(map(tuple, cells[["q0", "q1"]].to_numpy(np.float64)))
    assert v1 <= recorded and v3 <= recorded            # every value either spec publishes was recorded


@pytest.mark.parametrize("where", ["inside the output", "around the output", "inside the input", "the input"])
def test_a_ledger_inside_or_around_an_input_or_output_is_refused(tmp_path, where):
    lake = tmp_path / "lake"
    lake.mkdir()
    _people(60).to_parquet(lake / "a.parquet", index=False)
    out = tmp_path / "pub" / "rel"
    (tmp_path / "pub").mkdir()
    ledger = {"inside the output": out / "ledger", "around the output": tmp_path / "pub",
              "inside the input": lake / "ledger", "the input": lake}[where]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(ParameterError, match="release ledger"):
        anonymize_file(lake, out, qi=QI, k=3, ledger=ledger, keep=["pid"])
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_release_with_other_qis_of_a_recorded_series_is_refused_unless_a_new_series(tmp_path):
    people = _people(300, seed=14)
    ledger = tmp_path / "ledger"
    anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"])
    for other in (dict(qi=QI[:2]), dict(qi=QI, strata=["region"]), dict(qi=QI, id_column="pid")):
        with pytest.raises(ParameterError, match="can be intersected") as err:
            anonymize(people, k=4, seed=1, ledger=ledger, keep=["pid"], **other)
        assert "\n" not in str(err.value)
    rel, rep = anonymize(people, qi=QI[:2], k=4, seed=1, ledger=ledger, keep=["pid"], new_series=True)
    assert rep.series["recorded"] and len(rel) == 300
    anonymize(people.rename(columns={"age": "years"}), qi=["years"], k=4, seed=1, ledger=ledger, keep=["pid"])
    # both series go on as they are: each one's frozen values protect it against itself
    again, rep = anonymize(people, qi=QI, k=6, seed=2, ledger=ledger, keep=["pid"])
    assert rep.series["republished"] == 300 and _smallest(again, QI) >= 6


def test_a_re_release_with_per_record_participation_is_refused_before_any_work(tmp_path, capsys):
    """Per-record participation probabilities in a re-release: refused in one line before any work
    (a frozen cell's failure probability would depend on its records' probabilities now), nothing
    recorded; a constant participation re-releases."""
    people = _people(200, seed=15).assign(pi=0.9)
    ledger = tmp_path / "ledger"
    anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"], participation="pi", max_cell_failure=0.2)
    with pytest.raises(ParameterError, match="per-record participation probabilities is not supported"):
        anonymize(people, qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"], participation="pi", max_cell_failure=0.2)
    releases = sorted(p.name for p in (ledger / "series").glob("*/r*"))
    _, rep = anonymize(people.drop(columns="pi"), qi=QI, k=4, seed=1, ledger=ledger, keep=["pid"], participation=0.9,
                       max_cell_failure=0.2)
    assert rep.series["republished"] == 200 and len(releases) == 1


def test_the_staging_of_a_run_killed_hard_is_swept_by_the_next(tmp_path):
    """A run killed between staging its ledger pieces and recording them (SIGKILL: no clean-up runs)
    leaves ``LEDGER/.stage-*``; the next run that stages removes it — and leaves alone the staging
    of a run still alive, and one just made that has not yet named its owner."""
    import signal
    import socket
    import subprocess
    import sys
    import textwrap

    from daskmicro.io.ledger import Ledger

    ledger = tmp_path / "ledger"
    code = textwrap.dedent(f"""
        import os, signal
        from daskmicro.io.ledger import Ledger
        ledger = Ledger.open({str(ledger)!r})
        ledger.key()
        stage = ledger.stage()
        (stage / "records-0.parquet").write_bytes(b"piece")
        print(stage, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL
    dead = Path(killed.stdout.strip())
    assert dead.is_dir() and (dead / "records-0.parquet").exists()
    alive = ledger / f".stage-{'a' * 32}"
    alive.mkdir()
    (alive / "_daskmicro_owner.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                             "started": 0}))
    unnamed = ledger / f".stage-{'b' * 32}"
    unnamed.mkdir()
    mine = Ledger.open(ledger).stage()
    assert not dead.exists() and alive.is_dir() and unnamed.is_dir() and mine.is_dir()
    os.utime(unnamed, (0, 0))   # an hour and more without an owner: its run died naming itself
    Ledger.open(ledger).sweep()
    assert not unnamed.exists() and alive.is_dir() and mine.is_dir()
