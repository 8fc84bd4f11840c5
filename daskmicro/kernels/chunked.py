"""Per-chunk steps of MDAV over a row-chunked data set (no Dask here; the driver is graph/macro.py).

The top level of the hierarchical macroaggregation (``001_4020e12e98fa2147.txt`` §IV-B with the
§VI-B recursion) runs MDAV-generic with a very large cell size K₀ over data that no single task
holds.  Every MDAV query then becomes a reduction over chunks:

* centroid of the free (unassigned) records — chunk sums in double-double precision
  (:func:`free_sums`), combined exactly, so the result does not depend on the chunking;
* record furthest from a point — chunk maxima combined by (distance, row id)
  (:func:`farthest_free`);
* the K₀ records nearest to a point — a distributed selection on the total order
  (distance, row id): chunks send a sorted sample with exact ranks (:func:`rank_sample`), the
  driver brackets the K₀-th pair between two samples (:func:`bracket`), chunks send the few pairs
  inside the bracket (:func:`pairs_between`), and the driver finishes the selection exactly
  (:func:`finish_selection`);
* assignment of the selected records to the new cell (:func:`assign_upto`).

A chunk is a z-scored matrix ``Z`` (rows in input order), its global row ids ``row0`` and an
int64 label array (−1 = free).  ``row0`` is either the first row id of a chunk of consecutive
rows (an int) or the ascending int64 array of the chunk's row ids (the pieces of a parent cell
at the deeper levels of the recursion, :func:`join_pieces`).  All functions are pure: they
return new arrays.
"""

from __future__ import annotations

import numpy as np

from .macro import dd_colsum, sq_dist

__all__ = [
    "free_sums",
    "farthest_free",
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
    free = labels < 0
    return int(free.sum()), dd_colsum(Z[free])


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


def distances(Z: np.ndarray, labels: np.ndarray, row0: int, point: np.ndarray, centre_row: int = -1):
    """Squared distances to ``point``; +inf for assigned rows, −1 for the centre record itself."""
    d = sq_dist(Z, point)
    d[labels >= 0] = _INF
    i = _position(row0, centre_row) if centre_row >= 0 else -1
    if 0 <= i < d.shape[0]:
        d[i] = -1.0
    return d


def _free_order(d: np.ndarray):
    free = np.flatnonzero(np.isfinite(d))
    # rows are ascending in `free`, so a stable sort on d orders by (d, row)
    order = free[np.argsort(d[free], kind="stable")]
    return order


def rank_sample(d: np.ndarray, row0: int, size: int = 256):
    """Sorted sample of a chunk's free (distance, row id) pairs with their exact ranks (1-based).

    Small chunks send every pair.  Returns (d, rows, ranks, n_free).
    """
    order = _free_order(d)
    n = order.size
    if n <= 2 * size:
        pick = np.arange(n)
    else:
        step = n // size
        pick = np.arange(step - 1, n, step)
    sel = order[pick]
    return d[sel], _ids(row0, sel), pick.astype(np.int64) + 1, n


def _le(d, r, td, tr):
    """(d, r) ≤ (td, tr) in the lexicographic order, vectorised over d, r."""
    return (d < td) | ((d == td) & (r <= tr))


def bracket(samples, count: int):
    """Pairs (lo, hi) with lo < the ``count``-th smallest pair ≤ hi, from chunk samples.

    ``lo``/``hi`` are (distance, row) tuples or None for −∞/+∞.  For a sample pair v of chunk b,
    the number of the chunk's pairs ≤ v is exactly its rank; between two consecutive samples of b it
    lies in [rank, next rank − 1].  The bracket is as tight as those bounds allow.
    """
    ds, rs, owner, rank, nxt = [], [], [], [], []
    n_free = []
    for b, (d, r, ranks, n) in enumerate(samples):
        n_free.append(n)
        ds.append(d)
        rs.append(r)
        owner.append(np.full(d.size, b))
        rank.append(ranks)
        nxt.append(np.append(ranks[1:], n + 1) if ranks.size else ranks)
    d = np.concatenate(ds)
    r = np.concatenate(rs)
    owner = np.concatenate(owner)
    rank = np.concatenate(rank)
    nxt = np.concatenate(nxt)
    order = np.lexsort((r, d))
    # lower bound L(v) = Σ_b rank of b's last sample ≤ v; upper bound U(v) = Σ_b (next rank − 1)
    last_rank = np.zeros(len(samples), dtype=np.int64)
    first_rank = np.array([s[2][0] if s[2].size else s[3] + 1 for s in samples], dtype=np.int64)
    upper = (first_rank - 1).copy()
    L = 0
    U = int(upper.sum())
    lo = hi = None
    for i in order:
        b = owner[i]
        L += int(rank[i] - last_rank[b])
        last_rank[b] = rank[i]
        U += int((nxt[i] - 1) - upper[b])
        upper[b] = nxt[i] - 1
        if U < count:
            lo = (float(d[i]), int(r[i]))
        if L >= count:
            hi = (float(d[i]), int(r[i]))
            break
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
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(n_groups + 1))
    out = []
    for g in range(n_groups):
        idx = order[bounds[g]:bounds[g + 1]]
        out.append((_ids(row0, idx), Z[idx]))
    return out


def label_counts(labels: np.ndarray, n_groups: int) -> np.ndarray:
    """Rows of the chunk in each of the groups 0 … n_groups − 1."""
    return np.bincount(labels, minlength=n_groups)[:n_groups]


def join_pieces(*pieces):
    """One chunk (row ids, Z) from (row ids, Z) pieces of consecutive chunks; ids stay ascending."""
    rows = np.concatenate([p[0] for p in pieces])
    Z = np.concatenate([p[1] for p in pieces])
    return rows, np.ascontiguousarray(Z)
