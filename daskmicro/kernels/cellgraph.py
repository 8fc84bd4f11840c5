"""Which cells are near which: neighbour lists of centroids, and each record's nearest centroids.

Shared by the improvement pass (:mod:`.improve`, moves and swaps between neighbouring cells) and
PCL's assignment step (:mod:`._auction`, the candidate cells of every record).  Exact k-nearest
searches among tens of thousands of centroids in 10+ dimensions cost more than the steps they
feed (scipy's k-d tree: 6.8 s for the 8 nearest of 10 000 centroids to 100 000 records in 13
dimensions), so both lists are found from a cell's neighbourhood instead:

* :func:`neighbour_cells` — a k-d tree in the leading principal axes of the centroids, then
  neighbour-of-neighbour descent rounds measured in all dimensions (Dong, Charikar & Li,
  *Efficient k-nearest neighbor graph construction*, WWW 2011);
* :func:`nearest_cells` — a record's nearest centroids among the cells two steps from its home
  cell in that graph (its neighbours and theirs), measured exactly.

Deterministic: the lists depend only on the centroids (and the records and their home cells).
Pure numpy / numba / scipy; no Dask.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._blocktree import dist2

__all__ = ["neighbour_cells", "descend", "nearest_cells", "PROJECTED_DIMS", "DESCENT_ROUNDS", "APPROXIMATE_DIMS",
           "APPROXIMATE_EPS"]

#: Principal axes of the first neighbour search, and descent rounds after it (neighbour_cells).
PROJECTED_DIMS = 5
DESCENT_ROUNDS = 2
#: With descent rounds after it, the first search is approximate (scipy's ``eps``: every cell it
#: lists lies within (1 + eps) times the distance of the true L-th nearest in the projection) in
#: more axes: the descent, measured in all dimensions, repairs what it misses.  Three sweeps × 8
#: neighbours from MDAV cells of 250 000 records in slabs of 25 000 (k = 10, 13 dimensions):
#: exact in 5 axes 0.218 / 0.162 s for the lists, SSE 0.8860 / 0.8651 of the start (correlated
#: Gaussian / census-like); eps 3 in 7 axes 0.130 / 0.105 s, SSE 0.8826 / 0.8648.
APPROXIMATE_DIMS, APPROXIMATE_EPS = 7, 3.0


def neighbour_cells(cen: np.ndarray, L: int, rounds: int = DESCENT_ROUNDS,
                    approximate: bool | None = None) -> np.ndarray:
    """About the ``L`` cells with the nearest centroids to each cell's own (itself excluded).

    Exact k-nearest search among thousands of centroids in 10+ dimensions costs more than the
    sweeps themselves, so: a k-d tree in the leading ``PROJECTED_DIMS`` principal axes of the
    centroids gives first lists (approximate, in ``APPROXIMATE_DIMS`` axes, when descent rounds
    follow, or with ``approximate`` when the caller runs them later), and ``rounds`` (default
    ``DESCENT_ROUNDS``) rounds of neighbour-of-neighbour descent (Dong, Charikar & Li, *Efficient
    k-nearest neighbor graph construction*, WWW 2011) measured in all dimensions improve them.
    Deterministic: depends only on the centroids.
    """
    from scipy.spatial import cKDTree

    C, m = cen.shape
    if approximate is None:
        approximate = rounds > 0
    dims, eps = (APPROXIMATE_DIMS, APPROXIMATE_EPS) if approximate else (PROJECTED_DIMS, 0.0)
    c0 = cen - cen.mean(axis=0)
    _, V = np.linalg.eigh(c0.T @ c0)
    P = np.ascontiguousarray(c0 @ V[:, ::-1][:, :min(m, dims)])
    _, idx = cKDTree(P).query(P, L + 1, eps=eps)
    own = idx == np.arange(C)[:, None]
    keep = np.where(own.any(axis=1)[:, None], ~own, np.arange(L + 1)[None, :] < L)
    near = np.ascontiguousarray(idx[keep].reshape(C, L), dtype=np.int64)
    return descend(np.ascontiguousarray(cen), near, rounds, np.ones(C, dtype=np.bool_))


@njit(cache=True, nogil=True)
def descend(cen, near, rounds, active):
    """Neighbour lists sorted by distance, then improved by neighbour-of-neighbour rounds, those of
    the ``active`` cells only (bool per cell: the improvement pass's live cells).  In place;
    returns ``near``.  (``active`` is always an array: one compiled specialisation.)

    A round keeps, for every active cell, the ``L`` nearest (by squared distance, then cell id) of
    its list and of its neighbours' lists.  The neighbours' neighbours not listed yet are collected
    first, their centroids copied coordinate by coordinate into one block, and all their distances
    measured together, contiguous over the cells (vectorised, where one distance at a time waits
    on its own sum): the same sums in the same order as :func:`dist2`, so the same lists, in 0.35
    instead of 0.46 s for 50 000 cells × 24 neighbours in 13 dimensions."""
    C, L = near.shape
    m = cen.shape[1]
    dist = np.empty((C, L))
    for c in range(C):
        for jj in range(L):
            dist[c, jj] = dist2(cen[c], cen[near[c, jj]])
        _sort_by_distance(dist[c], near[c])
    seen = np.empty(C, np.int64)  # seen[b] == c: cell b already listed or collected for cell c
    S = np.empty(L * L, np.int64)  # the cells collected for one cell
    block = np.empty((m, L * L))  # their centroids, one row per coordinate
    acc = np.empty(L * L)
    for _ in range(rounds):
        old = near.copy()
        seen[:] = -1
        for c in range(C):
            if not active[c]:
                continue
            seen[c] = c
            for q in range(L):
                seen[near[c, q]] = c
            ns = 0
            for jj in range(L):
                r = old[c, jj]
                for kk in range(L):  # branch-free: written either way, kept only when new
                    b = old[r, kk]
                    S[ns] = b
                    ns += seen[b] != c
                    seen[b] = c
            for j in range(m):
                for s in range(ns):
                    block[j, s] = cen[S[s], j]
            acc[:ns] = 0.0
            for j in range(m):
                x = cen[c, j]
                for s in range(ns):
                    t = x - block[j, s]
                    acc[s] += t * t
            for s in range(ns):
                d, b = acc[s], S[s]
                if d > dist[c, L - 1] or (d == dist[c, L - 1] and b >= near[c, L - 1]):
                    continue
                p = L - 2
                while p >= 0 and (dist[c, p] > d or (dist[c, p] == d and near[c, p] > b)):
                    dist[c, p + 1], near[c, p + 1] = dist[c, p], near[c, p]
                    p -= 1
                dist[c, p + 1], near[c, p + 1] = d, b
    return near


@njit(cache=True, nogil=True)
def _within_two_steps(h, near, stamp, S):
    """The cells within two steps of cell ``h`` (``h`` first, then ``near[h]`` and their own
    neighbours, each once) into ``S``; returns their count.  ``stamp[q] == h`` marks q as
    collected for h (each home comes once, so no reset is needed).  Branch-free: a cell is written
    at the end of the list either way and kept only when new."""
    Ln = near.shape[1]
    stamp[h] = h
    S[0] = h
    ns = 1
    for a in range(Ln):
        b = near[h, a]
        S[ns] = b
        ns += stamp[b] != h
        stamp[b] = h
        for c in range(Ln):
            q = near[b, c]
            S[ns] = q
            ns += stamp[q] != h
            stamp[q] = h
    return ns


@njit(cache=True, nogil=True)
def nearest_cells(X, C, home, near, out_cell, out_d2):
    """For every record, the ``out_cell.shape[1]`` nearest centroids among its home cell, the
    cells of ``near[home]`` and their own neighbours (two steps in the neighbour graph), nearest
    first: ``out_cell[i]`` their ids, ``out_d2[i]`` the squared distances, exact in float64, ties
    by cell id (columns left over when fewer cells are within two steps hold −1 and +inf).

    Records are taken home cell by home cell: the cells within two steps (about 330 with 24
    neighbours per cell) are collected and copied together once per home cell, as float32 offsets
    from the home centroid (small numbers wherever the cells lie, so that float32 keeps their
    differences), and every record of the home is measured against all of them in float32, twice as
    many to a vector as float64; the ``L`` nearest by that measure are measured again in float64
    and sorted.  The choice can differ from float64's only among cells whose distances agree to
    float32's rounding.  Measured on 100 000 correlated Gaussian records (13 dimensions, 10 000
    cells, 16 neighbours per cell): 80 % of the exact 8 nearest found, in 0.25 s where scipy's
    k-d tree takes 6.8 s; PCL's assignment step needs the near ones, not the exact set (see
    :data:`._auction.HOP_NEIGHBOURS`).
    """
    n, m = X.shape
    K, Ln = near.shape
    L = out_cell.shape[1]
    order = np.argsort(home, kind="mergesort")
    stamp = np.full(K, -1, np.int64)
    S = np.empty(1 + Ln + Ln * Ln, np.int64)
    block = np.empty((m, S.shape[0]), np.float32)
    acc = np.empty(S.shape[0], np.float32)
    xf = np.empty(m, np.float32)
    bd = np.empty(L, np.float32)
    bc = np.empty(L, np.int64)
    ed = np.empty(L)
    i0 = 0
    while i0 < n:
        h = home[order[i0]]
        i1 = i0
        while i1 < n and home[order[i1]] == h:
            i1 += 1
        ns = _within_two_steps(h, near, stamp, S)
        for j in range(m):  # one row per coordinate, offsets from the home centroid; filled row
            ch = C[h, j]      # by row (a cell at a time: 13 rows' stores apart, 0.12 s more a call)
            for s in range(ns):
                block[j, s] = np.float32(C[S[s], j] - ch)
        for ii in range(i0, i1):
            i = order[ii]
            for j in range(m):
                xf[j] = np.float32(X[i, j] - C[h, j])
            acc[:ns] = 0.0
            for j in range(m):  # contiguous over the cells: vectorised
                xj = xf[j]
                for s in range(ns):
                    t = xj - block[j, s]
                    acc[s] += t * t
            bd[:] = np.inf
            bc[:] = -1
            worst = np.float32(np.inf)  # the L-th smallest so far
            for s in range(ns):
                d = acc[s]
                if d >= worst:
                    continue
                pos = L - 1
                while pos > 0 and bd[pos - 1] > d:
                    bd[pos] = bd[pos - 1]
                    bc[pos] = bc[pos - 1]
                    pos -= 1
                bd[pos] = d
                bc[pos] = S[s]
                worst = bd[L - 1]
            _exact_sorted(X[i], C, bc, ed)
            for j in range(L):
                out_cell[i, j] = bc[j]
                out_d2[i, j] = ed[j]
        i0 = i1


@njit(cache=True, nogil=True, inline="always")
def _exact_sorted(x, C, cells, d2):
    """``d2`` the float64 squared distances from ``x`` to ``cells`` (+inf for −1), both sorted by
    (distance, cell id) in place."""
    for j in range(cells.shape[0]):
        d2[j] = dist2(x, C[cells[j]]) if cells[j] >= 0 else np.inf
    _sort_by_distance(d2, cells)


@njit(cache=True, nogil=True, inline="always")
def _sort_by_distance(d2, cells):
    """Insertion sort of ``d2`` and ``cells`` together by (distance, cell id), in place."""
    for j in range(1, d2.shape[0]):
        d, c = d2[j], cells[j]
        p = j - 1
        while p >= 0 and (d2[p] > d or (d2[p] == d and cells[p] > c)):
            d2[p + 1] = d2[p]
            cells[p + 1] = cells[p]
            p -= 1
        d2[p + 1] = d
        cells[p + 1] = c
