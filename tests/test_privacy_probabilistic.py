"""p-probabilistic cells: MDAV at n_min for constant π, per-record growth, metrics, distortion, bad input."""

import numpy as np
import pytest

from daskmicro.errors import InputError, ParameterError
from daskmicro.kernels import distortion, mdav, standardize
from daskmicro.privacy.probabilistic import expected_distortion, grow_cells, probabilistic_cells, weighted_centroids

from _oracles import binom_failure, binom_n_min, failure_figures, poisson_binomial_failure


@pytest.fixture(scope="module")
def Z():
    return standardize(np.random.default_rng(0).normal(size=(1000, 4)))[0]


def test_constant_participation_is_mdav_at_n_min(Z):
    cells = probabilistic_cells(Z, 10, 0.75, 1e-4)
    assert cells.n_min == binom_n_min(10, 0.75, 1e-4) == 25
    assert np.array_equal(cells.labels, mdav(Z, 25))
    assert cells.cell_sizes.min() >= 25 and cells.cell_sizes.sum() == len(Z)
    # MDAV's cells are ⌊N/n_min⌋ − 1 cells of n_min plus the remainder: the table of §VI-A
    assert cells.n_cells == len(Z) // 25
    # the figures, recomputed here from a binomial tail per cell and the cells' PMFs
    q = np.array([binom_failure(10, 0.75, int(s)) for s in cells.cell_sizes])
    assert cells.cell_failure == pytest.approx(q, rel=1e-9) and q.max() <= 1e-4
    expect = failure_figures(10, 1e-4, [np.full(s, 0.75) for s in cells.cell_sizes])
    assert cells.table_failure == pytest.approx(expect["table_failure"], rel=1e-9)
    assert cells.expected_unprotected == pytest.approx(expect["expected_unprotected"], rel=1e-9)
    assert cells.record_failure == pytest.approx(expect["record_failure"], rel=1e-9)
    assert cells.record_failure_given_active == pytest.approx(expect["record_failure_given_active"], rel=1e-9)
    assert cells.expected_active == pytest.approx(cells.cell_sizes * 0.75)
    summary = cells.summary()
    assert summary["n_records"] == 1000 and summary["participation"] == 0.75


def test_per_record_cells_each_meet_the_requirement(Z):
    pis = np.random.default_rng(1).uniform(0.3, 1.0, len(Z))
    cells = probabilistic_cells(Z, 5, pis, 1e-5)
    labels = cells.labels
    assert labels.shape == (len(Z),) and labels.min() == 0
    assert np.array_equal(np.unique(labels), np.arange(cells.n_cells))
    assert cells.cell_sizes.min() >= 5
    for c in range(cells.n_cells):
        independent = poisson_binomial_failure(5, pis[labels == c])
        assert independent == pytest.approx(cells.cell_failure[c], rel=1e-9)
        assert independent <= 1e-5
    expect = failure_figures(5, 1e-5, [pis[labels == c] for c in range(cells.n_cells)])
    for key in ("table_failure", "expected_unprotected", "record_failure", "record_failure_given_active"):
        assert getattr(cells, key) == pytest.approx(expect[key], rel=1e-9), key
    assert cells.expected_active == pytest.approx(np.bincount(labels, weights=pis))
    assert cells.n_min is None and cells.summary()["participation"] == "per-record"
    # higher participation → smaller cells
    high = probabilistic_cells(Z, 5, np.clip(pis + 0.3, 0, 1), 1e-5)
    assert high.cell_sizes.mean() < cells.cell_sizes.mean()


def test_per_record_growth_with_constant_values_matches_n_min(Z):
    labels = grow_cells(Z[:990], 10, np.full(990, 0.75), 1e-4)
    sizes = np.bincount(labels)
    # 39 cells of n_min = 25 grow; the 15 records left cannot form a cell and join the last one
    assert sizes.size == 39 and (sizes[:-1] == 25).all() and sizes[-1] == 40
    # same construction as MDAV-generic: the first cell is the same
    assert set(np.flatnonzero(labels == 0)) == set(np.flatnonzero(mdav(Z[:990], 25) == 0))


def test_leftovers_join_the_last_cell():
    Z = standardize(np.random.default_rng(2).normal(size=(60, 2)))[0]
    pis = np.full(60, 0.6)
    pis[-15:] = 0.05  # records that can hardly fill a cell of their own
    labels = grow_cells(Z, 3, pis, 1e-3)
    sizes = np.bincount(labels)
    for c in range(sizes.size):
        assert sizes[c] >= 3 and poisson_binomial_failure(3, pis[labels == c]) <= 1e-3


def test_expected_distortion(Z):
    labels = mdav(Z, 5)
    assert expected_distortion(Z, labels, 0.7) == pytest.approx(distortion(Z, labels, standardized=True))
    assert expected_distortion(Z, labels) == pytest.approx(distortion(Z, labels, standardized=True))
    w = np.random.default_rng(3).uniform(0.2, 1, len(Z))
    C = weighted_centroids(Z, labels, w)
    c0 = labels == 0
    assert C[0] == pytest.approx((w[c0, None] * Z[c0]).sum(0) / w[c0].sum())
    # the weighted centroid minimises the expected SSE: any other point does worse
    d = expected_distortion(Z, labels, w)
    resid = Z - (weighted_centroids(Z, labels)[labels])
    plain = float(w @ (resid**2).sum(1)) / (Z.shape[1] * w.sum())
    assert d <= plain


def test_bad_input(Z):
    with pytest.raises(ParameterError, match="participation has 3 values"):
        probabilistic_cells(Z, 5, [0.5, 0.5, 0.5], 1e-4)
    pis = np.full(len(Z), 0.5)
    pis[7] = np.nan
    with pytest.raises(ParameterError, match="missing"):
        probabilistic_cells(Z, 5, pis, 1e-4)
    with pytest.raises(ParameterError, match="participation"):
        probabilistic_cells(Z, 5, 0.0, 1e-4)
    with pytest.raises(ParameterError, match="max_cell_failure"):
        probabilistic_cells(Z, 5, 0.5, 1.0)
    with pytest.raises(ParameterError, match="cannot be met"):
        probabilistic_cells(Z[:100], 50, 0.5, 1e-6)
    with pytest.raises(ParameterError, match="cannot be met"):
        probabilistic_cells(Z[:100], 50, np.full(100, 0.5), 1e-6)
    with pytest.raises(ParameterError, match="exceeds"):
        probabilistic_cells(Z[:10], 11, 0.9, 1e-2)
    bad = Z.copy()
    bad[0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        probabilistic_cells(bad, 5, 0.5, 1e-4)
