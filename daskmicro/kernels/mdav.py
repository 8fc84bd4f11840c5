"""Exact MDAV ("MDAV-generic"), compiled with numba.

Implements Algorithm A of Rebollo-Monedero et al., *Efficient k-Anonymous Microaggregation of
Multivariate Numerical Data via PCA* (``001_4020e12e98fa2147.txt`` §III-B), which is the
MDAV-generic of Domingo-Ferrer & Torra (Algorithm 5.1 in their ref. [11]):

    while at least 3k records remain:
        C ← centroid of the remaining records
        P ← remaining record furthest from C
        cell ← P and its k−1 nearest remaining records;          remove it
        Q ← remaining record furthest from P
        cell ← Q and its k−1 nearest remaining records;          remove it
    if at least 2k remain: one more cell around the record furthest from their centroid
    the rest (k … 2k−1 records) form the last cell

so every cell holds between k and 2k−1 records.  Ties are broken by row position: the lowest
row wins an argmax, and among equidistant neighbours the lowest rows are taken first.

How it is fast while staying exact
----------------------------------
Textbook MDAV makes three full distance passes over the remaining records per pair of cells
(≈ 0.75·n²·m/k operations).  This kernel answers the same four queries per iteration — the
record furthest from a point, and the k−1 records nearest a point — with branch-and-bound over
small blocks instead of full passes:

* records are stored in blocks of at most ``_BLOCK`` spatial neighbours (the leaves of a
  median-split k-d tree), column-major inside a block so a block's distances are one SIMD loop;
* every block keeps the bounding box of its remaining records; a box's lower (upper) bound on
  the distance to the query prunes the whole block from a nearest (furthest) search;
* removed records are swapped out of their block, empty blocks are swapped out of the block list,
  and boxes are shrunk once a quarter of a block's records have gone, so the work follows the
  shrinking set.

All arithmetic is float64 and pruning is conservative, so the result is exactly the MDAV of the
specification above — only faster.  Memory is O(n·m): never an n×n matrix.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["mdav", "check_k", "leaf_order"]

_BLOCK = 32
_SAFE_LO = 1.0 - 1e-12  # slack on box bounds against rounding
_SAFE_HI = 1.0 + 1e-12


def check_k(n: int, k) -> int:
    """Validate the anonymity parameter against the number of records; return it as an int."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer ≥ 2, got {k!r}")
    k = int(k)
    if k < 2:
        raise ValueError(f"k must be ≥ 2, got {k}")
    if k > n:
        raise ValueError(f"k = {k} exceeds the number of records n = {n}")
    return k


def as_records(X, name: str = "X") -> np.ndarray:
    """``X`` as a finite, C-contiguous float64 matrix (n × m); 1-D input is one column."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n records × m attributes), got {X.ndim} dimensions")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has no records")
    if X.shape[1] == 0:
        raise ValueError(f"{name} has no columns")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return np.ascontiguousarray(X)


def mdav(X, k) -> np.ndarray:
    """Exact MDAV micropartition of the rows of ``X``.

    Parameters
    ----------
    X : array_like, shape (n, m)
        Records to microaggregate, already in the space where Euclidean distance is meant
        (callers standardise, as with scikit-learn; :func:`daskmicro.anonymize` does it for you).
        Must be finite.
    k : int
        Anonymity parameter, 2 ≤ k ≤ n.

    Returns
    -------
    labels : ndarray of int64, shape (n,)
        Cell id of every record, numbered 0, 1, … in the order MDAV forms the cells.  Every cell
        holds between k and 2k−1 records.
    """
    X = as_records(X)
    k = check_k(X.shape[0], k)
    return _mdav(X, k, *leaf_order(X, _BLOCK))


def leaf_order(X: np.ndarray, leaf_size: int) -> np.ndarray:
    """Leaf boundaries of a median-split k-d tree: returns ``perm`` and ``starts``.

    ``perm`` lists the rows leaf by leaf; leaf ``j`` is ``perm[starts[j]:starts[j+1]]`` and holds at
    most ``leaf_size`` rows.  Each split halves a node along its widest coordinate.
    """
    n = X.shape[0]
    perm = np.arange(n)
    starts = [0]
    stack = [(0, n)]
    leaves = []
    while stack:
        a, b = stack.pop()
        if b - a <= leaf_size:
            leaves.append(a)
            continue
        sub = X[perm[a:b]]
        d = int(np.argmax(sub.max(axis=0) - sub.min(axis=0)))
        h = (b - a) // 2
        part = np.argpartition(sub[:, d], h, kind="introselect")
        perm[a:b] = perm[a:b][part]
        stack.append((a + h, b))
        stack.append((a, a + h))
    starts = np.array(sorted(leaves) + [n], dtype=np.int64)
    return perm, starts


# --------------------------------------------------------------------------- block queries


@njit(cache=True, inline="always")
def _dist(x, q):
    s = 0.0
    for d in range(q.shape[0]):
        t = x[d] - q[d]
        s += t * t
    return s


@njit(cache=True)
def _box_bounds(lo, hi, cen, rad, nlive, q, lower, out, tmp):
    """Per live block, a lower (``lower=True``) or upper bound on ‖x − q‖² over its records.

    Two bounds are combined, each exact for the region it describes: the bounding box (tight
    along the coordinate axes) and the bounding ball about the block mean (tight for far
    queries, where a box's corners overshoot in many dimensions).
    """
    m = lo.shape[0]
    for j in range(nlive):
        out[j] = 0.0
        tmp[j] = 0.0
    for d in range(m):
        qd = q[d]
        ld = lo[d]
        hd = hi[d]
        cd = cen[d]
        if lower:
            for j in range(nlive):
                t = max(max(ld[j] - qd, qd - hd[j]), 0.0)
                out[j] += t * t
                u = cd[j] - qd
                tmp[j] += u * u
        else:
            for j in range(nlive):
                t = max(qd - ld[j], hd[j] - qd)
                out[j] += t * t
                u = cd[j] - qd
                tmp[j] += u * u
    for j in range(nlive):
        dc = np.sqrt(tmp[j])
        if lower:
            b = max(dc - rad[j], 0.0)
            out[j] = max(out[j], b * b)
        else:
            b = dc + rad[j]
            out[j] = min(out[j], b * b)


@njit(cache=True, inline="always")
def _block_dist(Yb, j, c, q, acc):
    for i in range(c):
        acc[i] = 0.0
    for d in range(q.shape[0]):
        qd = q[d]
        row = Yb[j, d]
        for i in range(c):
            t = row[i] - qd
            acc[i] += t * t


@njit(cache=True, inline="always")
def _worse(d1, r1, d2, r2):
    """(d1, r1) ranks after (d2, r2) for nearest-first order: larger distance, then larger row."""
    return d1 > d2 or (d1 == d2 and r1 > r2)


@njit(cache=True)
def _heap_offer(hd, hr, size, need, d, row):
    """Keep the ``need`` best (d, row) pairs in a max-heap (worst on top)."""
    if size < need:
        j = size
        hd[j] = d
        hr[j] = row
        size += 1
        while j > 0:
            p = (j - 1) // 2
            if _worse(hd[j], hr[j], hd[p], hr[p]):
                hd[j], hd[p] = hd[p], hd[j]
                hr[j], hr[p] = hr[p], hr[j]
                j = p
            else:
                break
        return size
    if not _worse(hd[0], hr[0], d, row):
        return size
    hd[0] = d
    hr[0] = row
    j = 0
    while True:
        a = 2 * j + 1
        if a >= need:
            break
        w = a
        if a + 1 < need and _worse(hd[a + 1], hr[a + 1], hd[a], hr[a]):
            w = a + 1
        if _worse(hd[w], hr[w], hd[j], hr[j]):
            hd[w], hd[j] = hd[j], hd[w]
            hr[w], hr[j] = hr[j], hr[w]
            j = w
        else:
            break
    return size


@njit(cache=True)
def _nearest(S, q, qrow, own, need, out):
    """Rows of the ``need`` live records nearest q (by distance, then row), q's own row excluded.

    ``own`` is the block to search first (q's block), so the pruning threshold is tight early.
    """
    Yb, bidx, cnt, lo, hi, cen, rad, nlive, hd, hr, buf, acc2, acc = S
    _box_bounds(lo, hi, cen, rad, nlive[0], q, True, buf, acc2)
    size = 0
    for step in range(nlive[0] + 1):
        j = own if step == 0 else step - 1
        if step > 0 and (j == own or (size == need and buf[j] * _SAFE_LO > hd[0])):
            continue
        c = cnt[j]
        _block_dist(Yb, j, c, q, acc)
        for i in range(c):
            row = bidx[j, i]
            if row != qrow and (size < need or acc[i] <= hd[0]):
                size = _heap_offer(hd, hr, size, need, acc[i], row)
    # sort the winners by (distance, row)
    rows = hr[:size].copy()
    dist = hd[:size].copy()
    o = np.argsort(rows)
    rows = rows[o]
    dist = dist[o]
    o = np.argsort(dist, kind="mergesort")
    for i in range(size):
        out[i] = rows[o[i]]


@njit(cache=True)
def _farthest(S, q):
    """Row of the live record furthest from q (lowest row on ties)."""
    Yb, bidx, cnt, lo, hi, cen, rad, nlive, hd, hr, buf, acc2, acc = S
    nl = nlive[0]
    _box_bounds(lo, hi, cen, rad, nl, q, False, buf, acc2)
    first = 0
    for j in range(nl):
        if buf[j] > buf[first]:
            first = j
    best = -1.0
    brow = -1
    for step in range(nl + 1):
        j = first if step == 0 else step - 1
        if step > 0 and (j == first or buf[j] * _SAFE_HI < best):
            continue
        c = cnt[j]
        _block_dist(Yb, j, c, q, acc)
        for i in range(c):
            d = acc[i]
            if d >= best:
                row = bidx[j, i]
                if d > best or row < brow:
                    best = d
                    brow = row
    return brow


@njit(cache=True)
def _refit_box(Yb, cnt, lo, hi, cen, rad, cntbox, j):
    """Recompute block j's bounding box and bounding ball over its live records."""
    c = cnt[j]
    m = Yb.shape[1]
    for d in range(m):
        row = Yb[j, d]
        a = row[0]
        b = row[0]
        s = 0.0
        for i in range(c):
            v = row[i]
            s += v
            if v < a:
                a = v
            if v > b:
                b = v
        lo[d, j] = a
        hi[d, j] = b
        cen[d, j] = s / c
    r2 = 0.0
    for i in range(c):
        t2 = 0.0
        for d in range(m):
            u = Yb[j, d, i] - cen[d, j]
            t2 += u * u
        r2 = max(r2, t2)
    rad[j] = np.sqrt(r2) * (1.0 + 1e-12)
    cntbox[j] = c


@njit(cache=True)
def _remove(S, T, rows, nrows, X, mu, Sc):
    """Take ``rows[:nrows]`` out of their blocks and out of the centred running sum."""
    Yb, bidx, cnt, lo, hi, cen, rad, nlive, hd, hr, buf, acc2, acc = S
    blk, slot, cntbox = T
    m = Yb.shape[1]
    for t in range(nrows):
        row = rows[t]
        for d in range(m):
            Sc[d] -= X[row, d] - mu[d]
        j = blk[row]
        s = slot[row]
        last = cnt[j] - 1
        if s != last:
            moved = bidx[j, last]
            for d in range(m):
                Yb[j, d, s] = Yb[j, d, last]
            bidx[j, s] = moved
            slot[moved] = s
        cnt[j] = last
        blk[row] = -1
        if last == 0:
            # the block is empty: move the last live block into its place
            z = nlive[0] - 1
            if j != z:
                c = cnt[z]
                for d in range(m):
                    for i in range(c):
                        Yb[j, d, i] = Yb[z, d, i]
                    lo[d, j] = lo[d, z]
                    hi[d, j] = hi[d, z]
                    cen[d, j] = cen[d, z]
                rad[j] = rad[z]
                for i in range(c):
                    bidx[j, i] = bidx[z, i]
                    blk[bidx[j, i]] = j
                cnt[j] = c
                cntbox[j] = cntbox[z]
                cnt[z] = 0
            nlive[0] = z
        elif 4 * last <= 3 * cntbox[j]:
            _refit_box(Yb, cnt, lo, hi, cen, rad, cntbox, j)


@njit(cache=True)
def _mdav(X, k, perm, starts):
    n, m = X.shape
    nb = starts.shape[0] - 1
    B = 1
    for j in range(nb):
        B = max(B, starts[j + 1] - starts[j])

    Yb = np.empty((nb, m, B))
    bidx = np.empty((nb, B), np.int64)
    cnt = np.empty(nb, np.int64)
    blk = np.empty(n, np.int64)
    slot = np.empty(n, np.int64)
    lo = np.empty((m, nb))
    hi = np.empty((m, nb))
    cen = np.empty((m, nb))
    rad = np.empty(nb)
    cntbox = np.empty(nb, np.int64)
    for j in range(nb):
        c = starts[j + 1] - starts[j]
        cnt[j] = c
        for i in range(c):
            row = perm[starts[j] + i]
            bidx[j, i] = row
            blk[row] = j
            slot[row] = i
            for d in range(m):
                Yb[j, d, i] = X[row, d]
        _refit_box(Yb, cnt, lo, hi, cen, rad, cntbox, j)
    nlive = np.array([nb])

    mu = np.zeros(m)
    for i in range(n):
        for d in range(m):
            mu[d] += X[i, d]
    mu /= n
    Sc = np.zeros(m)  # Σ (x − μ) over the remaining records
    for i in range(n):
        for d in range(m):
            Sc[d] += X[i, d] - mu[d]

    need = max(k - 1, 1)
    S = (Yb, bidx, cnt, lo, hi, cen, rad, nlive, np.empty(need), np.empty(need, np.int64), np.empty(nb), np.empty(nb), np.empty(B))
    T = (blk, slot, cntbox)
    labels = np.full(n, -1, np.int64)
    group = np.empty(k, np.int64)
    C = np.empty(m)

    r = n
    cell = 0
    while r >= 2 * k:
        for d in range(m):
            C[d] = mu[d] + Sc[d] / r
        p = _farthest(S, C)
        group[0] = p
        _nearest(S, X[p], p, blk[p], k - 1, group[1:])
        for j in range(k):
            labels[group[j]] = cell
        cell += 1
        _remove(S, T, group, k, X, mu, Sc)
        r -= k
        if r < 2 * k:
            break  # 2k ≤ r_before < 3k: the rest form the last cell

        q = _farthest(S, X[p])
        group[0] = q
        _nearest(S, X[q], q, blk[q], k - 1, group[1:])
        for j in range(k):
            labels[group[j]] = cell
        cell += 1
        _remove(S, T, group, k, X, mu, Sc)
        r -= k

    if r > 0:
        for i in range(n):
            if labels[i] < 0:
                labels[i] = cell
    return labels
