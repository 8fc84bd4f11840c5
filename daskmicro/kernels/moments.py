"""Numerically stable column moments for z-scoring, over one matrix or over chunks of it.

The textbook one-pass formula var = E[x²] − E[x]² subtracts two numbers of size ≈ mean², so a
column with a large mean and a small spread loses its variance to rounding: epoch milliseconds
(1.7e12 ± 1000) have x² ≈ 2.9e24, whose float64 spacing (≈ 5e8) dwarfs the variance (≈ 3e5).
Nothing here squares a raw value; every sum of squares is of deviations from a centre.

Two ways of combining chunks, both pure numpy (no Dask; the graph code maps and combines):

* :func:`chunk_moments` + :func:`merge_moments` — each chunk computes (count, mean, M2) by two
  passes over its own rows (mean first, then the squared deviations from it, with the
  correction term of the corrected two-pass algorithm), and chunks are merged by the pairwise
  update of Chan, Golub & LeVeque (1979)::

      n = n_a + n_b,   δ = mean_b − mean_a,
      mean = mean_a + δ·n_b/n,   M2 = M2_a + M2_b + δ²·n_a·n_b/n

  (with δδᵀ for the co-moment matrix).  Stable for any offset; the last bits depend on how the
  rows are chunked and in which order the merges run.

* :func:`centered_sums` + :func:`centered_m2` — when the result must not depend on the chunking
  at all (the distributed ingest: the release must be bit-identical for any partitioning), every
  chunk sums the deviations from one global centre (the correctly rounded mean) in
  double-double precision, and the sums are combined exactly: M2 = Σd² − (Σd)²/n, the corrected
  two-pass algorithm (Chan, Golub & LeVeque, *Am. Stat.* 37, 1983).  Each deviation is rounded
  on its own, whatever chunk holds it, and the combined sums are correctly rounded, so the
  result is the same for every chunking.

Constant columns are found exactly, by min == max on the original values, never by a variance
that rounding may leave at a tiny non-zero value (or cancel to zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .macro import dd_colsum, dd_combine

__all__ = [
    "Moments",
    "as_matrix",
    "chunk_moments",
    "merge_moments",
    "combine_moments",
    "centered_sums",
    "centered_m2",
    "population_std",
    "varying_columns",
]


@dataclass(frozen=True)
class Moments:
    """Count, mean, sum of squared deviations M2 and range of the columns of a set of rows.

    The mean is carried as an unevaluated sum ``mean + mean_err`` (``mean`` the nearest float,
    ``mean_err`` the remainder): the difference of two means in :func:`merge_moments` then keeps
    its relative accuracy even when the offset dwarfs the spread.  ``m2`` is per column (m,) or,
    for :func:`chunk_moments` with ``cross=True``, the co-moment matrix (m, m) — Σ (x − x̄)(x − x̄)ᵀ.
    ``minimum``/``maximum`` are the columns' range (+inf/−inf for no rows).
    """

    count: int
    mean: np.ndarray
    mean_err: np.ndarray
    m2: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray

    @property
    def constant(self) -> np.ndarray:
        """Columns that take one value only (exact: min == max), or no rows at all."""
        return ~(self.maximum > self.minimum)

    def variance(self) -> np.ndarray:
        """Population variance M2/n per column (the diagonal of a co-moment matrix); 0 if constant."""
        m2 = np.diagonal(self.m2) if self.m2.ndim == 2 else self.m2
        var = np.maximum(m2, 0.0) / max(self.count, 1)
        return np.where(self.constant, 0.0, var)

    def std(self) -> np.ndarray:
        """Population standard deviation (ddof = 0) per column; exactly 0 for constant columns."""
        return np.sqrt(self.variance())

    def covariance(self) -> np.ndarray:
        """Population covariance matrix M2/n (needs ``cross=True``)."""
        if self.m2.ndim != 2:
            raise ValueError("covariance needs co-moments: chunk_moments(X, cross=True)")
        return self.m2 / max(self.count, 1)


def as_matrix(X) -> np.ndarray:
    """``X`` as a float64 matrix (a vector becomes one column); anything else than 1-D/2-D is refused."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n records × m attributes), got {X.ndim} dimensions")
    return X


def _two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth's TwoSum), elementwise."""
    s = a + b
    bp = s - a
    return s, (a - (s - bp)) + (b - bp)


def chunk_moments(X, cross: bool = False) -> Moments:
    """(count, mean, M2, min, max) of the columns of ``X`` by two passes over its rows.

    The second pass sums the deviations d from the first pass's mean: Σd/n refines the mean
    (kept as its low-order part) and M2 = Σd² − (Σd)²/n is the corrected two-pass sum of squares,
    free of the first pass's rounding error.  With ``cross=True`` M2 is the co-moment matrix.
    """
    X = as_matrix(X)
    n, m = X.shape
    if n == 0:
        zeros = np.zeros((m, m)) if cross else np.zeros(m)
        return Moments(0, np.zeros(m), np.zeros(m), zeros, np.full(m, np.inf), np.full(m, -np.inf))
    first = X.mean(axis=0)
    D = X - first
    s = D.sum(axis=0)
    if cross:
        m2 = D.T @ D - np.outer(s, s) / n
    else:
        m2 = np.einsum("ij,ij->j", D, D) - s * s / n
    mean, err = _two_sum(first, s / n)
    return Moments(n, mean, err, m2, X.min(axis=0), X.max(axis=0))


def merge_moments(a: Moments, b: Moments) -> Moments:
    """Moments of the union of two disjoint row sets: the pairwise update of Chan, Golub &
    LeVeque (1979, "Updating formulae and a pairwise algorithm for computing sample variances")::

        n = n_a + n_b,  δ = x̄_b − x̄_a,  x̄ = x̄_a + δ·n_b/n,  M2 = M2_a + M2_b + δ²·n_a·n_b/n

    Only differences of means are squared, never raw values; δ is formed from the two-part
    means, so it is accurate to a few ulps of itself whatever the offset of the data.
    """
    lo, hi = np.minimum(a.minimum, b.minimum), np.maximum(a.maximum, b.maximum)
    if a.count == 0 or b.count == 0:
        c = b if a.count == 0 else a
        return Moments(c.count, c.mean, c.mean_err, c.m2, lo, hi)
    n = a.count + b.count
    delta = (b.mean - a.mean) + (b.mean_err - a.mean_err)
    s, e = _two_sum(a.mean, delta * (b.count / n))
    mean, err = _two_sum(s, e + a.mean_err)
    w = a.count * b.count / n
    extra = np.outer(delta, delta) * w if a.m2.ndim == 2 else delta * delta * w
    return Moments(n, mean, err, a.m2 + b.m2 + extra, lo, hi)


def combine_moments(parts) -> Moments:
    """Merge a list of :class:`Moments` by a balanced tree of :func:`merge_moments` (in list order)."""
    parts = list(parts)
    if not parts:
        raise ValueError("nothing to combine")
    while len(parts) > 1:
        parts = [merge_moments(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def centered_sums(X, center) -> np.ndarray:
    """Double-double column sums of ``d = X − center`` and of ``d²`` (shape (2, 2, m)).

    ``center`` must be the same for every chunk (the global mean): then each deviation is the
    same float whatever chunk holds its row, and :func:`centered_m2` combines the sums exactly.
    """
    X = as_matrix(X)
    D = X - np.asarray(center, dtype=np.float64)
    return np.stack([dd_colsum(D), dd_colsum(D * D)])


def centered_m2(parts, n: int) -> np.ndarray:
    """M2 per column from the :func:`centered_sums` of all chunks: Σd² − (Σd)²/n (corrected
    two-pass), each sum correctly rounded, so the result does not depend on the chunking."""
    parts = [np.asarray(p) for p in parts]
    s1 = dd_combine([p[0] for p in parts])
    s2 = dd_combine([p[1] for p in parts])
    return np.maximum(s2 - s1 * s1 / n, 0.0)


def population_std(m2: np.ndarray, n: int, constant: np.ndarray) -> np.ndarray:
    """sqrt(M2/n), exactly 0 where ``constant``."""
    return np.where(constant, 0.0, np.sqrt(np.maximum(m2, 0.0) / max(n, 1)))


def varying_columns(X) -> np.ndarray:
    """Columns of ``X`` holding at least two distinct values (exact: max > min; none for no rows)."""
    X = as_matrix(X)
    if X.shape[0] == 0:
        return np.zeros(X.shape[1], dtype=bool)
    return X.max(axis=0) > X.min(axis=0)
