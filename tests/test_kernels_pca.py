"""PCA reduction, MDAV with PCA, and the scikit-learn-style estimators."""

import numpy as np
import pytest

from daskmicro import (
    MDAV,
    PCAMDAV,
    cell_sizes,
    centroids,
    information_loss,
    mdav,
    pca_mdav,
    pca_reduce,
    standardize,
)
from daskmicro.datasets import census_like
from daskmicro.kernels.pca import DEFAULT_ENERGY_LOSS

# The spectrum of the synthetic data below: total 10, so the residual energies ε²(m̃) after
# keeping m̃ = 0 … 5 components are 1, 0.5, 0.2, 0.1, 0.04, 0.
SPECTRUM = np.array([5.0, 3.0, 1.0, 0.6, 0.4])
RESIDUAL = np.array([1.0, 0.5, 0.2, 0.1, 0.04, 0.0])


def known_spectrum_data(n=400, seed=0, rotate=True):
    """Records whose (population) covariance is exactly V·diag(SPECTRUM)·Vᵀ.

    Orthonormal, centred columns (QR of centred noise) scaled by √(n·λ) have covariance
    diag(λ); a random rotation V then hides the axes, and a constant shift the mean.
    """
    rng = np.random.default_rng(seed)
    m = len(SPECTRUM)
    A = rng.standard_normal((n, m))
    A -= A.mean(axis=0)
    Q, _ = np.linalg.qr(A)
    X = Q * np.sqrt(n * SPECTRUM)
    V = np.linalg.qr(rng.standard_normal((m, m)))[0] if rotate else np.eye(m)
    shift = rng.uniform(-10, 10, size=m)
    return X @ V.T + shift, V, shift


# --------------------------------------------------------------------------------------------
# pca_reduce
# --------------------------------------------------------------------------------------------


def test_known_spectrum():
    X, V, shift = known_spectrum_data()
    red = pca_reduce(X, n_components=5)
    np.testing.assert_allclose(red.eigenvalues, SPECTRUM, rtol=1e-10)
    assert (np.diff(red.eigenvalues) <= 0).all()
    assert red.eigenvalues.sum() == pytest.approx(X.var(axis=0).sum())
    np.testing.assert_allclose(red.mean, shift, atol=1e-10)
    # eigenvectors are the columns of the rotation, up to sign
    np.testing.assert_allclose(np.abs(red.components.T @ V), np.eye(5), atol=1e-8)
    np.testing.assert_allclose(red.energy, 1.0 - RESIDUAL[1:], atol=1e-12)


@pytest.mark.parametrize(
    "bound, m_tilde",
    [
        (0.99, 1),
        (0.5, 1),
        (0.3, 2),
        (0.2, 2),
        (0.19, 3),
        (0.1, 3),
        (0.099, 4),
        (0.04, 4),
        (0.039, 5),
        (0.0, 5),
    ],
)
def test_energy_loss_bound_picks_smallest_m(bound, m_tilde):
    X, _, _ = known_spectrum_data()
    red = pca_reduce(X, energy_loss=bound)
    assert red.n_components == m_tilde
    assert red.energy_loss == pytest.approx(RESIDUAL[m_tilde], abs=1e-12)
    assert red.energy_loss <= bound + 1e-12
    # one component fewer would break the bound
    assert RESIDUAL[m_tilde - 1] > bound
    assert red.scores.shape == (len(X), m_tilde)
    assert red.components.shape == (5, m_tilde)
    assert red.eigenvalues.shape == (5,)


def test_default_bound():
    X, _, _ = known_spectrum_data()
    red = pca_reduce(X)
    assert DEFAULT_ENERGY_LOSS == 0.1
    assert red.n_components == pca_reduce(X, energy_loss=DEFAULT_ENERGY_LOSS).n_components == 3


@pytest.mark.parametrize("m_tilde", [1, 2, 3, 4, 5])
def test_n_components_given(m_tilde):
    X, _, _ = known_spectrum_data()
    red = pca_reduce(X, n_components=m_tilde)
    assert red.n_components == m_tilde
    assert red.energy_loss == pytest.approx(RESIDUAL[m_tilde], abs=1e-12)
    # scores: uncorrelated, with variances the leading eigenvalues
    cov = red.scores.T @ red.scores / len(X)
    np.testing.assert_allclose(cov, np.diag(SPECTRUM[:m_tilde]), atol=1e-9)


def test_scores_are_orthogonal_projections():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 6)) @ rng.standard_normal((6, 6)) + 3.0
    full = pca_reduce(X, n_components=6)
    U = full.components
    np.testing.assert_allclose(U.T @ U, np.eye(6), atol=1e-12)
    Xc = X - X.mean(axis=0)
    np.testing.assert_allclose(full.scores, Xc @ U, atol=1e-12)
    np.testing.assert_allclose(full.scores @ U.T, Xc, atol=1e-10)  # nothing lost with all of them
    part = pca_reduce(X, n_components=3)
    np.testing.assert_allclose(part.components.T @ part.components, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.abs(part.scores), np.abs(full.scores[:, :3]), atol=1e-10)
    # the residual of a truncated projection carries exactly the dropped energy
    resid = Xc - part.scores @ part.components.T
    assert (resid**2).sum() / len(X) == pytest.approx(full.eigenvalues[3:].sum(), rel=1e-9)


def test_z_scored_spectrum_sums_to_m(census_z):
    red = pca_reduce(census_z, energy_loss=0.1)
    assert red.eigenvalues.sum() == pytest.approx(13.0)
    assert (red.eigenvalues >= 0).all()
    assert red.energy_loss <= 0.1
    assert red.eigenvalues[red.n_components - 1 :].sum() / 13.0 > 0.1


def test_both_choices_rejected():
    X, _, _ = known_spectrum_data()
    with pytest.raises(ValueError, match="either energy_loss or n_components, not both"):
        pca_reduce(X, energy_loss=0.1, n_components=2)
    with pytest.raises(ValueError, match="not both"):
        pca_mdav(X, 5, energy_loss=0.1, n_components=2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"energy_loss": 1.0}, r"energy_loss must be in \[0, 1\)"),
        ({"energy_loss": 1.5}, r"energy_loss must be in \[0, 1\)"),
        ({"energy_loss": -0.01}, r"energy_loss must be in \[0, 1\)"),
        ({"energy_loss": "0.1"}, "energy_loss must be a number"),
        ({"energy_loss": True}, "energy_loss must be a number"),
        ({"n_components": 0}, "n_components must be between 1 and m = 5"),
        ({"n_components": 6}, "n_components must be between 1 and m = 5"),
        ({"n_components": 2.0}, "n_components must be an integer"),
        ({"n_components": True}, "n_components must be an integer"),
    ],
)
def test_choice_out_of_range(kwargs, match):
    X, _, _ = known_spectrum_data()
    with pytest.raises(ValueError, match=match):
        pca_reduce(X, **kwargs)


def test_pca_reduce_rejects_bad_records():
    with pytest.raises(ValueError, match="NaN or infinite"):
        pca_reduce(np.array([[0.0, 1.0], [np.nan, 2.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="no records"):
        pca_reduce(np.empty((0, 2)))


# --------------------------------------------------------------------------------------------
# pca_mdav
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, m, k", [(200, 2, 3), (350, 5, 7), (500, 8, 10)])
def test_pca_mdav_is_mdav_on_the_scores(n, m, k):
    rng = np.random.default_rng(n + m + k)
    X = rng.standard_normal((n, m)) @ rng.standard_normal((m, m))
    for m_tilde in (1, m):
        red = pca_reduce(X, n_components=m_tilde)
        np.testing.assert_array_equal(pca_mdav(X, k, n_components=m_tilde), mdav(red.scores, k))
    red = pca_reduce(X, energy_loss=0.2)
    np.testing.assert_array_equal(pca_mdav(X, k, energy_loss=0.2), mdav(red.scores, k))


def test_pca_mdav_with_all_components_is_mdav(census_z):
    # a rotation and a shift do not change distances: same partition up to rounding
    for k in (3, 10):
        il_pca = information_loss(census_z, pca_mdav(census_z, k, n_components=13), standardized=True)
        il_mdav = information_loss(census_z, mdav(census_z, k), standardized=True)
        assert il_pca == pytest.approx(il_mdav, abs=1e-9)


@pytest.mark.parametrize("k", [3, 5, 10])
def test_pca_mdav_on_census(census_z, k):
    labels = pca_mdav(census_z, k, energy_loss=0.1)
    sizes = np.bincount(labels)
    assert labels.shape == (len(census_z),)
    assert (sizes >= k).all() and (sizes <= 2 * k - 1).all()
    assert len(sizes) == labels.max() + 1 == len(census_z) // k
    il_pca = information_loss(census_z, labels, standardized=True)
    il_mdav = information_loss(census_z, mdav(census_z, k), standardized=True)
    assert il_pca >= il_mdav - 0.5
    assert il_pca < 2 * il_mdav  # a mild price for compressing 13 attributes to a few


def test_pca_mdav_validation():
    X, _, _ = known_spectrum_data(n=20)
    with pytest.raises(ValueError, match="k must be ≥ 2"):
        pca_mdav(X, 1)
    with pytest.raises(ValueError, match="exceeds the number of records"):
        pca_mdav(X, 21)


# --------------------------------------------------------------------------------------------
# estimators
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def census_like_z():
    return standardize(census_like(2000, seed=3).to_numpy(dtype=np.float64))[0]


def test_mdav_estimator(census_like_z):
    X = census_like_z
    est = MDAV(k=5)
    assert est.fit(X) is est
    np.testing.assert_array_equal(est.labels_, mdav(X, 5))
    np.testing.assert_allclose(est.centroids_, centroids(X, est.labels_))
    np.testing.assert_array_equal(est.cell_sizes_, cell_sizes(est.labels_))
    assert est.n_cells_ == len(est.cell_sizes_) == est.labels_.max() + 1
    assert est.cell_sizes_.min() >= 5 and est.cell_sizes_.max() <= 9
    assert est.information_loss_ == pytest.approx(information_loss(X, est.labels_))
    np.testing.assert_array_equal(MDAV(k=5).fit_predict(X), est.labels_)
    T = MDAV(k=5).fit_transform(X)
    np.testing.assert_array_equal(T, est.centroids_[est.labels_])
    assert T.shape == X.shape


def test_mdav_estimator_params():
    est = MDAV(k=4)
    assert est.get_params() == {"k": 4}
    assert repr(est) == "MDAV(k=4)"
    assert est.set_params(k=7) is est
    assert est.k == 7 and repr(est) == "MDAV(k=7)"
    with pytest.raises(ValueError, match="unknown parameter 'energy_loss' for MDAV"):
        est.set_params(energy_loss=0.1)
    assert MDAV().k == 10
    with pytest.raises(ValueError, match="k must be ≥ 2"):
        MDAV(k=1).fit(np.zeros((5, 2)))


def test_pcamdav_estimator(census_like_z):
    X = census_like_z
    est = PCAMDAV(k=5, energy_loss=0.2).fit(X)
    red = pca_reduce(X, energy_loss=0.2)
    np.testing.assert_array_equal(est.labels_, pca_mdav(X, 5, energy_loss=0.2))
    assert est.n_components_ == red.n_components
    assert 1 <= est.n_components_ <= 13
    assert est.energy_loss_ <= 0.2 + 1e-12
    assert est.energy_loss_ == pytest.approx(red.energy_loss)
    assert est.eigenvalues_.shape == (13,)
    assert est.eigenvalues_.sum() == pytest.approx(13.0)
    assert est.components_.shape == (13, est.n_components_)
    # centroids live in the original space, not in the compressed one
    assert est.centroids_.shape == (est.n_cells_, 13)
    np.testing.assert_allclose(est.centroids_, centroids(X, est.labels_))
    np.testing.assert_array_equal(PCAMDAV(k=5, energy_loss=0.2).fit_transform(X), est.centroids_[est.labels_])
    assert est.cell_sizes_.min() >= 5 and est.cell_sizes_.max() <= 9
    assert est.information_loss_ == pytest.approx(information_loss(X, est.labels_))
    assert est.information_loss_ >= MDAV(k=5).fit(X).information_loss_ - 0.5


def test_pcamdav_estimator_n_components(census_like_z):
    est = PCAMDAV(k=4, n_components=2).fit(census_like_z)
    assert est.n_components_ == 2
    assert est.components_.shape == (13, 2)
    np.testing.assert_array_equal(est.labels_, pca_mdav(census_like_z, 4, n_components=2))


def test_pcamdav_estimator_default_bound(census_like_z):
    est = PCAMDAV(k=5).fit(census_like_z)
    assert est.energy_loss_ <= DEFAULT_ENERGY_LOSS + 1e-12
    assert est.n_components_ == pca_reduce(census_like_z).n_components


def test_pcamdav_estimator_params():
    est = PCAMDAV(k=3, energy_loss=0.1)
    assert est.get_params() == {"k": 3, "energy_loss": 0.1, "n_components": None}
    assert repr(est) == "PCAMDAV(k=3, energy_loss=0.1, n_components=None)"
    est.set_params(energy_loss=None, n_components=2)
    assert est.get_params() == {"k": 3, "energy_loss": None, "n_components": 2}
    with pytest.raises(ValueError, match="unknown parameter"):
        est.set_params(bogus=1)
    with pytest.raises(ValueError, match="not both"):
        PCAMDAV(k=3, energy_loss=0.1, n_components=2).fit(np.random.default_rng(0).standard_normal((30, 4)))
