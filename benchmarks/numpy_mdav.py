"""Plain vectorised numpy MDAV: the baseline the compiled kernel is measured against.

Same specification as ``daskmicro.mdav`` (MDAV-generic; ties broken by row position), written
the obvious way: boolean mask of remaining rows, one full distance pass per search.
"""

import numpy as np


def numpy_mdav(X, k):
    X = np.ascontiguousarray(X, dtype=np.float64)
    n = len(X)
    labels = np.full(n, -1, dtype=np.int64)
    remaining = np.arange(n)
    cell = 0

    def take_group(center_row, rem):
        d = ((X[rem] - X[center_row]) ** 2).sum(axis=1)
        d[rem == center_row] = -1.0  # the centre itself always belongs to its group
        order = np.lexsort((rem, d))  # by distance, then by row position
        return rem[order[:k]]

    while len(remaining) >= 3 * k:
        c = X[remaining].mean(axis=0)
        dc = ((X[remaining] - c) ** 2).sum(axis=1)
        p = remaining[np.argmax(dc)]  # argmax returns the first (lowest row) on ties
        group = take_group(p, remaining)
        labels[group] = cell
        cell += 1
        dp = ((X[remaining] - X[p]) ** 2).sum(axis=1)
        keep = labels[remaining] < 0
        remaining, dp = remaining[keep], dp[keep]
        q = remaining[np.argmax(dp)]
        group = take_group(q, remaining)
        labels[group] = cell
        cell += 1
        remaining = remaining[labels[remaining] < 0]
    if len(remaining) >= 2 * k:
        c = X[remaining].mean(axis=0)
        dc = ((X[remaining] - c) ** 2).sum(axis=1)
        p = remaining[np.argmax(dc)]
        group = take_group(p, remaining)
        labels[group] = cell
        cell += 1
        remaining = remaining[labels[remaining] < 0]
    if len(remaining):
        labels[remaining] = cell
    return labels
