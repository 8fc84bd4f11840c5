"""Textbook MDAV compiled with numba: full distance passes, O(n²/k) like the papers' implementations.

The incremental paper's timing analysis (*Incremental k-Anonymous Microaggregation … With Optimized Scheduling*, §IV-A) assumes a quadratic
MDAV: each pair of cells costs full distance passes over the remaining records (to the centroid,
to P, to Q).  The package's kernel (:func:`daskmicro.mdav`) prunes those passes with a k-d tree and
is far from quadratic; this one does not, so it reproduces the setting of the paper's example.
Same MDAV-generic specification; k nearest found by partial selection (ties by row position).
"""

import numpy as np
from numba import njit


@njit(cache=True)
def _dist(X, rem, nrem, x, d):
    for i in range(nrem):
        r = rem[i]
        s = 0.0
        for j in range(X.shape[1]):
            t = X[r, j] - x[j]
            s += t * t
        d[i] = s


@njit(cache=True)
def _take(X, rem, nrem, centre, k, labels, cell, d):
    """Label the k remaining records nearest to X[centre] (itself included); compact ``rem``."""
    _dist(X, rem, nrem, X[centre], d)
    thr = np.partition(d[:nrem].copy(), k - 1)[k - 1]
    taken = 0
    for i in range(nrem):
        if d[i] < thr:
            labels[rem[i]] = cell
            taken += 1
    for i in range(nrem):
        if taken == k:
            break
        if d[i] == thr and labels[rem[i]] < 0:
            labels[rem[i]] = cell
            taken += 1
    w = 0
    for i in range(nrem):
        if labels[rem[i]] < 0:
            rem[w] = rem[i]
            w += 1
    return w


@njit(cache=True)
def _mdav(X, k):
    n, m = X.shape
    labels = -np.ones(n, dtype=np.int64)
    rem = np.arange(n)
    d = np.empty(n)
    nrem, cell = n, 0
    c = np.empty(m)
    while nrem >= 3 * k:
        c[:] = 0.0
        for i in range(nrem):
            c += X[rem[i]]
        c /= nrem
        _dist(X, rem, nrem, c, d)
        p = rem[np.argmax(d[:nrem])]
        _dist(X, rem, nrem, X[p], d)
        q = rem[np.argmax(d[:nrem])]
        nrem = _take(X, rem, nrem, p, k, labels, cell, d)
        cell += 1
        if labels[q] >= 0:  # q was among P's neighbours: the furthest remaining record from P
            _dist(X, rem, nrem, X[p], d)
            q = rem[np.argmax(d[:nrem])]
        nrem = _take(X, rem, nrem, q, k, labels, cell, d)
        cell += 1
    if nrem >= 2 * k:
        c[:] = 0.0
        for i in range(nrem):
            c += X[rem[i]]
        c /= nrem
        _dist(X, rem, nrem, c, d)
        p = rem[np.argmax(d[:nrem])]
        nrem = _take(X, rem, nrem, p, k, labels, cell, d)
        cell += 1
    for i in range(nrem):
        labels[rem[i]] = cell
    return labels


def quadratic_mdav(X, k):
    """Cell labels of textbook MDAV on the rows of ``X`` (float64, n × m)."""
    return _mdav(np.ascontiguousarray(X, dtype=np.float64), int(k))
