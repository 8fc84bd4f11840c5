"""Local improvement of a k-anonymous partition: single-record moves and pairwise swaps between
neighbouring cells, each applied only when it lowers the SSE and keeps every cell at ≥ k records.

This is Hartigan's exact-transfer rule for k-means (Hartigan, *Clustering Algorithms*, 1975, §4.3;
Hartigan & Wong, AS 136, 1979) under the size constraint of microaggregation, plus the pairwise
exchange that the constraint makes necessary: MDAV (*Efficient k-Anonymous Microaggregation … via PCA*, §III-B) leaves
almost every cell at exactly k records, so a record can rarely leave its cell alone, but two
records of neighbouring cells can trade places.  The PCL paper (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*,
§3.3) improves a partition by Lloyd iterations under the same constraint; the moves here are the
cheap, monotone counterpart: every applied step lowers the SSE, exactly.

With cell A (n_A records, centroid a) and cell B (n_B, b):

* **move** x from A to B (allowed when n_A > k and n_B < 2k − 1, the largest size an optimal cell
  needs):  ΔSSE = n_B/(n_B+1)·‖x − b‖² − n_A/(n_A−1)·‖x − a‖²;
* **swap** x ∈ A with y ∈ B:  ΔSSE = (‖x − b‖² − ‖x − a‖²) + (‖y − a‖² − ‖y − b‖²)
  − (1/n_A + 1/n_B)·‖x − y‖².

Candidates for a record of cell A are the records of the ``neighbours`` cells whose centroids are
nearest A's.  A swap is measured exactly only when the bound ‖x − y‖ ≤ ‖x − b‖ + ‖y − b‖ does not
already rule it out, so a sweep costs ≈ (2·m + k)·``neighbours`` operations per record.

Deterministic: cells are visited in label order, records in their order within the cell, the
neighbour lists come from the centroids alone; the result depends only on the records, their
order and the starting labels.  Pure numpy / numba / scipy; no Dask.

:func:`polish` is the pass a ``quality`` setting runs: these moves, and for "high" noiseless PCL
iterations from their cells (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*, §3.3: a joint reassignment of all
records under the size constraint, whose chains of moves through many cells no pair finds) and
moves again, all three sharing one neighbour graph of the cells (:mod:`.cellgraph`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numba as nb
import numpy as np

from ._auction import EXACT_MAX_CELLS, HOP_NEIGHBOURS, AuctionSettings, cell_means
from ._blocktree import dist2
from .cellgraph import descend, neighbour_cells
from .pcl import refine_partition

__all__ = ["improve", "polish", "improve_partitions", "ImproveSettings", "DEFAULT_NEIGHBOURS"]

#: Neighbouring cells a record is tried against (nearest centroids of its own cell).
DEFAULT_NEIGHBOURS = 8


@dataclass(frozen=True)
class ImproveSettings:
    """The improvement pass of :func:`polish` / :func:`improve_partitions`: ``sweeps`` sweeps of
    moves and swaps against ``neighbours`` neighbouring cells, then ``pcl_iter`` PCL iterations and
    ``post_sweeps`` more sweeps."""

    sweeps: int
    neighbours: int = DEFAULT_NEIGHBOURS
    pcl_iter: int = 0
    post_sweeps: int = 0


def improve(X, labels, k: int, sweeps: int = 2, neighbours: int = DEFAULT_NEIGHBOURS, active=None,
            return_info: bool = False):
    """Lower the SSE of a partition by moves and swaps between neighbouring cells.

    Parameters
    ----------
    X : ndarray (n, m)
        Records (the z-scored QIs).
    labels : ndarray of int (n,)
        Cells ``0 … C−1``, each of at least ``k`` records (MDAV's, PCA-MDAV's, PCL's …).
    k : int
        Minimum cell size, kept by every step.
    sweeps : int
        Most passes over the cells; a pass that changes nothing ends the loop early.
    neighbours : int
        Cells tried per record: those with the nearest centroids to its own cell's.
    active : ndarray of bool (C,), optional
        Only the records of these cells are tried (they may still trade with any neighbour).
    return_info : bool
        Also return a dict: SSE before and after, steps applied, sweeps run.

    Returns
    -------
    labels : ndarray of int64 (n,)
        Same cell ids, same number of cells, every cell still ≥ k; SSE never above the start.
    """
    new, info = _improve(X, labels, k, sweeps, neighbours, active, None)
    return (new, info) if return_info else new


def _improve(X, labels, k, sweeps, neighbours, active, near):
    """:func:`improve` from the cells' neighbour lists ``near`` (at least ``neighbours`` columns,
    updated by a descent round instead of searched; None: searched); returns (labels, info)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64).copy()
    n, m = X.shape
    C = int(labels.max()) + 1 if n else 0
    size = np.bincount(labels, minlength=C).astype(np.int64)
    if C and size.min() < k:
        raise ValueError(f"improve: a cell holds {int(size.min())} records, fewer than k = {k}")
    info = {"sse_before": 0.0, "sse_after": 0.0, "steps": 0, "sweeps": 0}
    L = min(int(neighbours), C - 1)
    if L < 1 or m == 0 or sweeps < 1:
        return labels, info
    # cell-major copies: a cell's records are contiguous, so a neighbour cell is one short read
    Y, ids = _cell_major(X, labels, C, max(2 * k - 1, int(size.max())))
    act = np.ones(C, dtype=np.bool_) if active is None else np.asarray(active, dtype=np.bool_)
    if near is not None:
        near = np.ascontiguousarray(near[:, :L], dtype=np.int64)
    for s in range(int(sweeps)):
        # the neighbour lists follow the centroids: after a sweep's swaps they have moved enough
        # that updated lists find a third more of the gain (Gaussian data, 4 sweeps); one descent
        # round from the previous lists does it for a third of the first search's cost
        cen = cell_means(X, labels, C)[0]   # summed in row order: np.bincount's sums, bit for bit
        # (only the live cells' lists: only their records are tried, and a cell once dead stays dead)
        live = act if s else np.ones(C, dtype=np.bool_)
        near = neighbour_cells(cen, L) if near is None else descend(cen, near, 1, live)
        changed = np.zeros(C, dtype=np.bool_)
        sse0, sse1, steps = _sweep(Y, ids, size, cen, near, act, changed, k, 2 * k - 1)
        labels[ids[ids >= 0]] = np.nonzero(ids >= 0)[0]
        if s == 0:
            info["sse_before"] = sse0
        info["sse_after"] = sse1
        info["steps"] += int(steps)
        info["sweeps"] = s + 1
        if steps == 0:
            break
        # live cells (Hartigan & Wong's live set): only a cell that changed, or has a neighbour that
        # changed, can find a new step in the next sweep
        act = act & (changed | changed[near].any(axis=1))
    return labels, info


def _cell_major(X, labels, C, cap):
    """(Y, ids): the records cell by cell, ``Y[c, :size_c]`` the rows of cell c in row order and
    ``ids`` their row numbers (−1 in the free slots).  Allocated by numpy, which asks the kernel for
    huge pages for large arrays (numba's allocations go through malloc, which does not): ``Y`` is the
    pass's largest array (100 MB for a top cell of 500,000 records in 13 dimensions), read at
    random, and mapped afresh by every call; in 4 KiB pages that was 24,000 page faults a call."""
    Y = np.zeros((C, cap, X.shape[1]))
    ids = np.full((C, cap), -1, np.int64)
    _fill_cell_major(X, labels, Y, ids)
    return Y, ids


@nb.njit(cache=True, nogil=True)
def _fill_cell_major(X, labels, Y, ids):
    n, m = X.shape
    fill = np.zeros(Y.shape[0], np.int64)
    for i in range(n):
        c = labels[i]
        s = fill[c]
        fill[c] = s + 1
        ids[c, s] = i
        for j in range(m):
            Y[c, s, j] = X[i, j]


@nb.njit(cache=True, nogil=True)
def _sweep(Y, ids, size, cen, near, active, changed, k, max_size):
    """One pass over the active cells of the cell-major records ``Y`` (C × cap × m, ``ids`` their
    row numbers); returns (SSE before, SSE after, steps applied).  Updates ``Y``, ``ids``, the
    sizes and the centroids in place, and flags in ``changed`` every cell a step touched."""
    C, cap, m = Y.shape
    L = near.shape[1]
    sums = np.zeros((C, m))
    R = np.zeros((C, cap))  # ‖y − centroid of its cell‖², kept exact
    S = np.zeros((C, cap))  # its square root (the swap bound's ‖y − b‖)
    sse0 = 0.0
    for c in range(C):
        for u in range(size[c]):
            for j in range(m):
                sums[c, j] += Y[c, u, j]
        for j in range(m):
            cen[c, j] = sums[c, j] / size[c]
        for u in range(size[c]):
            R[c, u] = dist2(Y[c, u], cen[c])
            S[c, u] = np.sqrt(R[c, u])
            sse0 += R[c, u]
    gap = np.empty((L, cap))  # ‖y − a‖² − ‖y − b‖² for y in neighbour cell b
    nb_cen = np.empty((m, L))  # the neighbours' centroids, one row per coordinate
    dxb = np.empty(L)  # ‖x − b‖² for every neighbour b
    lower = np.empty(cap)  # the swap bound for every record of one neighbour
    steps = 0
    for a in range(C):
        if not active[a]:
            continue
        _scratch(Y, a, near, size, cen, R, gap, nb_cen)
        t = 0
        while t < size[a]:
            x = Y[a, t]
            rx = R[a, t]
            best, bb, bu = -1e-12 * (1.0 + rx), -1, -1
            na = size[a]
            dxb[:] = 0.0
            for j in range(m):  # ‖x − b‖² for all neighbours at once, summed in dist2's order
                xj = x[j]
                for jj in range(L):
                    d = xj - nb_cen[j, jj]
                    dxb[jj] += d * d
            for jj in range(L):
                b = near[a, jj]
                nbb = size[b]
                if na > k and nbb < max_size:
                    dm = nbb / (nbb + 1.0) * dxb[jj] - na / (na - 1.0) * rx
                    if dm < best:
                        best, bb, bu = dm, b, -1
                gx = dxb[jj] - rx
                w = 1.0 / na + 1.0 / nbb
                sx = np.sqrt(dxb[jj])
                for u in range(nbb):  # the bounds first, vectorised; the exact change where they allow
                    lower[u] = gx + gap[jj, u] - w * (sx + S[b, u]) ** 2
                for u in range(nbb):
                    if lower[u] >= best:
                        continue
                    ds = gx + gap[jj, u] - w * dist2(x, Y[b, u])
                    if ds < best:
                        best, bb, bu = ds, b, u
            if bb < 0:
                t += 1
                continue
            steps += 1
            changed[a] = changed[bb] = True
            _apply(Y, ids, a, t, bb, bu, size, sums, cen, R, S)
            _scratch(Y, a, near, size, cen, R, gap, nb_cen)
            if bu >= 0:
                t += 1  # the swapped-in record now sits at t; a moved-out one was replaced by the last
    sse1 = 0.0
    for c in range(C):
        for u in range(size[c]):
            sse1 += dist2(Y[c, u], cen[c])
    return sse0, sse1, steps





@nb.njit(cache=True, nogil=True, inline="always")
def _scratch(Y, a, near, size, cen, R, gap, nb_cen):
    """Cell a's scratch: ``gap`` (‖y − a‖² − ‖y − b‖² for the records y of every neighbour b) and
    ``nb_cen`` (the neighbours' centroids, transposed)."""
    for jj in range(near.shape[1]):
        b = near[a, jj]
        for j in range(cen.shape[1]):
            nb_cen[j, jj] = cen[b, j]
        for u in range(size[b]):
            gap[jj, u] = dist2(Y[b, u], cen[a]) - R[b, u]


@nb.njit(cache=True, nogil=True, inline="always")
def _apply(Y, ids, a, t, b, u, size, sums, cen, R, S):
    """Record t of cell a goes to cell b; with u ≥ 0, record u of b comes to a in its place."""
    m = Y.shape[2]
    if u >= 0:
        for j in range(m):
            d = Y[b, u, j] - Y[a, t, j]
            sums[a, j] += d
            sums[b, j] -= d
            Y[a, t, j], Y[b, u, j] = Y[b, u, j], Y[a, t, j]
        ids[a, t], ids[b, u] = ids[b, u], ids[a, t]
    else:
        last, nb_ = size[a] - 1, size[b]
        for j in range(m):
            sums[a, j] -= Y[a, t, j]
            sums[b, j] += Y[a, t, j]
            Y[b, nb_, j] = Y[a, t, j]
            Y[a, t, j] = Y[a, last, j]
        ids[b, nb_], ids[a, t], ids[a, last] = ids[a, t], ids[a, last], -1
        size[a] -= 1
        size[b] += 1
    for c in (a, b):
        for j in range(m):
            cen[c, j] = sums[c, j] / size[c]
        for v in range(size[c]):
            R[c, v] = dist2(Y[c, v], cen[c])
            S[c, v] = np.sqrt(R[c, v])


#: First and final auction ε of the PCL step of :func:`polish`, relative to the mean squared error
#: per record (:func:`.pcl.pcl`'s ``auction_eps``).  Two PCL iterations from improved cells of
#: 250 000 records (k = 10): census-like 57.2 M bids with (0.25, 0.1), 11.2 M with (4, 0.25), same
#: SSE to 0.1 %; correlated Gaussian 5.3 M and 5.7 M.  Records with equal values bid each other up
#: by ε at a time: a coarse first phase settles most prices in few bids.  The whole pass over a
#: top cell of 500 000 (Gaussian / census-like; SSE of the pass, PCL step's seconds): (4, 0.25)
#: 613 177 / 84 185 in 5.5 / 7.4 s; (2, 0.5), two phases, 613 115 / 84 031 in 4.7 / 5.7 s;
#: (4, 1) 616 931 / 84 189; (2, 1) 616 180 / 84 168; (0.5, 0.5) 613 222 / 84 059 in 3.9 / 8.4 s.
#: A final ε of 0.5 leaves the SSE where 0.25 does (the auction's n·ε bound is far above what
#: either loses); 1 loses 0.6 % on Gaussian data.  Only the first iteration scales ε down: the
#: second starts from the first's prices, which the centroids' small moves leave close to
#: equilibrium, and runs one phase at the final ε (``rescale_warm=False``).  Two iterations, same
#: top cells: 8.14 M → 5.72 M bids on Gaussian data (the second iteration's assignment 2.7 →
#: 2.1 s), 13.05 M → 12.80 M on census-like; SSE of the pass 612 674 → 612 817 / 84 191 → 84 195.
POLISH_AUCTION_EPS = (2.0, 0.5)
#: Nearest centroids tried per record in that PCL step.  Whole 1M runs of ``quality="high"``
#: (k = 10): 6 candidates cost 15.2 / 15.1 CPU s of PCL against 17.4 / 17.8 with 8 (Gaussian /
#: census-like) at the same information loss to 4 digits; 4 cost 17.3 / 16.1 s (fewer options,
#: more bids) and lose 0.05 %.
POLISH_CANDIDATES = 6
#: Neighbouring cells tried per record by the moves after the PCL step (at most ``neighbours``):
#: PCL has made the long chains of moves, what is left is short-range.  A top cell of 500 000
#: (k = 10, 2 × 16 moves and 2 PCL iterations before; SSE of the pass, Gaussian / census-like):
#: 2 sweeps × 16 611 540 / 84 063 in 1.2 / 1.0 s; × 10 612 306 / 84 152; × 8 612 674 / 84 191 in
#: 0.7 / 0.6 s; 1 sweep × 16 612 698 / 84 239 in 0.8 / 0.6 s.  With partitions of 25,000 (where
#: MDAV in the partitions takes 1.5–1.8 s instead of 2.2–2.9 s per top cell), after the second PCL
#: iteration's single auction phase: × 8 614 126 / 84 576; × 12 613 336 / 84 500 (+0.3 s);
#: × 16 612 803 / 84 451 (+0.5–0.65 s).  12, with 25,000, loses 0.02 % of the 1M Gaussian run's
#: information loss to 50,000 with 8 (0.8985 against 0.8983 of exact MDAV's) for ~0.45 s less per
#: top cell.
POST_PCL_NEIGHBOURS = 12


def polish(X, labels, k: int, sweeps: int, neighbours: int = DEFAULT_NEIGHBOURS, pcl_iter: int = 0,
           post_sweeps: int = 0, return_info: bool = False):
    """The improvement pass of a ``quality`` setting: :func:`improve`, and with ``pcl_iter`` > 0
    that many noiseless PCL iterations (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*, §3.3) from its cells, then
    :func:`improve` once more (``post_sweeps`` sweeps, :data:`POST_PCL_NEIGHBOURS` neighbours).

    Moves and swaps stop at a partition where no single record and no pair gains; PCL's
    assignment step reassigns all records at once under the size constraint (an optimal
    transportation problem: chains of moves through many cells), which finds what pairs cannot.
    From 8 × 16 improved exact MDAV on 100 000 correlated Gaussian records (m = 13, k = 10; SSE
    0.902 of MDAV's) one PCL iteration and 8 × 16 more give 0.875.  PCL keeps the number of
    cells and returns the best partition it saw; a result with an empty cell (only after a
    repair of a failed auction) is dropped, so every cell stays ≥ k and the SSE never rises.
    Returns labels, and with ``return_info`` the figures of :func:`improve` over the whole pass.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    t0 = time.perf_counter()
    C = int(np.max(labels)) + 1 if len(labels) else 0
    graph = None
    if pcl_iter > 0 and C > EXACT_MAX_CELLS:
        # one neighbour search for the whole pass: the moves take the nearest ``neighbours`` of
        # each list, PCL's candidate search all of them; each step updates them by a descent round,
        # so the search itself is the approximate one (on a top cell of 500 000, k = 10: 0.3 s
        # instead of 0.65, and the pass ends 0.26 % lower on Gaussian data, 0.04 % higher on
        # census-like)
        cen, _ = cell_means(X, np.asarray(labels, dtype=np.int64), C)
        graph = neighbour_cells(cen, min(max(HOP_NEIGHBOURS, neighbours), C - 1), 0, approximate=True)
    new, info = _improve(X, labels, k, sweeps, neighbours, None, graph)
    info["seconds"] = {"moves": time.perf_counter() - t0}
    if pcl_iter > 0 and info["sweeps"] > 0:
        t0 = time.perf_counter()
        auction = AuctionSettings(POLISH_CANDIDATES, eps_final=POLISH_AUCTION_EPS[1], eps_first=POLISH_AUCTION_EPS[0],
                                  rescale_warm=False)
        moved, run, graph = refine_partition(X, new, k, int(pcl_iter), auction, graph)
        info["seconds"]["pcl"] = time.perf_counter() - t0
        if int(moved.max()) + 1 == C and np.bincount(moved, minlength=C).min() >= k:
            new = moved
            info = {**info, "sse_after": float(run.sse), "pcl_iter": int(pcl_iter)}
            if post_sweeps > 0:
                t0 = time.perf_counter()
                new, again = _improve(X, moved, k, post_sweeps, min(neighbours, POST_PCL_NEIGHBOURS), None,
                                      graph)
                info["seconds"]["moves after"] = time.perf_counter() - t0
                info["steps"] += again["steps"]
                info["sweeps"] += again["sweeps"]
                info["sse_after"] = again["sse_after"] if again["sweeps"] else info["sse_after"]
    return (new, info) if return_info else new


def improve_partitions(parts, results, k: int, sweeps: int, neighbours: int = DEFAULT_NEIGHBOURS,
                       pcl_iter: int = 0, post_sweeps: int = 0):
    """Improve the cells of several partitions jointly (records may change partition).

    ``parts`` are the partitions' (row ids, Z), ``results`` their
    :class:`~daskmicro.kernels.cells.PartitionResult`.  The cells of all of them are improved
    together by :func:`polish`, so records also move and swap across the partitions' borders;
    each cell stays with the partition that formed it.  Returns one PartitionResult per
    partition, in order, with ``info["improve"]`` (SSE before and after, steps) on the first.
    """
    from .cells import PartitionResult
    from .macro import cell_stats

    rowids = np.concatenate([p[0] for p in parts])
    Z = np.concatenate([p[1] for p in parts])
    offsets = np.cumsum([0] + [r.n_cells for r in results])
    labels = np.concatenate([r.labels + off for r, off in zip(results, offsets)])
    new, info = polish(Z, labels, k, sweeps, neighbours, pcl_iter, post_sweeps, return_info=True)
    out = []
    for i, r in enumerate(results):
        sel = np.flatnonzero((new >= offsets[i]) & (new < offsets[i + 1]))
        sel = sel[np.argsort(rowids[sel], kind="stable")]
        lab = new[sel] - offsets[i]
        size, sums, sse = cell_stats(Z[sel], lab, r.n_cells)
        extra = {"improve": info} if i == 0 else {}
        out.append(PartitionResult(rowids=rowids[sel], labels=lab, size=size, centroid=sums / size[:, None],
                                   sse=sse, info={**r.info, **extra}))
    return out
