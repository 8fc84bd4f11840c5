"""Cost adjustment and cost-sensitive assignment of PCL: an ε-scaling auction.

Private helper of :mod:`daskmicro.kernels.pcl` (numba and scipy's k-d tree, no Dask): the
auction itself, the candidate cells of every sample, and :class:`Adjuster`, which runs one
cost adjustment + assignment with warm-started prices.

Given reconstruction values x̂_q and the required number of samples per cell, the costs c(q) of
the cost-sensitive nearest-neighbour step q(x) = argmin_q ‖x − x̂_q‖² + c(q) that meet the
constraints are the dual prices (Lagrange multipliers) of the transportation problem

    minimise Σ_i ‖x_i − x̂_{q(i)}‖²   subject to   |{i : q(i) = q}| = capacity(q).

The auction algorithm (Bertsekas; the "similar objects" form of Bertsekas & Castañon for
transportation problems) computes both the assignment and those prices directly: every cell
holds ``capacity(q)`` slots, each with a price; an unassigned sample bids for the slot that
maximises benefit − price, raising its price by the bid increment plus ε, and evicts the
previous holder.  At termination every sample is within ε of its best choice (ε-complementary
slackness), so the assignment is within n·ε of optimal, and a sample's cell is an additively
weighted nearest neighbour with the slot prices as costs.  ε is scaled down geometrically,
reusing the prices of the previous phase (and of the previous PCL iteration), which is the
warm start the PCL paper asks of its cost adjustment.

Slots of one cell are kept as a binary min-heap on price, so the cheapest slot (the cell's cost)
and the second cheapest (needed for the bid increment) are found in O(1) and updated in
O(log capacity): this keeps very large cells (macroaggregation, k in the thousands) cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.spatial import cKDTree

from .cellgraph import descend, nearest_cells, neighbour_cells
from ._prefetch import prefetch, prefetch_row

__all__ = ["auction", "new_prices", "AuctionSettings", "Adjuster", "cell_means", "sse_of", "EPS_NOISY"]

#: Neighbours per cell of the graph the candidates are searched in (cellgraph.nearest_cells).  One
#: PCL iteration from improved cells of 250 000 correlated Gaussian records (m = 13, k = 10) ended
#: at 0.8553 of the starting SSE with 24, 0.8586 with 20, 0.8628 with 16, in 1.6 / 1.4 / 1.2 s of
#: candidate search; the exact k-d tree query of the 8 nearest took 7 s per 100 000 records.
HOP_NEIGHBOURS = 24
EXACT_MAX_CELLS = 1000  # up to this many cells the candidates come from an exact k-d tree query
_EPS_FINAL = 1e-6  # final auction ε, relative to the mean squared distance per record (n·ε = 1e-6·SSE_start)
_EPS_FIRST = 0.25  # first auction ε, same unit
# final auction ε of the noisy stage, same unit: the auction meets the capacities exactly at any
# ε, and the clouds only steer the reconstruction values, so near-optimality is not needed here
EPS_NOISY = 1e-1
_EPS_STEP = 4.0  # ε is divided by this between auction phases (4 measured ~10 % faster than 8)
# Prefetch distances of the auction's bidders (:func:`_prefetch_bidders`): the rows (candidates,
# benefits) of the bidder ``_AHEAD`` places ahead in the queue, and the slot heaps of the nearest
# ``_HEAPS_OF`` candidate cells of the bidder ``_HEAPS_AHEAD`` places ahead, whose row has arrived
# by then.  An evicted bidder's rows lie anywhere in 2 × 28 MB (500 000 records × 7 columns), its
# cell's heap anywhere in 2 × 4 MB.  The auctions of two PCL iterations on a top cell of 500 000
# (k = 10; Gaussian / census-like): 1.76 / 4.3 s without; rows only, 10 ahead, 1.15–1.2 / 3.05–3.3 s
# (8 alike, 16 and 32 slower); and the two nearest cells' heaps 4 ahead 0.87–0.92 / 2.73–2.84 s.
_AHEAD, _HEAPS_AHEAD, _HEAPS_OF = 10, 4, 2


def new_prices(capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Heap offsets (cells + 1), zero slot prices and empty slot holders for :func:`auction`."""
    start = np.zeros(len(capacity) + 1, dtype=np.int64)
    np.cumsum(capacity, out=start[1:])
    return start, np.zeros(int(start[-1])), np.full(int(start[-1]), -1, dtype=np.int64)


@njit(cache=True)
def _sift_down(price, holder, lo, size, pos):
    """Restore the min-heap ``price[lo:lo+size]`` (and its ``holder`` entries) after the entry at
    ``pos`` went up."""
    while True:
        left = 2 * pos + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and price[lo + right] < price[lo + left]:
            child = right
        if price[lo + child] < price[lo + pos]:
            a = lo + child
            b = lo + pos
            price[a], price[b] = price[b], price[a]
            holder[a], holder[b] = holder[b], holder[a]
            pos = child
        else:
            return


@njit(cache=True)
def auction(benefit, cand, start, price, holder, eps_phases, spread, max_bids):
    """Assign every person (sample) to one slot, maximising Σ benefit, by ε-scaling auction.

    Parameters
    ----------
    benefit : float64 (n, w)
        ``benefit[i, j]`` is the value to person ``i`` of a slot of cell ``cand[i, j]``
        (−‖x_i − x̂_q‖² in PCL).
    cand : int64 (n, w)
        Candidate cells of each person; −1 marks an unused column.  A cell must not repeat in
        a row.  The candidate graph must admit a perfect matching (PCL guarantees it by always
        listing each sample's current cell).
    start : int64 (cells + 1)
        Slot offsets: cell q owns slots ``start[q]:start[q+1]``; ``start[-1]`` must equal n.
    price : float64 (n,)
        Slot prices, a min-heap per cell; updated in place (warm start for the next call).
    holder : int64 (n,)
        Person holding each slot (−1: free); updated in place.  A warm start keeps every
        holder that still meets ε-complementary slackness under the new benefits.
    eps_phases : float64 (p,)
        Decreasing ε values, one auction phase each.
    spread : float
        Bid increment used when a person has a single possible slot.
    max_bids : int
        Safety cap on the total number of bids; when reached the auction stops early.

    Returns
    -------
    cell : int64 (n,)
        Cell of every person (−1 for anyone left unassigned when ``max_bids`` was hit).
    bids : int
        Number of bids made.
    """
    n, w = cand.shape
    slot_cell = _slot_cells(start, n)
    where = np.empty(n, np.int64)
    queue = np.empty(n, np.int64)
    # each cell's cheapest slot price (its heap's top), kept beside the heaps: a bid reads it for
    # every candidate, and one value per cell stays in cache where the slots' prices do not
    ncell = start.shape[0] - 1
    cost = np.empty(ncell)
    bids = 0
    for phase in range(eps_phases.shape[0]):
        eps = eps_phases[phase]
        head = 0
        _where(holder, where)
        for q in range(ncell):
            cost[q] = price[start[q]]
        count = _unseat(benefit, cand, cost, price, holder, where, slot_cell, queue, eps)
        while count > 0:
            if bids >= max_bids:
                break
            i = queue[head]
            if count > _AHEAD:
                _prefetch_bidders(queue, head, n, cand, benefit, start, price, holder)
            head += 1
            if head == n:
                head = 0
            count -= 1
            w1 = -np.inf
            w2 = -np.inf
            best_j = -1
            for j in range(w):
                q = cand[i, j]
                if q < 0:
                    continue
                v = benefit[i, j] - cost[q]
                if v > w1:
                    w2 = w1
                    w1 = v
                    best_j = j
                elif v > w2:
                    w2 = v
            q = cand[i, best_j]
            lo = start[q]
            size = start[q + 1] - lo
            # the second cheapest slot of the chosen cell competes with the other cells
            if size >= 2:
                p2 = price[lo + 1]
                if size >= 3 and price[lo + 2] < p2:
                    p2 = price[lo + 2]
                v2 = benefit[i, best_j] - p2
                if v2 > w2:
                    w2 = v2
            if w2 == -np.inf:
                w2 = w1 - spread
            price[lo] = benefit[i, best_j] - w2 + eps
            evicted = holder[lo]
            holder[lo] = i
            _sift_down(price, holder, lo, size, np.int64(0))
            cost[q] = price[lo]
            bids += 1
            if evicted >= 0:
                tail = head + count
                if tail >= n:
                    tail -= n
                queue[tail] = evicted
                count += 1
    _where(holder, where)
    cell = np.full(n, -1, np.int64)
    for i in range(n):
        if where[i] >= 0:
            cell[i] = slot_cell[where[i]]
    return cell, bids


@njit(cache=True, inline="always")
def _prefetch_bidders(queue, head, n, cand, benefit, start, price, holder):
    """Prefetch for the bidders queued ahead of ``queue[head]`` (at least ``_AHEAD`` of them): the
    rows of the one ``_AHEAD`` places ahead, the first and last slots of the nearest cells' heaps of
    the one ``_HEAPS_AHEAD`` places ahead.  Hints only: no value changes."""
    ahead = head + _AHEAD
    if ahead >= n:
        ahead -= n
    prefetch_row(cand, queue[ahead])
    prefetch_row(benefit, queue[ahead])
    ahead = head + _HEAPS_AHEAD
    if ahead >= n:
        ahead -= n
    b = queue[ahead]
    for j in range(min(_HEAPS_OF, cand.shape[1])):
        q = cand[b, j]
        if q >= 0:
            lo, hi = start[q], start[q + 1] - 1
            if hi >= lo:  # a cell with slots (every cell has k or more)
                prefetch(price, lo)
                prefetch(holder, lo)
                prefetch(price, hi)
                prefetch(holder, hi)


@njit(cache=True)
def _slot_cells(start, n):
    """The cell of every slot of :func:`auction`'s heaps."""
    slot_cell = np.empty(n, np.int64)
    for q in range(start.shape[0] - 1):
        for s in range(start[q], start[q + 1]):
            slot_cell[s] = q
    return slot_cell


@njit(cache=True)
def _where(holder, where):
    """``where[i]``: the slot person i holds, or −1 — rebuilt from the holders in one pass where and
    when it is read (an auction phase's start and end), instead of kept up to date through every
    bid's heap swaps: a random write into an n-long array for each entry a swap moves."""
    where[:] = -1
    for s in range(holder.shape[0]):
        if holder[s] >= 0:
            where[holder[s]] = s


@njit(cache=True)
def _unseat(benefit, cand, cost, price, holder, where, slot_cell, queue, eps):
    """Start of an auction phase: keep the holders that satisfy ε-complementary slackness; the
    others lose their slot and are queued (``queue[:count]``) to bid again.  ``cost``: each cell's
    cheapest slot price.  Returns count."""
    n, w = cand.shape
    count = 0
    for i in range(n):
        s = where[i]
        own = -np.inf
        best = -np.inf
        if s >= 0:
            q0 = slot_cell[s]
            for j in range(w):
                q = cand[i, j]
                if q < 0:
                    continue
                v = benefit[i, j] - cost[q]
                if v > best:
                    best = v
                if q == q0:
                    own = benefit[i, j] - price[s]
        if s < 0 or own < best - eps:
            if s >= 0:
                holder[s] = -1
                where[i] = -1
            queue[count] = i
            count += 1
    return count


@njit(cache=True)
def cell_means(P, cell, ncell):
    """Centroid (reconstruction value, §3.2 Eq. 3) and size of every cell; empty cells get 0."""
    m = P.shape[1]
    sums = np.zeros((ncell, m))
    cnt = np.zeros(ncell)
    for i in range(P.shape[0]):
        q = cell[i]
        cnt[q] += 1.0
        for j in range(m):
            sums[q, j] += P[i, j]
    for q in range(ncell):
        if cnt[q] > 0:
            for j in range(m):
                sums[q, j] /= cnt[q]
    return sums, cnt


@njit(cache=True)
def sse_of(X, labels, C):
    """Σ‖x_i − C[labels_i]‖²."""
    total = 0.0
    for i in range(X.shape[0]):
        q = labels[i]
        for j in range(X.shape[1]):
            d = X[i, j] - C[q, j]
            total += d * d
    return total


@njit(cache=True)
def _add_column(P, C, cand, benefit, col, extra):
    """Fill column ``col`` with cell ``extra[i]`` unless it is among the first ``col`` already."""
    for i in range(P.shape[0]):
        q = extra[i]
        dup = False
        for j in range(col):
            if cand[i, j] == q:
                dup = True
                break
        if dup:
            cand[i, col] = -1
            benefit[i, col] = -np.inf  # unused: must not count as the best free-slot value
        else:
            d = 0.0
            for j in range(P.shape[1]):
                t = P[i, j] - C[q, j]
                d += t * t
            cand[i, col] = q
            benefit[i, col] = -d


def _candidates(P, C, home, backbone, n_candidates, overflow, graph=None):
    """Candidate cells of every sample: its L nearest reconstruction values, its backbone cell
    (which keeps the assignment feasible), and the free slots.

    With few cells (K ≤ ``EXACT_MAX_CELLS``) the L nearest come from a k-d tree query.  With
    many, they are the L nearest among the cells within two steps of the sample's home cell (the
    nearest cell found in the previous iteration, else its backbone cell) in a graph of each
    cell's ``HOP_NEIGHBOURS`` nearest centroids (:func:`.cellgraph.nearest_cells`): O(n·m) per
    iteration where the exact query is O(n·m·log K) with a large constant in 10+ dimensions.
    ``graph``, the previous iteration's lists, is updated by one descent round instead of being
    searched afresh (the centroids move little between iterations).  Returns (cand, benefit,
    graph).
    """
    K = C.shape[0]
    L = min(n_candidates, K)
    w = L + 1 + (1 if overflow else 0)
    cand = np.empty((P.shape[0], w), dtype=np.int64)
    benefit = np.empty((P.shape[0], w))
    if K <= EXACT_MAX_CELLS:
        dist, near = cKDTree(C).query(P, k=L)
        cand[:, :L] = near.reshape(len(P), L)
        benefit[:, :L] = -(dist * dist).reshape(len(P), L)
    else:
        C = np.ascontiguousarray(C)
        if graph is None:
            graph = neighbour_cells(C, min(HOP_NEIGHBOURS, K - 1), 1)
        else:
            graph = descend(C, graph, 1, np.ones(K, np.bool_))
        d2 = np.empty((P.shape[0], L))
        nearest_cells(P, C, backbone if home is None else home, graph, cand[:, :L], d2)
        benefit[:, :L] = -d2
    _add_column(P, C, cand, benefit, L, backbone)
    if overflow:
        # a free slot's holder joins its nearest candidate cell
        cand[:, L + 1] = K
        benefit[:, L + 1] = benefit[:, : L + 1].max(axis=1)
    return cand, benefit, graph


def _resolve(cell, cand, benefit, K):
    """Map free-slot holders (cell K) and unassigned samples (−1) to their nearest candidate."""
    odd = np.nonzero((cell == K) | (cell < 0))[0]
    if odd.size:
        b = np.where(cand[odd, :-1] >= 0, benefit[odd, :-1], -np.inf)
        cell = cell.copy()
        cell[odd] = cand[odd, np.argmax(b, axis=1)]
    return cell


@dataclass(frozen=True)
class AuctionSettings:
    """How :class:`Adjuster` runs its auctions: the nearest reconstruction values tried per sample
    (``n_candidates``) and the ε-scaling schedule — final and first ε, in units of the scale per
    sample (first ε default ``_EPS_FIRST``, never below the final one), and whether a call after
    the first scales ε down again from the first ε (``rescale_warm``)."""

    n_candidates: int
    eps_final: float = _EPS_FINAL
    eps_first: float | None = None
    rescale_warm: bool = True


class Adjuster:
    """Cost adjustment + cost-sensitive nearest-neighbour step for a fixed set of capacities."""

    def __init__(self, K, k, n, scale_per_sample, settings: AuctionSettings, cloud=1, graph=None):
        eps_final, eps_first = settings.eps_final, settings.eps_first
        self.K = K
        self.r = (n - K * k) * cloud
        cap = np.full(K + (1 if self.r > 0 else 0), k * cloud, dtype=np.int64)
        if self.r > 0:
            cap[K] = self.r
        self.start, self.price, self.holder = new_prices(cap)
        self.n_candidates = settings.n_candidates
        self.scale = max(scale_per_sample, 1e-300)
        self.eps_final = eps_final
        self.eps_first = max(_EPS_FIRST if eps_first is None else eps_first, eps_final)
        # with ``rescale_warm`` False, a call after the first (prices warm from the previous one)
        # runs a single phase at the final ε: ε-scaling keeps a cold start from price wars, and
        # warm prices already meet the final ε's slackness for every record whose benefits have
        # barely moved (see improve.POLISH_AUCTION_EPS for what it measured)
        self.rescale_warm = settings.rescale_warm
        self.warm = False  # prices left by an earlier call
        self.bids = 0
        self.failed = False
        self.graph = graph  # the cells' neighbour lists (many cells only), kept between calls

    def assign(self, P, C, home, backbone):
        cand, benefit, self.graph = _candidates(P, C, home, backbone, self.n_candidates, self.r > 0, self.graph)
        eps = []
        e = (self.eps_final if self.warm and not self.rescale_warm else self.eps_first) * self.scale
        self.warm = True
        while e > self.eps_final * self.scale:
            eps.append(e)
            e /= _EPS_STEP
        eps.append(self.eps_final * self.scale)
        finite = benefit[np.isfinite(benefit)]
        spread = float(finite.max() - finite.min()) + self.scale  # increment for a lone option
        n = P.shape[0]
        cell, bids = auction(
            benefit, cand, self.start, self.price, self.holder, np.array(eps), spread, 400 * n * len(eps) + 10**6
        )
        self.bids += int(bids)
        self.failed = bool((cell < 0).any())
        # the nearest cell found is the next home (where the neighbour search starts)
        self.nearest = cand[:, 0].copy()
        return _resolve(cell, cand, benefit, self.K)

    def costs(self):
        c = self.price[self.start[: self.K]].copy()
        return c - c.mean()
