"""kernels.chunked: the per-chunk steps of distributed MDAV, with first-row or explicit row ids."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.kernels import chunked as ck


@pytest.fixture()
def chunk():
    rng = np.random.default_rng(5)
    Z = rng.standard_normal((40, 3))
    labels = np.full(40, -1, dtype=np.int64)
    labels[[3, 7, 8]] = 0                      # three rows already assigned
    return Z, labels


def test_explicit_row_ids_give_the_same_results_as_a_first_row(chunk):
    Z, labels = chunk
    row0, ids = 100, np.arange(100, 140, dtype=np.int64)
    point = np.array([0.5, -0.2, 1.0])
    for r in (row0, ids):
        d = ck.distances(Z, labels, r, point, centre_row=110)
        assert d[10] == -1.0 and np.isinf(d[[3, 7, 8]]).all()
    d_int = ck.distances(Z, labels, row0, point, centre_row=110)
    d_ids = ck.distances(Z, labels, ids, point, centre_row=110)
    np.testing.assert_array_equal(d_int, d_ids)
    far_int, far_ids = ck.farthest_free(Z, labels, row0, d_int), ck.farthest_free(Z, labels, ids, d_ids)
    assert far_int[:2] == far_ids[:2]
    vals, counts, n_free = ck.rank_sample(d_int, size=4)
    assert n_free == 37 and np.all(np.diff(vals) > 0)
    np.testing.assert_array_equal(counts, [(d_int[np.isfinite(d_int)] <= v).sum() for v in vals])
    lo, hi = (float(np.sort(d_int)[5]), 0), None
    for a, b in zip(ck.pairs_between(d_int, row0, lo, hi), ck.pairs_between(d_ids, ids, lo, hi)):
        np.testing.assert_array_equal(a, b)
    cut = (float(np.sort(d_int[np.isfinite(d_int)])[9]), 10**9)
    np.testing.assert_array_equal(ck.assign_upto(labels, d_int, row0, cut, 1),
                                  ck.assign_upto(labels, d_ids, ids, cut, 1))
    for (ra, za), (rb, zb) in zip(ck.split_rows(Z, labels + 1, row0, 2), ck.split_rows(Z, labels + 1, ids, 2)):
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(za, zb)


def test_non_consecutive_row_ids_and_a_centre_elsewhere(chunk):
    Z, labels = chunk
    ids = np.arange(0, 80, 2, dtype=np.int64)  # every other row of a parent cell
    d = ck.distances(Z, labels, ids, np.zeros(3), centre_row=13)   # 13 is not in this chunk
    assert (d >= 0).all()
    d = ck.distances(Z, labels, ids, np.zeros(3), centre_row=14)
    assert d[7] == -1.0
    pieces = ck.split_rows(Z, (np.arange(40) % 2).astype(np.int64), ids, 2)
    np.testing.assert_array_equal(pieces[0][0], ids[::2])
    rows, Zj = ck.join_pieces(pieces[0], pieces[1])
    assert rows.size == 40 and Zj.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(ck.label_counts(np.array([0, 2, 2, 1]), 3), [1, 1, 2])


class _InProcessMap:
    """The part of a Dask client that graph.macro_stage.chunked_mdav uses, run in this process; chunks
    send ``sample`` sample points each."""

    def __init__(self, sample):
        self.sample = sample

    def map(self, fn, *iterables, pure=None, **kwargs):
        if fn is ck.rank_sample:
            kwargs["size"] = self.sample
        return [fn(*args, **kwargs) for args in zip(*iterables)]

    def gather(self, values):
        return values


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 700), m=st.integers(1, 5), fan=st.integers(1, 5), integers=st.booleans(),
       single=st.booleans(), cuts=st.lists(st.integers(1, 699), max_size=12), sample=st.integers(1, 40),
       seed=st.integers(0, 2 ** 16))
def test_chunked_mdav_is_mdav_at_size_K_for_any_chunking(n, m, fan, integers, single, cuts, sample, seed):
    """The distributed selection (samples, bracket, pairs inside it) gives exactly MDAV-generic at
    size K on the whole matrix (kernels.macro.mdav_large), for any chunking and sample size, with
    ties (integer data: many equal distances) broken by row id; on float32 chunks (the top level's
    working copy) exactly MDAV on the same values in float64.  The same inside one task
    (``cut_in_task``, the top level's small parents), with each chunk's count per cell."""
    from daskmicro.graph.macro_stage import chunked_mdav, cut_in_task
    from daskmicro.kernels.macro import mdav_large

    rng = np.random.default_rng(seed)
    Z = rng.integers(-3, 4, size=(n, m)).astype(np.float64) if integers else rng.standard_normal((n, m))
    if single:
        Z = Z.astype(np.float32)
    K = max(1, n // fan)
    bounds = sorted({0, n, *[c for c in cuts if c < n]})
    blocks = [Z[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    row0s = bounds[:-1]
    labels, n_cells = chunked_mdav(_InProcessMap(sample), blocks, row0s, n, K)
    expected = mdav_large(Z.astype(np.float64), K)
    np.testing.assert_array_equal(np.concatenate(labels), expected)
    assert n_cells == expected.max() + 1
    in_task, cells, counts = cut_in_task(blocks, row0s, n, K)
    np.testing.assert_array_equal(np.concatenate(in_task), expected)
    assert cells == n_cells
    for got, block_labels in zip(counts, np.split(expected, bounds[1:-1])):
        np.testing.assert_array_equal(got, np.bincount(block_labels, minlength=cells))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 400), m=st.integers(1, 6), scale=st.integers(-6, 9), seed=st.integers(0, 2 ** 16))
def test_masked_compensated_sums_equal_the_sums_of_the_kept_rows(n, m, scale, seed):
    """free_sums adds the free rows in place: bit for bit the sums of a copy of those rows."""
    from daskmicro.kernels.macro import dd_colsum, dd_colsum_where

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) * 10.0 ** scale + rng.integers(-3, 3, size=(n, m)) * 10.0 ** (scale + 8)
    labels = rng.integers(-1, 3, size=n)
    np.testing.assert_array_equal(dd_colsum_where(X, labels), dd_colsum(X[labels < 0]))
    np.testing.assert_array_equal(dd_colsum_where(X, None), dd_colsum(X))
    count, sums = ck.free_sums(X, labels)
    assert count == int((labels < 0).sum())
    np.testing.assert_array_equal(sums, dd_colsum(X[labels < 0]))
