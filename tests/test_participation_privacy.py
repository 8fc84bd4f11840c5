"""Per-record participation π_j is an input, never published: no published figure gives it back.

The attacker reads the published report of a real run (``Report.to_json``, the CLI's
``OUT.report.json``) and knows the cell structure of the table and, in the multi-cell tables, the
π_j of every record outside the last cell.  It attacks the last cell's π_j two ways:

* the *solver*: treats every published failure figure (and the mean π, where published) as an
  exact equation in the unknown π_j and solves them by least squares from many starts (the
  figures are symmetric in a cell's records, so it recovers their sorted values at best);
* the *explorer*: random walks through the unknown π_j, keeping every point whose figures the run
  would publish exactly as published (the documented rule: each failure figure rounded up to one
  significant digit, at least p̄/10, p̄ where rounding up would pass it; exact figures compared
  to 1e-9 where the section carries no ``bounds``) — how far from the true values the published
  report still allows each sorted π to be.

On the exact figures (the private run record, and what the published report held before it
coarsened them) the explorer finds no other point, and the solver recovers every π of a cell of
n = k records well within SOLVED.  On the published report the explorer moves every sorted π by
more than TOL, and the solver misses some π by more than SOLVED (unless an exact figure is itself a
one-digit number, so that its bound is exact: then the solver may land on the truth by chance, with
no way to tell it from the rest of what the explorer finds).
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from scipy.optimize import least_squares

from daskmicro import anonymize
from daskmicro.cli import main
from daskmicro.report import render_html

from _oracles import binom_failure, failure_figures

PBAR = 0.9      # every cell of k … 2k − 1 records with π_j in (0.5, 1) fails with q̄ < 0.875 ≤ p̄: no growth
TOL = 0.03      # the published report leaves every sorted π of the last cell at least this much room
SOLVED = 1e-3   # a π recovered closer than this is recovered
QI = ["x", "y"]


# --------------------------------------------------------------------------- the runs


def _table(known, last, seed=0) -> pd.DataFrame:
    """Cells of well-apart clusters: ``known`` (lists of π_j) on a circle of radius 1000, ``last`` at
    its centre, so that MDAV forms each cluster's cell (the last one last); QI values jittered by
    10⁻³, distinct."""
    rng = np.random.default_rng(seed)
    rows = []
    for c, pis in enumerate(known):
        angle = np.pi / 4 + 2 * np.pi * c / max(3, len(known))   # both QIs vary between clusters
        for p in pis:
            rows.append((1000 * np.cos(angle) + rng.normal(0, 1e-3), 1000 * np.sin(angle) + rng.normal(0, 1e-3), p))
    for p in last:
        rows.append((rng.normal(0, 1e-3), rng.normal(0, 1e-3), p))
    return pd.DataFrame(rows, columns=["x", "y", "pi"])


def _publish(df, k, pbar=PBAR, participation="pi"):
    """A real run: (the published report as read back from its file, the exact private report)."""
    _, report = anonymize(df, QI, k, participation=participation, max_cell_failure=pbar, seed=0,
                          plain_k_reference=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "release.report.json"
        report.to_json(path)
        published = json.loads(path.read_text())
    return published, report.run_record()["report"]


# --------------------------------------------------------------------------- the attacker


def _pmf(pis: np.ndarray) -> np.ndarray:
    """P{K = m}, m = 0 … n, for each row of ``pis`` (S, n)."""
    out = np.ones((pis.shape[0], 1))
    for j in range(pis.shape[1]):
        a = pis[:, j:j + 1]
        out = np.pad(out * (1 - a), ((0, 0), (0, 1))) + np.pad(out * a, ((0, 0), (1, 0)))
    return out


def _cell_terms(k, pis):
    """q̄_c, expected unprotected records and Σ_j P{K_−j ≤ k − 2} of a cell, per row of ``pis``."""
    pis = np.atleast_2d(np.asarray(pis, dtype=np.float64))
    full = _pmf(pis)
    q = full[:, 1:k].sum(1)
    unprotected = (full[:, 1:k] * np.arange(1, k)).sum(1)
    given_active = sum(_pmf(np.delete(pis, j, axis=1))[:, :k - 1].sum(1) for j in range(pis.shape[1]))
    return q, unprotected, given_active


class Attacker:
    """Knows k, p̄, the cells and the π_j of every record outside the last cell."""

    #: random starts of the least-squares solver (four find the exact figures' solution: the
    #: honest attacker's check below says so for every example)
    starts = 4

    def __init__(self, k, pbar, known, n_last, published):
        self.k, self.pbar, self.n_last, self.pub = k, pbar, n_last, published
        self.bounds = "bounds" in published
        terms = [_cell_terms(k, p) for p in known]
        self.known_q = np.array([t[0][0] for t in terms])
        self.known_u = sum(t[1][0] for t in terms) if terms else 0.0
        self.known_a = sum(t[2][0] for t in terms) if terms else 0.0
        self.known_pi = float(sum(np.sum(p) for p in known))
        self.n = sum(len(p) for p in known) + n_last
        self.cells = len(known) + 1
        # the last cell's entry among the worst cells: the published list less the known cells' entries
        entries = [(int(w["size"]), float(w["cell_failure"])) for w in published["worst_cells"]
                   for _ in range(int(w.get("cells", 1)))]
        for size, q in zip((len(p) for p in known), self.known_q):
            value = float(self.rule(np.array([q]), cell=True)[0]) if self.bounds else q
            entries.remove(next(e for e in entries if e[0] == size and np.isclose(e[1], value, rtol=1e-9)))
        assert len(entries) == 1 and entries[0][0] == n_last
        self.last_entry = entries[0][1]

    def rule(self, x, cell=False, probability=False):
        """The documented published form of exact figures ``x`` (vectorised)."""
        least = self.pbar / 10
        x = np.asarray(x, dtype=np.float64)
        unit = 10.0 ** np.floor(np.log10(np.maximum(x, 1e-300)))
        b = np.where(x <= least, least, np.ceil(x / unit * (1 - 1e-12)) * unit)
        if cell:
            b = np.where((x <= self.pbar) & (b > self.pbar), self.pbar, b)
        return np.minimum(b, 1.0) if probability else b

    def figures(self, cand):
        """The exact figures of the table with the last cell's π_j = each row of ``cand``."""
        q, u, a = _cell_terms(self.k, cand)
        qs = np.column_stack([np.broadcast_to(self.known_q, (q.size, self.known_q.size)), q])
        eu = self.known_u + u
        return {
            "cell_failure_max": qs.max(1), "cell_failure_mean": qs.mean(1),
            "table_failure": -np.expm1(np.log1p(-qs).sum(1)), "expected_unprotected": eu,
            "record_failure": eu / self.n, "record_failure_given_active": (self.known_a + a) / self.n,
            "participation_mean": (self.known_pi + cand.sum(1)) / self.n, "last_cell": q,
        }

    _FORM = {"cell_failure_max": dict(cell=True), "cell_failure_mean": dict(cell=True),
             "table_failure": dict(probability=True), "expected_unprotected": {},
             "record_failure": dict(probability=True), "record_failure_given_active": dict(probability=True),
             "participation_mean": None}

    def consistent(self, cand) -> np.ndarray:
        """Whether the run would have published exactly this report for each row of ``cand``."""
        fig = self.figures(cand)
        ok = np.all((cand > 0) & (cand <= 1), axis=1)
        for key, form in self._FORM.items():
            if key not in self.pub:
                continue
            x = fig[key] if not self.bounds or form is None else self.rule(fig[key], **form)
            ok &= np.isclose(x, self.pub[key], rtol=1e-9, atol=0)
        last = self.rule(fig["last_cell"], cell=True) if self.bounds else fig["last_cell"]
        return ok & np.isclose(last, self.last_entry, rtol=1e-9, atol=0)

    def solve(self, rng) -> np.ndarray:
        """Least squares on the published figures taken as exact; sorted π of the last cell."""
        keys = [key for key in ("cell_failure_mean", "table_failure", "expected_unprotected",
                                "record_failure_given_active", "participation_mean") if key in self.pub]

        def residual(p):
            fig = self.figures(p[None, :])
            return np.array([(fig[key][0] - self.pub[key]) / max(abs(self.pub[key]), 1e-12) for key in keys]
                            + [(fig["last_cell"][0] - self.last_entry) / max(self.last_entry, 1e-12)])

        best = None
        for _ in range(self.starts):
            fit = least_squares(residual, rng.uniform(0.5, 1.0, self.n_last), bounds=(1e-9, 1.0),
                                xtol=1e-15, ftol=1e-15, gtol=1e-15)
            if best is None or fit.cost < best.cost:
                best = fit
        return np.sort(best.x)

    def explore(self, truth, rng, chains=256, steps=150) -> np.ndarray:
        """How far from ``truth`` (sorted) each sorted π can move with the published report unchanged."""
        state = np.tile(truth, (chains, 1))
        scale = np.geomspace(0.002, 0.05, chains)[:, None]
        far = np.zeros(truth.size)
        for _ in range(steps):
            proposal = state + rng.normal(size=state.shape) * scale
            keep = self.consistent(proposal)
            state[keep] = proposal[keep]
            far = np.maximum(far, np.abs(np.sort(state, axis=1) - np.sort(truth)).max(0))
        return far


# --------------------------------------------------------------------------- (1) no π recovered


@st.composite
def tables(draw):
    k = draw(st.integers(2, 4))
    n_last = draw(st.integers(k, min(k + 2, 2 * k - 1)))
    pi = st.floats(0.5, 1.0, exclude_min=True, exclude_max=True)
    known = draw(st.lists(st.lists(pi, min_size=k, max_size=k), max_size=3))
    last = draw(st.lists(pi, min_size=n_last, max_size=n_last))
    return k, known, last


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(tables(), st.integers(0, 2**32 - 1))
@example((2, [], [0.5000000000000001, 0.5000000000000001]), 0)
def test_published_report_gives_back_no_participation(table, seed):
    k, known, last = table
    published, exact = _publish(_table(known, last), k)
    sizes = {str(len(p)): 0 for p in known + [last]}
    for p in known + [last]:
        sizes[str(len(p))] += 1
    assert published["cell_size_counts"] == exact["cell_size_counts"] == dict(sorted(sizes.items(), key=lambda i: int(i[0])))
    # the cells are the clusters (their Σπ, in the private record, say so)
    active = sorted(w["expected_active"] for w in exact["probabilistic"]["worst_cells"])
    assert active == pytest.approx(sorted(float(np.sum(p)) for p in known + [last]), abs=1e-9)
    truth = np.sort(np.asarray(last, dtype=np.float64))
    rng = np.random.default_rng(seed)

    # the attacker is sound: on the exact figures (what the report published before) it wins
    honest = Attacker(k, PBAR, known, len(last), exact["probabilistic"])
    assert honest.consistent(truth[None, :])[0]
    if len(last) == k:   # n = k: the figures fix the elementary symmetric functions, so every π (to
        # about √ε where two are equal: a double root)
        assert np.abs(honest.solve(rng) - truth).max() < SOLVED / 10
    assert honest.explore(truth, rng, steps=20).max() < 1e-6

    # on the published report it loses: no solution near the truth, every π left wide open
    prob = published["probabilistic"]
    attacker = Attacker(k, PBAR, known, len(last), prob)
    assert attacker.consistent(truth[None, :])[0]
    if not _one_digit(exact["probabilistic"]):   # else the bounds are the exact figures (π = 0.5, 0.5:
        # q̄ = r̄′ = 0.5), the solver may land on the truth and cannot tell: the explorer's room stays
        assert np.abs(attacker.solve(rng) - truth).max() > SOLVED
    assert (attacker.explore(truth, rng) > TOL).all()
    assert "bounds" in prob and "participation_mean" not in prob


def _one_digit(section) -> bool:
    return any(len(f"{section[key]:e}".split("e")[0].rstrip("0").rstrip(".")) == 1 for key in _FIGURES)


def test_two_record_table_of_the_defect():
    # π = 0.91, 0.97: the exact q̄ = 0.1146 and mean π = 0.94 gave both back (q̄ = s − 2p, s = 2·mean)
    published, exact = _publish(_table([], [0.91, 0.97]), 2)
    ex = exact["probabilistic"]
    s, p = 2 * ex["participation_mean"], (2 * ex["participation_mean"] - ex["cell_failure_max"]) / 2
    assert np.sort(np.roots([1, -s, p])) == pytest.approx([0.91, 0.97], abs=1e-9)
    prob = published["probabilistic"]
    assert "participation_mean" not in prob and prob["cell_failure_max"] == 0.2
    attacker = Attacker(2, PBAR, [], 2, prob)
    far = attacker.explore(np.array([0.91, 0.97]), np.random.default_rng(0))
    assert (far > 0.02).all()


# --------------------------------------------------------------------------- (2) bounds, still the guarantee


_FIGURES = ("cell_failure_max", "cell_failure_mean", "table_failure", "expected_unprotected", "record_failure",
            "record_failure_given_active")


@pytest.mark.parametrize("pis,k,pbar", [
    ([0.91, 0.97], 2, 0.12),                       # q̄ = 0.1146: rounded up, 0.2 > p̄: p̄ published
    ([0.91, 0.97], 2, 0.9),                        # 0.2
    ([0.999999, 0.999998], 2, 0.5),                # q̄ ≈ 3·10⁻⁶: published as p̄/10
    ([1.0, 1.0, 0.7, 0.6], 2, 0.3),                # q̄ = 0: p̄/10, not 0 (which says π = 1)
])
def test_bounds_cover_the_exact_figures_and_show_the_guarantee(pis, k, pbar):
    published, exact = _publish(_table([], pis), k, pbar=pbar)
    prob, ex = published["probabilistic"], exact["probabilistic"]
    oracle = failure_figures(k, pbar, [np.asarray(pis)])
    for key in _FIGURES:
        assert ex[key] == pytest.approx(oracle[key], abs=1e-12)   # the private record keeps them exact
        assert prob[key] >= ex[key] and prob[key] >= pbar / 10
        assert len(f"{prob[key]:e}".split("e")[0].rstrip("0").rstrip(".")) == 1 or prob[key] in (pbar, pbar / 10)
    assert prob["cell_failure_max"] <= pbar and prob["cell_failure_mean"] <= pbar
    assert prob["cells_above_max_cell_failure"] == 0
    assert all(w["cell_failure"] <= pbar and set(w) == {"size", "cell_failure", "cells"} for w in prob["worst_cells"])
    for key in ("participation_mean", "participation_min", "participation_max"):
        assert key not in prob and key in ex
    if pbar == 0.12:
        assert prob["cell_failure_max"] == 0.12 and prob["table_failure"] == 0.2


def test_cli_report_page_and_summary_hold_no_exact_figure(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    df = _table([[0.83, 0.64, 0.77]], [0.91, 0.97, 0.58, 0.71])
    df.to_csv(tmp_path / "in.csv", index=False)
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(tmp_path / "in.csv"), str(out), "--qi", "x,y", "--k", "3", "--seed", "0",
                 "--participation", "pi", "--max-cell-failure", str(PBAR)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.with_name("release.report.json").read_text())
    prob = report["probabilistic"]
    assert "bounds" in prob and "probabilistic" not in (report.get("pipeline") or {})
    assert "pi" not in pd.read_parquet(out).columns
    oracle = failure_figures(3, PBAR, [np.array([0.83, 0.64, 0.77]), np.array([0.91, 0.97, 0.58, 0.71])])
    secrets = [oracle[key] for key in _FIGURES] + [float(df["pi"].mean()), *oracle["cell_failure"]]
    page = render_html(report)
    for key in _FIGURES:
        assert prob[key] >= oracle[key]
    for value in secrets:   # no exact figure, in any form, in the file, the page or the printed summary
        assert not any(np.isclose(v, value, rtol=1e-6, atol=0) for v in _numbers(report)), value
        for shown in (f"{value:.3g}", f"{value:.4g}", repr(value)):
            pattern = rf"(?<![\d.]){re.escape(shown)}(?!\d)"
            assert not re.search(pattern, printed) and not re.search(pattern, page), shown
    assert "participation_mean" not in json.dumps(report)
    assert "≤" in printed and "at most" in page


def _numbers(value):
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


# --------------------------------------------------------------------------- (3) constant π unchanged


def test_constant_participation_report_unchanged():
    df = _table([[0.7] * 3, [0.7] * 3], [0.7] * 4)
    published, exact = _publish(df, 3, pbar=PBAR, participation=0.7)
    prob, ex = published["probabilistic"], exact["probabilistic"]
    assert "bounds" not in prob
    for key in _FIGURES + ("worst_cells", "participation", "n_min", "n_cells", "cells_above_max_cell_failure"):
        assert prob[key] == ex[key], key
    sizes = [int(s) for s, c in exact["cell_size_counts"].items() for _ in range(c)]
    q = [binom_failure(3, 0.7, s) for s in sizes]
    assert prob["cell_failure_max"] == pytest.approx(max(q), rel=1e-12)
    assert prob["participation"] == 0.7


# --------------------------------------------------------------------------- the spec


def test_spec_publishes_per_record_failures_as_bounds():
    from daskmicro.privacy.spec import build_spec

    from _oracles import poisson_binomial_failure

    rng = np.random.default_rng(5)
    centre = np.repeat(np.arange(6.0), 4) * 100
    X = np.column_stack([centre + rng.normal(0, 1e-3, 24), centre[::-1] ** 1.5 + rng.normal(0, 1e-3, 24)])
    labels = np.repeat(np.arange(6), 4)
    pis = rng.uniform(0.6, 1.0, 24)
    spec = build_spec(X, labels, QI, 2, participation=pis, max_cell_failure=0.5)
    assert spec["anonymity"]["participation"] == "per-record"
    sizes = spec["model"]["cell_sizes"]
    assert sizes == [4] * 6
    for c, bound in enumerate(spec["model"]["cell_failure"]):
        exact = poisson_binomial_failure(2, pis[labels == c])
        assert exact <= bound <= 0.5 and bound >= 0.05 and bound != pytest.approx(exact, rel=1e-6)
    constant = build_spec(X, labels, QI, 2, participation=0.8, max_cell_failure=0.5)
    assert constant["model"]["cell_failure"] == pytest.approx([binom_failure(2, 0.8, 4)] * 6, rel=1e-12)
