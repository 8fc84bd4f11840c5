"""Cost adjustment of PCL: an ε-scaling auction for the capacity-constrained assignment.

Private helper of :mod:`daskmicro.kernels.pcl`; pure numba, no Dask.

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

import numpy as np
from numba import njit

__all__ = ["auction", "new_prices"]


def new_prices(capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Heap offsets (cells + 1), zero slot prices and empty slot holders for :func:`auction`."""
    start = np.zeros(len(capacity) + 1, dtype=np.int64)
    np.cumsum(capacity, out=start[1:])
    return start, np.zeros(int(start[-1])), np.full(int(start[-1]), -1, dtype=np.int64)


@njit(cache=True)
def _sift_down(price, holder, where, lo, size, pos):
    """Restore the min-heap ``price[lo:lo+size]`` after the entry at ``pos`` went up."""
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
            if holder[a] >= 0:
                where[holder[a]] = a
            if holder[b] >= 0:
                where[holder[b]] = b
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
    ncell = start.shape[0] - 1
    slot_cell = np.empty(n, np.int64)
    for q in range(ncell):
        for s in range(start[q], start[q + 1]):
            slot_cell[s] = q
    where = np.full(n, -1, np.int64)
    for s in range(n):
        if holder[s] >= 0:
            where[holder[s]] = s
    queue = np.empty(n, np.int64)
    bids = 0
    for phase in range(eps_phases.shape[0]):
        eps = eps_phases[phase]
        # keep the holders that satisfy ε-complementary slackness; the others bid again
        head = 0
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
                    v = benefit[i, j] - price[start[q]]
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
        while count > 0:
            if bids >= max_bids:
                break
            i = queue[head]
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
                v = benefit[i, j] - price[start[q]]
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
            where[i] = lo
            if evicted >= 0:
                where[evicted] = -1
            _sift_down(price, holder, where, lo, size, 0)
            bids += 1
            if evicted >= 0:
                tail = head + count
                if tail >= n:
                    tail -= n
                queue[tail] = evicted
                count += 1
    cell = np.full(n, -1, np.int64)
    for i in range(n):
        if where[i] >= 0:
            cell[i] = slot_cell[where[i]]
    return cell, bids
