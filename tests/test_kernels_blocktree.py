"""The shrinking block index behind exact MDAV (``daskmicro.kernels._blocktree``, searched by
``_search`` with the float32 pass of ``_float32``).

Its searches measure distances in float32 first and recheck in float64 only the records the
float32 value cannot rule out, so they must return exactly what a float64 full scan returns, on
any scale, with near-ties, and after deletions.  Small leaves make every search cross many blocks.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from daskmicro.kernels import _blocktree as bt
from daskmicro.kernels import _search as search
from daskmicro.kernels.mdav import _mdav

from test_kernels_mdav import problems, reference_mdav


def _data(kind, n=900, m=3):
    rng = np.random.default_rng(sum(map(ord, kind)))
    X = rng.standard_normal((n, m)) @ rng.standard_normal((m, m))
    if kind == "huge":
        return X * 1e150
    if kind == "tiny":
        return X * 1e-150
    if kind == "offset":  # small spread around a large common value
        return 1e7 + X * 1e-3
    if kind == "mixed":  # columns on scales 1e9, 1 and 1e-3
        return X * np.array([1e9, 1.0, 1e-3])
    if kind == "grid":  # a grid of non-dyadic steps: many distances tie to the last bit or nearly
        return rng.integers(0, 9, (n, m)) * 0.1 + 1e-12 * rng.standard_normal((n, m))
    if kind == "ties":  # few integer levels: exact duplicates and exact distance ties everywhere
        return rng.integers(0, 3, (n, m)).astype(np.float64)
    # near-duplicates: pairs closer than float32 can tell apart
    half = X[: n // 2]
    return np.vstack([half, half + 1e-9 * rng.standard_normal(half.shape)])


KINDS = ["plain", "huge", "tiny", "offset", "mixed", "grid", "ties", "near-duplicates"]


def _brute_nearest(X, live, q, skip, need):
    rows = np.flatnonzero(live)
    rows = rows[rows != skip]
    d = ((X[rows] - q) ** 2).sum(axis=1)
    return rows[np.lexsort((rows, d))][:need]


def _brute_farthest(X, live, q):
    rows = np.flatnonzero(live)
    d = ((X[rows] - q) ** 2).sum(axis=1)
    return rows[np.flatnonzero(d == d.max())[0]]


@pytest.mark.parametrize("kind, need", [(kind, 6) for kind in KINDS] + [("plain", 40), ("grid", 40)])
def test_searches_match_a_float64_scan_before_and_after_deletions(kind, need):
    # need = 40 takes the sort path for many neighbours, 6 the insertion sort
    X = np.ascontiguousarray(_data(kind))
    n = X.shape[0]
    T = bt.build(X, 16, need)
    live = np.ones(n, bool)
    rng = np.random.default_rng(5)
    out = np.empty(need, np.int64)
    for stage in range(3):
        queries = rng.choice(np.flatnonzero(live), 60, replace=False)
        for r in queries:
            got = out[: search.nearest(T, X[r], r, need, out)]
            np.testing.assert_array_equal(got, _brute_nearest(X, live, X[r], r, need), err_msg=f"nearest of {r}")
            assert search.farthest(T, X[r]) == _brute_farthest(X, live, X[r]), f"farthest from {r}"
        centroid = X[live].mean(axis=0)
        assert search.farthest(T, centroid) == _brute_farthest(X, live, centroid)
        for r in rng.choice(np.flatnonzero(live), n // 4, replace=False):
            bt.remove(T, r)
            live[r] = False


@pytest.mark.parametrize("kind", KINDS)
def test_mdav_with_small_leaves_matches_the_reference(kind):
    X = np.ascontiguousarray(_data(kind))
    np.testing.assert_array_equal(_mdav(X, 5, 16), reference_mdav(X, 5))


def test_records_too_large_for_the_float32_frame_still_give_exact_results():
    # differences overflow float64 here: the float32 pass must not discard anything
    X = np.array([[1.5e308], [-1.5e308], [0.0], [1.0], [2.0], [1e308]])
    T = bt.build(X, 2, 2)
    out = np.empty(2, np.int64)
    assert list(out[: search.nearest(T, X[3], 3, 2, out)]) == [2, 4]  # both at distance 1: lower row first
    assert search.farthest(T, X[3]) == 0  # rows 0, 1 and 5 all at an infinite distance: lowest row


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems())
def test_labels_do_not_depend_on_the_leaf_size(problem):
    # the searches are exact with ties broken by row, so how the index is cut into leaves (and
    # when it is rebuilt) must not change a single label, on grids full of ties included
    X, k = problem
    X = np.ascontiguousarray(X, dtype=np.float64)
    want = _mdav(X, k, 512)
    for leaf in (2, 5, 16):
        np.testing.assert_array_equal(_mdav(X, k, leaf), want)
