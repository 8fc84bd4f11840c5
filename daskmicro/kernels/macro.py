"""Macroaggregation kernels: MDAV at a large cell size K, nested MDAV, cell statistics.

Macroaggregation (Rebollo-Monedero et al., *Efficient k-Anonymous Microaggregation … via PCA*, §IV-B, step 1 of
Algorithm C) runs MDAV with a cell size K ≫ k to cut the records into *macrocells* of K … 2K−1
neighbouring records.  With few, large cells the tree search of :func:`~daskmicro.kernels.mdav`
is the wrong tool: here each MDAV step is one vectorised distance pass plus a partial selection,
there are ≈ 2.5·n/K steps over ≈ n/2 remaining records on average, so the cost is ≈ 1.25·n²·m/K
— a small fraction of exact MDAV's cost for K ≫ k.

:func:`nested_mdav` applies the §VI-B idea of recursion: MDAV at a large size first, then MDAV at
the next size inside each of those cells.  With an intermediate size K₁ ≈ √(n·K) the cost drops
from ≈ n²/K to ≈ 2·n·√(n/K), which is what lets one task macroaggregate a few hundred thousand
records in a fraction of a second.

Everything here is plain numpy/numba (no Dask) and deterministic: ties are broken by row position.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ._blocktree import dist2
from .mdav import as_records

__all__ = [
    "mdav_large",
    "nested_mdav",
    "sq_dist",
    "cell_stats",
    "dd_colsum",
    "dd_colsum_where",
    "dd_combine",
]


@nb.njit(cache=True, nogil=True)
def _sq_dist(X, c, out):
    n, m = X.shape
    for i in range(n):
        s = 0.0
        for j in range(m):
            t = X[i, j] - c[j]
            s += t * t
        out[i] = s
    return out


def sq_dist(X: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared Euclidean distance of every row of ``X`` to the point ``c``.

    Each row's sum runs over the columns in a fixed order, so a row's distance does not depend on
    which other rows share the array (chunking-independent).
    """
    X = _float_records(X)
    return _sq_dist(X, np.ascontiguousarray(c, dtype=np.float64), np.empty(X.shape[0]))


def _float_records(X: np.ndarray) -> np.ndarray:
    """``X`` as a C-contiguous float64 or float32 matrix (float32 is read as it is: the top level's
    working copy; every sum and distance of the kernels is accumulated in float64)."""
    dtype = np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64
    return np.ascontiguousarray(X, dtype=dtype)


def mdav_large(X, K: int) -> np.ndarray:
    """MDAV-generic (Algorithm A of *Efficient k-Anonymous Microaggregation … via PCA*, §III-B) with cell size ``K``, by full passes.

    Same specification as :func:`daskmicro.kernels.mdav` — cells of K … 2K−1 records, the
    record P (or Q) always belongs to its own cell, ties broken by row position — but each step is
    a full distance pass, which is the fast way when K is large (macroaggregation).  When fewer
    than 2K records are given they form a single cell (also when fewer than K: the caller decides
    whether that is acceptable).  The records taken stay where they are (each pass skips them)
    until half of those held have gone; the rest are then copied together, so a pass never reads
    more than twice the records left.

    Returns int64 cell labels numbered in order of formation.
    """
    X = as_records(X)
    K = int(K)
    if K < 1:
        raise ValueError(f"K must be ≥ 1, got {K}")
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    rows = np.arange(n)  # the global row of each record of Xr
    Xr, held = X, np.full(n, -1, dtype=np.int8)  # held[i] ≥ 0: Xr's record i is taken
    dist, pos = np.empty(n), np.empty(n, dtype=np.int64)
    r, cell = n, 0
    while r >= 2 * K:
        if 2 * r <= Xr.shape[0]:
            keep = held < 0
            rows, Xr = rows[keep], np.ascontiguousarray(Xr[keep])
            held = np.full(r, -1, dtype=np.int8)
        c = dd_combine([dd_colsum_where(Xr, held)]) / r
        p = _farthest_held(Xr, held, c)
        q = _take_nearest(Xr, held, p, K, dist, pos)
        labels[rows[pos[:K]]] = cell
        cell, r = cell + 1, r - K
        if r < 2 * K:  # 2K ≤ r < 3K before this cell: the rest form the last cell
            break
        _take_nearest(Xr, held, q, K, dist, pos)
        labels[rows[pos[:K]]] = cell
        cell, r = cell + 1, r - K
    if r:
        labels[rows[held < 0]] = cell
    return labels


@nb.njit(cache=True, nogil=True)
def _farthest_held(X, held, c):
    # the lowest free row (held < 0) of those furthest from c
    best, brow = -1.0, -1
    for i in range(X.shape[0]):
        if held[i] >= 0:
            continue
        s = dist2(X[i], c)
        if s > best:
            best, brow = s, i
    return brow


@nb.njit(cache=True, nogil=True)
def _take_nearest(X, held, centre, K, dist, pos):
    """Take the ``centre`` record and its ``K``−1 nearest free records (ties: lowest rows: every
    record nearer than the K-th distance, then the lowest rows at it); their rows in ``pos[:K]``.  Returns the lowest free row of
    those left furthest from the centre (−1 if none is left)."""
    r = 0
    for i in range(X.shape[0]):
        if held[i] >= 0:
            continue
        dist[r] = -1.0 if i == centre else dist2(X[i], X[centre])
        pos[r] = i
        r += 1
    d = dist[:r]
    taken = np.zeros(r, dtype=np.bool_)
    if K >= r:
        taken[:] = True
    else:
        t = np.partition(d.copy(), K - 1)[K - 1]
        need = K
        for a in range(r):
            if d[a] < t:
                taken[a] = True
                need -= 1
        for a in range(r):
            if need == 0:
                break
            if d[a] == t:
                taken[a] = True
                need -= 1
    best, brow, t_ = -1.0, -1, 0
    for a in range(r):
        if taken[a]:
            held[pos[a]] = 1
            pos[t_] = pos[a]  # (a ≥ t_: the taken rows packed to the front, in row order)
            t_ += 1
        elif d[a] > best:
            best, brow = d[a], pos[a]
    return brow


def nested_mdav(X, sizes, cut=None) -> list[np.ndarray]:
    """Nested macroaggregation: MDAV at ``sizes[0]``, then at ``sizes[1]`` inside each cell, …

    Returns one label array per level; level ``l`` labels are global (cells of a parent are
    numbered consecutively, parents in order), so each level refines the previous one.  A parent
    with fewer than 2·size records at the next level stays one cell there.  ``cut(X_parent,
    size) -> labels`` replaces MDAV (:func:`mdav_large`) as the way a parent is cut.
    """
    cut = cut or mdav_large
    X = as_records(X)
    n = X.shape[0]
    parent = np.zeros(n, dtype=np.int64)
    out = []
    for size in sizes:
        size = int(size)
        child = np.empty(n, dtype=np.int64)
        order = np.argsort(parent, kind="stable")
        bounds = np.flatnonzero(np.diff(parent[order])) + 1
        offset = 0
        for idx in np.split(order, bounds):
            if idx.size == 0:
                continue
            if idx.size >= 2 * size:
                # (one parent holds every record, in row order: cut X itself, no copy)
                sub = np.asarray(cut(X if idx.size == n else X[idx], size), dtype=np.int64)
            else:
                sub = np.zeros(idx.size, np.int64)
            child[idx] = sub + offset
            offset += int(sub.max()) + 1
        out.append(child)
        parent = child
    return out


def cell_stats(X: np.ndarray, labels: np.ndarray, n_cells: int | None = None):
    """Per-cell size, coordinate sums and SSE (sum of squared distances to the cell centroid).

    Every sum runs over the rows in row order (column by column for the SSE), so each figure is
    the one ``np.bincount`` with weights gives, bit for bit."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if n_cells is None:
        n_cells = int(labels.max()) + 1 if labels.size else 0
    if labels.size and (labels.min() < 0 or labels.max() >= n_cells):
        raise ValueError(f"cell labels must lie in 0 … {n_cells - 1}")
    size, sums, sse = np.zeros(n_cells, dtype=np.int64), np.zeros((n_cells, X.shape[1])), np.zeros(n_cells)
    _cell_stats(X, labels, size, sums, sse)
    return size, sums, sse


@nb.njit(cache=True, nogil=True)
def _cell_stats(X, labels, size, sums, sse):
    n, m = X.shape
    for i in range(n):
        c = labels[i]
        size[c] += 1
        for j in range(m):
            sums[c, j] += X[i, j]
    cen = np.empty_like(sums)
    for c in range(sums.shape[0]):
        for j in range(m):
            cen[c, j] = sums[c, j] / max(size[c], 1)
    dev = np.zeros_like(sums)  # per cell and column: Σ (x − centroid)², rows in order
    for i in range(n):
        c = labels[i]
        for j in range(m):
            t = X[i, j] - cen[c, j]
            dev[c, j] += t * t
    for c in range(sums.shape[0]):
        s = 0.0
        for j in range(m):
            s += dev[c, j]
        sse[c] = s


@nb.njit(cache=True, nogil=True)
def _dd_colsum(X, skip, hi, lo):
    # one pass over the rows (row-major), a compensated sum per column; rows with skip[i] ≥ 0 are
    # left out (pass an array of −1 to sum every row)
    n, m = X.shape
    for i in range(n):
        if skip[i] >= 0:
            continue
        for j in range(m):
            x = X[i, j]
            s = hi[j]
            t = s + x
            # TwoSum: exact error of the addition, whatever the magnitudes
            bp = t - s
            lo[j] += (s - (t - bp)) + (x - bp)
            hi[j] = t
    return hi, lo


def dd_colsum(X: np.ndarray) -> np.ndarray:
    """Column sums as (hi, lo) float pairs, accurate to ≈ 2⁻¹⁰⁰ relative (compensated summation).

    Sums of chunks combined with :func:`dd_combine` round to the same float64 whatever the
    chunking, except when the exact sum lies within ~1e-30 (relative) of a rounding boundary —
    which is what makes global z-scoring and distributed centroids chunking-independent.
    """
    return dd_colsum_where(X, None)


def dd_colsum_where(X: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    """:func:`dd_colsum` of the rows of ``X`` whose label is negative (all rows when ``labels`` is
    None), without copying them: the same sums, bit for bit, as ``dd_colsum(X[labels < 0])``."""
    X = _float_records(X)
    n, m = X.shape
    skip = np.full(n, -1, dtype=np.int8) if labels is None else np.ascontiguousarray(labels)
    hi, lo = _dd_colsum(X, skip, np.zeros(m), np.zeros(m))
    return np.stack([hi, lo])


def dd_combine(parts) -> np.ndarray:
    """Correctly rounded float64 column sums of a list of :func:`dd_colsum` results."""
    import math

    parts = [np.asarray(p, dtype=np.float64) for p in parts]
    if not parts:
        raise ValueError("nothing to combine")
    m = parts[0].shape[1]
    return np.array([math.fsum(v for p in parts for v in p[:, j]) for j in range(m)])
