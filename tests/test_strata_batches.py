"""Many small groups (strata × missingness patterns) share tasks (daskmicro.graph.group_cells): each piece
is split once by a group code per record, each batch of groups is one task.  What must hold: the
grouping is the pre-scan's, every group publishes what its own task would, the merge of small
strata follows its rule, and a run publishes each stratum's exact MDAV cells whatever the
batches, the files and the workers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import cli as lake_cli
from daskmicro.cli import build_parser
from daskmicro.graph import group_cells as cells
from daskmicro.graph.group_task import batch_task, one_task
from daskmicro.io.prescan import scan_frame
from daskmicro.release.run_figures import group_range
from daskmicro.runplan import GroupPlan, Improve
from daskmicro.strata import Group, group_codes, group_mask, plan_groups

# --------------------------------------------------------------------------- the merge of small strata


def _merge_by_the_rule(sizes: list, k: int) -> list:
    """The rule as stated (daskmicro.strata): the smallest unit under k, the first on a tie, joins
    its neighbour with fewer records, the previous on a tie; until none is under k or one is left."""
    units = [[i] for i in range(len(sizes))]
    total = lambda u: sum(sizes[i] for i in u)  # noqa: E731
    while len(units) > 1:
        small = [i for i, u in enumerate(units) if total(u) < k]
        if not small:
            break
        i = min(small, key=lambda j: (total(units[j]), j))
        j = min([c for c in (i - 1, i + 1) if 0 <= c < len(units)], key=lambda c: (total(units[c]), c))
        lo, hi = min(i, j), max(i, j)
        units[lo:hi + 1] = [units[lo] + units[hi]]
    return units


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(1, 20), min_size=1, max_size=60), k=st.integers(2, 25))
def test_merged_strata_follow_the_rule(sizes, k):
    counts = {((i,), 0): n for i, n in enumerate(sizes)}
    if sum(sizes) < k:
        return
    groups = plan_groups(counts, ["s"], ["x"], k, merge_small=True)
    assert [[key[0] for key in g.strata] for g in groups] == _merge_by_the_rule(sizes, k)
    assert [g.n for g in groups] == [sum(sizes[i] for i in u) for u in _merge_by_the_rule(sizes, k)]


def test_merging_twenty_thousand_small_strata_is_quick():
    import time

    counts = {((i,), 0): 3 for i in range(20_000)}
    started = time.perf_counter()
    groups = plan_groups(counts, ["s"], ["x"], 10, merge_small=True)
    assert sum(g.n for g in groups) == 60_000 and min(g.n for g in groups) >= 10
    assert time.perf_counter() - started < 30   # was quadratic: hours at this size


# --------------------------------------------------------------------------- group codes


_KEYS = {
    "int": lambda r, n: r.integers(0, 4, n),
    "float": lambda r, n: r.choice([0.0, -0.0, 1.5, np.nan, 2.25], n),
    "text": lambda r, n: pd.array(r.choice(["a", "b", None, "c"], n), dtype=object),
    "bool": lambda r, n: r.integers(0, 2, n).astype(bool),
    "float16": lambda r, n: r.choice([0.5, -0.0, 0.0, 1.0], n).astype(np.float16),
    "Int64": lambda r, n: pd.array(r.choice([1, 2, None], n), dtype="Int64"),
    "category": lambda r, n: pd.Categorical(r.choice(["u", "v", "w"], n), categories=["u", "v", "w", "z"]),
    # Arrow's double holds a NaN beside its nulls: two keys to pandas, one missing value to the pre-scan
    "arrow_nan_null": lambda r, n: pd.Series(pd.arrays.ArrowExtensionArray(pa.array(
        r.choice([1.0, np.nan, 2.0], n), type=pa.float64(), mask=r.random(n) < 0.3, from_pandas=False))),
    "arrow_float32_nan_null": lambda r, n: pd.Series(pd.arrays.ArrowExtensionArray(pa.array(
        r.choice([1.0, np.nan, -0.0], n).astype(np.float32), type=pa.float32(), mask=r.random(n) < 0.3,
        from_pandas=False))),
}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(sorted(_KEYS)), min_size=0, max_size=2, unique=True),
       n=st.integers(1, 80), seed=st.integers(0, 2**16), gaps=st.booleans())
def test_group_codes_are_the_prescans_grouping(kinds, n, seed, gaps):
    """Each record's group code names the group whose mask holds it, for every key dtype, missing
    keys and QI gaps; the codes count what the pre-scan counted."""
    r = np.random.default_rng(seed)
    df = pd.DataFrame({f"k{j}": _KEYS[kind](r, n) for j, kind in enumerate(kinds)})
    df["x"] = r.normal(size=n)
    df["y"] = r.normal(size=n)
    if gaps:
        df.loc[r.random(n) < 0.3, "x"] = np.nan
    strata, qi = list(df.columns[:len(kinds)]), ["x", "y"]
    combos = scan_frame(df, qi, strata)["combos"]
    counts = {(key[:-1], key[-1]): c for key, c in combos.items()}
    groups = plan_groups(counts, strata, qi, 1)
    where = {(key, g.pattern): i for i, g in enumerate(groups) for key in g.strata}
    codes = group_codes(df, strata, qi, where)
    assert (codes >= 0).all()
    for i, g in enumerate(groups):
        assert np.array_equal(codes == i, group_mask(df, strata, qi, g))
        assert int((codes == i).sum()) == g.n


# --------------------------------------------------------------------------- one batch, many groups


_QI_TYPES = {
    "float64": lambda v: v,
    "float32": lambda v: v.astype(np.float32),
    "float16": lambda v: np.clip(v, -6e4, 6e4).astype(np.float16),   # float16 holds up to 65,504
    "int64": lambda v: np.round(v * 10).astype(np.int64),
    "Int64": lambda v: pd.array(np.round(v * 10).astype(np.int64), dtype="Int64"),
    "Float32": lambda v: pd.array(v.astype(np.float32), dtype="Float32"),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(types=st.lists(st.sampled_from(sorted(_QI_TYPES)), min_size=1, max_size=3),
       sizes=st.lists(st.integers(3, 30), min_size=1, max_size=6), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-6, 1.0, 1e6]), improve=st.booleans(), gaps=st.booleans())
def test_a_batch_publishes_what_each_groups_own_task_would(types, sizes, seed, scale, improve, gaps):
    r = np.random.default_rng(seed)
    n = sum(sizes)
    qi = [f"q{j}" for j in range(len(types))]
    df = pd.DataFrame({c: _QI_TYPES[t](r.normal(size=n) * scale) for c, t in zip(qi, types)})
    df["other"] = np.arange(n)
    spans = list(zip(np.cumsum([0] + sizes[:-1]).tolist(), np.cumsum(sizes).tolist()))
    gps = []
    for g, (a, b) in enumerate(spans):
        observed = list(qi)
        if gaps and g % 2 and len(qi) > 1 and not pd.api.types.is_integer_dtype(df[qi[0]].dtype):
            df.loc[a:b - 1, qi[0]] = np.nan            # this group has qi[0] missing: another pattern
            observed = qi[1:]
        if g == 0 and b - a > 3:
            df.loc[a:b - 1, qi[-1]] = df[qi[-1]].iloc[a]   # a constant column in one group
        group = Group(strata=[(g,)], pattern=0 if observed == qi else 1, observed=observed, n=b - a, label=f"g{g}")
        gps.append(GroupPlan(group=group, method="mdav", k=3, energy_loss=None, n_components=None,
                             participation=None, plain_k=None, reference_k=None,
                             improve=Improve(2, 4, 1, 1) if improve else None, pipeline=None))
    out, infos = batch_task(df, spans, gps, qi)
    for gp, (a, b), info in zip(gps, spans, infos):
        alone, own = one_task(df.iloc[a:b].reset_index(drop=True), gp)
        own = replace(own, figures=[group_range(alone, qi)], seconds=info.seconds)
        assert repr(own) == repr(info)
        mine = out.iloc[a:b].reset_index(drop=True)
        for c in df.columns:   # the same published values, in the column's published type
            x = pd.Series(mine[c]).astype("float64").to_numpy(na_value=np.nan)
            y = pd.Series(alone[c]).astype("float64").to_numpy(na_value=np.nan)
            assert np.array_equal(x, y, equal_nan=True), c
            if pd.api.types.is_float_dtype(df[c].dtype):
                assert mine[c].dtype == df[c].dtype


# --------------------------------------------------------------------------- whole runs


def _run(argv, client):
    args = build_parser().parse_args(["anonymize", *map(str, argv)])
    return lake_cli.run_anonymize(args, client=client)


def _lake(root: Path, df: pd.DataFrame, files: int) -> Path:
    root.mkdir(parents=True)
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        df.iloc[part].to_parquet(root / f"f{i}.parquet", index=False)
    return root


def _exact_mdav_per_group(df, strata, qi, k):
    """The published (stratum, QI) tuples of exact MDAV in each stratum and pattern, records in input order."""
    out = []
    for _, g in df.groupby(strata, dropna=False, sort=False):
        for _, p in g.groupby(g[qi].isna().apply(tuple, axis=1), sort=False):
            observed = [c for c in qi if p[c].notna().all()]
            group = Group(strata=[()], pattern=0, observed=observed, n=len(p), label="")
            gp = GroupPlan(group=group, method="mdav", k=k, energy_loss=None, n_components=None, participation=None,
                           plain_k=None, reference_k=None, improve=None, pipeline=None)
            out.append(one_task(p.reset_index(drop=True), gp)[0] if observed else p)
    return pd.concat(out, ignore_index=True)


@pytest.mark.parametrize("batch_rows", [1, 60, 20_000])
def test_many_strata_publish_each_stratums_own_cells(tmp_path, client, monkeypatch, batch_rows):
    """120 strata over 4 files (spread over every file, or each in one or two once sorted), a QI
    missing in some strata (another missingness pattern): the release holds, as a multiset,
    exactly the cells of exact MDAV run on each group alone — whether every group is a batch of
    its own, a few share one, or all do."""
    monkeypatch.setattr(cells, "BATCH_ROWS", batch_rows)
    r = np.random.default_rng(3)
    n = 1200
    df = pd.DataFrame({"x": r.normal(size=n), "y": r.integers(0, 500, n), "s": r.permutation(np.arange(n) % 120),
                       "t": np.array(["a", "b"])[np.arange(n) % 2]})
    df.loc[df.s < 12, "x"] = np.nan
    df = df.sort_values("s", kind="stable").reset_index(drop=True) if batch_rows == 60 else df
    src = _lake(tmp_path / "in", df, files=4)
    out = tmp_path / "out"
    assert _run([src, out, "--qi", "x,y", "--k", "3", "--strata", "s", "--missing", "separate", "--method", "mdav",
                 "--seed", "4"], client) == 0
    rel = pd.read_parquet(out)
    report = json.loads((out / "_report.json").read_text())
    assert report["n"] == n and len(report["strata"]["groups"]) == 120
    want = _exact_mdav_per_group(df, ["s"], ["x", "y"], 3)
    cols = ["s", "x", "y", "t"]
    key = lambda f: f[cols].sort_values(cols).reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(key(rel), key(want), check_exact=False, rtol=1e-12)
    assert rel.groupby(["s", "x", "y"], dropna=False).size().min() >= 3


def test_many_strata_release_is_the_same_whatever_the_batches(tmp_path, client, monkeypatch):
    """Byte for byte: the batches are a matter of tasks, not of what is published."""
    r = np.random.default_rng(8)
    n = 800
    df = pd.DataFrame({"x": r.normal(size=n), "y": r.normal(size=n), "s": r.integers(0, 60, n)})
    df.loc[df.s < 8, "y"] = np.nan
    src = _lake(tmp_path / "in", df, files=3)
    files, groups = [], []
    for rows in (1, 100, 20_000):
        monkeypatch.setattr(cells, "BATCH_ROWS", rows)
        out = tmp_path / f"out{rows}"
        assert _run([src, out, "--qi", "x,y", "--k", "4", "--strata", "s", "--missing", "separate",
                     "--merge-small-strata", "--seed", "2"], client) == 0
        files.append({p.name: p.read_bytes() for p in out.glob("part-*.parquet")})
        groups.append(json.loads((out / "_report.json").read_text())["strata"]["groups"])
    assert files[0] and files[0] == files[1] == files[2]
    assert len(groups[0]) >= 55 and groups[0] == groups[1] == groups[2]


def test_a_stratified_re_release_is_the_same_whatever_the_batches(tmp_path, client, monkeypatch):
    """A re-release of 40 strata with new records in each: the records published before keep their
    values, the new ones form cells of their own in their stratum, in shared tasks or one task per
    group alike (each ledger keys the release's order: the rows are compared by row id)."""
    r = np.random.default_rng(5)
    n, extra = 800, 240
    df = pd.DataFrame({"x": r.normal(size=n + extra), "y": r.normal(size=n + extra),
                       "s": np.concatenate([r.permutation(np.arange(n) % 40), np.arange(extra) % 40]),
                       "pid": np.arange(n + extra)})
    first, second = _lake(tmp_path / "in1", df.iloc[:n], files=2), _lake(tmp_path / "in2", df, files=3)
    files = []
    for rows in (1, 20_000):
        monkeypatch.setattr(cells, "BATCH_ROWS", rows)
        ledger, out1, out2 = tmp_path / f"ledger{rows}", tmp_path / f"a{rows}", tmp_path / f"b{rows}"
        for src, out in ((first, out1), (second, out2)):
            assert _run([src, out, "--qi", "x,y", "--k", "3", "--strata", "s", "--id-column", "pid", "--keep-row-id",
                         "--ledger", ledger, "--seed", "6"], client) == 0
        files.append(pd.read_parquet(out2).sort_values("row_id").reset_index(drop=True))
        # the first release's records are the first rows of the second input: the same row ids
        before, after = pd.read_parquet(out1).set_index("row_id"), pd.read_parquet(out2).set_index("row_id")
        assert len(after) == n + extra
        pd.testing.assert_frame_equal(after.loc[before.index, ["x", "y", "s"]], before[["x", "y", "s"]])
        new = after.loc[~after.index.isin(before.index)]
        old_tuples = set(map(tuple, before[["s", "x", "y"]].to_numpy()))
        assert not any(t in old_tuples for t in map(tuple, new[["s", "x", "y"]].to_numpy()))
        assert after.groupby(["s", "x", "y"]).size().min() >= 3
    pd.testing.assert_frame_equal(files[0], files[1])
