"""scikit-learn-style estimators around the kernels.

``__init__`` only stores parameters; ``fit`` does the work; results end in ``_``.  Like the
kernels, the estimators work in the space they are given: standardise first if Euclidean
distance on the raw columns is not what you mean (:func:`daskmicro.standardize`).
"""

from __future__ import annotations

from .kernels.mdav import as_records, mdav
from .kernels.metrics import cell_sizes, centroids, information_loss
from .kernels.pca import pca_reduce
from .kernels.pcl import pcl

__all__ = ["MDAV", "PCAMDAV", "PCL"]


class _Microaggregator:
    """Common results: ``labels_``, ``centroids_``, ``cell_sizes_``, ``information_loss_``."""

    def _labels(self, X):  # pragma: no cover - overridden
        raise AssertionError("subclasses define _labels")

    def fit(self, X, y=None):
        """Microaggregate the rows of X (``y`` is ignored)."""
        X = as_records(X)
        self.labels_ = self._labels(X)
        self.centroids_ = centroids(X, self.labels_)
        self.cell_sizes_ = cell_sizes(self.labels_)
        self.n_cells_ = len(self.cell_sizes_)
        self.information_loss_ = information_loss(X, self.labels_)
        return self

    def fit_predict(self, X, y=None):
        """Fit and return the cell label of every row."""
        return self.fit(X).labels_

    def fit_transform(self, X, y=None):
        """Fit and return X with every row replaced by its cell centroid."""
        self.fit(X)
        return self.centroids_[self.labels_]

    def get_params(self, deep=True):
        return {name: getattr(self, name) for name in self._param_names}

    def set_params(self, **params):
        for name, value in params.items():
            if name not in self._param_names:
                raise ValueError(f"unknown parameter {name!r} for {type(self).__name__}")
            setattr(self, name, value)
        return self

    def __repr__(self):
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._param_names)
        return f"{type(self).__name__}({args})"


class MDAV(_Microaggregator):
    """Exact MDAV (Algorithm A): every cell holds k to 2k−1 records.

    Parameters
    ----------
    k : int
        Anonymity parameter (≥ 2).

    Attributes
    ----------
    labels_, centroids_, cell_sizes_, n_cells_, information_loss_
    """

    _param_names = ("k",)

    def __init__(self, k=10):
        self.k = k

    def _labels(self, X):
        return mdav(X, self.k)


class PCAMDAV(_Microaggregator):
    """MDAV with PCA (Algorithm B): cells found in the space of the m̃ dominant components.

    Parameters
    ----------
    k : int
        Anonymity parameter (≥ 2).
    energy_loss : float in [0, 1), optional
        Bound on the relative energy loss ε² that picks m̃ (default 0.1 when neither is given).
    n_components : int, optional
        m̃ directly.

    Attributes
    ----------
    labels_, centroids_ (original space), cell_sizes_, n_cells_, information_loss_,
    n_components_, energy_loss_ (attained ε²), eigenvalues_ (whole spectrum), components_
    """

    _param_names = ("k", "energy_loss", "n_components")

    def __init__(self, k=10, energy_loss=None, n_components=None):
        self.k = k
        self.energy_loss = energy_loss
        self.n_components = n_components

    def _labels(self, X):
        red = pca_reduce(X, energy_loss=self.energy_loss, n_components=self.n_components)
        self.n_components_ = red.n_components
        self.energy_loss_ = red.energy_loss
        self.eigenvalues_ = red.eigenvalues
        self.components_ = red.components
        return mdav(red.scores, self.k)


class PCL(_Microaggregator):
    """Probability-constrained Lloyd algorithm (PCL paper §3.3–3.4): every cell holds ≥ k records.

    Parameters
    ----------
    k : int
        Minimum cell size (≥ 2); large k gives clustering / macroaggregation.
    init : {"mdav", "random"} or array of labels
        Start from exact MDAV, from random records, or refine a given partition.
    n_cells, max_iter, tol, noisy, n_noisy, cooling, sigma, n_candidates, seed
        As in :func:`daskmicro.kernels.pcl.pcl`.

    Attributes
    ----------
    labels_, centroids_, cell_sizes_, n_cells_, information_loss_,
    info_ : :class:`daskmicro.kernels.pcl.PCLInfo` (iterations, SSE history, costs c(q), repairs)
    """

    _param_names = (
        "k", "init", "n_cells", "max_iter", "tol", "noisy", "n_noisy", "cooling", "sigma", "n_candidates", "seed",
    )  # fmt: skip

    def __init__(
        self,
        k=10,
        init="mdav",
        n_cells=None,
        max_iter=100,
        tol=1e-4,
        noisy=None,
        n_noisy=16,
        cooling=0.85,
        sigma=None,
        n_candidates=8,
        seed=0,
    ):
        self.k = k
        self.init = init
        self.n_cells = n_cells
        self.max_iter = max_iter
        self.tol = tol
        self.noisy = noisy
        self.n_noisy = n_noisy
        self.cooling = cooling
        self.sigma = sigma
        self.n_candidates = n_candidates
        self.seed = seed

    def _labels(self, X):
        labels, self.info_ = pcl(
            X,
            self.k,
            init=self.init,
            n_cells=self.n_cells,
            max_iter=self.max_iter,
            tol=self.tol,
            noisy=self.noisy,
            n_noisy=self.n_noisy,
            cooling=self.cooling,
            sigma=self.sigma,
            n_candidates=self.n_candidates,
            seed=self.seed,
            return_info=True,
        )
        return labels
