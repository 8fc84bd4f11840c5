"""Data sets for tests, demos and benchmarks.

* :func:`load_census` — the CASC "Census" reference microdata (1080 × 13), shipped with the package
  (see ``daskmicro/data/SOURCES.md`` for its origin and attribution);
* :func:`load_eia` — the CASC "EIA" reference microdata (4092 × 11), shipped likewise;
* :func:`census_like` — any number of records with the structure of Census (skew, outliers,
  correlations), by a smoothed bootstrap of its rows (resampling plus correlated noise);
* :func:`correlated_gaussian` — multivariate normal records with a random covariance.

Every generator is seeded and deterministic: the same arguments give the same data.
"""

from __future__ import annotations

import os
from importlib import resources

import numpy as np
import pandas as pd

__all__ = [
    "CENSUS_COLUMNS",
    "REGIONS",
    "EIA_COLUMNS",
    "load_census",
    "load_eia",
    "census_like",
    "correlated_gaussian",
]

#: The 13 numerical attributes of the Census reference data set, in file order.
CENSUS_COLUMNS = (
    "AFNLWGT", "AGI", "EMCONTRB", "FEDTAX", "PTOTVAL", "STATETAX", "TAXINC",
    "POTHVAL", "INTVAL", "PEARNVAL", "FICA", "WSALVAL", "ERNVAL",
)  # fmt: skip

#: The 11 numerical attributes of the EIA reference data set, in file order.
EIA_COLUMNS = (
    "UTILITYID", "RESREVENUE", "RESSALES", "COMREVENUE", "COMSALES", "INDREVENUE", "INDSALES",
    "OTHREVENUE", "OTHRSALES", "TOTREVENUE", "TOTSALES",
)  # fmt: skip

#: Values of the demo ``region`` column and their probabilities.
REGIONS = ("North", "South", "East", "West", "Central")
_REGION_P = (0.22, 0.28, 0.18, 0.20, 0.12)

# Bandwidth of census_like's smoothed bootstrap, as a fraction of Silverman's rule of thumb.
_BANDWIDTH = 0.5


def load_census() -> pd.DataFrame:
    """The CASC "Census" reference microdata set.

    Returns
    -------
    pandas.DataFrame
        1080 rows × 13 int64 columns (:data:`CENSUS_COLUMNS`), no missing values.  A fresh copy
        on every call.

    Notes
    -----
    Source and attribution: ``daskmicro/data/SOURCES.md``.  Exact MDAV on all 13 columns gives
    information loss 5.69, 7.49, 9.09 and 14.16 for k = 3, 4, 5 and 10.
    """
    return _shipped("census.csv")


def load_eia() -> pd.DataFrame:
    """The "EIA" reference microdata set of the CASC project: U.S. Energy Information
    Administration figures of electric utilities.

    Returns
    -------
    pandas.DataFrame
        4092 rows × 11 int64 columns (:data:`EIA_COLUMNS`), no missing values.  A fresh copy on
        every call.

    Notes
    -----
    Source and attribution: ``daskmicro/data/SOURCES.md``.
    """
    return _shipped("eia.csv")


def _shipped(name: str) -> pd.DataFrame:
    """A CSV file of ``daskmicro/data``, read afresh."""
    with resources.files("daskmicro").joinpath("data", name).open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh)


def census_like(n: int, seed: int = 0, with_extra_columns: bool = False) -> pd.DataFrame:
    """Census-like records: a smoothed bootstrap of the Census rows.

    Method (the smoothed bootstrap, i.e. sampling from a Gaussian kernel density estimate):
    draw ``n`` rows of :func:`load_census` uniformly with replacement; add to each drawn row
    Gaussian noise whose covariance is ``h²·Σ``, with ``Σ`` the covariance of Census (so the noise
    is correlated the way the attributes are) and ``h`` half of Silverman's rule of thumb
    ``(4/(m+2))^(1/(m+4))·N^(−1/(m+4))`` (≈ 0.31 for N = 1080, m = 13); shrink the result towards
    the Census mean by ``1/√(1+h²)`` so that the variances are those of Census; reflect the few
    negative values at 0 (``|y|``, the reflection method for a density bounded at 0) and round to
    integers.

    Resampling keeps the skewed marginals and the outliers (POTHVAL, INTVAL); the noise turns
    the 1080 points into a continuum, so that n ≫ 1080 does not produce clusters of
    near-duplicates that would make microaggregation look artificially easy (plain resampling
    with a few per cent of multiplicative jitter gives IL ≈ 0.6 at n = 20 000, k = 5; this gives
    ≈ 2.6).  Measured on n = 20 000 (seed 0): skewness within 0.15 of Census's, correlations
    within 0.03, standard deviations within 6 %.

    Parameters
    ----------
    n : int
        Number of records, ≥ 1.
    seed : int, default 0
        Seed of :func:`numpy.random.default_rng`; the same seed gives the same data.
    with_extra_columns : bool, default False
        Also add two non-QI columns for demos of pass-through: ``record_id`` (strings
        ``"R000001"``, … in row order) and ``region`` (one of :data:`REGIONS`, drawn at random).
        The 13 census columns are the same with or without them.

    Returns
    -------
    pandas.DataFrame
        ``n`` rows; the 13 non-negative int64 columns of :data:`CENSUS_COLUMNS`, then the extra
        columns if asked.
    """
    n = _check_n(n)
    _check_memory(n * 15 * 8 * 6, f"n = {n:,} census-like records")
    rng = np.random.default_rng(seed)
    base = load_census()
    X = base.to_numpy(dtype=np.float64)
    n0, m = X.shape
    mean = X.mean(axis=0)
    # Census has an exact linear relation among its columns (Σ has rank 12): a tiny ridge on the
    # correlation matrix makes the Cholesky factor exist; it is unique, hence the same everywhere.
    std = X.std(axis=0, ddof=1)
    corr = np.corrcoef(X, rowvar=False) + 1e-9 * np.eye(m)
    chol = std[:, None] * np.linalg.cholesky(corr)
    h = _BANDWIDTH * (4.0 / (m + 2)) ** (1.0 / (m + 4)) * n0 ** (-1.0 / (m + 4))
    rows = rng.integers(0, n0, size=n)
    noise = rng.standard_normal((n, m)) @ chol.T
    Y = mean + (X[rows] - mean + h * noise) / np.sqrt(1.0 + h * h)
    out = pd.DataFrame(np.rint(np.abs(Y)).astype(np.int64), columns=list(base.columns))
    if with_extra_columns:
        width = max(6, len(str(n)))
        out["record_id"] = [f"R{i:0{width}d}" for i in range(1, n + 1)]
        out["region"] = np.asarray(REGIONS, dtype=object)[rng.choice(len(REGIONS), size=n, p=_REGION_P)]
    return out


def correlated_gaussian(n: int, m: int = 13, seed: int = 0) -> np.ndarray:
    """Multivariate normal records with a random, well-conditioned covariance.

    The covariance is ``L @ L.T + I`` with ``L`` an m × m matrix of standard normal draws, so the
    attributes are strongly but not perfectly correlated; the mean is zero.

    Parameters
    ----------
    n : int
        Number of records, ≥ 1.
    m : int, default 13
        Number of attributes, ≥ 1.
    seed : int, default 0
        Seed of :func:`numpy.random.default_rng`; the same seed gives the same data.

    Returns
    -------
    numpy.ndarray of float64, shape (n, m)
    """
    n = _check_n(n)
    m = _check_n(m, "m")
    _check_memory((n * m * 3 + m * m * 4) * 8, f"n = {n:,} records of m = {m:,} columns")
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((m, m))
    chol = np.linalg.cholesky(L @ L.T + np.eye(m))
    return rng.standard_normal((n, m)) @ chol.T


def _check_memory(nbytes: int, what: str) -> None:
    """Refuse, in one line naming the sizes, a data set that this machine's memory cannot hold
    while it is generated (it ended as a MemoryError, or swapped the machine to a halt)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no such figure here: the allocation decides
        return
    if nbytes > total:
        from .errors import ParameterError

        raise ParameterError(f"{what} would take about {nbytes / 2 ** 30:,.1f} GiB of memory to generate, more than "
                             f"this machine's {total / 2 ** 30:,.1f} GiB: ask for fewer records or columns")


def _check_n(n, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name} must be an integer ≥ 1, got {n!r}")
    return int(n)
