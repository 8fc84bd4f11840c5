"""Exact MDAV kernel (``daskmicro.mdav``): reference values, agreement with simple
re-implementations, structural properties, input validation and a memory smoke test."""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from daskmicro import information_loss, mdav, standardize

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


# --------------------------------------------------------------------------------------------
# An independent reference: MDAV-generic written as literally as possible.
# --------------------------------------------------------------------------------------------


def _sq_dist(X, rows, point):
    """Squared distances from ``point`` to ``X[rows]``, summed column by column."""
    acc = np.zeros(len(rows))
    for j in range(X.shape[1]):
        diff = X[rows, j] - point[j]
        acc += diff * diff
    return acc


def _furthest(X, rows, point):
    """The row of ``rows`` furthest from ``point``; the smallest row index wins a tie."""
    d = _sq_dist(X, rows, point)
    order = np.lexsort((rows, -d))  # primary key: distance, descending; then row, ascending
    return rows[order[0]]


def _cell_around(X, rows, centre, k):
    """``centre`` and its k−1 nearest rows of ``rows`` (closest first, then lowest row)."""
    others = rows[rows != centre]
    d = _sq_dist(X, others, X[centre])
    order = np.lexsort((others, d))
    return np.concatenate(([centre], others[order[: k - 1]]))


def reference_mdav(X, k):
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    next_cell = 0

    def assign(cell_rows):
        nonlocal next_cell
        labels[cell_rows] = next_cell
        next_cell += 1

    def remaining():
        return np.flatnonzero(labels < 0)

    rows = remaining()
    while len(rows) >= 3 * k:
        centroid = X[rows].mean(axis=0)
        p = _furthest(X, rows, centroid)
        assign(_cell_around(X, rows, p, k))
        rows = remaining()
        q = _furthest(X, rows, X[p])
        assign(_cell_around(X, rows, q, k))
        rows = remaining()
    if len(rows) >= 2 * k:
        centroid = X[rows].mean(axis=0)
        p = _furthest(X, rows, centroid)
        assign(_cell_around(X, rows, p, k))
        rows = remaining()
    if len(rows):
        assign(rows)
    return labels


def assert_valid_partition(labels, n, k):
    labels = np.asarray(labels)
    assert labels.shape == (n,)
    assert labels.dtype == np.int64
    assert labels.min() == 0
    sizes = np.bincount(labels)
    # contiguous cell ids 0 … c−1, none empty
    assert len(sizes) == labels.max() + 1
    assert (sizes > 0).all()
    assert (sizes >= k).all(), sizes
    assert (sizes <= 2 * k - 1).all(), sizes
    assert sizes.sum() == n


def expected_cell_count(n, k):
    """Number of cells MDAV-generic forms: ⌊n/k⌋ (cells of exactly k, the last absorbs the rest)."""
    return n // k


# --------------------------------------------------------------------------------------------
# Census reference values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k, il", [(3, 5.69), (4, 7.49), (5, 9.09), (10, 14.16)])
def test_census_information_loss(census_z, k, il):
    labels = mdav(census_z, k)
    assert_valid_partition(labels, len(census_z), k)
    assert information_loss(census_z, labels, standardized=True) == pytest.approx(il, abs=0.01)
    # the same value when the metric does the z-scoring itself
    assert information_loss(census_z, labels) == pytest.approx(il, abs=0.01)


@pytest.mark.parametrize("k, il", [(3, 0.48), (5, 1.67), (10, 3.84)])
def test_eia_information_loss(k, il):
    """The second reference set (4092 × 11): 0.48 at k = 3 is MDAV's figure in the literature."""
    from daskmicro.datasets import load_eia

    z, _ = standardize(load_eia().to_numpy(dtype=np.float64))
    labels = mdav(z, k)
    assert_valid_partition(labels, len(z), k)
    assert information_loss(z, labels, standardized=True) == pytest.approx(il, abs=0.01)


# --------------------------------------------------------------------------------------------
# Agreement with the reference on continuous data (no exact ties)
# --------------------------------------------------------------------------------------------

SHAPES = [
    # (n, m, k)
    (2, 1, 2),  # n = k
    (5, 3, 3),  # k ≤ n < 2k
    (11, 2, 6),  # k ≤ n < 2k
    (7, 4, 3),  # 2k ≤ n < 3k
    (25, 1, 10),  # 2k ≤ n < 3k
    (9, 2, 3),  # n = 3k
    (40, 3, 4),  # divisible, even number of cells
    (41, 3, 4),  # not divisible
    (60, 5, 12),  # divisible, odd number of cells
    (71, 8, 12),  # last cell of 2k − 1 = 23 records
    (100, 1, 2),
    (101, 2, 2),
    (233, 6, 7),
    (300, 8, 5),
    (451, 4, 9),
    (600, 3, 10),
    (599, 7, 11),
    (600, 8, 2),
]


@pytest.mark.parametrize("n, m, k", SHAPES)
@pytest.mark.parametrize("dist", ["normal", "uniform", "lognormal"])
def test_matches_reference_on_continuous_data(n, m, k, dist):
    rng = np.random.default_rng(1000 * n + 10 * m + k)
    if dist == "normal":
        X = rng.standard_normal((n, m)) @ rng.standard_normal((m, m))
    elif dist == "uniform":
        X = rng.uniform(-3.0, 5.0, size=(n, m))
    else:
        X = rng.lognormal(0.0, 1.0, size=(n, m))
    got = mdav(X, k)
    want = reference_mdav(X, k)
    np.testing.assert_array_equal(got, want)
    assert_valid_partition(got, n, k)
    assert got.max() + 1 == expected_cell_count(n, k)


def test_small_n_is_a_single_cell():
    rng = np.random.default_rng(3)
    for k in range(2, 9):
        for n in range(k, 2 * k):
            labels = mdav(rng.standard_normal((n, 3)), k)
            np.testing.assert_array_equal(labels, np.zeros(n, dtype=np.int64))


def test_one_dimensional_input_is_one_column():
    x = np.random.default_rng(4).standard_normal(57)
    np.testing.assert_array_equal(mdav(x, 4), mdav(x[:, None], 4))
    np.testing.assert_array_equal(mdav(x, 4), reference_mdav(x, 4))


def test_matches_numpy_baseline():
    sys.path.insert(0, str(BENCH_DIR))
    try:
        from numpy_mdav import numpy_mdav
    finally:
        sys.path.remove(str(BENCH_DIR))
    rng = np.random.default_rng(2024)
    X = rng.standard_normal((3000, 5)) @ rng.standard_normal((5, 5))
    got = mdav(X, 7)
    np.testing.assert_array_equal(got, numpy_mdav(X, 7))
    assert_valid_partition(got, 3000, 7)


def test_matches_reference_across_index_rebuilds_with_duplicate_rows():
    # the index is rebuilt over the remaining records each time half have gone (while more than
    # 4 leaves' worth, 2,048, remain): at 5,000 and 2,500 of these 10,000 rows, every one present
    # twice, so distance ties are exact
    rng = np.random.default_rng(77)
    half = rng.standard_normal((5000, 4)) @ rng.standard_normal((4, 4))
    X = np.vstack([half, half[::-1]])
    got = mdav(X, 6)
    np.testing.assert_array_equal(got, reference_mdav(X, 6))
    assert_valid_partition(got, 10000, 6)


# --------------------------------------------------------------------------------------------
# Properties (hypothesis)
# --------------------------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def problems(draw, max_n=300, max_m=6):
    """(X, k): a grid of few integer levels (many duplicates and ties) or continuous values."""
    k = draw(st.integers(2, 12))
    n = draw(st.integers(k, max(k, max_n)))
    m = draw(st.integers(1, max_m))
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["grid", "continuous", "skewed"]))
    rng = np.random.default_rng(seed)
    if kind == "grid":
        levels = draw(st.integers(1, 5))
        X = rng.integers(0, levels, size=(n, m)).astype(np.float64)
    elif kind == "continuous":
        X = rng.standard_normal((n, m))
    else:
        X = np.round(rng.lognormal(0.0, 1.5, size=(n, m)), 1)
    return X, k


@PROPERTY_SETTINGS
@given(problems())
def test_partition_properties(problem):
    X, k = problem
    n = len(X)
    labels = mdav(X, k)
    assert_valid_partition(labels, n, k)
    assert labels.max() + 1 == expected_cell_count(n, k)
    # deterministic, and independent of memory layout / integer vs float storage of the values
    np.testing.assert_array_equal(mdav(X, k), labels)
    np.testing.assert_array_equal(mdav(np.asfortranarray(X), k), labels)
    if np.array_equal(X, np.round(X)):
        np.testing.assert_array_equal(mdav(X.astype(np.int64), k), labels)


@PROPERTY_SETTINGS
@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=40),
        elements=st.sampled_from([-2.0, -0.5, 0.0, 0.25, 1.0, 3.0]),
    ),
    st.integers(2, 12),
)
def test_partition_properties_adversarial_ties(X, k):
    n = X.shape[0]
    if n < k:
        with pytest.raises(ValueError, match="exceeds the number of records"):
            mdav(X, k)
        return
    labels = mdav(X, k)
    assert_valid_partition(labels, n, k)
    assert labels.max() + 1 == expected_cell_count(n, k)
    np.testing.assert_array_equal(mdav(X, k), labels)


@PROPERTY_SETTINGS
@given(st.integers(2, 12), st.integers(0, 300), st.integers(1, 6), st.floats(-1e6, 1e6))
def test_identical_rows(k, extra, m, value):
    n = k + extra
    X = np.full((n, m), value)
    labels = mdav(X, k)
    assert_valid_partition(labels, n, k)
    assert labels.max() + 1 == expected_cell_count(n, k)
    # every distance ties: the row order decides, so the result is the reference's exactly
    np.testing.assert_array_equal(labels, reference_mdav(X, k))


@PROPERTY_SETTINGS
@given(st.integers(2, 12), st.integers(0, 300), st.integers(0, 2**32 - 1))
def test_single_column(k, extra, seed):
    n = k + extra
    x = np.random.default_rng(seed).standard_normal(n)
    labels = mdav(x[:, None], k)
    assert_valid_partition(labels, n, k)
    np.testing.assert_array_equal(labels, reference_mdav(x, k))


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------

GOOD = np.arange(30, dtype=np.float64).reshape(10, 3)


@pytest.mark.parametrize(
    "X, k, match",
    [
        (np.where(np.eye(10, 3) == 1, np.nan, GOOD), 2, "NaN or infinite"),
        (np.where(np.eye(10, 3) == 1, np.inf, GOOD), 2, "NaN or infinite"),
        (np.where(np.eye(10, 3) == 1, -np.inf, GOOD), 2, "NaN or infinite"),
        (GOOD, 1, "k must be ≥ 2"),
        (GOOD, 0, "k must be ≥ 2"),
        (GOOD, -3, "k must be ≥ 2"),
        (GOOD, 11, "k = 11 exceeds the number of records n = 10"),
        (GOOD, 2.5, "k must be an integer"),
        (GOOD, 2.0, "k must be an integer"),
        (GOOD, True, "k must be an integer"),
        (GOOD, "3", "k must be an integer"),
        (GOOD, None, "k must be an integer"),
        (np.empty((0, 3)), 2, "no records"),
        (np.empty((5, 0)), 2, "no columns"),
        (np.zeros((4, 3, 2)), 2, "2-D array"),
        (np.float64(1.0), 2, "2-D array"),
    ],
)
def test_bad_input(X, k, match):
    with pytest.raises(ValueError, match=match):
        mdav(X, k)


def test_numpy_integer_k_is_accepted():
    np.testing.assert_array_equal(mdav(GOOD, np.int32(3)), mdav(GOOD, 3))


# --------------------------------------------------------------------------------------------
# Memory: no n × n matrix
# --------------------------------------------------------------------------------------------


def test_large_input_smoke():
    n = 20000
    X = np.random.default_rng(7).standard_normal((n, 3))
    labels = mdav(X, 5)  # an n × n float64 matrix would be 3.2 GB
    assert_valid_partition(labels, n, 5)
    assert labels.max() + 1 == n // 5
