"""kernels.chunked: the per-chunk steps of distributed MDAV, with first-row or explicit row ids."""

from __future__ import annotations

import numpy as np
import pytest

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
    for a, b in zip(ck.rank_sample(d_int, row0, size=4), ck.rank_sample(d_ids, ids, size=4)):
        np.testing.assert_array_equal(a, b)
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
