"""Distortion metrics on fixtures small enough to work out on paper."""

import numpy as np
import pytest

from daskmicro import (
    cell_sizes,
    cell_sse,
    centroids,
    distortion,
    information_loss,
    relative_distortion,
    sse,
    sst,
    standardize,
)

# --------------------------------------------------------------------------------------------
# Fixture 1: four points on a line, two cells.
#   x = 0, 2 | 5, 9        centroids 1 and 7
#   cell SSE: (0−1)² + (2−1)² = 2 ;  (5−7)² + (9−7)² = 8 ;  SSE = 10
#   mean 4:  SST = 16 + 4 + 1 + 25 = 46 ;  D = 10/46 (z-scoring one column rescales both sums)
# --------------------------------------------------------------------------------------------
LINE = np.array([0.0, 2.0, 5.0, 9.0])
LINE_LABELS = np.array([0, 0, 1, 1])


def test_line_fixture():
    np.testing.assert_allclose(centroids(LINE, LINE_LABELS), [[1.0], [7.0]])
    np.testing.assert_allclose(cell_sse(LINE, LINE_LABELS), [2.0, 8.0])
    np.testing.assert_array_equal(cell_sizes(LINE_LABELS), [2, 2])
    assert sse(LINE, LINE_LABELS) == pytest.approx(10.0)
    assert sst(LINE) == pytest.approx(46.0)
    assert distortion(LINE, LINE_LABELS, standardized=True) == pytest.approx(10.0 / 46.0)
    assert distortion(LINE, LINE_LABELS) == pytest.approx(10.0 / 46.0)
    assert information_loss(LINE, LINE_LABELS) == pytest.approx(1000.0 / 46.0)
    # a column vector is the same thing as a 1-D array
    assert sse(LINE[:, None], LINE_LABELS) == pytest.approx(10.0)


# --------------------------------------------------------------------------------------------
# Fixture 2: five points in the plane, cells {0, 1} and {2, 3, 4}.
#   cell 0: (0,0) (2,0)            centroid (1,0)  SSE 1 + 1 = 2
#   cell 1: (0,4) (2,4) (10,10)    centroid (4,6)  SSE 20 + 8 + 52 = 80         SSE = 82
#   means (2.8, 3.6):  Σ(x − 2.8)² = 68.8,  Σ(y − 3.6)² = 67.2                SST = 136
#   per column within-cell SSE: x 2 + 56 = 58,  y 0 + 24 = 24
#   z-scored (variances 68.8/5, 67.2/5): SSE_z = 58/13.76 + 24/13.44, SST_z = 5 + 5
# --------------------------------------------------------------------------------------------
PLANE = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [2.0, 4.0], [10.0, 10.0]])
PLANE_LABELS = np.array([0, 0, 1, 1, 1])


def test_plane_fixture_raw():
    np.testing.assert_allclose(centroids(PLANE, PLANE_LABELS), [[1.0, 0.0], [4.0, 6.0]])
    np.testing.assert_allclose(cell_sse(PLANE, PLANE_LABELS), [2.0, 80.0])
    np.testing.assert_array_equal(cell_sizes(PLANE_LABELS), [2, 3])
    assert sse(PLANE, PLANE_LABELS) == pytest.approx(82.0)
    assert sst(PLANE) == pytest.approx(136.0)
    assert distortion(PLANE, PLANE_LABELS, standardized=True) == pytest.approx(82.0 / 136.0)
    assert information_loss(PLANE, PLANE_LABELS, standardized=True) == pytest.approx(8200.0 / 136.0)


def test_plane_fixture_z_scored():
    expected = (58.0 / 13.76 + 24.0 / 13.44) / 10.0
    assert distortion(PLANE, PLANE_LABELS) == pytest.approx(expected)
    assert information_loss(PLANE, PLANE_LABELS) == pytest.approx(100.0 * expected)
    Z, _ = standardize(PLANE)
    assert sst(Z) == pytest.approx(10.0)
    assert sse(Z, PLANE_LABELS) == pytest.approx(58.0 / 13.76 + 24.0 / 13.44)


def test_label_values_do_not_need_to_be_sorted():
    perm = np.array([4, 2, 0, 3, 1])
    assert sse(PLANE[perm], PLANE_LABELS[perm]) == pytest.approx(82.0)
    swapped = 1 - PLANE_LABELS
    np.testing.assert_allclose(cell_sse(PLANE, swapped), [80.0, 2.0])


def test_trivial_partitions():
    # one record per cell: no loss;  a single cell: all of the variance is lost
    singletons = np.arange(len(PLANE))
    assert sse(PLANE, singletons) == 0.0
    assert information_loss(PLANE, singletons) == 0.0
    one_cell = np.zeros(len(PLANE), dtype=np.int64)
    assert sse(PLANE, one_cell) == pytest.approx(sst(PLANE))
    assert information_loss(PLANE, one_cell) == pytest.approx(100.0)


def test_unused_cell_id():
    labels = np.array([0, 0, 2, 2])
    C = centroids(LINE, labels)
    assert C.shape == (3, 1)
    assert C[0, 0] == pytest.approx(1.0) and C[2, 0] == pytest.approx(7.0)
    assert np.isnan(C[1, 0])
    np.testing.assert_array_equal(cell_sizes(labels), [2, 0, 2])
    np.testing.assert_allclose(cell_sse(LINE, labels), [2.0, 0.0, 8.0])


def test_empty_labels():
    assert cell_sizes(np.array([], dtype=np.int64)).shape == (0,)


# --------------------------------------------------------------------------------------------
# standardize
# --------------------------------------------------------------------------------------------


def test_standardize_population_std():
    X = np.array([[1.0, 10.0], [3.0, 30.0], [5.0, 20.0], [7.0, 60.0]])
    Z, params = standardize(X)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-15)
    np.testing.assert_allclose(Z.std(axis=0), 1.0)  # ddof = 0
    np.testing.assert_allclose(params.mean, [4.0, 30.0])
    np.testing.assert_allclose(params.scale, [np.sqrt(5.0), np.sqrt(350.0)])
    np.testing.assert_allclose(Z[:, 0], np.array([-3.0, -1.0, 1.0, 3.0]) / np.sqrt(5.0))
    np.testing.assert_allclose(params.inverse_transform(Z), X)
    np.testing.assert_allclose(params.transform(X), Z)


def test_standardize_constant_column():
    X = np.array([[1.0, 5.0, -2.0], [3.0, 5.0, -2.0], [5.0, 5.0, -2.0]])
    Z, params = standardize(X)
    np.testing.assert_array_equal(params.constant, [False, True, True])
    np.testing.assert_array_equal(params.scale[1:], [1.0, 1.0])
    np.testing.assert_array_equal(Z[:, 1:], 0.0)
    assert np.isfinite(Z).all()
    np.testing.assert_allclose(Z[:, 0], np.array([-1.0, 0.0, 1.0]) * np.sqrt(1.5))
    np.testing.assert_allclose(params.inverse_transform(Z), X)


def test_constant_column_does_not_change_distortion():
    with_constant = np.column_stack([LINE, np.full(4, 7.0)])
    assert distortion(with_constant, LINE_LABELS) == pytest.approx(10.0 / 46.0)
    assert sst(standardize(with_constant)[0]) == pytest.approx(4.0)


def test_all_constant_data_has_zero_distortion():
    X = np.full((6, 3), 2.5)
    labels = np.array([0, 0, 0, 1, 1, 1])
    assert sst(X) == 0.0
    assert distortion(X, labels) == 0.0
    assert information_loss(X, labels, standardized=True) == 0.0


# --------------------------------------------------------------------------------------------
# relative_distortion
# --------------------------------------------------------------------------------------------


def test_relative_distortion():
    assert relative_distortion(0.12, 0.1) == pytest.approx(0.2)
    assert relative_distortion(0.1, 0.1) == 0.0
    assert relative_distortion(0.05, 0.1) == pytest.approx(-0.5)


@pytest.mark.parametrize("reference", [0.0, -0.1])
def test_relative_distortion_needs_positive_reference(reference):
    with pytest.raises(ValueError, match="reference distortion must be positive"):
        relative_distortion(0.1, reference)


# --------------------------------------------------------------------------------------------
# label validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("func", [centroids, cell_sse, sse, distortion, information_loss])
@pytest.mark.parametrize(
    "labels",
    [np.array([0, 0, 1]), np.array([0, 0, 1, 1, 1]), np.array([[0, 0], [1, 1]])],
    ids=["short", "long", "2-D"],
)
def test_labels_of_wrong_shape(func, labels):
    with pytest.raises(ValueError, match="one entry per record"):
        func(LINE, labels)


@pytest.mark.parametrize("func", [centroids, cell_sse, sse, distortion])
def test_negative_labels(func):
    with pytest.raises(ValueError, match="non-negative"):
        func(LINE, np.array([0, 0, -1, 1]))


def test_three_dimensional_data_rejected():
    with pytest.raises(ValueError, match="2-D array"):
        sst(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="2-D array"):
        standardize(np.zeros((2, 2, 2)))
