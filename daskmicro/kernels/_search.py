"""Exact nearest and furthest searches over the MDAV index (:mod:`._blocktree`).

Depth-first branch-and-bound: box lower bounds for the k nearest, ball upper bounds for the
furthest, thresholds widened by the frame's error radius; blocks are read in float32
(:mod:`._float32`) and every record that may matter is measured again in float64, in the same
order of operations as a plain scan, so the result is exactly a full scan's, ties by row.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._blocktree import SAFE_HI, SAFE_LO, dist2
from ._float32 import (
    as_bits,
    far_node_cut,
    max_bits,
    min_bits,
    near_node_cut,
    block_dist,
    far_cut,
    near_cut,
    query,
)


@njit(cache=True, inline="always")
def _lower(lo, hi, node, q):
    """Lower bound on ‖x − q‖² over the node's box (tight for the nearby queries of kNN)."""
    s = 0.0
    for d in range(q.shape[0]):
        qd = q[d]
        t = max(max(lo[node, d] - qd, qd - hi[node, d]), 0.0)
        s += t * t
    return s * SAFE_LO


@njit(cache=True, inline="always")
def _upper(cen, rad, node, q):
    """Upper bound on ‖x − q‖² over the node's ball (a box's corners overshoot for far queries)."""
    u = 0.0
    for d in range(q.shape[0]):
        v = cen[node, d] - q[d]
        u += v * v
    b = np.sqrt(u) + rad[node]
    return b * b * SAFE_HI


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
    _sift_worst(hd, hr, 0, need)
    return size


@njit(cache=True, inline="always")
def _sift_worst(hd, hr, j, n):
    """Sift pair j down the max-heap (worst on top) of the first n pairs."""
    while True:
        a = 2 * j + 1
        if a >= n:
            return
        w = a
        if a + 1 < n and _worse(hd[a + 1], hr[a + 1], hd[a], hr[a]):
            w = a + 1
        if _worse(hd[w], hr[w], hd[j], hr[j]):
            hd[w], hd[j] = hd[j], hd[w]
            hr[w], hr[j] = hr[j], hr[w]
            j = w
        else:
            return


@njit(cache=True, inline="always")
def _scan_near(Yb, bidx, cnt, X, acc, hd, hr, j, q, q32, A, scale, skip_row, need, size):
    """Offer the live records of block j to the nearest-search heap; return the heap size.

    (Helpers take arrays, not the index tuple: see :mod:`._blocktree`.)"""
    c = cnt[j]
    m = q.shape[0]
    block_dist(Yb, j, c, q32, acc)
    cut = near_cut(m, scale, hd[0] if size == need else np.inf, A)
    if cut < np.inf and min_bits(acc, c) > as_bits(cut):
        return size  # no record of the block can enter (the common case)
    for i in range(c):
        if not acc[i] > cut:  # (NaN-safe: keeps the record)
            row = bidx[j, i]
            if row != skip_row:
                d = dist2(X[row], q)
                if size < need or d <= hd[0]:
                    size = _heap_offer(hd, hr, size, need, d, row)
                    if size == need:
                        cut = near_cut(m, scale, hd[0], A)
    return size


@njit(cache=True, nogil=True)
def nearest(T, q, skip_row, need, out):
    """Rows of the ``need`` live records nearest q, by (distance, row), ``skip_row`` excluded.

    The block holding ``skip_row`` (the query record itself, when it is one) is searched first
    so the pruning threshold is tight from the start.  Written to ``out[:need]`` in order.
    """
    Yb, bidx, cnt, blk = T[0], T[1], T[2], T[3]
    left, right, leaf, ncnt = T[5], T[6], T[8], T[9]
    lo, hi = T[11], T[12]
    acc, stack_n, stack_b, hd, hr = T[15], T[16], T[17], T[18], T[19]
    X, q32, qr = T[21], T[24], T[27]
    scale = T[23][0]
    size = np.int64(0)  # (not a literal: one specialization of _heap_offer)
    A, E = query(T, q)
    own = blk[skip_row] if skip_row >= 0 else -1
    if own >= 0:
        size = _scan_near(Yb, bidx, cnt, X, acc, hd, hr, own, q, q32, A, scale, skip_row, need, size)
    tn = near_node_cut(hd[0] if size == need else np.inf, E)
    stack_n[0] = 0
    stack_b[0] = _lower(lo, hi, np.int64(0), qr)
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack_n[sp]
        if stack_b[sp] > tn:
            continue
        j = leaf[node]
        if j >= 0:
            if j != own:
                size = _scan_near(Yb, bidx, cnt, X, acc, hd, hr, j, q, q32, A, scale, skip_row, need, size)
                if size == need:
                    tn = near_node_cut(hd[0], E)
            continue
        lc = left[node]
        rc = right[node]
        bl = _lower(lo, hi, lc, qr) if ncnt[lc] > 0 else np.inf
        br = _lower(lo, hi, rc, qr) if ncnt[rc] > 0 else np.inf
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
    if size > 32:
        # heapsort of the heap itself (it is one already): no np.argsort to compile
        for end in range(size - 1, 0, -1):
            hd[0], hd[end] = hd[end], hd[0]
            hr[0], hr[end] = hr[end], hr[0]
            _sift_worst(hd, hr, 0, end)
        for i in range(size):
            out[i] = hr[i]
        return size
    # few neighbours (k ≤ 33): insertion sort by (distance, row) in the heap's own arrays
    for i in range(1, size):
        d = hd[i]
        r = hr[i]
        j = i - 1
        while j >= 0 and _worse(hd[j], hr[j], d, r):
            hd[j + 1] = hd[j]
            hr[j + 1] = hr[j]
            j -= 1
        hd[j + 1] = d
        hr[j + 1] = r
    for i in range(size):
        out[i] = hr[i]
    return size


@njit(cache=True, nogil=True)
def farthest(T, q):
    """Row of the live record furthest from q (lowest row on ties)."""
    return farthest_from(T, q, -1.0, np.int64(-1))  # no literal: the one specialization


@njit(cache=True, nogil=True)
def farthest_from(T, q, best, brow):
    """:func:`farthest`, seeded with a live record ``brow`` at squared distance ``best`` from q
    (or ``-1.0, -1``): a good seed prunes from the first node on."""
    Yb, bidx, cnt = T[0], T[1], T[2]
    left, right, leaf, ncnt = T[5], T[6], T[8], T[9]
    cen, rad = T[13], T[14]
    acc, stack_n, stack_b = T[15], T[16], T[17]
    X, q32, qr = T[21], T[24], T[27]
    scale = T[23][0]
    m = q.shape[0]
    A, E = query(T, q)
    tf = far_node_cut(best, E)
    stack_n[0] = 0
    stack_b[0] = _upper(cen, rad, np.int64(0), qr)
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack_n[sp]
        if stack_b[sp] < tf:
            continue
        j = leaf[node]
        if j >= 0:
            c = cnt[j]
            block_dist(Yb, j, c, q32, acc)
            cut = far_cut(m, scale, best, A)
            if cut > 0.0 and A < np.inf and max_bits(acc, c) < as_bits(cut):
                continue  # every record of the block is nearer than the best
            for i in range(c):
                if not acc[i] < cut:
                    row = bidx[j, i]
                    d = dist2(X[row], q)
                    if d > best or (d == best and row < brow):
                        best = d
                        brow = row
                        cut = far_cut(m, scale, best, A)
            tf = far_node_cut(best, E)
            continue
        lc = left[node]
        rc = right[node]
        bl = _upper(cen, rad, lc, qr) if ncnt[lc] > 0 else -1.0
        br = _upper(cen, rad, rc, qr) if ncnt[rc] > 0 else -1.0
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
