"""A shrinking spatial index for exact MDAV: a k-d tree whose leaves are SIMD-friendly blocks.

MDAV needs two queries over the records not yet assigned, again and again: the record
furthest from a point, and the records nearest a point.  This index answers both exactly by
branch-and-bound (:mod:`._search`) while records are deleted:

* the records are centred and turned to their principal axes (:func:`_frame`; distances are
  the same in any orthonormal frame, and boxes along the principal axes of correlated data are
  tighter), then split at medians along the widest axis into a balanced binary tree; each leaf
  is a block of at most ``leaf_size`` records stored column-major in float32 (one SIMD loop per
  block, half the memory traffic of float64);
* every node keeps a bounding box and a bounding ball of its live records (float64); the box
  gives the lower bounds of nearest searches, the ball the upper bounds of furthest searches;
* a deletion swaps the record out of its block and decrements live counts up to the root; a
  node refits its box and ball once a quarter of its records have gone, so bounds follow the
  shrinking set.

Exactness: the float32 distances of a block only *discard* records, and only those that a
rigorous bound on float32 rounding (:mod:`._float32`) proves further than the current k-th
neighbour (or nearer than the current furthest record); every record that may matter is
measured again in float64 from the caller's matrix, in the same order of operations as a plain
scan.  Node bounds are float64, compared with thresholds widened by the rotation's error bound.
So the searches return exactly what a float64 full scan would, ties broken by row.

The index is a tuple of arrays (numba-friendly) built by :func:`build`.  Hot loops take the
arrays they need, never the tuple (unpacking it in a helper called per block cost ~40 % of a
search: reference counting of every array touched).  numba's on-disk cache does not track
imports: after editing this module, ``_float32`` or ``_search``, touch ``mdav.py`` (whose
compiled loop inlines their functions) or its cached build keeps the old code.
"""

from __future__ import annotations

import numpy as np
from numba import float32, njit

SAFE_LO = 1.0 - 1e-12
SAFE_HI = 1.0 + 1e-12

# Tree tuple layout (see build):
#   Yb, bidx, cnt, blk, slot,                         blocks and row maps
#   left, right, parent, leaf, ncnt, nfit,            nodes
#   lo, hi, cen, rad,                                 node bounds
#   acc, stack_n, stack_b, heap_d, heap_r             scratch (acc is float32)
#   leaf_node                                         block id → its leaf node
#   X, shift, scal, q32, V, Yr, qr                    the caller's float64 records; the frame
#                                                     (z = (x − shift)·V, see _frame; scal =
#                                                     [scale, big·scale, big]); query scratch in
#                                                     float32 and float64; Yr[row] = z of a row

#: dtype and ndim of each array of the tree tuple, in order ("s": float32, "f": float64, "i": int64)
TREE_LAYOUT = ("s3 i2 i1 i1 i1 i1 i1 i1 i1 i1 i1 f2 f2 f2 f1 s1 i1 f1 f1 i1 i1 f2 f1 f1 s1 f2 f2 f1").split()
_DTYPES = {"s": np.float32, "f": np.float64, "i": np.int64}


def tree_like(m: int = 1):
    """Empty arrays typed like :func:`build`'s tuple: lets a kernel that takes the index be compiled ahead
    (:mod:`daskmicro.runtime.warmup`) without building one. ``tests/test_compile_units.py`` checks it
    against a real index."""
    return tuple(np.zeros((0,) * (int(code[1]) - 1) + (m,), _DTYPES[code[0]]) for code in TREE_LAYOUT)


def build(X, leaf_size, need):
    """Build the index over all rows of X; ``need`` sizes the nearest-search heap.  (A Python
    function: compiled callers call :func:`build_rows`, one compiled entry less to build.)"""
    return build_rows(X, np.arange(X.shape[0]), np.int64(leaf_size), np.int64(need))


@njit(cache=True, nogil=True)
def _widest(Z, a, b, blo, bhi):
    """The widest coordinate of rows a:b of Z, judged on at most ~1024 evenly spaced records (the
    split only shapes the tree; every bound is refitted on the records themselves)."""
    m = Z.shape[1]
    step = max(1, (b - a) // 1024)
    for d in range(m):
        blo[d] = Z[a, d]
        bhi[d] = Z[a, d]
    for i in range(a, b, step):
        for d in range(m):
            v = Z[i, d]
            blo[d] = min(blo[d], v)
            bhi[d] = max(bhi[d], v)
    dim = 0
    wide = -1.0
    for d in range(m):
        if bhi[d] - blo[d] > wide:
            wide = bhi[d] - blo[d]
            dim = d
    return dim


@njit(cache=True, nogil=True)
def _split(Z, perm, tmp, tmp_id, a, b, h, dim, med):
    """Stable split of rows a:b of Z (and of ``perm``) around the median ``med`` of coordinate
    ``dim``, reading Z in order: the h − a smallest go to a:h (ties at the median by position),
    written as two sequential streams."""
    m = Z.shape[1]
    below = 0
    for i in range(a, b):
        if Z[i, dim] < med:
            below += 1
    ties = h - a - below
    pl = a
    pr = h
    for i in range(a, b):
        v = Z[i, dim]
        if v < med or (v == med and ties > 0):
            if v == med:
                ties -= 1
            dst = pl
            pl += 1
        else:
            dst = pr
            pr += 1
        tmp_id[dst] = perm[i]
        for d in range(m):
            tmp[dst, d] = Z[i, d]
    for i in range(a, b):
        perm[i] = tmp_id[i]
        for d in range(m):
            Z[i, d] = tmp[i, d]


@njit(cache=True, nogil=True)
def _blocks(Z, perm, scal, leaf_nodes, na, nb_, n_all, nnodes):
    """The leaves' records as float32 blocks: (B, Yb, Yr, bidx, cnt, blk, slot, ncnt) of the index
    (see :func:`build_rows`); ``ncnt`` holds the leaves' counts, inner nodes 0."""
    m = Z.shape[1]
    nleaf = leaf_nodes.shape[0]
    B = 1
    for t in range(nleaf):
        node = leaf_nodes[t]
        B = max(B, nb_[node] - na[node])
    B = (B + 31) // 32 * 32  # whole SIMD strides: see block_dist
    Yb = np.zeros((nleaf, m, B), np.float32)  # zeros: the padding never holds subnormals
    Yr = np.empty((n_all, m))  # each record in the frame, by row (for refits)
    bidx = np.empty((nleaf, B), np.int64)
    cnt = np.empty(nleaf, np.int64)
    blk = np.full(n_all, -1, np.int64)
    slot = np.full(n_all, -1, np.int64)
    ncnt = np.zeros(nnodes, np.int64)
    for t in range(nleaf):
        node = leaf_nodes[t]
        a = na[node]
        c = nb_[node] - a
        cnt[t] = c
        for i in range(c):
            row = perm[a + i]
            bidx[t, i] = row
            blk[row] = t
            slot[row] = i
            for d in range(m):
                Yb[t, d, i] = float32(Z[a + i, d] * scal[0])
                Yr[row, d] = Z[a + i, d]
        ncnt[node] = c
    return B, Yb, Yr, bidx, cnt, blk, slot, ncnt


@njit(cache=True, nogil=True)
def build_rows(X, rows, leaf_size, need):
    """Build the index over the rows ``rows`` of X (ascending); the other rows count as deleted.

    MDAV rebuilds its index over the remaining records each time half of them have gone: blocks
    stay full and the tree shallow, so a search visits fewer, fuller leaves.
    """
    m = X.shape[1]
    n_all = X.shape[0]
    n = rows.shape[0]
    # the records are copied, centred and turned to their principal axes (Z), and moved
    # physically as the tree splits them, so every pass below reads contiguous memory
    perm = rows.copy()
    Z, shift, V, scal = _frame(X, rows)
    key = np.empty(n)
    tmp = np.empty((n, m))
    tmp_id = np.empty(n, np.int64)
    blo = np.empty(m)
    bhi = np.empty(m)
    maxnodes = 2 * (n // max(leaf_size // 2, 1) + 1) + 1
    left = np.full(maxnodes, -1, np.int64)
    right = np.full(maxnodes, -1, np.int64)
    parent = np.full(maxnodes, -1, np.int64)
    leaf = np.full(maxnodes, -1, np.int64)
    na = np.empty(maxnodes, np.int64)
    nb_ = np.empty(maxnodes, np.int64)
    na[0] = 0
    nb_[0] = n
    nnodes = 1
    stack = np.empty(256, np.int64)
    stack[0] = 0
    sp = 1
    leaf_nodes = np.empty(maxnodes, np.int64)
    nleaf = 0
    while sp > 0:
        sp -= 1
        node = stack[sp]
        a = na[node]
        b = nb_[node]
        if b - a <= leaf_size:
            leaf[node] = nleaf
            leaf_nodes[nleaf] = node
            nleaf += 1
            continue
        dim = _widest(Z, a, b, blo, bhi)
        h = a + (b - a) // 2
        for i in range(a, b):
            key[i] = Z[i, dim]
        med = quickselect(key, a, b, h)
        _split(Z, perm, tmp, tmp_id, a, b, h, dim, med)
        lc = nnodes
        rc = nnodes + 1
        nnodes += 2
        na[lc] = a
        nb_[lc] = h
        na[rc] = h
        nb_[rc] = b
        left[node] = lc
        right[node] = rc
        parent[lc] = node
        parent[rc] = node
        stack[sp] = rc  # left child popped first: leaves come out in row order
        stack[sp + 1] = lc
        sp += 2

    B, Yb, Yr, bidx, cnt, blk, slot, ncnt = _blocks(Z, perm, scal, leaf_nodes[:nleaf], na, nb_, n_all, nnodes)
    nfit = np.zeros(nnodes, np.int64)
    lo = np.empty((nnodes, m))
    hi = np.empty((nnodes, m))
    cen = np.empty((nnodes, m))
    rad = np.empty(nnodes)
    T = (Yb, bidx, cnt, blk, slot, left[:nnodes], right[:nnodes], parent[:nnodes], leaf[:nnodes],
         ncnt, nfit, lo, hi, cen, rad,
         np.empty(B, np.float32), np.empty(256, np.int64), np.empty(256), np.empty(max(need, 1)),
         np.empty(max(need, 1), np.int64), leaf_nodes[:nleaf].copy(),
         X, shift, scal, np.empty(m, np.float32), V, Yr, np.empty(m))
    # leaves are fitted from the contiguous copy; then the inner nodes, children before parents
    # (they were created after them)
    at = np.arange(n)
    for t in range(nleaf):
        node = leaf_nodes[t]
        _fit_leaf(Z, at[na[node]:], cnt[t], node, lo, hi, cen, rad)
        nfit[node] = cnt[t]
    for node in range(nnodes - 1, -1, -1):
        if leaf[node] < 0:
            ncnt[node] = ncnt[left[node]] + ncnt[right[node]]
            _refit(T, node)
    return T


@njit(cache=True, nogil=True)
def _frame(X, rows):
    """The index's frame: the records centred on their mean and turned to their principal axes.

    Returns ``Z`` (the records ``rows`` of X in the frame, n × m), ``shift`` (the mean), ``V``
    (orthonormal, m × m: z = (x − shift)·V) and ``scal = [scale, big·scale, big]`` where ``big``
    bounds ‖z‖ and ``scale`` is the power of two that puts it in [0.5, 1) (exact in float64, no
    float32 overflow).  Distances are the same in any orthonormal frame, so the choice only
    shapes the tree: splits and boxes along the principal axes of correlated data are tighter
    (150 000 × 13 Gaussian records: a nearest search crosses ~40 % fewer leaves).  The basis
    comes from at most ~4096 evenly spaced records.  Records too large for float64 arithmetic
    keep the original axes, unshifted.
    """
    m = X.shape[1]
    n = rows.shape[0]
    shift = np.zeros(m)
    for i in range(n):
        for d in range(m):
            shift[d] += X[rows[i], d]
    shift /= n
    step = max(1, n // 4096)
    k = (n + step - 1) // step
    S = np.empty((k, m))
    for t in range(k):
        for d in range(m):
            S[t, d] = X[rows[t * step], d] - shift[d]
    V = np.eye(m)
    ok = np.isfinite(shift).all() and np.isfinite(S).all()
    if ok:
        C = S.T @ S
        ok = np.isfinite(C).all()
        if ok:
            V = np.ascontiguousarray(np.linalg.eigh(C)[1][:, ::-1])
    Z = np.empty((n, m))
    if ok:
        D = np.empty((n, m))
        for i in range(n):
            for d in range(m):
                D[i, d] = X[rows[i], d] - shift[d]
        Z = D @ V
        ok = np.isfinite(Z).all()
    if not ok:  # absurd magnitudes: the original axes, unshifted (every value finite)
        V = np.eye(m)
        shift[:] = 0.0
        for i in range(n):
            for d in range(m):
                Z[i, d] = X[rows[i], d]
    big = 0.0
    for i in range(n):
        s = 0.0
        for d in range(m):
            s += Z[i, d] * Z[i, d]
        big = max(big, s)
    scale, big = pow2_scale(np.sqrt(big) * SAFE_HI)
    return Z, shift, V, np.array([scale, big * scale, big])


@njit(cache=True, inline="always")
def pow2_scale(big):
    """``(scale, big)``: the power of two that puts a norm bound ``big`` in [0.5, 1) (exact in
    float64; no float32 overflow), or 1 with ``big = ∞`` when the bound is not finite (the
    float32 pass then discards nothing)."""
    if not np.isfinite(big):
        return 1.0, np.inf
    if big > 0.0:
        return 2.0 ** (-np.ceil(np.log2(big))), big
    return 1.0, big


@njit(cache=True, nogil=True)
def quickselect(key, a, b, h):
    """The (h − a)-th smallest of key[a:b] (key is reordered; Hoare partitioning)."""
    lft = a
    rgt = b - 1
    while lft < rgt:
        pivot = key[(lft + rgt) // 2]
        i = lft
        j = rgt
        while i <= j:
            while key[i] < pivot:
                i += 1
            while key[j] > pivot:
                j -= 1
            if i <= j:
                key[i], key[j] = key[j], key[i]
                i += 1
                j -= 1
        if h <= j:
            rgt = j
        elif h >= i:
            lft = i
        else:
            break
    return key[h]


@njit(cache=True, nogil=True)
def sort_desc(vals, rows):
    """Sort the pairs (vals[i], rows[i]) in place, largest value first, equal values by row.

    A heapsort: one small compiled function instead of numba's ``np.argsort``, whose generic sort
    machinery cost more compile time than the functions calling it; the order is total,
    so the result does not depend on the sort."""
    n = vals.shape[0]
    for start in range(n // 2 - 1, -1, -1):
        _sift_desc(vals, rows, start, n)
    for end in range(n - 1, 0, -1):
        vals[0], vals[end] = vals[end], vals[0]
        rows[0], rows[end] = rows[end], rows[0]
        _sift_desc(vals, rows, 0, end)


@njit(cache=True, inline="always")
def _sift_desc(vals, rows, j, n):
    """Sift pair j down the min-heap (by value, then larger row first) of the first n pairs."""
    while True:
        a = 2 * j + 1
        if a >= n:
            return
        w = a
        if a + 1 < n and (vals[a + 1] < vals[a] or (vals[a + 1] == vals[a] and rows[a + 1] > rows[a])):
            w = a + 1
        if vals[w] < vals[j] or (vals[w] == vals[j] and rows[w] > rows[j]):
            vals[w], vals[j] = vals[j], vals[w]
            rows[w], rows[j] = rows[j], rows[w]
            j = w
        else:
            return


@njit(cache=True, nogil=True)
def _refit(T, node):
    """Recompute a node's box and ball over its live records (leaf) or live children."""
    Yb, bidx, cnt, blk, slot, left, right, parent, leaf = T[:9]
    ncnt, nfit, lo, hi, cen, rad = T[9:15]
    m = lo.shape[1]
    j = leaf[node]
    if j >= 0:
        _fit_leaf(T[26], bidx[j], cnt[j], node, lo, hi, cen, rad)
    else:
        lc = left[node]
        rc = right[node]
        wl = ncnt[lc]
        wr = ncnt[rc]
        first = True
        for ch in (lc, rc):
            if ncnt[ch] == 0:
                continue
            for d in range(m):
                if first or lo[ch, d] < lo[node, d]:
                    lo[node, d] = lo[ch, d]
                if first or hi[ch, d] > hi[node, d]:
                    hi[node, d] = hi[ch, d]
            first = False
        for d in range(m):
            cen[node, d] = (wl * cen[lc, d] + wr * cen[rc, d]) / (wl + wr)
        r = 0.0
        for ch in (lc, rc):
            if ncnt[ch] == 0:
                continue
            t2 = 0.0
            for d in range(m):
                u = cen[node, d] - cen[ch, d]
                t2 += u * u
            r = max(r, np.sqrt(t2) * SAFE_HI + rad[ch])
        rad[node] = r * SAFE_HI
    nfit[node] = ncnt[node]


@njit(cache=True, nogil=True)
def _fit_leaf(V, rows, c, node, lo, hi, cen, rad):
    """Box and ball of the records V[rows[:c]] (c ≥ 1), into the bounds of ``node``."""
    m = V.shape[1]
    for d in range(m):
        v = V[rows[0], d]
        lo[node, d] = v
        hi[node, d] = v
        cen[node, d] = 0.0
    for i in range(c):
        x = V[rows[i]]
        for d in range(m):
            v = x[d]
            cen[node, d] += v
            lo[node, d] = min(lo[node, d], v)
            hi[node, d] = max(hi[node, d], v)
    for d in range(m):
        cen[node, d] /= c
    r2 = 0.0
    for i in range(c):
        x = V[rows[i]]
        t2 = 0.0
        for d in range(m):
            u = x[d] - cen[node, d]
            t2 += u * u
        r2 = max(r2, t2)
    rad[node] = np.sqrt(r2) * SAFE_HI


@njit(cache=True, nogil=True)
def remove(T, row):
    """Delete one record from the index."""
    Yb, bidx, cnt, blk, slot, left, right, parent, leaf = T[:9]
    ncnt, nfit = T[9:11]
    m = Yb.shape[1]
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
    # the leaf node of block j is the one whose leaf id is j: walk up from it
    node = _leaf_node(T, j)
    while node >= 0:
        ncnt[node] -= 1
        if ncnt[node] > 0 and 4 * ncnt[node] <= 3 * nfit[node]:
            _refit(T, node)
        node = parent[node]


@njit(cache=True, inline="always")
def _leaf_node(T, j):
    return T[20][j]


@njit(cache=True, inline="always")
def dist2(x, q):
    s = 0.0
    for d in range(q.shape[0]):
        t = x[d] - q[d]
        s += t * t
    return s
