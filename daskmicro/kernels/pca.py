"""PCA dimensionality reduction and MDAV with PCA.

Implements §III-C and Algorithm B of Rebollo-Monedero et al., *Efficient k-Anonymous
Microaggregation of Multivariate Numerical Data via PCA* (Information Sciences 2019):

* the compression matrix Ũ holds the m̃ dominant eigenvectors of the covariance Σ_X, and the
  compressed records are x̃ = Ũᵀ(x − x̄);
* m̃ is given directly or chosen as the smallest number of components whose relative energy
  loss ε² = Σ_{i>m̃} λ_i / Σ_i λ_i does not exceed the bound (for z-scored data Σ_i λ_i = m);
* MDAV runs unchanged in the compressed space; the assignment is then applied to the original
  records, where centroids and distortion are computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mdav import as_records, check_k, mdav

__all__ = ["PCAReduction", "pca_reduce", "pca_basis", "pca_mdav", "DEFAULT_ENERGY_LOSS"]

#: ε² used when neither an energy-loss bound nor a number of components is given (the
#: paper's Tables I–II setting).
DEFAULT_ENERGY_LOSS = 0.1


@dataclass(frozen=True)
class PCAReduction:
    """Result of :func:`pca_reduce`.

    Attributes
    ----------
    scores : ndarray (n, m̃)
        Compressed records x̃ = Ũᵀ(x − mean).
    components : ndarray (m, m̃)
        Ũ, the dominant eigenvectors as columns.
    eigenvalues : ndarray (m,)
        The whole spectrum of the covariance, in decreasing order (the paper's Fig. 9).
    mean : ndarray (m,)
    n_components : int
        m̃.
    energy_loss : float
        Attained relative energy loss ε² = Σ_{i>m̃} λ_i / Σ_i λ_i.
    """

    scores: np.ndarray
    components: np.ndarray
    eigenvalues: np.ndarray
    mean: np.ndarray
    n_components: int
    energy_loss: float

    @property
    def energy(self) -> np.ndarray:
        """Normalized cumulative energy 1 − ε² for m̃ = 1 … m."""
        total = self.eigenvalues.sum()
        return np.cumsum(self.eigenvalues) / total if total > 0 else np.ones_like(self.eigenvalues)


def _check_choice(energy_loss, n_components, m):
    if energy_loss is not None and n_components is not None:
        raise ValueError("give either energy_loss or n_components, not both")
    if n_components is not None:
        if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)):
            raise ValueError(f"n_components must be an integer, got {n_components!r}")
        if not 1 <= n_components <= m:
            raise ValueError(f"n_components must be between 1 and m = {m}, got {n_components}")
    elif energy_loss is not None:
        if not isinstance(energy_loss, (int, float, np.floating, np.integer)) or isinstance(energy_loss, bool):
            raise ValueError(f"energy_loss must be a number in [0, 1), got {energy_loss!r}")
        if not 0.0 <= float(energy_loss) < 1.0:
            raise ValueError(f"energy_loss must be in [0, 1), got {energy_loss}")


def pca_reduce(X, energy_loss=None, n_components=None) -> PCAReduction:
    """Project the records onto their dominant principal components.

    Parameters
    ----------
    X : array_like (n, m)
        Records, normally z-scored first (the paper's convention; the kernels do not scale).
    energy_loss : float in [0, 1), optional
        Upper bound on ε²; the smallest m̃ meeting it is used.
    n_components : int, optional
        m̃ directly.  With neither, ``energy_loss = DEFAULT_ENERGY_LOSS``.
    """
    X = as_records(X)
    n, m = X.shape
    _check_choice(energy_loss, n_components, m)
    mean = X.mean(axis=0)
    Xc = X - mean
    cov = (Xc.T @ Xc) / n
    Ut, lam, n_components, loss = pca_basis(cov, energy_loss, n_components)
    return PCAReduction(
        scores=np.ascontiguousarray(Xc @ Ut),
        components=Ut,
        eigenvalues=lam,
        mean=mean,
        n_components=n_components,
        energy_loss=loss,
    )


def pca_basis(cov, energy_loss=None, n_components=None):
    """Dominant eigenvectors of a covariance matrix, chosen as in :func:`pca_reduce`.

    Used where the covariance comes from a distributed reduction rather than from one array
    (the pipeline fits the PCA of all proximal records this way).

    Returns
    -------
    components : ndarray (m, m̃)
    eigenvalues : ndarray (m,), decreasing
    n_components : int
    energy_loss : float, the attained ε²
    """
    cov = np.asarray(cov, dtype=np.float64)
    m = cov.shape[0]
    _check_choice(energy_loss, n_components, m)
    lam, U = np.linalg.eigh(cov)  # ascending
    lam = np.clip(lam[::-1], 0.0, None)
    U = U[:, ::-1]
    total = lam.sum()
    # residual energy after keeping the first j components, j = 0 … m
    resid = np.concatenate(([total], total - np.cumsum(lam)))
    resid = np.clip(resid, 0.0, None)
    loss = resid / total if total > 0 else np.zeros(m + 1)
    if n_components is None:
        bound = DEFAULT_ENERGY_LOSS if energy_loss is None else float(energy_loss)
        # smallest m̃ ≥ 1 with ε² ≤ bound (tiny tolerance for rounding in the cumulative sums)
        ok = np.nonzero(loss[1:] <= bound + 1e-12)[0]
        n_components = int(ok[0]) + 1 if ok.size else m
    n_components = int(n_components)
    return U[:, :n_components], lam, n_components, float(loss[n_components])


def pca_mdav(X, k, energy_loss=None, n_components=None) -> np.ndarray:
    """MDAV with PCA (Algorithm B): cells found by MDAV on the compressed records.

    Returns the cell labels; apply them to the original records for centroids and distortion
    (:func:`daskmicro.centroids`, :func:`daskmicro.information_loss`).
    """
    X = as_records(X)
    k = check_k(X.shape[0], k)
    red = pca_reduce(X, energy_loss=energy_loss, n_components=n_components)
    return mdav(red.scores, k)
