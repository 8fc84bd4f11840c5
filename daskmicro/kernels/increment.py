"""Increment stage of incremental microaggregation: add late records to a base micropartition.

Implements the increment algorithms of Rebollo-Monedero et al., *Incremental k-Anonymous
Microaggregation in Large-Scale Electronic Surveys With Optimized Scheduling* (IEEE Access 2018;
Table 1):

* **2MDAV** (§IV-A): MDAV on the increment records alone; the two partitions are joined.
* **Nearest neighbour** (§IV-D): each increment record joins the cell of the nearest base
  centroid; no new cells (``"nn"``).
* **Split while adding** (``"nn-split-mid"``, §IV-D): records are adjoined one at a time, centroids
  are updated as they go, and a cell that reaches 2k records is split by MDAV at once, so later
  records can join the new cells.
* **Split at the end** (``"nn-split-end"``, §IV-D): adjoin every record, then split each cell of
  2k or more records by MDAV inside it.
* **Inertial coefficient** (§III-B.6): optionally a record joins
  ``argmin_q n_q/(n_q + 1)·‖y − x̂_q‖²`` — the SSE increase of adjoining it, with the centroid
  updated — rather than the nearest centroid.  Sizes then change as records join, so records are
  adjoined one at a time, in the order given, with current sizes and centroids.

Every input cell must hold at least k records; adjoining never shrinks a cell and MDAV splits
give cells of k … 2k−1, so every output cell holds at least k records.

Nearest-centroid search uses :class:`scipy.spatial.cKDTree`, never an n × c distance matrix.  The
one-at-a-time methods (inertial, split-mid) move centroids and create cells while they run; they
query a tree built on the centroids at the start of each chunk of records for a short list of
candidates, and a compiled loop then checks the candidates exactly against the current centroids
(plus the cells created since the tree was built).  A triangle-inequality bound on how far the
centroids have drifted proves the candidate list sufficient; when it cannot, that one record is
checked against every centroid.  The result is the exact sequential algorithm.

No Dask import: the time-delayed stages in ``daskmicro.graph`` wire these kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.spatial import cKDTree

from ..errors import InputError, ParameterError
from ._blocktree import dist2
from .mdav import check_k, mdav

__all__ = ["METHODS", "increment", "two_mdav", "nn_assign", "split_large_cells"]

#: Increment methods accepted by :func:`increment`.
METHODS = ("2mdav", "nn", "nn-split-mid", "nn-split-end")

_CHUNK = 1024  # records per tree rebuild in the one-at-a-time methods
_CANDIDATES = 16  # nearest tree centroids checked exactly per record


# --------------------------------------------------------------------------- validation


def _matrix(Z, name: str, allow_empty: bool = False) -> np.ndarray:
    try:
        Z = np.asarray(Z, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a numeric array") from None
    if Z.ndim == 1:
        Z = Z[:, None]
    if Z.ndim != 2:
        raise InputError(f"{name} must be a 2-D array (records × attributes), got {Z.ndim} dimensions")
    if Z.shape[0] == 0 and not allow_empty:
        raise InputError(f"{name} has no records")
    if Z.shape[1] == 0:
        raise InputError(f"{name} has no columns")
    if not np.isfinite(Z).all():
        raise InputError(f"{name} contains NaN or infinite values")
    return np.ascontiguousarray(Z)


def _check_k(k, n0: int) -> int:
    try:
        return check_k(n0, k)
    except ValueError as exc:
        raise ParameterError(str(exc)) from None


def _cell_labels(labels, n: int, k: int, name: str) -> np.ndarray:
    """Validate cell ids for n records (each cell ≥ k records); return them compacted to 0 … c−1."""
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ParameterError(f"{name} must have one entry per record ({n}), got shape {labels.shape}")
    if labels.dtype.kind not in "iu":
        if labels.dtype.kind == "f" and np.isfinite(labels).all() and (labels == np.round(labels)).all():
            labels = labels.astype(np.int64)
        else:
            raise ParameterError(f"{name} must be integer cell ids")
    if labels.min() < 0:
        raise ParameterError(f"{name} must be non-negative cell ids")
    _, compact = np.unique(labels, return_inverse=True)
    compact = compact.astype(np.int64).ravel()
    smallest = int(np.bincount(compact).min())
    if smallest < k:
        raise ParameterError(f"{name}: a cell has {smallest} records, fewer than k = {k}")
    return compact


def _prepare(Z_base, base_labels, Z_inc, k):
    """Validate the inputs; return float64 matrices, compact base labels (0 … c−1) and k."""
    Zb = _matrix(Z_base, "Z_base")
    try:
        Zi = np.asarray(Z_inc, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("Z_inc must be a numeric array") from None
    if Zi.size == 0:
        Zi = np.empty((0, Zb.shape[1]))
    Zi = _matrix(Zi, "Z_inc", allow_empty=True)
    if Zi.shape[1] != Zb.shape[1]:
        raise InputError(f"Z_inc has {Zi.shape[1]} columns but Z_base has {Zb.shape[1]}")
    k = _check_k(k, Zb.shape[0])
    return Zb, _cell_labels(base_labels, Zb.shape[0], k, "base_labels"), Zi, k


def _check_inertial(inertial) -> bool:
    if not isinstance(inertial, (bool, np.bool_)):
        raise ParameterError(f"inertial must be True or False, got {inertial!r}")
    return bool(inertial)


# --------------------------------------------------------------------------- public API


def increment(method, Z_base, base_labels, Z_inc, k, inertial=False) -> np.ndarray:
    """Micropartition of base + increment records from a base micropartition (§IV, Table 1).

    Parameters
    ----------
    method : {"2mdav", "nn", "nn-split-mid", "nn-split-end"}
        Increment algorithm: two-step MDAV (§IV-A), or nearest-neighbour assignment to the base
        centroids without splitting, splitting while adding, or splitting at the end (§IV-D).
    Z_base : array_like, shape (n0, m)
        Base records, standardized the same way as ``Z_inc`` (the base stage's z-scoring).
    base_labels : array_like of int, shape (n0,)
        Cell ids of the base micropartition (e.g. ``mdav(Z_base, k)``); every cell ≥ k records.
    Z_inc : array_like, shape (n_plus, m)
        Increment records, in arrival order (the order matters for the one-at-a-time methods).
    k : int
        Anonymity parameter, 2 ≤ k ≤ n0.
    inertial : bool, default False
        Nearest-neighbour methods only: choose cells by ``n_q/(n_q+1)·‖y − x̂_q‖²`` (§III-B.6).

    Returns
    -------
    labels : ndarray of int64, shape (n0 + n_plus,)
        Cell ids of the base records followed by the increment records.  Base cells keep their
        ids when ``base_labels`` are 0 … c−1 (as :func:`~daskmicro.kernels.mdav.mdav` returns);
        new cells get ids from c on.  Every cell holds at least k records.
    """
    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    inertial = _check_inertial(inertial)
    if method == "2mdav":
        if inertial:
            raise ParameterError("inertial applies to the nearest-neighbour methods (nn, nn-split-mid, nn-split-end), not 2mdav")
        return two_mdav(Z_base, base_labels, Z_inc, k)
    split = {"nn": None, "nn-split-mid": "mid", "nn-split-end": "end"}[method]
    return nn_assign(Z_base, base_labels, Z_inc, k, split=split, inertial=inertial)


def two_mdav(Z_base, base_labels, Z_inc, k) -> np.ndarray:
    """2MDAV increment (§IV-A): MDAV on the increment records alone, joined to the base cells.

    Needs at least k increment records (or none).  See :func:`increment` for the parameters.
    """
    Zb, lb, Zi, k = _prepare(Z_base, base_labels, Z_inc, k)
    if len(Zi) == 0:
        return lb
    if len(Zi) < k:
        raise ParameterError(f"2mdav needs at least k = {k} increment records, got {len(Zi)}; use a nearest-neighbour method")
    return np.concatenate([lb, mdav(Zi, k) + (int(lb.max()) + 1)])


def nn_assign(Z_base, base_labels, Z_inc, k, split=None, inertial=False) -> np.ndarray:
    """Nearest-neighbour increment (§IV-D), optionally with cell splitting and the inertial coefficient.

    Parameters
    ----------
    Z_base, base_labels, Z_inc, k
        As in :func:`increment`.
    split : {None, "mid", "end"}
        None: adjoin only.  "mid": split a cell by MDAV as soon as it reaches 2k records.
        "end": adjoin every record, then split each cell of 2k or more records by MDAV.
    inertial : bool
        Use the inertial criterion ``n_q/(n_q+1)·‖y − x̂_q‖²`` of §III-B.6.

    Returns
    -------
    ndarray of int64
        Labels of base + increment records, as :func:`increment`.

    Notes
    -----
    Without the inertial coefficient and without split-mid, the records join the nearest *base*
    centroid (one batched KD-tree query; order does not matter), and centroids are updated
    afterwards, as in §IV-D.  Otherwise the records are adjoined in order, each to the best cell
    by the current centroids and sizes.
    """
    if split not in (None, "mid", "end"):
        raise ParameterError(f"split must be None, 'mid' or 'end'; got {split!r}")
    inertial = _check_inertial(inertial)
    Zb, lb, Zi, k = _prepare(Z_base, base_labels, Z_inc, k)
    labels, _ = _nn_assign(Zb, lb, Zi, k, split, inertial)
    return labels


def split_large_cells(Z, labels, k) -> np.ndarray:
    """Split every cell of 2k or more records by MDAV inside it (the last step of split-end, §IV-D).

    Parameters
    ----------
    Z : array_like, shape (n, m)
        Records (standardized).
    labels : array_like of int, shape (n,)
        Cell ids; every cell must hold at least k records.
    k : int
        Anonymity parameter.

    Returns
    -------
    ndarray of int64
        Compacted labels: each split cell keeps its id for its first MDAV sub-cell; the other
        sub-cells get new ids after the existing ones.  Every cell holds k … max(2k−1, original).
    """
    Z = _matrix(Z, "Z")
    k = _check_k(k, Z.shape[0])
    return _split_end(Z, _cell_labels(labels, Z.shape[0], k, "labels"), k)


# --------------------------------------------------------------------------- implementation


def _nn_assign(Zb, lb, Zi, k, split, inertial):
    """Validated inputs → (labels, stats); ``stats`` counts exact fallbacks of the tree search."""
    n0 = len(Zb)
    stats = {"records": len(Zi), "brute_force": 0, "trees": 0, "splits": 0}
    if len(Zi) == 0:
        return lb, stats
    if split == "mid" or inertial:
        labels = _sequential(Zb, lb, Zi, k, inertial, split == "mid", stats)
    else:
        C = _centroids(Zb, lb)
        stats["trees"] = 1
        _, q = cKDTree(C, leafsize=32).query(Zi, k=1)
        labels = np.concatenate([lb, np.asarray(q, dtype=np.int64).ravel()])
    if split == "end":
        Zall = np.concatenate([Zb, Zi])
        before = int(labels.max()) + 1
        labels = _split_end(Zall, labels, k)
        stats["splits"] = int(labels.max()) + 1 - before
    assert len(labels) == n0 + len(Zi)
    return labels, stats


def _centroids(Z, labels, ncell=None):
    ncell = int(labels.max()) + 1 if ncell is None else ncell
    sizes = np.bincount(labels, minlength=ncell).astype(np.float64)
    sums = np.zeros((ncell, Z.shape[1]))
    for j in range(Z.shape[1]):
        sums[:, j] = np.bincount(labels, weights=Z[:, j], minlength=ncell)
    return sums / sizes[:, None]


def _split_end(Z, labels, k):
    labels = labels.copy()
    sizes = np.bincount(labels)
    big = np.flatnonzero(sizes >= 2 * k)
    if big.size == 0:
        return labels
    order = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)])
    next_id = len(sizes)
    for q in big:
        members = order[starts[q]:starts[q + 1]]
        sub = mdav(Z[members], k)
        nsub = int(sub.max()) + 1
        ids = np.empty(nsub, dtype=np.int64)
        ids[0] = q
        ids[1:] = np.arange(next_id, next_id + nsub - 1)
        next_id += nsub - 1
        labels[members] = ids[sub]
    return labels


def _sequential(Zb, lb, Zi, k, inertial, split_mid, stats):
    """Adjoin the increment records one at a time (inertial and/or split-mid), exactly."""
    n0, m = Zb.shape
    ni = len(Zi)
    c0 = int(lb.max()) + 1
    cap = (n0 + ni) // k + 1  # no micropartition of n records into cells ≥ k has more cells
    Zall = np.concatenate([Zb, Zi])
    labels = np.empty(n0 + ni, dtype=np.int64)
    labels[:n0] = lb
    sizes = np.zeros(cap, dtype=np.int64)
    sizes[:c0] = np.bincount(lb, minlength=c0)
    sums = np.zeros((cap, m))
    cent = np.zeros((cap, m))
    cent[:c0] = _centroids(Zb, lb, c0)
    sums[:c0] = cent[:c0] * sizes[:c0, None]
    head = np.full(cap, -1, dtype=np.int64)
    nxt = np.full(n0 + ni, -1, dtype=np.int64)
    if split_mid:
        _link(labels, n0, head, nxt)
    split_at = 2 * k if split_mid else 0
    wmin = k / (k + 1.0) if inertial else 1.0
    state = np.zeros(3, dtype=np.int64)  # [number of cells, brute-force fallbacks, number of extras]
    state[0] = c0
    # "Extras" are checked for every record: cells created since the tree was built, and tree cells
    # whose centroid jumped in a split (kept out of the drift bound, which would otherwise blow up).
    extras = np.zeros(cap, dtype=np.int64)
    detached = np.zeros(cap, dtype=np.bool_)
    drift = np.zeros(1)
    cells = _CellTables(cent, sums, sizes, labels, head, nxt, state, extras, detached)
    for lo in range(0, ni, _CHUNK):
        hi = min(lo + _CHUNK, ni)
        ntree = int(state[0])
        pos = cent[:ntree].copy()
        K = min(_CANDIDATES, ntree)
        dist, cand = cKDTree(pos, leafsize=32).query(Zi[lo:hi], k=K)
        stats["trees"] += 1
        dist = np.ascontiguousarray(np.asarray(dist, dtype=np.float64).reshape(hi - lo, K))
        cand = np.ascontiguousarray(np.asarray(cand, dtype=np.int64).reshape(hi - lo, K))
        drift[0] = 0.0
        state[2] = 0
        detached[:] = False
        i = lo
        while i < hi:
            i, q = _adjoin(Zi, i, hi, lo, cand, dist, pos, ntree, cent, sums, sizes, state, drift, extras, detached, wmin, inertial, split_at, labels, n0, head, nxt)
            if q >= 0:
                _split_mid(Zall, k, q, ntree, cells)
                stats["splits"] += 1
    stats["brute_force"] = int(state[1])
    return labels


@njit(cache=True)
def _link(labels, n, head, nxt):
    for r in range(n):
        q = labels[r]
        nxt[r] = head[q]
        head[q] = r


@njit(cache=True)
def _adjoin(Y, lo, hi, off, cand, dist, pos, ntree, cent, sums, sizes, state, drift, extras, detached, wmin, inertial, split_at, labels, n0, head, nxt):
    """Adjoin records lo … hi−1 in order; stop early (returning the cell) when one must be split."""
    m = Y.shape[1]
    K = cand.shape[1]
    for i in range(lo, hi):
        y = Y[i]
        r = i - off
        best = np.inf
        bq = -1
        for jj in range(K):
            q = cand[r, jj]
            w = sizes[q] / (sizes[q] + 1.0) if inertial else 1.0
            f = w * dist2(y, cent[q])
            if f < best or (f == best and q < bq):
                best = f
                bq = q
        for e in range(state[2]):  # new cells and split tree cells
            q = extras[e]
            w = sizes[q] / (sizes[q] + 1.0) if inertial else 1.0
            f = w * dist2(y, cent[q])
            if f < best or (f == best and q < bq):
                best = f
                bq = q
        # A tree cell outside the candidates is at least dist[r, K−1] from y at build time and has
        # moved at most drift[0] since (or is an extra, checked above), so it cannot beat `best`
        # if the bound below holds.
        if K < ntree and dist[r, K - 1] < math.sqrt(best / wmin) + drift[0]:
            state[1] += 1
            for q in range(ntree):
                w = sizes[q] / (sizes[q] + 1.0) if inertial else 1.0
                f = w * dist2(y, cent[q])
                if f < best or (f == best and q < bq):
                    best = f
                    bq = q
        row = n0 + i
        labels[row] = bq
        sizes[bq] += 1
        for j in range(m):
            sums[bq, j] += y[j]
            cent[bq, j] = sums[bq, j] / sizes[bq]
        if bq < ntree and not detached[bq]:
            d = math.sqrt(dist2(cent[bq], pos[bq]))
            if d > drift[0]:
                drift[0] = d
        if split_at > 0:
            nxt[row] = head[bq]
            head[bq] = row
            if sizes[bq] >= split_at:
                return i + 1, bq
    return hi, -1


@njit(cache=True)
def _members(head, nxt, q, size):
    out = np.empty(size, dtype=np.int64)
    r = head[q]
    j = 0
    while r >= 0:
        out[j] = r
        j += 1
        r = nxt[r]
    return out[::-1].copy()  # earliest record first, so MDAV's ties follow arrival order


@dataclass(frozen=True)
class _CellTables:
    """The arrays :func:`_sequential` adjoins records in (updated in place): per cell its centroid,
    sum and size, per record its cell and its successor in its cell's list (``head``/``nxt``),
    the state [cells, brute-force fallbacks, extras], the extras and which tree cells are detached."""

    cent: np.ndarray
    sums: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray
    head: np.ndarray
    nxt: np.ndarray
    state: np.ndarray
    extras: np.ndarray
    detached: np.ndarray


def _split_mid(Zall, k, q, ntree, cells: _CellTables):
    """Split cell q by MDAV; sub-cell 0 keeps id q, the others get fresh ids (checked by brute force)."""
    cent, sums, sizes, labels = cells.cent, cells.sums, cells.sizes, cells.labels
    head, nxt, state, extras, detached = cells.head, cells.nxt, cells.state, cells.extras, cells.detached
    members = _members(head, nxt, q, int(sizes[q]))
    sub = mdav(Zall[members], k)
    nsub = int(sub.max()) + 1
    ncell = int(state[0])
    ids = np.concatenate([[q], np.arange(ncell, ncell + nsub - 1)]).astype(np.int64)
    state[0] = ncell + nsub - 1
    for s, cid in enumerate(ids):
        rows = members[sub == s]
        labels[rows] = cid
        sizes[cid] = len(rows)
        sums[cid] = Zall[rows].sum(axis=0)
        cent[cid] = sums[cid] / sizes[cid]
        head[cid] = -1
        for r in rows:
            nxt[r] = head[cid]
            head[cid] = r
    fresh = list(ids[1:]) if (q >= ntree or detached[q]) else list(ids)
    if q < ntree:
        detached[q] = True
    for cid in fresh:
        extras[state[2]] = cid
        state[2] += 1
