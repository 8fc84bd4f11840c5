"""Exact MDAV ("MDAV-generic"), compiled with numba.

Implements Algorithm A of Rebollo-Monedero et al., *Efficient k-Anonymous Microaggregation of
Multivariate Numerical Data via PCA* (Information Sciences 2019, §III-B), which is the
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
row wins an argmax, and among equidistant neighbours the lowest rows are taken first.  Ties are
judged on float64 distances; the centroid is a running sum, so when several records are exactly
equidistant from the true centroid (integer grids), its rounding — not the row — may pick one,
as it does in any floating-point MDAV (numpy's mean included).  The result is deterministic.

How it is fast while staying exact
----------------------------------
Textbook MDAV makes three full distance passes over the remaining records per pair of cells
(≈ 0.75·n²·m/k operations).  This kernel answers the same queries without full passes:

* the k−1 nearest records come from branch-and-bound over a shrinking k-d tree
  (:mod:`._blocktree`) built in the principal-axes frame of the records it holds, whose leaves
  are SIMD-friendly float32 blocks (a float32 distance only discards records that provably
  cannot matter; the rest are measured again in float64).  It is rebuilt over the remaining
  records each time half of them have gone, so searches visit full blocks of a shallow tree
  fitted to what remains rather than the emptied blocks of the first one;
* the record furthest from the centroid comes from a list sorted by distance to an older
  reference centroid: the centroid moves little between iterations, so the triangle inequality
  ``d(x, C) ≤ d(x, C_ref) + ‖C − C_ref‖`` leaves only the first few records of the list to check;
  the list is rebuilt (one pass) when that stops being true;
* Q, the record furthest from P, comes from the same list (its first quarter, also stored as
  float32 columns): ``d(x, P) ≤ d(x, C_ref) + d(C_ref, P)`` ends the walk after 0.5–15 % of the
  records on 150 000 × 13 Gaussian data, where the tree's ball bounds had to read ~40 %; the
  tree finishes only when the list runs out;
* the centroid is a running sum, updated as cells are removed.

Where the time goes (150 000 × 13 Gaussian, k = 10, ~1.3 s): nearest searches about half,
rebuilds a fifth, Q a fifth.

Every distance that decides anything is float64 and every bound is conservative, so the result
is exactly the MDAV of the specification above.  Memory is O(n·m): never an n×n matrix.
"""

from __future__ import annotations

import numpy as np
from numba import float32, njit

from .bounds import check_values
from ._blocktree import SAFE_HI, build_rows, dist2, pow2_scale, quickselect, remove, sort_desc, tree_like
from ._float32 import as_bits, error_radius, far_cut, max_bits
from ._search import farthest_from, nearest

__all__ = ["mdav", "check_k", "as_records", "compile_units"]

_BLOCK = 512  # leaf size (leaves hold 256–512 records): see the sweep in benchmarks/README.md


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
    """``X`` as a finite, C-contiguous float64 matrix (n × m); 1-D input is one column.

    Values must be finite and within ±:data:`~daskmicro.kernels.bounds.MAX_ABS`.
    """
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):  # numpy's message quotes the value
        raise ValueError(f"{name} must hold numbers only") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n records × m attributes), got {X.ndim} dimensions")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has no records")
    if X.shape[1] == 0:
        raise ValueError(f"{name} has no columns")
    return np.ascontiguousarray(check_values(X, name))


def compile_units():
    """The compiled pieces of :func:`mdav`, leaf first: ``(name, dispatcher, argument types, names of the
    pieces it calls)``. Compiling them ahead in this order, possibly split across the worker processes of a
    machine (:mod:`daskmicro.runtime.warmup`), leaves nothing for a run to compile: every piece a run calls has one
    specialization, the one listed (``tests/test_compile_units.py``)."""
    from numba import typeof

    f2, f1, i1 = typeof(np.zeros((1, 1))), typeof(np.zeros(1)), typeof(np.zeros(1, np.int64))
    i, f = typeof(np.int64(0)), typeof(0.0)
    T = typeof(tree_like())
    W = typeof(_work_like(1, 1))
    return [
        ("mdav.tree", build_rows, (f2, i1, i, i), ()),
        ("mdav.nearest", nearest, (T, f1, i, i, i1), ()),
        ("mdav.remove", remove, (T, i), ()),
        ("mdav.farthest", farthest_from, (T, f1, f, i), ()),
        ("mdav.rebuild-list", _walk_rebuild, (T, W, f1), ()),
        ("mdav.from-centroid", _farthest_from_centroid, (T, W, f1, f2, i), ("mdav.rebuild-list",)),
        ("mdav.from-record", _farthest_from_record, (T, W, f2, i), ("mdav.farthest",)),
        ("mdav.take-cell", _take_cell, (T, f2, i, i, i1, i1, i, f1, f1, i), ("mdav.nearest", "mdav.remove")),
        ("mdav", _mdav, (f2, i, i), ("mdav.tree", "mdav.from-centroid", "mdav.from-record", "mdav.take-cell")),
    ]


def _work_like(n, m):
    """The walk's work arrays W (see :func:`_walk_rebuild`) for n records of m attributes."""
    return (np.zeros(n), np.empty(n, np.int64), np.array([0.0, 0.0, -1.0, 1.0]), np.zeros(m),
            np.zeros((m, n + 64), np.float32), np.ones(2), np.empty(m, np.float32), np.empty(64, np.float32))


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
    return _mdav(X, k, _BLOCK)


@njit(cache=True, nogil=True)
def _walk_rebuild(T, W, C):
    """Exact furthest record from C by a full pass, keeping the top of the distance list.

    W = (a, top, state, Cref, S32, frame, q32, acc): ``a[row]`` bounds ‖x − Cref‖ from above,
    ``top`` lists the rows with the largest ``a`` in decreasing order (a quarter of the records),
    ``state = [len(top), cursor, floor, stale]`` where ``floor`` bounds ``a`` of every live row
    not in ``top``; ``S32`` holds the records of ``top`` in that order, column-major, in float32
    (x − Cref scaled by ``frame[0]``, a power of two; ``frame[1]`` bounds their scaled norms).
    """
    cnt, blk, X = T[2], T[3], T[21]
    a, top, state, Cref, S32, frame = W[:6]
    r = 0
    for j in range(cnt.shape[0]):
        r += cnt[j]
    rows = np.empty(r, np.int64)
    vals = np.empty(r)
    best = -1.0
    brow = np.int64(-1)
    t = 0
    for row in range(X.shape[0]):
        if blk[row] < 0:
            continue
        d = dist2(X[row], C)
        if d > best:
            best = d
            brow = row
        v = np.sqrt(d) * SAFE_HI
        a[row] = v
        rows[t] = row
        vals[t] = v
        t += 1
    ntop = min(r, max(256, r // 4))
    floor = -1.0
    if ntop < r:
        # the largest value left out of the list comes from a partial sort; only the list itself
        # is then sorted (a full argsort of r values was most of this function's time); the index's
        # own quickselect, not np.partition, whose compile alone took 5 s
        floor = quickselect(vals.copy(), np.int64(0), np.int64(r), np.int64(r - ntop - 1))
        head = np.empty(ntop, np.int64)
        hv = np.empty(ntop)
        t = 0
        for i in range(r):
            if vals[i] > floor:
                head[t] = rows[i]
                hv[t] = vals[i]
                t += 1
        for i in range(r):  # then rows at exactly the floor value (any of them will do)
            if t == ntop:
                break
            if vals[i] == floor:
                head[t] = rows[i]
                hv[t] = vals[i]
                t += 1
        rows = head
        vals = hv
    sort_desc(vals, rows)
    for i in range(ntop):
        top[i] = rows[i]
    scale, amax = pow2_scale(vals[0])
    frame[0] = scale
    frame[1] = amax * scale
    for i in range(ntop):
        row = top[i]
        for d in range(C.shape[0]):
            S32[d, i] = float32((X[row, d] - C[d]) * scale)
    state[0] = ntop
    state[1] = 0
    state[2] = floor
    state[3] = 0
    for d in range(C.shape[0]):  # (a loop: a slice assignment compiles numba's shape-error formatting)
        Cref[d] = C[d]
    return brow


@njit(cache=True, nogil=True)
def _farthest_from_centroid(T, W, C, X, r):
    """Record furthest from the centroid C.

    The centroid moves little from one MDAV iteration to the next, so distances to an older
    reference centroid Cref, plus ‖C − Cref‖ (triangle inequality), bound the new distances: only
    the few records at the top of the old list need an exact distance.
    """
    blk = T[3]
    a, top, state, Cref = W[:4]
    if state[3] != 0:
        return _walk_rebuild(T, W, C)
    drift = np.sqrt(dist2(C, Cref))
    ntop = int(state[0])
    cur = int(state[1])
    while cur < ntop and blk[top[cur]] < 0:
        cur += 1
    state[1] = cur
    best = -1.0
    brow = np.int64(-1)
    walked = 0
    done = False
    for i in range(cur, ntop):
        row = top[i]
        if blk[row] < 0:
            continue
        if best >= 0.0 and (a[row] + drift) * SAFE_HI < np.sqrt(best):
            done = True
            break
        walked += 1
        d = dist2(X[row], C)
        if d > best or (d == best and row < brow):
            best = d
            brow = row
    if not done and not (best >= 0.0 and (state[2] + drift) * SAFE_HI < np.sqrt(best)):
        return _walk_rebuild(T, W, C)
    if walked * 256 > r:
        state[3] = 1  # the list has gone stale: rebuild at the next query
    return brow


@njit(cache=True, nogil=True)
def _farthest_from_record(T, W, X, p):
    """Record furthest from record p (its cell already removed).

    Walks the reference list, 64 records at a time: ‖x − p‖ ≤ ‖x − Cref‖ + ‖Cref − p‖ ends the
    walk as soon as the list's ``a`` drops below the best distance minus ‖Cref − p‖.  On 150 000
    Gaussian records that leaves 0.5–15 % of the live records to examine, against ~40 % for the
    tree's ball bounds.  Each chunk is measured in float32 first (the same rigorous discard
    bound as the index, :func:`._float32.query`); records it cannot rule out are measured in
    float64.  If the list runs out first, the tree search finishes, seeded with the best record.
    """
    blk = T[3]
    a, top, state, Cref, S32, frame, q32, acc = W
    m = X.shape[1]
    xp = X[p]
    dcp = np.sqrt(dist2(xp, Cref)) * SAFE_HI
    scale = frame[0]
    nq = 0.0
    for d in range(m):
        v = (xp[d] - Cref[d]) * scale
        q32[d] = float32(v)
        nq += v * v
    A = error_radius(frame[1], np.sqrt(nq) * SAFE_HI)
    ntop = int(state[0])
    best = -1.0
    brow = np.int64(-1)  # (not a literal: one specialization of farthest_from)
    for i0 in range(int(state[1]), ntop, 64):
        if best >= 0.0 and (a[top[i0]] + dcp) * SAFE_HI < np.sqrt(best):
            return brow  # every record from here on has a ≤ a[top[i0]]
        for i in range(64):
            acc[i] = float32(0.0)
        for d in range(m):
            qd = q32[d]
            col = S32[d, i0:i0 + 64]  # (a contiguous view: the loop vectorises; 2-D indexing did not)
            for i in range(64):
                t = col[i] - qd
                acc[i] += t * t
        cut = far_cut(m, scale, best, A)
        c = min(64, ntop - i0)
        if cut > 0.0 and A < np.inf and max_bits(acc, c) < as_bits(cut):
            continue  # the whole chunk is nearer than the best
        for i in range(c):
            if not acc[i] < cut:
                row = top[i0 + i]
                if blk[row] < 0:
                    continue
                dd = dist2(X[row], xp)
                if dd > best or (dd == best and row < brow):
                    best = dd
                    brow = row
                    cut = far_cut(m, scale, best, A)
    if best >= 0.0 and (state[2] + dcp) * SAFE_HI < np.sqrt(best):
        return brow
    return farthest_from(T, xp, best, brow)  # the list ran out: the tree finishes, seeded


@njit(cache=True, nogil=True)
def _mdav(X, k, leaf_size):
    n, m = X.shape
    T = build_rows(X, np.arange(n), leaf_size, k - 1)
    W = (np.zeros(n), np.empty(n, np.int64), np.array([0.0, 0.0, -1.0, 1.0]), np.zeros(m),
         np.zeros((m, n + 64), np.float32), np.ones(2), np.empty(m, np.float32), np.empty(64, np.float32))

    mu = np.zeros(m)
    for i in range(n):
        for d in range(m):
            mu[d] += X[i, d]
    mu /= n
    Sc = np.zeros(m)  # Σ (x − μ) over the remaining records
    for i in range(n):
        for d in range(m):
            Sc[d] += X[i, d] - mu[d]

    labels = np.full(n, -1, np.int64)
    group = np.empty(k, np.int64)
    C = np.empty(m)
    r = n
    built = n
    cell = np.int64(0)  # (not a literal: one specialization of _take_cell)
    while r >= 2 * k:
        if 2 * r <= built and r > 4 * leaf_size:
            # half the records have gone: re-index the rest (full blocks, a shallower tree, the
            # principal axes of what remains); see the sweep in benchmarks/README.md
            rows = np.empty(r, np.int64)  # the rows left (a loop: np.flatnonzero compiled in 0.5 s)
            t = 0
            for i in range(n):
                if labels[i] < 0:
                    rows[t] = i
                    t += 1
            T = build_rows(X, rows, leaf_size, k - 1)
            built = r
        for d in range(m):
            C[d] = mu[d] + Sc[d] / r
        p = _farthest_from_centroid(T, W, C, X, r)
        r = _take_cell(T, X, p, k, group, labels, cell, mu, Sc, r)
        cell += 1
        if r < 2 * k:
            break  # 2k ≤ r < 3k before this cell: the rest form the last cell
        q = _farthest_from_record(T, W, X, p)
        r = _take_cell(T, X, q, k, group, labels, cell, mu, Sc, r)
        cell += 1
    if r > 0:
        for i in range(n):
            if labels[i] < 0:
                labels[i] = cell
    return labels


@njit(cache=True, nogil=True)
def _take_cell(T, X, centre, k, group, labels, cell, mu, Sc, r):
    """Form the cell of ``centre`` and its k−1 nearest remaining records; remove it."""
    group[0] = centre
    nearest(T, X[centre], centre, k - 1, group[1:])
    for j in range(k):
        row = group[j]
        labels[row] = cell
        remove(T, row)
        for d in range(X.shape[1]):
            Sc[d] -= X[row, d] - mu[d]
    return r - k
