"""Utility measures: hand-computed values on small fixtures, IL1s and eigen against their definitions."""

import math
import statistics

import numpy as np
import pytest

from daskmicro.errors import InputError, ParameterError
from daskmicro.kernels.mdav import mdav
from daskmicro.kernels.metrics import centroids, distortion
from daskmicro.kernels.utility import correlation_eigenvalues, eigen_measure, il1s, utility_measures

# Original: two perfectly correlated columns and a constant one; release: the first two records
# merged into one cell (centroid), the third on its own.
X = np.array([[1.0, 10.0, 7.0], [3.0, 20.0, 7.0], [5.0, 30.0, 7.0]])
Y = np.array([[2.0, 15.0, 7.0], [2.0, 15.0, 7.0], [5.0, 30.0, 7.0]])


def test_il1s_hand_computed():
    # S = (2, 10) (ddof 1); |dev| sums: col0 2/(√2·2), col1 10/(√2·10); constant column left out.
    assert il1s(X, Y) == pytest.approx(math.sqrt(2) / 6, rel=1e-12)
    assert il1s(X[:, :2], Y[:, :2]) == pytest.approx(math.sqrt(2) / 6, rel=1e-12)
    assert il1s(X, X) == 0.0
    assert il1s(np.full((4, 2), 3.0), np.full((4, 2), 3.0)) == 0.0


def test_il1s_against_definition_on_random_data():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(40, 4)) * [1, 5, 0.1, 20]
    B = A + rng.normal(size=A.shape)
    n, m = A.shape
    total = 0.0
    for j in range(m):
        s = statistics.stdev(A[:, j].tolist())
        total += sum(abs(a - b) / (math.sqrt(2) * s) for a, b in zip(A[:, j], B[:, j]))
    assert il1s(A, B) == pytest.approx(total / (n * m), rel=1e-12)


def test_utility_measures_hand_computed():
    u = utility_measures(X, Y, columns=["a", "b", "c"])
    # z-scored SSE: each varying column contributes 0.75, SST = 3 + 3
    assert u.distortion == pytest.approx(0.25, rel=1e-12)
    assert u.information_loss == pytest.approx(25.0, rel=1e-12)
    assert u.mean_change == pytest.approx([0.0, 0.0, 0.0], abs=1e-15)
    # var(Y) = (3, 75) against var(X) = (4, 100)
    assert u.variance_ratio == pytest.approx([-0.25, -0.25, 0.0], rel=1e-12)
    # both pairs of columns are perfectly correlated: nothing changes
    assert u.correlation_max_abs_diff == pytest.approx(0.0, abs=1e-12)
    assert u.eigen == pytest.approx(0.0, abs=1e-12)
    assert u.eigenvalues_original == pytest.approx([2.0, 0.0], abs=1e-12)
    assert u.columns == ["a", "b", "c"]
    d = u.to_dict()
    assert d["il1s"] == pytest.approx(math.sqrt(2) / 6) and d["columns"] == ["a", "b", "c"]


def test_eigen_hand_computed():
    # x = (1,2,3), y = (1,3,2): r = 0.5, eigenvalues (1.5, 0.5).  Release perfectly correlated:
    # eigenvalues (2, 0), so eigen = |1.5-2|/1.5 + |0.5-0|/0.5 = 4/3.
    A = np.array([[1.0, 1.0], [2.0, 3.0], [3.0, 2.0]])
    B = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    assert correlation_eigenvalues(A) == pytest.approx([1.5, 0.5], rel=1e-12)
    assert eigen_measure(A, B) == pytest.approx(4 / 3, rel=1e-12)
    u = utility_measures(A, B)
    assert u.correlation_max_abs_diff == pytest.approx(0.5, rel=1e-12)
    assert u.correlation_mean_abs_diff == pytest.approx(0.5, rel=1e-12)


def test_eigen_against_numpy_corrcoef():
    rng = np.random.default_rng(5)
    A = rng.normal(size=(60, 4)) @ rng.normal(size=(4, 4))
    B = A + 0.5 * rng.normal(size=A.shape)
    e1 = np.sort(np.linalg.eigvalsh(np.corrcoef(A.T)))[::-1]
    e2 = np.sort(np.linalg.eigvalsh(np.corrcoef(B.T)))[::-1]
    assert eigen_measure(A, B) == pytest.approx(float(np.sum(np.abs(e1 - e2) / e1)), rel=1e-9)


def test_distortion_agrees_with_metrics_for_a_microaggregated_release():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(120, 3)) * [1, 10, 100]
    labels = mdav(A, 4)
    release = centroids(A, labels)[labels]
    u = utility_measures(A, release)
    assert u.distortion == pytest.approx(distortion(A, labels), rel=1e-10)
    assert np.allclose(u.mean_change, 0.0, atol=1e-12)  # centroids keep the means
    assert all(v <= 1e-12 for v in u.variance_ratio)  # and shrink the variances


@pytest.mark.parametrize(
    "original, released, match",
    [
        (np.zeros((3, 2)), np.zeros((4, 2)), "row-aligned"),
        (np.zeros((1, 2)), np.zeros((1, 2)), "at least 2 records"),
        (np.array([[1.0, np.nan], [2.0, 3.0]]), np.zeros((2, 2)), "original contains NaN"),
        (np.zeros((2, 2)), np.array([[1.0, np.inf], [2.0, 3.0]]), "released contains NaN"),
        (np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), "2-D"),
        ([["a", "b"], ["c", "d"]], np.zeros((2, 2)), "numeric"),
    ],
)
def test_bad_input(original, released, match):
    for fn in (il1s, eigen_measure, utility_measures):
        with pytest.raises(InputError, match=match):
            fn(original, released)


def test_bad_parameters():
    with pytest.raises(ParameterError, match="columns"):
        utility_measures(X, Y, columns=["a"])
    with pytest.raises(ParameterError, match="n_eigenvalues"):
        utility_measures(X, Y, n_eigenvalues=0)
