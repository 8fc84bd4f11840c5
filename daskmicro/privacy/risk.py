"""Disclosure-risk measures of a microaggregated release: record linkage and interval disclosure.

Both compare the original QI matrix ``X`` with the released matrix ``X'``, **row-aligned** (row i
of ``X'`` is what was published for record i).  Both are estimated on a uniform random sample of
records when ``sample_size`` is smaller than n, so they stay cheap on large tables; the nearest
released tuple is found with a KD-tree (:class:`scipy.spatial.cKDTree`) built on the distinct
released tuples.  Results hold rates and counts, never a data value.

Definitions (the sdcMicro ``dRisk`` / record-linkage conventions, adapted to releases whose
records share centroids):

* **Record linkage** — an intruder who knows a record's original QI values links it to the
  nearest *distinct* released tuple (all records of a cell publish the same centroid, so the
  tuples, not the rows, are the candidates).  The link is correct when that tuple is the
  record's own published tuple, i.e. its cell's centroid.  Distances are Euclidean after
  z-scoring every column with the original's mean and standard deviation (constant columns are
  ignored).  Ties — several distinct tuples at the same smallest distance, own tuple among them —
  count as correct links: the conservative choice for a risk measure.  The rate is the share of
  sampled records correctly linked.  A correct link discloses the record's cell (k or more
  records), not the record itself; for a k-anonymous release the risk of identifying the record
  is at most rate/k.
* **Interval disclosure** — for attribute j let :math:`S'_j` be the sample standard deviation
  (ddof = 1) of the *released* column, as in sdcMicro's ``dRisk``.  Record i is disclosed when
  :math:`|x_{ij} - x'_{ij}| \\le p\\,S'_j` for every attribute j but at most ``max_outside``
  of them.  With ``max_outside = 0`` (the default) that is "the released value lies within
  ±p·S' of the original for all QIs"; sdcMicro's ``dRisk`` uses ``max_outside = 1`` and
  ``p = 0.05``.  The rate is the share of sampled records disclosed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.spatial import cKDTree

from ..errors import ParameterError
from ..kernels.moments import varying_columns
from ..kernels.utility import check_pair

__all__ = [
    "RecordLinkage",
    "IntervalDisclosure",
    "record_linkage",
    "interval_disclosure",
    "disclosure_risk",
]

_TIE_TOL = 1e-9


def _sample(n: int, sample_size, seed) -> np.ndarray:
    """Indices of the records to evaluate: all of them, or a uniform sample without replacement."""
    if sample_size is None:
        return np.arange(n)
    if isinstance(sample_size, bool) or not isinstance(sample_size, (int, np.integer)) or sample_size < 1:
        raise ParameterError(f"sample_size must be a positive integer or None, got {sample_size!r}")
    if sample_size >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=int(sample_size), replace=False))


@dataclass(frozen=True)
class RecordLinkage:
    """Outcome of :func:`record_linkage`.

    Attributes
    ----------
    rate : float
        Share of sampled records whose nearest distinct released tuple is their own.
    n_linked, n_sampled : int
        Correctly linked records, and records evaluated.
    n_tuples : int
        Number of distinct released QI tuples (≈ number of cells).
    """

    rate: float
    n_linked: int
    n_sampled: int
    n_tuples: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class IntervalDisclosure:
    """Outcome of :func:`interval_disclosure`.

    Attributes
    ----------
    rate : float
        Share of sampled records disclosed.
    n_disclosed, n_sampled : int
        Disclosed records, and records evaluated.
    p : float
        Half-width of the interval as a fraction of the released standard deviation.
    max_outside : int
        Attributes allowed outside their interval for a record still to count as disclosed.
    """

    rate: float
    n_disclosed: int
    n_sampled: int
    p: float
    max_outside: int

    def to_dict(self) -> dict:
        return asdict(self)


def record_linkage(original, released, sample_size: int | None = 10_000, seed=0) -> RecordLinkage:
    """Distance-based record linkage rate of a release (definition in the module docstring).

    Parameters
    ----------
    original, released : array_like, shape (n, m)
        Original and released QI matrices, row-aligned, n ≥ 2.
    sample_size : int or None, default 10 000
        Number of records to evaluate (uniform sample without replacement); None evaluates all.
        The KD-tree always holds every distinct released tuple.
    seed : int or numpy Generator, optional
        Seed of the sample.

    Returns
    -------
    RecordLinkage
    """
    X, Y = check_pair(original, released)
    idx = _sample(X.shape[0], sample_size, seed)
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    used = varying_columns(X)  # exact; a one-valued column's std may round to a few ulps
    if not used.any():
        # nothing varies: every record publishes the same tuple, which is trivially "its own"
        tuples = np.unique(Y, axis=0)
        return RecordLinkage(rate=1.0, n_linked=len(idx), n_sampled=len(idx), n_tuples=len(tuples))
    Zx = (X[idx][:, used] - mean[used]) / std[used]
    Zy = (Y[:, used] - mean[used]) / std[used]
    tuples, inverse = np.unique(Zy, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    own = tuples[inverse[idx]]
    d_own = np.sqrt(np.sum((Zx - own) ** 2, axis=1))
    d_min, _ = cKDTree(tuples).query(Zx, k=1)
    linked = d_own <= d_min + _TIE_TOL * np.maximum(1.0, d_min)
    n_linked = int(linked.sum())
    return RecordLinkage(rate=n_linked / len(idx), n_linked=n_linked, n_sampled=len(idx), n_tuples=len(tuples))


def interval_disclosure(
    original, released, p: float = 0.05, max_outside: int = 0, sample_size: int | None = None, seed=0
) -> IntervalDisclosure:
    """Interval-disclosure rate of a release (definition in the module docstring).

    Parameters
    ----------
    original, released : array_like, shape (n, m)
        Original and released QI matrices, row-aligned, n ≥ 2.
    p : float, default 0.05
        Half-width of the interval as a fraction of each released column's standard deviation
        (sdcMicro's ``k`` argument of ``dRisk``), p ≥ 0.
    max_outside : int, default 0
        How many attributes may fall outside their interval for the record still to count as
        disclosed (0: all QIs must lie inside; sdcMicro's ``dRisk`` uses 1).
    sample_size : int or None, default None
        Number of records to evaluate; None evaluates all (the test is O(n·m)).  The standard
        deviations always come from the whole release.
    seed : int or numpy Generator, optional
        Seed of the sample.

    Returns
    -------
    IntervalDisclosure
    """
    X, Y = check_pair(original, released)
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ParameterError(f"p must be a non-negative number, got {p!r}") from None
    if not np.isfinite(p) or p < 0:
        raise ParameterError(f"p must be a non-negative number, got {p!r}")
    if isinstance(max_outside, bool) or not isinstance(max_outside, (int, np.integer)) or max_outside < 0:
        raise ParameterError(f"max_outside must be a non-negative integer, got {max_outside!r}")
    idx = _sample(X.shape[0], sample_size, seed)
    half = p * Y.std(axis=0, ddof=1)
    # a hair of slack so that values equal up to rounding count as inside
    slack = 1e-12 * np.maximum(np.abs(Y[idx]), 1.0)
    outside = np.abs(X[idx] - Y[idx]) > half + slack
    disclosed = outside.sum(axis=1) <= max_outside
    n_disclosed = int(disclosed.sum())
    return IntervalDisclosure(
        rate=n_disclosed / len(idx), n_disclosed=n_disclosed, n_sampled=len(idx), p=p, max_outside=int(max_outside)
    )


def disclosure_risk(
    original, released, p: float = 0.05, max_outside: int = 0, sample_size: int | None = 10_000, seed=0
) -> dict:
    """Both risk measures on the same record sample, as a JSON-ready dict for a run report.

    Returns ``{"record_linkage": {...}, "interval_disclosure": {...}}`` with the fields of
    :class:`RecordLinkage` and :class:`IntervalDisclosure`.
    """
    linkage = record_linkage(original, released, sample_size=sample_size, seed=seed)
    interval = interval_disclosure(
        original, released, p=p, max_outside=max_outside, sample_size=sample_size, seed=seed
    )
    return {"record_linkage": linkage.to_dict(), "interval_disclosure": interval.to_dict()}
