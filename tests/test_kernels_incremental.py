"""Increment-stage kernels: k-anonymity of the joined partition, splitting, exact KD-tree search, bad input."""

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from daskmicro.errors import InputError, ParameterError
from daskmicro.kernels.increment import METHODS, _nn_assign, _split_end, increment, nn_assign, split_large_cells, two_mdav
from daskmicro.kernels.mdav import mdav
from daskmicro.kernels.metrics import centroids, distortion, standardize


def _data(n, m=4, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, m))
    return standardize(rng.normal(size=(n, m)) @ A)[0]


def _split(X, nu, k):
    n0 = int(round(len(X) * (1 - nu)))
    Zb, Zi = X[:n0], X[n0:]
    return Zb, mdav(Zb, k), Zi


def _reference(Zb, lb, Zi, k, inertial, split_mid):
    """The sequential adjoin written plainly: brute force over every current centroid, one record at a time."""
    Z = np.concatenate([Zb, Zi])
    n0 = len(Zb)
    labels = np.concatenate([lb, np.full(len(Zi), -1)])
    for i, y in enumerate(Zi):
        ids = np.unique(labels[labels >= 0])
        C = centroids(Z[labels >= 0], labels[labels >= 0])[ids]
        sizes = np.bincount(labels[labels >= 0])[ids]
        w = sizes / (sizes + 1.0) if inertial else np.ones(len(ids))
        q = ids[np.argmin(w * ((C - y) ** 2).sum(axis=1))]
        labels[n0 + i] = q
        if split_mid and (labels == q).sum() >= 2 * k:
            rows = np.flatnonzero(labels == q)
            sub = mdav(Z[rows], k)
            fresh = labels.max() + 1
            labels[rows] = np.where(sub == 0, q, fresh + sub - 1)
    return labels


def _check_partition(labels, n, k):
    assert labels.shape == (n,) and labels.dtype == np.int64
    sizes = np.bincount(labels)
    assert sizes[sizes > 0].min() >= k
    assert (sizes > 0).all(), "labels are compact 0 … Q−1"


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("nu", [0.05, 0.3, 0.7])
def test_every_record_labelled_and_cells_at_least_k(method, nu):
    X = _data(700, seed=1)
    k = 5
    Zb, lb, Zi = _split(X, nu, k)
    for inertial in ([False] if method == "2mdav" else [False, True]):
        labels = increment(method, Zb, lb, Zi, k, inertial=inertial)
        _check_partition(labels, len(X), k)
        if method in ("2mdav", "nn"):
            np.testing.assert_array_equal(labels[: len(Zb)], lb)  # base cells keep their ids
        else:
            # Splits only divide cells: no output cell mixes records of two base cells.
            pairs = np.unique(np.stack([labels[: len(Zb)], lb]), axis=1)
            assert np.unique(pairs[0]).size == pairs.shape[1]


def test_two_mdav_is_mdav_on_each_part():
    X = _data(400, seed=2)
    Zb, lb, Zi = _split(X, 0.25, 4)
    labels = two_mdav(Zb, lb, Zi, 4)
    np.testing.assert_array_equal(labels[: len(Zb)], lb)
    np.testing.assert_array_equal(labels[len(Zb):], mdav(Zi, 4) + lb.max() + 1)


def test_nn_without_split_joins_nearest_base_centroid():
    X = _data(500, seed=3)
    Zb, lb, Zi = _split(X, 0.3, 5)
    labels = nn_assign(Zb, lb, Zi, 5)
    C = centroids(Zb, lb)
    np.testing.assert_array_equal(labels[len(Zb):], cdist(Zi, C).argmin(axis=1))
    assert labels.max() == lb.max()  # no new cells


@pytest.mark.parametrize("inertial, split_mid", [(True, False), (False, True), (True, True)])
def test_sequential_methods_match_brute_force_reference(inertial, split_mid):
    # Larger than one tree chunk (1024 records) and with many cells, so the KD-tree candidates, the
    # drift bound, the brute-force fallback and the tree rebuild are all exercised.
    X = _data(3000, m=3, seed=4)
    k = 3
    Zb, lb, Zi = _split(X, 0.4, k)
    labels, stats = _nn_assign(Zb, lb, Zi, k, "mid" if split_mid else None, inertial)
    np.testing.assert_array_equal(labels, _reference(Zb, lb, Zi, k, inertial, split_mid))
    assert stats["trees"] == 2
    # The KD-tree candidates settle most records; only a minority need the exact fallback.
    assert stats["brute_force"] < 0.5 * len(Zi)
    if split_mid:
        assert stats["splits"] > 0


def test_inertial_criterion_prefers_smaller_cell():
    # Two base cells, sizes 2 and 6 (k = 2); y slightly nearer the big one's centroid.
    # Plain NN picks the big cell; the inertial weight n/(n+1) (2/3 vs 6/7) picks the small one.
    small = np.array([[-1.0, 0.1], [-1.0, -0.1]])
    big = np.array([[1.0, 0.1], [1.0, -0.1]] * 3)
    Zb = np.concatenate([small, big])
    lb = np.array([0, 0] + [1] * 6)
    y = np.array([[0.05, 0.0]])  # d² = 1.1025 to cell 0, 0.9025 to cell 1
    assert nn_assign(Zb, lb, y, 2)[-1] == 1
    assert nn_assign(Zb, lb, y, 2, inertial=True)[-1] == 0  # 2/3·1.1025 = 0.735 < 6/7·0.9025 = 0.774


def test_split_mid_splits_as_soon_as_a_cell_reaches_2k():
    k = 3
    Zb = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [10.0, 10.0], [10.1, 10.0], [10.0, 10.1]])
    lb = np.array([0, 0, 0, 1, 1, 1])
    Zi = np.array([[0.05, 0.05], [0.2, 0.2], [0.1, 0.1], [0.3, 0.3]])  # all near cell 0
    mid = nn_assign(Zb, lb, Zi, k, split="mid")
    # After the third increment record cell 0 has 6 = 2k records and is split in two cells of 3.
    _check_partition(mid, 10, k)
    assert mid.max() == 2
    sizes = np.bincount(mid)
    assert sorted(sizes) == [3, 3, 4]
    end = nn_assign(Zb, lb, Zi, k, split="end")
    _check_partition(end, 10, k)
    assert sorted(np.bincount(end)) == [3, 3, 4]
    none = nn_assign(Zb, lb, Zi, k)
    assert sorted(np.bincount(none)) == [3, 7]


def test_split_end_splits_only_cells_of_2k_or_more():
    X = _data(600, seed=5)
    k = 5
    Zb, lb, Zi = _split(X, 0.5, k)
    plain = nn_assign(Zb, lb, Zi, k)
    end = nn_assign(Zb, lb, Zi, k, split="end")
    big = np.flatnonzero(np.bincount(plain) >= 2 * k)
    assert big.size > 0
    assert np.bincount(end).max() < 2 * k
    # Records of cells below 2k are untouched; each big cell's records are re-partitioned by MDAV.
    untouched = ~np.isin(plain, big)
    np.testing.assert_array_equal(end[untouched], plain[untouched])
    np.testing.assert_array_equal(end, _split_end(X, plain, k))
    # Splitting lowers the distortion (§IV-D, Fig. 18).
    assert distortion(X, end, standardized=True) < distortion(X, plain, standardized=True)


def test_split_large_cells_public():
    X = _data(100, seed=6)
    labels = np.repeat([0, 1], 50)
    out = split_large_cells(X, labels, 5)
    _check_partition(out, 100, 5)
    assert np.bincount(out).max() <= 9
    with pytest.raises(ParameterError, match="fewer than k"):
        split_large_cells(X, np.repeat([0, 1], [98, 2]), 5)


def test_empty_increment_and_base_label_ids():
    X = _data(60, seed=7)
    lb = mdav(X, 4) * 10 + 3  # non-compact ids are compacted, order kept
    for method in METHODS:
        out = increment(method, X, lb, np.empty((0, X.shape[1])), 4)
        np.testing.assert_array_equal(out, (lb - 3) // 10)


def test_single_base_cell_and_one_record():
    Zb = _data(5, m=2, seed=8)
    lb = np.zeros(5, dtype=int)
    y = np.array([[0.1, 0.2]])
    for method in ("nn", "nn-split-mid", "nn-split-end"):
        for inertial in (False, True):
            out = increment(method, Zb, lb, y, 3, inertial=inertial)
            _check_partition(out, 6, 3)


def test_distortion_grows_little_with_split_end_at_small_nu():
    X = _data(2000, m=6, seed=9)
    k = 5
    ref = distortion(X, mdav(X, k), standardized=True)
    Zb, lb, Zi = _split(X, 0.1, k)
    for method in METHODS:
        d = distortion(X, increment(method, Zb, lb, Zi, k), standardized=True)
        assert d < 1.25 * ref, method


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(method="kmeans"), ParameterError, "method must be one of"),
        (dict(k=1), ParameterError, "k must be ≥ 2"),
        (dict(k=2.5), ParameterError, "k must be an integer"),
        (dict(k=1000), ParameterError, "exceeds the number of records"),
        (dict(base_labels=np.zeros(3)), ParameterError, "base_labels must have one entry"),
        (dict(base_labels=np.full(40, 0.5)), ParameterError, "integer cell ids"),
        (dict(base_labels=np.full(40, -1)), ParameterError, "non-negative"),
        (dict(base_labels=np.repeat([0, 1], [38, 2])), ParameterError, "fewer than k"),
        (dict(Z_inc=np.ones((5, 2))), InputError, "Z_inc has 2 columns but Z_base has 3"),
        (dict(Z_inc=np.full((5, 3), np.nan)), InputError, "Z_inc contains NaN"),
        (dict(Z_base=np.ones((40, 3, 1))), InputError, "Z_base must be a 2-D array"),
        (dict(Z_base=[["a"] * 3] * 40), InputError, "Z_base must be a numeric array"),
        (dict(inertial="yes"), ParameterError, "inertial must be True or False"),
        (dict(method="2mdav", inertial=True), ParameterError, "inertial applies"),
        (dict(method="2mdav", Z_inc=np.ones((2, 3))), ParameterError, "2mdav needs at least k"),
    ],
)
def test_bad_input(kwargs, exc, match):
    rng = np.random.default_rng(0)
    args = dict(method="nn-split-end", Z_base=rng.normal(size=(40, 3)), base_labels=np.repeat(np.arange(8), 5), Z_inc=rng.normal(size=(10, 3)), k=5, inertial=False)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        increment(**args)


def test_bad_split_argument():
    with pytest.raises(ParameterError, match="split must be"):
        nn_assign(np.ones((4, 2)), np.zeros(4, int), np.ones((1, 2)), 2, split="later")
