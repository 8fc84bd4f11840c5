"""Distortion metrics for a micropartition: centroids, cell SSE, SST, information loss.

Pure numpy; no Dask.  The conventions are those of the SDC literature and of Rebollo-Monedero et al.
(*Efficient k-Anonymous Microaggregation … via PCA*, §V, Tables II and IV): distortion D = SSE/SST measured after
columnwise z-scoring, information loss IL = 100·D.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bounds import check_values
from .moments import as_matrix, chunk_moments

__all__ = [
    "Standardization",
    "standardize",
    "centroids",
    "cell_sizes",
    "cell_sse",
    "sse",
    "sst",
    "distortion",
    "information_loss",
    "relative_distortion",
]


@dataclass(frozen=True)
class Standardization:
    """Columnwise z-scoring parameters.

    Columns whose standard deviation is zero (or not finite) are flagged in ``constant``;
    they carry no identifying information and are mapped to 0 rather than divided by zero.
    """

    mean: np.ndarray
    scale: np.ndarray
    constant: np.ndarray

    def transform(self, X: np.ndarray) -> np.ndarray:
        Z = (np.asarray(X, dtype=np.float64) - self.mean) / self.scale
        if self.constant.any():
            Z[:, self.constant] = 0.0
        return Z

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        X = np.asarray(Z, dtype=np.float64) * self.scale + self.mean
        if self.constant.any():
            X[:, self.constant] = self.mean[self.constant]
        return X


def _matrix(X) -> np.ndarray:
    """``X`` as a float64 matrix of finite values within ±MAX_ABS (the public entry points' check)."""
    return check_values(as_matrix(X), "X")


def standardize(X) -> tuple[np.ndarray, Standardization]:
    """Z-score the columns of ``X`` (population standard deviation, ddof=0).

    Mean and standard deviation come from :func:`~daskmicro.kernels.moments.chunk_moments`
    (two passes, stable for any offset); a column is constant when its min equals its max.
    Returns the standardized matrix and the parameters needed to undo it.
    """
    X = _matrix(X)
    mo = chunk_moments(X)
    mean = mo.mean
    std = mo.std()
    # constant by min == max on the values themselves (no rows: constant too); a variance left
    # at a few ulps by rounding never makes a one-valued column look varying
    constant = mo.constant | ~(std > 0) | ~np.isfinite(std)
    scale = np.where(constant, 1.0, std)
    params = Standardization(mean=mean, scale=scale, constant=constant)
    return params.transform(X), params


def _check_labels(X: np.ndarray, labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (X.shape[0],):
        raise ValueError(f"labels must have one entry per record ({X.shape[0]}), got shape {labels.shape}")
    if labels.size and labels.min() < 0:
        raise ValueError("labels must be non-negative cell ids")
    return labels.astype(np.int64, copy=False)


def cell_sizes(labels) -> np.ndarray:
    """Number of records in each cell id ``0 … max(labels)``."""
    labels = np.asarray(labels, dtype=np.int64)
    return np.bincount(labels) if labels.size else np.zeros(0, dtype=np.int64)


def centroids(X, labels) -> np.ndarray:
    """Cell centroids (cells × m): the mean of the records of each cell id.

    Cell ids that occur in no record get a row of NaN.
    """
    X = _matrix(X)
    labels = _check_labels(X, labels)
    ncell = int(labels.max()) + 1 if labels.size else 0
    sums = np.zeros((ncell, X.shape[1]))
    np.add.at(sums, labels, X)
    sizes = np.bincount(labels, minlength=ncell).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / sizes[:, None]


def cell_sse(X, labels) -> np.ndarray:
    """Sum of squared distances from each record to its cell centroid, per cell."""
    X = _matrix(X)
    labels = _check_labels(X, labels)
    C = centroids(X, labels)
    resid = X - C[labels]
    return np.bincount(labels, weights=np.einsum("ij,ij->i", resid, resid), minlength=len(C))


def sse(X, labels) -> float:
    """Total within-cell sum of squared errors."""
    return float(cell_sse(X, labels).sum())


def sst(X) -> float:
    """Total sum of squares about the global mean."""
    X = _matrix(X)
    resid = X - X.mean(axis=0)
    return float(np.einsum("ij,ij->", resid, resid))


def distortion(X, labels, standardized: bool = False) -> float:
    """Normalized distortion D = SSE/SST (z-scoring ``X`` first unless ``standardized``).

    Zero-variance columns contribute nothing to either sum.  Returns 0 when SST is 0.
    """
    X = _matrix(X)
    Z = X if standardized else standardize(X)[0]
    total = sst(Z)
    return sse(Z, labels) / total if total > 0 else 0.0


def information_loss(X, labels, standardized: bool = False) -> float:
    """Information loss IL = 100·SSE/SST after columnwise z-scoring (sdcMicro's convention)."""
    return 100.0 * distortion(X, labels, standardized=standardized)


def relative_distortion(value: float, reference: float) -> float:
    """Relative distortion increment δ = (D − D_ref)/D_ref against a reference method (e.g. exact MDAV)."""
    if reference <= 0:
        raise ValueError("reference distortion must be positive")
    return (value - reference) / reference
