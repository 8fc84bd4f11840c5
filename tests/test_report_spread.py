"""The companions of a release (report JSON, HTML page, ``_SUCCESS``, the printed summary) give
nothing that pins down a record's distance from its published centroid.

The attacker holds the release and every companion, and knows every record except those of one
cell (every other cell has no spread: its records are its centroid).  The release gives each
QI's between-cell sum of squares SSB (grand mean = the release's mean, cells = groups of equal
published tuples); SST = SSE + SSB, so any exact figure of the original spread — the information
loss IL = 100·SSE/SST, an original mean and standard deviation (bin edges in units of them) —
gives the cell's SSE, and with k = 2 the pair exactly.  The attacker below solves for the pair
from what the companions give: the rounded IL with its interval, or the original standard
deviation when bin edges carry it.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import hypothesis
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from daskmicro.anonymize import anonymize
from daskmicro.cli import main
from daskmicro.report import render_html
from daskmicro.report.coarse import IL_GRID, MIN_ODDS_RATIO, rounded_information_loss

REL = 1e-3   # a record counts as recovered when the attacker pins every QI value within 0.1 %


# --------------------------------------------------------------------------- the attacker


def _numbers(text: str) -> list:
    """Every number written in ``text`` (thousands separators read as such)."""
    pattern = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
    return [float(t.replace(",", "")) for t in re.findall(pattern, text)]


def _floats(doc) -> list:
    """Every number in a JSON document."""
    if isinstance(doc, dict):
        return [v for value in doc.values() for v in _floats(value)]
    if isinstance(doc, list):
        return [v for value in doc for v in _floats(value)]
    return [float(doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


def _within_bounds(release: pd.DataFrame, qi: list, report: dict, manifest: dict | None):
    """Per QI, the bounds (low, high) the companions put on the within-cell sum of squares W of
    the one cell with spread (inf: no bound)."""
    Y = release[qi].to_numpy(np.float64)
    n = len(Y)
    ssb = ((Y - Y.mean(axis=0)) ** 2).sum(axis=0)       # SSB of each QI, from the release alone
    low, high = np.zeros(len(qi)), np.full(len(qi), np.inf)
    # (a) an original standard deviation, as bin edges at mean + j·σ/4 of the originals gave it: SST = n·σ²
    for column in (report.get("before_after") or {}).get("columns", []):
        j = qi.index(column["name"])
        sigma = 4 * (column["edges"][1] - column["edges"][0])
        low[j] = high[j] = max(n * sigma ** 2 - ssb[j], 0.0)
    # (b) the information loss IL = (100/m_used)·Σ W_j/(W_j + SSB_j): with one varying QI, W = SSB·IL/(100 − IL)
    intervals = []
    for doc in (report, (manifest or {}).get("metrics") or {}):
        if (doc.get("information_loss_rounding") or {}).get("interval"):
            intervals.append(tuple(doc["information_loss_rounding"]["interval"]))
        elif doc.get("information_loss") is not None:          # published as it is: exact
            intervals.append((doc["information_loss"], doc["information_loss"]))
    varying = [j for j, c in enumerate(qi) if c not in report.get("constant_columns", [])]
    if len(varying) == 1 and intervals:
        j = varying[0]
        lo, hi = max(a for a, _ in intervals), min(b for _, b in intervals)
        odds = (lambda p: p / (100 - p) if p < 100 else math.inf)
        low[j], high[j] = max(low[j], ssb[j] * odds(lo)), min(high[j], ssb[j] * odds(hi))
    return low, high


def _pinned(release, qi, report, manifest, cell_rows: np.ndarray, centroid, k: int) -> list:
    """For each record of the spread cell (its original values ``cell_rows``; ``centroid`` its
    published tuple), whether the attacker pins it: only a pair (k = 2) follows from W, as the
    centroid ± √(W/2) in each QI."""
    low, high = _within_bounds(release, qi, report, manifest)
    if k != 2:
        return [False] * len(cell_rows)
    out = []
    for x in cell_rows:
        pinned = True
        for j in range(len(qi)):
            h_lo, h_hi = math.sqrt(low[j] / 2), math.sqrt(high[j] / 2)
            h = abs(x[j] - centroid[j])
            assert h_lo * (1 - 1e-7) <= h <= h_hi * (1 + 1e-7), "the attacker's bounds miss the truth"
            # the attacker's values for this record lie in centroid ∓ [h_lo, h_hi]: pinned when narrow
            pinned &= (h_hi - h_lo) / 2 <= REL * abs(x[j])
        out.append(bool(pinned))
    return out


def _exact(report: dict, il: float) -> dict:
    """``report`` with the exact information loss, as an unrounded report would publish it."""
    out = {key: v for key, v in report.items() if key != "information_loss_rounding"}
    out["information_loss"] = il
    return out


# --------------------------------------------------------------------------- the k = 2 example

PAIR = (43.7, 47.9)
EXAMPLE = [10.0, 10.0, 100.0, 100.0, 200.0, 200.0, 300.0, 300.0, 400.0, 400.0, 500.0, 500.0, 600.0, 600.0, *PAIR]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("spread")
    path = root / "input.parquet"
    pd.DataFrame({"x": EXAMPLE, "note": [f"r{i}" for i in range(len(EXAMPLE))]}).to_parquet(path, index=False)
    return root, path


def _record(stderr: str) -> dict:
    found = re.findall(r"private run record .*: (\S+)\s*$", stderr, re.M)
    assert found, stderr
    path = Path(found[-1])
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    return json.loads(path.read_text())


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_the_pair_is_not_solved_from_the_release_and_its_companions(example, kind, capsys):
    root, path = example
    out = root / ("release.parquet" if kind == "file" else "lake")
    assert main(["anonymize", str(path), str(out), "--qi", "x", "--k", "2", "--seed", "3", "--keep", "note"]) == 0
    captured = capsys.readouterr()
    if kind == "file":
        release, report_path = pd.read_parquet(out), root / "release.report.json"
        manifest = None
        assert main(["report", str(out)]) == 0
        html = (root / "release.report.html").read_text()
    else:
        release, report_path = pd.read_parquet(out), out / "_report.json"
        manifest = json.loads((out / "_SUCCESS").read_text())
        assert main(["report", str(out)]) == 0
        html = root.joinpath("lake.report.html").read_text()
    capsys.readouterr()
    report = json.loads(report_path.read_text())
    cell, centroid = np.array([[v] for v in PAIR]), [np.mean(PAIR)]
    assert sorted(release["x"].value_counts().tolist()) == [2] * 8          # eight cells of two
    assert np.isclose(release["x"], centroid[0], rtol=1e-12).sum() == 2     # the pair is one of them
    assert "information loss" in html and "information loss" in captured.out
    assert _pinned(release, ["x"], report, manifest, cell, centroid, 2) == [False, False]
    # the exact information loss is in the private run record only, never printed or published
    exact = _record(captured.err)["report"]["information_loss"]
    assert 0 < exact and report["information_loss"] == rounded_information_loss(exact)[0]
    for doc in [report] + ([manifest] if manifest else []):
        assert not any(math.isclose(v, exact, rel_tol=1e-9) for v in _floats(doc))
    for text in (html, captured.out):
        for digits in (3, 4, 6, 10, 17):
            assert f"{exact:.{digits}g}" not in text
    # the channel is real: with the exact value published, the same attacker solves the pair
    assert _pinned(release, ["x"], _exact(report, exact), None, cell, centroid, 2) == [True, True]
    low, high = _within_bounds(release, ["x"], _exact(report, exact), None)
    estimate = centroid[0] - math.sqrt(low[0] / 2), centroid[0] + math.sqrt(high[0] / 2)
    assert np.allclose(estimate, PAIR, rtol=1e-6)


def test_the_pair_from_bin_edges_in_units_of_the_original_spread(example):
    """What a report with before/after bins at mean + j·σ/4 of the originals gave away: σ, so SST."""
    _, path = example
    release, report = anonymize(pd.read_parquet(path), qi=["x"], k=2, seed=3, keep=["note"])
    x = np.asarray(EXAMPLE)
    leaky = dict(report.to_dict(), before_after={"columns": [
        {"name": "x", "edges": list(x.mean() + x.std() * np.linspace(-4, 4, 33))}]})
    cell, centroid = np.array([[v] for v in PAIR]), [np.mean(PAIR)]
    assert _pinned(release, ["x"], leaky, None, cell, centroid, 2) == [True, True]
    assert _pinned(release, ["x"], report.to_dict(), None, cell, centroid, 2) == [False, False]


# --------------------------------------------------------------------------- every cell but one without spread


@st.composite
def one_spread_cell(draw):
    k = draw(st.one_of(st.just(2), st.integers(2, 5)))      # a pair on one QI most often: the case a
    m = draw(st.one_of(st.just(1), st.integers(1, 3)))      # single figure of the spread would solve
    scale = 10.0 ** draw(st.integers(-3, 9))
    cells = draw(st.integers(1, 6))
    rows = []
    for j in range(m):   # cells far apart in every QI (±40, ±80, …), each in its own order
        order = draw(st.permutations(range(cells)))
        signs = draw(st.lists(st.sampled_from([-1, 1]), min_size=cells, max_size=cells))
        shift = draw(st.lists(st.integers(0, 5), min_size=cells, max_size=cells))
        rows.append([signs[i] * 40 * (order[i] + 1) + shift[i] for i in range(cells)])
    centres = np.array(rows, dtype=np.float64).T * scale
    spread = np.array(draw(st.lists(st.lists(st.integers(-6, 6), min_size=m, max_size=m), min_size=k, max_size=k)),
                      dtype=np.float64) * scale
    assume(len({tuple(r) for r in spread}) > 1)             # the one cell with spread
    X = np.vstack([np.repeat(centres, k, axis=0), spread])
    order = draw(st.permutations(range(len(X))))
    return k, X[list(order)], spread


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(one_spread_cell())
@hypothesis.example((2, np.array([[40.0], [3.0], [-80.0], [40.0], [5.0], [-80.0]]), np.array([[3.0], [5.0]])))
def test_no_record_of_the_spread_cell_is_pinned(case):
    k, X, spread = case
    qi = [f"q{j}" for j in range(X.shape[1])]
    event(f"k = {k}, {len(qi)} QI(s)")
    release, report = anonymize(pd.DataFrame(X, columns=qi), qi=qi, k=k, seed=1)
    cells = release.groupby(qi).size()
    assume((cells == k).all() and len(cells) == len(X) // k)   # MDAV formed the cells as laid out
    Y = release[qi].to_numpy()
    near = np.isclose(Y, spread.mean(axis=0), rtol=1e-9, atol=1e-9 * np.abs(X).max()).all(axis=1)
    assume(near.sum() == k)
    centroid = Y[near][0]
    published = report.to_dict()
    html = render_html(published)
    assert "information loss" in html
    assert not any(_pinned(release, qi, published, None, spread, centroid, k))
    # the exact information loss is published nowhere, printed nowhere
    exact = report.information_loss
    assert not any(math.isclose(v, exact, rel_tol=1e-9) for v in _floats(published)) or exact in IL_GRID
    if exact not in IL_GRID:
        for text in (html, report.summary()):
            assert f"{exact:.6g}" not in text
    # with the exact IL instead, a pair on one varying QI is solved: the rounding is what protects it
    if k == 2 and report.m_used == 1 and exact > 0:
        assert all(_pinned(release, qi, _exact(published, exact), None, spread, centroid, k))


def test_the_grid_never_fixes_the_ratio_sse_ssb_closer_than_its_factor():
    for value in IL_GRID:
        v, low, high = rounded_information_loss(value)
        assert v == value and low <= value <= high
        if 0 < low and high < 100:
            assert (high / (100 - high)) / (low / (100 - low)) >= MIN_ODDS_RATIO
    steps = np.diff(IL_GRID)
    assert steps.min() == pytest.approx(0.1) and steps.max() == 5 and IL_GRID[0] == 0 and IL_GRID[-1] == 100
    assert rounded_information_loss(5.69) == (6.0, 5.5, 7.0) and rounded_information_loss(0.03)[0] == 0.0


# --------------------------------------------------------------------------- no original moment anywhere


def test_no_original_mean_sd_or_extreme_in_the_companions(tmp_path, capsys):
    rng = np.random.default_rng(11)
    n = 600
    df = pd.DataFrame({"a": rng.uniform(1e5, 9e5, n), "b": -rng.lognormal(12, 0.5, n), "c": rng.normal(3e6, 4e5, n),
                       "id": np.arange(n)})
    path = tmp_path / "input.parquet"
    df.to_parquet(path, index=False)
    qi = ["a", "b", "c"]
    originals = []
    for c in qi:
        x = df[c].to_numpy()
        originals += [x.mean(), x.std(), x.std(ddof=1), x.min(), x.max(), x.var(), np.median(x)]
    texts = {}
    for name, out in (("file", tmp_path / "r.parquet"), ("dir", tmp_path / "lake")):
        assert main(["anonymize", str(path), str(out), "--qi", ",".join(qi), "--k", "3", "--seed", "2", "--keep", "id"]) == 0
        texts[f"{name}: stdout"] = capsys.readouterr().out
        assert main(["report", str(out)]) == 0
        capsys.readouterr()
    texts["file: json"] = (tmp_path / "r.report.json").read_text()
    texts["file: html"] = (tmp_path / "r.report.html").read_text()
    texts["dir: json"] = (tmp_path / "lake" / "_report.json").read_text()
    texts["dir: html"] = (tmp_path / "lake.report.html").read_text()
    texts["dir: _SUCCESS"] = (tmp_path / "lake" / "_SUCCESS").read_text()
    for where, text in texts.items():
        shown = {float(f"{v:.6g}") for v in _numbers(text) if v != 0}
        for v in originals:
            assert float(f"{v:.6g}") not in shown, (where, v)
    # the release's own range is what the bins span (published values, not the originals')
    release = pd.read_parquet(tmp_path / "r.parquet")
    report = json.loads(texts["file: json"])
    for column in report["release_figures"]["columns"]:
        assert column["edges"][0] == release[column["name"]].min() != df[column["name"]].min()
