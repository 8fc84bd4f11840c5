"""A shrinking spatial index for exact MDAV: a k-d tree whose leaves are SIMD-friendly blocks.

MDAV needs two queries over the records not yet assigned, again and again: the record
furthest from a point, and the records nearest a point.  This index answers both exactly by
branch-and-bound while records are deleted:

* the rows are split at medians along the widest coordinate into a balanced binary tree; each
  leaf is a block of at most ``leaf_size`` records stored column-major (one SIMD loop per block);
* every node keeps a bounding box and a bounding ball of its live records; the box gives the
  lower bounds of nearest searches, the ball the upper bounds of furthest searches (a box's
  corners overshoot in many dimensions; measured: box+ball bounds cost more than they prune);
* a deletion swaps the record out of its block and decrements live counts up to the root; a
  node refits its box and ball once a quarter of its records have gone, so bounds follow the
  shrinking set.

Everything is float64 and every bound is conservative (with a 1e-12 relative slack against
rounding), so the searches return exactly what a full scan would: ties are broken by row.

The index is a tuple of arrays (numba-friendly) built by :func:`build`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_SAFE_LO = 1.0 - 1e-12
_SAFE_HI = 1.0 + 1e-12

# Tree tuple layout (see build):
#   Yb, bidx, cnt, blk, slot,                         blocks and row maps
#   left, right, parent, leaf, ncnt, nfit,            nodes
#   lo, hi, cen, rad,                                 node bounds
#   acc, stack_n, stack_b, heap_d, heap_r             scratch
#   leaf_node                                         block id → its leaf node


@njit(cache=True, nogil=True)
def build(X, leaf_size, need):
    """Build the index over all rows of X; ``need`` sizes the nearest-search heap."""
    return build_rows(X, np.arange(X.shape[0]), leaf_size, need)


@njit(cache=True, nogil=True)
def build_rows(X, rows, leaf_size, need):
    """Build the index over the rows ``rows`` of X (ascending); the other rows count as deleted.

    MDAV rebuilds its index over the remaining records each time a quarter of them have gone: blocks
    stay full and the tree shallow, so a search visits fewer, fuller leaves.
    """
    m = X.shape[1]
    n_all = X.shape[0]
    n = rows.shape[0]
    perm = rows.copy()
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
        dim = 0
        wide = -1.0
        for d in range(m):
            lo = X[perm[a], d]
            hi = lo
            for i in range(a + 1, b):
                v = X[perm[i], d]
                if v < lo:
                    lo = v
                elif v > hi:
                    hi = v
            if hi - lo > wide:
                wide = hi - lo
                dim = d
        h = a + (b - a) // 2
        _quickselect(X, perm, a, b, h, dim)
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

    B = 1
    for t in range(nleaf):
        node = leaf_nodes[t]
        B = max(B, nb_[node] - na[node])
    Yb = np.empty((nleaf, m, B))
    bidx = np.empty((nleaf, B), np.int64)
    cnt = np.empty(nleaf, np.int64)
    blk = np.full(n_all, -1, np.int64)
    slot = np.full(n_all, -1, np.int64)
    ncnt = np.zeros(nnodes, np.int64)
    nfit = np.zeros(nnodes, np.int64)
    lo = np.empty((nnodes, m))
    hi = np.empty((nnodes, m))
    cen = np.empty((nnodes, m))
    rad = np.empty(nnodes)
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
                Yb[t, d, i] = X[row, d]
        ncnt[node] = c
    T = (Yb, bidx, cnt, blk, slot, left[:nnodes], right[:nnodes], parent[:nnodes], leaf[:nnodes],
         ncnt, nfit, lo, hi, cen, rad,
         np.empty(B), np.empty(256, np.int64), np.empty(256), np.empty(max(need, 1)),
         np.empty(max(need, 1), np.int64), leaf_nodes[:nleaf].copy())
    # children were created after their parents: fit in reverse creation order
    for node in range(nnodes - 1, -1, -1):
        if leaf[node] < 0:
            ncnt[node] = ncnt[left[node]] + ncnt[right[node]]
        _refit(T, node)
    return T


@njit(cache=True, nogil=True)
def _quickselect(X, perm, a, b, h, dim):
    """Reorder perm[a:b] so that perm[h] holds the median along dim (Hoare partitioning)."""
    lft = a
    rgt = b - 1
    while lft < rgt:
        pivot = X[perm[(lft + rgt) // 2], dim]
        i = lft
        j = rgt
        while i <= j:
            while X[perm[i], dim] < pivot:
                i += 1
            while X[perm[j], dim] > pivot:
                j -= 1
            if i <= j:
                perm[i], perm[j] = perm[j], perm[i]
                i += 1
                j -= 1
        if h <= j:
            rgt = j
        elif h >= i:
            lft = i
        else:
            break


@njit(cache=True, nogil=True)
def _refit(T, node):
    """Recompute a node's box and ball over its live records (leaf) or live children."""
    Yb, bidx, cnt, blk, slot, left, right, parent, leaf = T[:9]
    ncnt, nfit, lo, hi, cen, rad = T[9:15]
    m = lo.shape[1]
    j = leaf[node]
    if j >= 0:
        c = cnt[j]
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
            lo[node, d] = a
            hi[node, d] = b
            cen[node, d] = s / c
        r2 = 0.0
        for i in range(c):
            t2 = 0.0
            for d in range(m):
                u = Yb[j, d, i] - cen[node, d]
                t2 += u * u
            r2 = max(r2, t2)
        rad[node] = np.sqrt(r2) * _SAFE_HI
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
            r = max(r, np.sqrt(t2) * _SAFE_HI + rad[ch])
        rad[node] = r * _SAFE_HI
    nfit[node] = ncnt[node]


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


@njit(cache=True, inline="always")
def block_dist(Yb, j, c, q, acc):
    """Squared distances from q to the c live records of block j, into acc[:c] (one SIMD loop)."""
    for i in range(c):
        acc[i] = 0.0
    for d in range(q.shape[0]):
        qd = q[d]
        row = Yb[j, d]
        for i in range(c):
            t = row[i] - qd
            acc[i] += t * t


@njit(cache=True, inline="always")
def _lower(T, node, q):
    """Lower bound on ‖x − q‖² over the node's box (tight for the nearby queries of kNN)."""
    lo, hi = T[11], T[12]
    s = 0.0
    for d in range(q.shape[0]):
        qd = q[d]
        t = max(max(lo[node, d] - qd, qd - hi[node, d]), 0.0)
        s += t * t
    return s * _SAFE_LO


@njit(cache=True, inline="always")
def _upper(T, node, q):
    """Upper bound on ‖x − q‖² over the node's ball (a box's corners overshoot for far queries)."""
    cen, rad = T[13], T[14]
    u = 0.0
    for d in range(q.shape[0]):
        v = cen[node, d] - q[d]
        u += v * v
    b = np.sqrt(u) + rad[node]
    return b * b * _SAFE_HI


@njit(cache=True, inline="always")
def _worse(d1, r1, d2, r2):
    """(d1, r1) ranks after (d2, r2) in nearest-first order: larger distance, then larger row."""
    return d1 > d2 or (d1 == d2 and r1 > r2)


@njit(cache=True, nogil=True)
def _heap_offer(hd, hr, size, need, d, row):
    """Keep the ``need`` best (distance, row) pairs in a max-heap (worst on top)."""
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


@njit(cache=True, nogil=True)
def _offer_block(T, j, q, skip_row, need, size):
    Yb, bidx, cnt = T[:3]
    acc = T[15]
    hd, hr = T[18], T[19]
    c = cnt[j]
    block_dist(Yb, j, c, q, acc)
    for i in range(c):
        row = bidx[j, i]
        if row != skip_row and (size < need or acc[i] <= hd[0]):
            size = _heap_offer(hd, hr, size, need, acc[i], row)
    return size


@njit(cache=True, nogil=True)
def nearest(T, q, skip_row, need, out):
    """Rows of the ``need`` live records nearest q, by (distance, row), ``skip_row`` excluded.

    The block holding ``skip_row`` (the query record itself, when it is one) is searched first
    so the pruning threshold is tight from the start.  Written to ``out[:need]`` in order.
    """
    blk, left, right, leaf, ncnt = T[3], T[5], T[6], T[8], T[9]
    stack_n, stack_b = T[16], T[17]
    hd, hr = T[18], T[19]
    size = 0
    own = blk[skip_row] if skip_row >= 0 else -1
    if own >= 0:
        size = _offer_block(T, own, q, skip_row, need, size)
    stack_n[0] = 0
    stack_b[0] = _lower(T, 0, q)
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack_n[sp]
        if size == need and stack_b[sp] > hd[0]:
            continue
        j = leaf[node]
        if j >= 0:
            if j != own:
                size = _offer_block(T, j, q, skip_row, need, size)
            continue
        lc = left[node]
        rc = right[node]
        bl = _lower(T, lc, q) if ncnt[lc] > 0 else np.inf
        br = _lower(T, rc, q) if ncnt[rc] > 0 else np.inf
        # push the farther child first so the nearer one is searched first
        if bl <= br:
            if br < np.inf:
                stack_n[sp] = rc
                stack_b[sp] = br
                sp += 1
            if bl < np.inf:
                stack_n[sp] = lc
                stack_b[sp] = bl
                sp += 1
        else:
            if bl < np.inf:
                stack_n[sp] = lc
                stack_b[sp] = bl
                sp += 1
            stack_n[sp] = rc
            stack_b[sp] = br
            sp += 1
    rows = hr[:size].copy()
    dist = hd[:size].copy()
    o = np.argsort(rows)
    rows = rows[o]
    dist = dist[o]
    o = np.argsort(dist, kind="mergesort")
    for i in range(size):
        out[i] = rows[o[i]]
    return size


@njit(cache=True, nogil=True)
def farthest(T, q):
    """Row of the live record furthest from q (lowest row on ties)."""
    Yb, bidx, cnt = T[:3]
    left, right, leaf, ncnt = T[5], T[6], T[8], T[9]
    acc, stack_n, stack_b = T[15], T[16], T[17]
    best = -1.0
    brow = -1
    stack_n[0] = 0
    stack_b[0] = _upper(T, 0, q)
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack_n[sp]
        if stack_b[sp] < best:
            continue
        j = leaf[node]
        if j >= 0:
            c = cnt[j]
            block_dist(Yb, j, c, q, acc)
            for i in range(c):
                d = acc[i]
                if d >= best:
                    row = bidx[j, i]
                    if d > best or row < brow:
                        best = d
                        brow = row
            continue
        lc = left[node]
        rc = right[node]
        bl = _upper(T, lc, q) if ncnt[lc] > 0 else -1.0
        br = _upper(T, rc, q) if ncnt[rc] > 0 else -1.0
        # push the nearer child first so the farther one is searched first
        if bl >= br:
            if br >= 0.0:
                stack_n[sp] = rc
                stack_b[sp] = br
                sp += 1
            stack_n[sp] = lc
            stack_b[sp] = bl
            sp += 1
        else:
            if bl >= 0.0:
                stack_n[sp] = lc
                stack_b[sp] = bl
                sp += 1
            stack_n[sp] = rc
            stack_b[sp] = br
            sp += 1
    return brow
