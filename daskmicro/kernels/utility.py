"""Utility measures of a masked release against its original, as sdcMicro reports them.

Pure numpy; no Dask.  All measures compare an original QI matrix ``X`` (n records × m attributes)
with the released matrix ``X'`` of the same shape, **row-aligned** (row i of ``X'`` is what was
published for record i).  They complement the distortion D = SSE/SST of
:mod:`daskmicro.kernels.metrics` (*Efficient k-Anonymous Microaggregation … via PCA*, §V) with the measures users of
sdcMicro's ``dUtility`` and ``summary.micro`` expect:

* **IL1s** — mean standardized absolute deviation (see :func:`il1s`);
* change in means and in variances, per attribute;
* difference of the correlation matrices;
* the **eigen** measure: relative change of the eigenvalues of the correlation matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, ParameterError
from .bounds import check_values
from .metrics import sst, standardize
from .moments import varying_columns

__all__ = ["UtilityMeasures", "il1s", "eigen_measure", "correlation_eigenvalues", "utility_measures"]

_REL_TOL = 1e-12


def check_pair(original, released) -> tuple[np.ndarray, np.ndarray]:
    """Validate and return ``(X, X')`` as float64 matrices of the same shape."""
    try:
        X = np.asarray(original, dtype=np.float64)
        Y = np.asarray(released, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("original and released must be numeric arrays") from None
    if X.ndim == 1:
        X = X[:, None]
    if Y.ndim == 1:
        Y = Y[:, None]
    if X.ndim != 2:
        raise InputError(f"original must be a 2-D array (records × attributes), got {X.ndim} dimensions")
    if Y.ndim != 2:
        raise InputError(f"released must be a 2-D array (records × attributes), got {Y.ndim} dimensions")
    if X.shape != Y.shape:
        raise InputError(f"released has shape {Y.shape} but original has shape {X.shape}: they must be row-aligned")
    if X.shape[0] < 2:
        raise InputError(f"original needs at least 2 records, got {X.shape[0]}")
    if X.shape[1] < 1:
        raise InputError("original has no attributes (0 columns)")
    return check_values(X, "original"), check_values(Y, "released")


def il1s(original, released) -> float:
    """sdcMicro's IL1s: mean standardized absolute deviation of the release.

    .. math::

        \\mathrm{IL1s} = \\frac{1}{n\\,m'} \\sum_{i=1}^{n} \\sum_{j} \\frac{|x_{ij} - x'_{ij}|}{\\sqrt{2}\\, S_j}

    where :math:`S_j` is the sample standard deviation (ddof = 1, as R's ``sd``) of original
    attribute j, and the inner sum runs over the m' attributes with :math:`S_j > 0`.  Attributes
    that are constant in the original carry no information and are left out of both the sum and
    the count m' (the anonymizer publishes them unchanged).  Returns 0 when every attribute is
    constant.

    This is the definition documented for sdcMicro's ``dUtility(method = "IL1")`` ("absolute
    distances … scaled by the standard deviation of original variables times the square root of
    2"; Mateo-Sanz, Sebé & Domingo-Ferrer, PSD 2004).  Note that sdcMicro's code at the time of
    writing *multiplies* the scaled distance by √2 instead of dividing, which gives exactly twice
    the documented value; this function follows the documentation.

    Parameters
    ----------
    original, released : array_like, shape (n, m)
        Original and released QI matrices, row-aligned, n ≥ 2.

    Returns
    -------
    float
    """
    X, Y = check_pair(original, released)
    S = X.std(axis=0, ddof=1)
    used = varying_columns(X)
    if not used.any():
        return 0.0
    dev = np.abs(X[:, used] - Y[:, used]) / (np.sqrt(2.0) * S[used])
    return float(dev.mean())


def _correlation(X: np.ndarray) -> np.ndarray:
    """Pearson correlation matrix; a constant column gets a zero row and column (diagonal included)."""
    Z = X - X.mean(axis=0)
    norm = np.sqrt(np.einsum("ij,ij->j", Z, Z))
    scale = np.where(norm > 0, norm, 1.0)
    Z = Z / scale
    R = Z.T @ Z
    return np.clip((R + R.T) / 2.0, -1.0, 1.0)


def correlation_eigenvalues(X) -> np.ndarray:
    """Eigenvalues of the Pearson correlation matrix of ``X``, largest first.

    A column that is constant contributes a zero row and column to the matrix, hence a zero
    eigenvalue (this is how a release that flattened a column shows up).
    """
    X = check_values(np.asarray(X, dtype=np.float64), "X")
    values = np.linalg.eigvalsh(_correlation(X))
    return np.clip(values[::-1], 0.0, None)


def eigen_measure(original, released) -> float:
    """sdcMicro's "eigen" utility measure: relative change of the correlation eigenvalues.

    With :math:`e_1 \\ge … \\ge e_m` the eigenvalues of the correlation matrix of the original
    (``var(scale(x))`` in R) and :math:`e'_1 \\ge … \\ge e'_m` those of the release,

    .. math::

        \\mathrm{eigen} = \\sum_{i:\\, e_i > 0} \\frac{|e_i - e'_i|}{e_i}.

    Columns constant in the original are left out.  Terms with a (numerically) zero original
    eigenvalue — exactly collinear attributes — are skipped instead of dividing by zero.
    0 means the correlation spectrum is unchanged.
    """
    X, Y = check_pair(original, released)
    used = varying_columns(X)
    if not used.any():
        return 0.0
    e1 = correlation_eigenvalues(X[:, used])
    e2 = correlation_eigenvalues(Y[:, used])
    keep = e1 > _REL_TOL * used.sum()
    return float(np.sum(np.abs(e1[keep] - e2[keep]) / e1[keep]))


@dataclass(frozen=True)
class UtilityMeasures:
    """Utility of a release, returned by :func:`utility_measures`.

    Attributes
    ----------
    il1s : float
        Mean standardized absolute deviation (:func:`il1s`).
    eigen : float
        sdcMicro's eigen measure (:func:`eigen_measure`).
    distortion : float
        D = SSE/SST of the release after columnwise z-scoring with the original's mean and
        standard deviation (the convention of Rebollo-Monedero et al.; 100·D is the information loss).
    mean_change : list of float
        Per attribute, change of the mean in units of the original standard deviation,
        (mean(x'_j) − mean(x_j)) / S_j (0 for constant attributes).  Microaggregation with cell
        centroids preserves means, so these are ~0.
    variance_ratio : list of float
        Per attribute, var(x'_j)/var(x_j) − 1 (0 for constant attributes); microaggregation
        shrinks variances, so these are ≤ 0.
    correlation_max_abs_diff, correlation_mean_abs_diff : float
        Largest and mean absolute difference between off-diagonal entries of the correlation
        matrices of release and original (0 with fewer than two non-constant attributes).
    eigenvalues_original, eigenvalues_released : list of float
        The leading eigenvalues (largest first) of the two correlation matrices.
    columns : list of str
        Attribute names, in the order of the per-attribute lists.
    """

    il1s: float
    eigen: float
    distortion: float
    mean_change: list
    variance_ratio: list
    correlation_max_abs_diff: float
    correlation_mean_abs_diff: float
    eigenvalues_original: list
    eigenvalues_released: list
    columns: list = field(default_factory=list)

    @property
    def information_loss(self) -> float:
        """IL = 100·D."""
        return 100.0 * self.distortion

    def to_dict(self) -> dict:
        """JSON-serialisable dictionary (aggregates only, never a data value)."""
        return {
            "il1s": float(self.il1s),
            "eigen": float(self.eigen),
            "distortion": float(self.distortion),
            "information_loss": float(self.information_loss),
            "mean_change": [float(v) for v in self.mean_change],
            "variance_ratio": [float(v) for v in self.variance_ratio],
            "correlation_max_abs_diff": float(self.correlation_max_abs_diff),
            "correlation_mean_abs_diff": float(self.correlation_mean_abs_diff),
            "eigenvalues_original": [float(v) for v in self.eigenvalues_original],
            "eigenvalues_released": [float(v) for v in self.eigenvalues_released],
            "columns": [str(c) for c in self.columns],
        }


def utility_measures(original, released, columns=None, n_eigenvalues: int = 5) -> UtilityMeasures:
    """All utility measures of a release at once (sdcMicro's ``dUtility`` and ``summary.micro``).

    Parameters
    ----------
    original, released : array_like, shape (n, m)
        Original and released QI matrices, row-aligned (row i of ``released`` was published for
        record i), n ≥ 2.
    columns : sequence of str, optional
        Attribute names for the per-attribute lists (default ``x1 … xm``).
    n_eigenvalues : int, default 5
        How many leading correlation eigenvalues to keep in the result.

    Returns
    -------
    UtilityMeasures

    Notes
    -----
    The distortion is the D = SSE/SST of *Efficient k-Anonymous Microaggregation … via PCA* (§V, computed with
    :func:`~daskmicro.kernels.metrics.standardize` and :func:`~daskmicro.kernels.metrics.sst`):
    for a release of cell centroids it equals :func:`~daskmicro.kernels.metrics.distortion` of the
    micropartition, and it is defined for any perturbation of the data.
    """
    X, Y = check_pair(original, released)
    m = X.shape[1]
    if columns is None:
        columns = [f"x{j + 1}" for j in range(m)]
    columns = [str(c) for c in columns]
    if len(columns) != m:
        raise ParameterError(f"columns names {len(columns)} attributes but the data has {m}")
    if isinstance(n_eigenvalues, bool) or not isinstance(n_eigenvalues, (int, np.integer)) or n_eigenvalues < 1:
        raise ParameterError(f"n_eigenvalues must be a positive integer, got {n_eigenvalues!r}")

    Z, params = standardize(X)
    Zr = params.transform(Y)
    total = sst(Z)
    D = float(np.sum((Z - Zr) ** 2) / total) if total > 0 else 0.0

    S = X.std(axis=0, ddof=1)
    varying = varying_columns(X)
    safe = np.where(varying, S, 1.0)
    mean_change = np.where(varying, (Y.mean(axis=0) - X.mean(axis=0)) / safe, 0.0)
    var_ratio = np.where(varying, Y.var(axis=0, ddof=1) / safe**2 - 1.0, 0.0)

    if varying.sum() >= 2:
        R1 = _correlation(X[:, varying])
        R2 = _correlation(Y[:, varying])
        off = ~np.eye(R1.shape[0], dtype=bool)
        diff = np.abs(R2 - R1)[off]
        corr_max, corr_mean = float(diff.max()), float(diff.mean())
    else:
        corr_max = corr_mean = 0.0
    if varying.any():
        e1 = correlation_eigenvalues(X[:, varying])
        e2 = correlation_eigenvalues(Y[:, varying])
    else:
        e1 = e2 = np.zeros(0)

    return UtilityMeasures(
        il1s=il1s(X, Y),
        eigen=eigen_measure(X, Y),
        distortion=D,
        mean_change=mean_change.tolist(),
        variance_ratio=var_ratio.tolist(),
        correlation_max_abs_diff=corr_max,
        correlation_mean_abs_diff=corr_mean,
        eigenvalues_original=e1[:n_eigenvalues].tolist(),
        eigenvalues_released=e2[:n_eigenvalues].tolist(),
        columns=columns,
    )
