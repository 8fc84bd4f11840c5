"""Exact k-anonymity repair of a partition with defective cells (PCL's final safeguard).

The PCL paper (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*, §5.3) reports that its cost adjustment occasionally
leaves a cell slightly below k.  :func:`repair_cells` restores the constraint on any partition
with at least k records in total: each defective cell first takes, nearest first, records that
other cells can spare (cells above k); if too few can be spared it is dissolved and its records
join their nearest remaining cells.  Pure numpy; no Dask.
"""

from __future__ import annotations

import numpy as np

__all__ = ["repair_cells"]


def _means(X, labels, K):
    cnt = np.bincount(labels, minlength=K).astype(np.float64)
    sums = np.zeros((K, X.shape[1]))
    for j in range(X.shape[1]):
        sums[:, j] = np.bincount(labels, weights=X[:, j], minlength=K)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / cnt[:, None], cnt.astype(np.int64)


def repair_cells(X, labels, K, k):
    """Make every non-empty cell of ``labels`` hold at least ``k`` records.

    Parameters
    ----------
    X : ndarray (n, m)
        Records (n ≥ k).
    labels : ndarray of int (n,)
        Cell ids in ``0 … K−1``; cells may be empty or below k.
    K : int
        Number of cell ids.
    k : int
        Minimum cell size.

    Returns
    -------
    labels : ndarray of int64 (n,)
        Repaired partition renumbered ``0 … K'−1`` (K' ≤ K: dissolved and empty cells vanish).
    n_repaired : int
        Number of non-empty cells that were below k.
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64).copy()
    if len(labels) < k:
        raise ValueError(f"cannot form a cell of k = {k} from {len(labels)} records")
    cnt = np.bincount(labels, minlength=K)
    defective = [int(q) for q in np.argsort(-cnt, kind="stable") if 0 < cnt[q] < k]
    n_repaired = len(defective)
    for q in defective:
        C, cnt = _means(X, labels, K)
        need = k - cnt[q]
        if need <= 0:
            continue
        spare = np.nonzero((cnt[labels] > k) & (labels != q))[0]
        if len(spare) >= need:
            # take the spare records nearest to this cell's centroid, never more than a donor
            # can give (it must stay at k or above)
            d = ((X[spare] - C[q]) ** 2).sum(axis=1)
            room = cnt - k
            taken = 0
            for i in spare[np.argsort(d, kind="stable")]:
                donor = labels[i]
                if room[donor] > 0:
                    room[donor] -= 1
                    labels[i] = q
                    taken += 1
                    if taken == need:
                        break
            if taken == need:
                continue
        # not enough spare records: dissolve the cell into its nearest cells of size ≥ k
        C, cnt = _means(X, labels, K)
        rows = np.nonzero(labels == q)[0]
        ok = np.nonzero((cnt >= k) & (np.arange(K) != q))[0]
        if ok.size == 0:  # nothing valid to join: everything becomes one cell
            labels[:] = q
            break
        d = ((X[rows, None, :] - C[None, ok, :]) ** 2).sum(axis=2)
        labels[rows] = ok[np.argmin(d, axis=1)]
    _, labels = np.unique(labels, return_inverse=True)
    return labels.astype(np.int64).ravel(), n_repaired
