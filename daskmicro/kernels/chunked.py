"""Per-chunk steps of MDAV over a row-chunked data set (no Dask here; the driver is graph/macro_stage.py).

The top level of the hierarchical macroaggregation (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B with the
§VI-B recursion) runs MDAV-generic with a very large cell size K₀ over data that no single task
holds.  Every MDAV query then becomes a reduction over chunks:

* centroid of the free (unassigned) records — chunk sums in double-double precision
  (:func:`free_sums`), combined exactly, so the result does not depend on the chunking;
* record furthest from a point — chunk maxima combined by (distance, row id)
  (:func:`farthest_free`);
* the K₀ records nearest to a point — a distributed selection on the total order
  (distance, row id): chunks send a few sample distances with the exact number of their pairs up
  to each (:func:`rank_sample`, no sort), the driver brackets the K₀-th pair between two sample
  points (:func:`bracket`), chunks send the few pairs inside the bracket (:func:`pairs_between`),
  and the driver finishes the selection exactly (:func:`finish_selection`);
* assignment of the selected records to the new cell (:func:`assign_upto`).

A chunk is a z-scored matrix ``Z`` (rows in input order), its global row ids ``row0`` and an
int64 label array (−1 = free).  ``row0`` is either the first row id of a chunk of consecutive
rows (an int) or the ascending int64 array of the chunk's row ids (the pieces of a parent cell
at the deeper levels of the recursion, :func:`join_pieces`).  All functions are pure: they
return new arrays.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .macro import dd_colsum_where, sq_dist

__all__ = [
    "working_copy",
    "residual",
    "free_sums",
    "farthest_free",
    "farthest_from",
    "distances",
    "rank_sample",
    "bracket",
    "pairs_between",
    "finish_selection",
    "assign_upto",
    "assign_rest",
    "split_rows",
    "join_pieces",
    "label_counts",
]

_INF = np.inf


def working_copy(Z: np.ndarray) -> np.ndarray:
    """The records the top level measures distances on: float32 (distances and sums in float64)."""
    return Z.astype(np.float32)


def residual(Z: np.ndarray, work: np.ndarray) -> np.ndarray:
    """The rest of each value beyond its working copy, in float32: ``Z − work`` is exact in float64
    and rounds to within 2⁻²⁴ of itself, so ``work + residual`` is ``Z`` to within 2⁻⁴⁸ of it
    (:func:`daskmicro.kernels.partition.join_split_pieces` adds them back)."""
    return (Z - work.astype(np.float64)).astype(np.float32)


def _ids(row0, idx):
    """Global row ids of the chunk positions ``idx`` (``row0``: first id, or every row's id)."""
    if isinstance(row0, np.ndarray):
        return row0[idx]
    return np.asarray(idx, dtype=np.int64) + row0


def _position(row0, row: int) -> int:
    """Position of global row ``row`` in the chunk, or −1 when the chunk does not hold it."""
    if isinstance(row0, np.ndarray):
        i = int(np.searchsorted(row0, row))
        return i if i < row0.size and row0[i] == row else -1
    i = row - row0
    return i


def free_sums(Z: np.ndarray, labels: np.ndarray):
    """(count, double-double column sums) of the free rows of a chunk."""
    return int(np.count_nonzero(labels < 0)), dd_colsum_where(Z, labels)


def farthest_free(Z: np.ndarray, labels: np.ndarray, row0: int, d: np.ndarray):
    """(distance, row id, coordinates) of the free row with the largest ``d``; lowest row on ties.

    ``d`` holds distances of all rows of the chunk (assigned rows are ignored).  Returns None
    when the chunk has no free row.
    """
    free = np.flatnonzero(labels < 0)
    if free.size == 0:
        return None
    i = free[int(np.argmax(d[free]))]
    return float(d[i]), int(_ids(row0, i)), Z[i].copy()


def farthest_from(Z: np.ndarray, labels: np.ndarray, row0, point: np.ndarray):
    """(distance, row id, coordinates) of the free row farthest from ``point`` (lowest row on ties),
    or None when the chunk has no free row: :func:`distances` and :func:`farthest_free` in one pass
    that keeps no distance array."""
    return farthest_free(Z, labels, row0, sq_dist(Z, point))


def distances(Z: np.ndarray, labels: np.ndarray, row0: int, point: np.ndarray, centre_row: int = -1):
    """Squared distances to ``point``; +inf for assigned rows, −1 for the centre record itself."""
    d = sq_dist(Z, point)
    d[labels >= 0] = _INF
    i = _position(row0, centre_row) if centre_row >= 0 else -1
    if 0 <= i < d.shape[0]:
        d[i] = -1.0
    return d


#: Row id of a sample point (v, ROW_MAX): after every real pair of distance v, so that the number of
#: a chunk's pairs up to it is simply the number of its distances ≤ v.
ROW_MAX = int(np.iinfo(np.int64).max)


@nb.njit(cache=True, nogil=True)
def _bucket_counts(d, n_buckets):
    """Free distances (finite ``d``) counted in ``n_buckets`` equal steps of their square root, with
    each bucket's largest distance: (counts, largest, n_free).  The bucket of a distance is a
    non-decreasing function of it (every step rounds monotonically), which is what makes the
    counts exact for :func:`rank_sample`."""
    lo, hi, n = np.inf, -np.inf, 0
    for i in range(d.shape[0]):
        x = d[i]
        if x < np.inf:
            r = np.sqrt(max(x, 0.0))
            lo, hi, n = min(lo, r), max(hi, r), n + 1
    counts = np.zeros(n_buckets, dtype=np.int64)
    top = np.full(n_buckets, -np.inf)
    if n == 0:
        return counts, top, 0
    scale = (n_buckets - 1) / (hi - lo) if hi > lo else 0.0
    if not np.isfinite(scale):
        scale = 0.0
    for i in range(d.shape[0]):
        x = d[i]
        if x < np.inf:
            j = min(int((np.sqrt(max(x, 0.0)) - lo) * scale), n_buckets - 1)
            counts[j] += 1
            if x > top[j]:
                top[j] = x
    return counts, top, n


def rank_sample(d: np.ndarray, size: int = 512):
    """Sample points of a chunk's free distances with exact counts: (values, counts, n_free).

    One pass, no sort: the free distances are counted in ``size`` buckets (equal steps of the
    distance), and each non-empty bucket sends its largest distance v with the number of free
    pairs ≤ (v, ROW_MAX), i.e. with distance ≤ v — every distance of the buckets up to v's and
    none after, since the bucket grows with the distance.  ``values`` are strictly ascending.
    Any sample points keep the selection exact; spread ones keep its bracket narrow.
    """
    counts, top, n = _bucket_counts(np.ascontiguousarray(d, dtype=np.float64), int(size))
    keep = counts > 0
    return top[keep], np.cumsum(counts)[keep], int(n)


def _le(d, r, td, tr):
    """(d, r) ≤ (td, tr) in the lexicographic order, vectorised over d, r."""
    return (d < td) | ((d == td) & (r <= tr))


def bracket(samples, count: int):
    """Points (lo, hi) with lo < the ``count``-th smallest pair ≤ hi, from :func:`rank_sample` results.

    ``lo``/``hi`` are (distance, ROW_MAX) points or None for −∞/+∞.  For a point w and a chunk b whose
    sample points s_1 < … < s_m hold c_1 ≤ … ≤ c_m pairs, the number of b's pairs ≤ w lies in
    [c_i, c_{i+1}] where s_i ≤ w < s_{i+1} (c_0 = 0, c_{m+1} = the chunk's free pairs).  Summed over
    the chunks, in the order of the points, these bounds give the tightest bracket the samples allow.
    """
    vals, cur, prev, nxt = [], [], [], []
    upper0 = 0
    for v, c, n in samples:
        if v.size == 0:
            upper0 += n
            continue
        upper0 += int(c[0])
        vals.append(v)
        cur.append(c)
        prev.append(np.concatenate([[0], c[:-1]]))
        nxt.append(np.concatenate([c[1:], [n]]))
    if not vals:
        return None, None
    v = np.concatenate(vals)
    cur, prev, nxt = np.concatenate(cur), np.concatenate(prev), np.concatenate(nxt)
    order = np.argsort(v, kind="stable")
    lower = np.cumsum((cur - prev)[order])            # Σ_b pairs ≤ its last point ≤ w
    upper = upper0 + np.cumsum((nxt - cur)[order])    # Σ_b pairs ≤ its first point > w
    below = np.flatnonzero(upper < count)
    above = np.flatnonzero(lower >= count)
    lo = (float(v[order[below[-1]]]), ROW_MAX) if below.size else None
    hi = (float(v[order[above[0]]]), ROW_MAX) if above.size else None
    return lo, hi


def pairs_between(d: np.ndarray, row0: int, lo, hi):
    """Free pairs of the chunk strictly above ``lo`` and at most ``hi``, and the count ≤ ``lo``."""
    free = np.flatnonzero(np.isfinite(d))
    fd = d[free]
    rows = _ids(row0, free)
    below = np.zeros(free.size, dtype=bool) if lo is None else _le(fd, rows, *lo)
    inside = ~below if hi is None else (~below & _le(fd, rows, *hi))
    return fd[inside], rows[inside], int(below.sum())


def finish_selection(candidates, count: int):
    """The ``count``-th smallest pair overall, from :func:`pairs_between` results."""
    n_below = sum(c[2] for c in candidates)
    d = np.concatenate([c[0] for c in candidates])
    r = np.concatenate([c[1] for c in candidates])
    need = count - n_below
    if not 1 <= need <= d.size:
        raise RuntimeError(f"distributed selection failed: need {need} of {d.size} candidates")
    order = np.lexsort((r, d))
    i = order[need - 1]
    return float(d[i]), int(r[i])


def assign_upto(labels: np.ndarray, d: np.ndarray, row0: int, cut, cell: int) -> np.ndarray:
    """New labels: free rows whose (distance, row) pair is ≤ ``cut`` join ``cell``."""
    out = labels.copy()
    rows = _ids(row0, np.arange(d.shape[0]))
    take = np.isfinite(d) & _le(d, rows, *cut)
    out[take] = cell
    return out


def assign_rest(labels: np.ndarray, cell: int) -> np.ndarray:
    """New labels: every free row joins ``cell``."""
    out = labels.copy()
    out[out < 0] = cell
    return out


def split_rows(Z: np.ndarray, labels: np.ndarray, row0: int, n_groups: int):
    """Rows of a chunk split by label: a list of (row ids, Z rows) per group, rows ascending."""
    if n_groups <= 8:   # the top level's few cells: one scan per group, rows stay ascending
        groups = [np.flatnonzero(labels == g) for g in range(n_groups)]
    else:
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(n_groups + 1))
        groups = [order[bounds[g]:bounds[g + 1]] for g in range(n_groups)]
    return [(_ids(row0, idx), Z[idx]) for idx in groups]


def label_counts(labels: np.ndarray, n_groups: int) -> np.ndarray:
    """Rows of the chunk in each of the groups 0 … n_groups − 1."""
    return np.bincount(labels, minlength=n_groups)[:n_groups]


def join_pieces(*pieces):
    """One chunk (row ids, Z) from (row ids, Z) pieces of consecutive chunks; ids stay ascending."""
    rows = np.concatenate([p[0] for p in pieces])
    Z = np.concatenate([p[1] for p in pieces])
    return rows, np.ascontiguousarray(Z)
