"""Macroaggregation kernels against plain NumPy statements of the same specification."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from daskmicro.kernels.macro import cell_stats, dd_colsum, dd_combine, mdav_large, sq_dist


def _select_nearest(d, count):
    """Mask of the ``count`` smallest entries of ``d``; ties go to the lowest positions."""
    if count >= d.shape[0]:
        return np.ones(d.shape[0], dtype=bool)
    t = np.partition(d, count - 1)[count - 1]
    mask = d < t
    mask[np.flatnonzero(d == t)[:count - int(mask.sum())]] = True
    return mask


def _mdav_large_numpy(X, K):
    """MDAV-generic at size K by whole-array NumPy steps: the remaining records copied after
    every cell, each distance a fresh pass (the specification of ``mdav_large``)."""
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    rows, Xr, cell = np.arange(n), X, 0

    def take(d, centre):
        nonlocal rows, Xr, cell
        d = d.copy()
        d[centre] = -1.0
        mask = _select_nearest(d, K)
        labels[rows[mask]] = cell
        cell += 1
        rows, Xr = rows[~mask], Xr[~mask]
        return d[~mask]

    def mean(Y):
        return dd_combine([dd_colsum(Y)]) / Y.shape[0]

    while rows.size >= 3 * K:
        p = int(np.argmax(sq_dist(Xr, mean(Xr))))
        dP = take(sq_dist(Xr, Xr[p].copy()), p)
        q = int(np.argmax(dP))
        take(sq_dist(Xr, Xr[q].copy()), q)
    if rows.size >= 2 * K:
        p = int(np.argmax(sq_dist(Xr, mean(Xr))))
        take(sq_dist(Xr, Xr[p].copy()), p)
    if rows.size:
        labels[rows] = cell
    return labels


@st.composite
def _records(draw):
    n = draw(st.integers(1, 400))
    m = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["gauss", "grid", "one value", "scaled"]))
    if kind == "gauss":
        X = rng.standard_normal((n, m))
    elif kind == "grid":  # many exact ties of distance
        X = rng.integers(-2, 3, size=(n, m)).astype(np.float64)
    elif kind == "one value":
        X = np.full((n, m), 7.0)
    else:
        X = rng.standard_normal((n, m)) * 10.0 ** rng.integers(-150, 150, size=m)
    return X, draw(st.integers(1, max(1, n // 2)))


@settings(max_examples=150, deadline=None)
@given(_records())
def test_mdav_large_is_the_numpy_statement_of_mdav_at_size_K(case):
    X, K = case
    got = mdav_large(X, K)
    assert np.array_equal(got, _mdav_large_numpy(X, K))
    if X.shape[0] >= K:
        assert np.bincount(got).min() >= K


@settings(max_examples=100, deadline=None)
@given(_records())
def test_cell_stats_are_the_numpy_sums(case):
    X, K = case
    labels = np.random.default_rng(K).integers(0, max(1, X.shape[0] // K), size=X.shape[0])
    n_cells = int(labels.max()) + 2  # one empty cell at the end
    size, sums, sse = cell_stats(X, labels, n_cells)
    assert np.array_equal(size, np.bincount(labels, minlength=n_cells))
    want = np.stack([np.bincount(labels, weights=X[:, j], minlength=n_cells) for j in range(X.shape[1])], axis=1)
    assert np.array_equal(sums, want)
    with np.errstate(invalid="ignore", divide="ignore"):
        cen = want / np.maximum(size, 1)[:, None]
    want_sse = np.zeros(n_cells)
    for j in range(X.shape[1]):  # column by column, each a sum over the rows in row order
        dev = X[:, j] - cen[labels, j]
        want_sse += np.bincount(labels, weights=dev * dev, minlength=n_cells)
    assert np.array_equal(sse, want_sse)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.integers(1, 4), st.integers(-30, 5), st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_a_top_cell_rejoined_from_working_copy_and_residual_is_its_records_to_2_pow_minus_48(n, m, e, seed, cuts):
    """The top level carries each z-score as a float32 working copy and a float32 residual, cut into
    pieces of shuffled rows: the top cell joined from them has the rows in row-id order and every
    value within 2⁻⁴⁸ of the z-score (or 2⁻¹⁴⁹ where it is below float32's normal range)."""
    from daskmicro.kernels.chunked import residual, working_copy
    from daskmicro.kernels.partition import join_split_pieces

    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, m)) * 10.0 ** rng.integers(e, e + 6, size=(n, 1))  # |z| from ~1e-30 to 1e10
    Z[rng.random((n, m)) < 0.05] = 0.0
    rowids = rng.permutation(4 * n)[:n].astype(np.int64)
    bounds = np.sort(rng.integers(0, n + 1, size=cuts))
    hi, lo = [], []
    for idx in np.split(np.arange(n), bounds):
        work = working_copy(Z[idx])
        hi.append((rowids[idx], work))
        lo.append((rowids[idx], residual(Z[idx], work)))
    top = join_split_pieces(hi, lo)
    order = np.argsort(rowids, kind="stable")
    assert np.array_equal(top.rowids, rowids[order]) and top.Z.dtype == np.float64
    err = np.abs(top.Z - Z[order])
    assert np.all(err <= np.maximum(2.0 ** -48 * np.abs(Z[order]), 2.0 ** -149)), err.max()
