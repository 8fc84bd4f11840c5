"""Cells of a re-release: records published before keep their frozen cell values.

For one group (a stratum × missingness pattern, as the planner forms them), given the ledger's
frozen cells:

1. a record published before (its fingerprint is in the ledger, with a cell whose observed QIs
   are this group's) takes its frozen cell's published values;
2. frozen cells with fewer than k of their records present (deletions, a larger k, records
   moved to another stratum) merge with the nearest frozen cell present, and the merged cell
   takes the values of its larger part — values published before;
3. records never published form new cells of at least k among themselves with the group's
   method; fewer than k of them join the nearest frozen cell and take its values; a frozen cell
   still short of k (the group's only one) takes its nearest new records.

So a record's re-published values are values published before, and the difference of two
releases' totals over any grouping is a combination of published cell values.  No Dask here.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .fingerprint import FP, FP_DTYPE

__all__ = ["Frozen", "series_values"]

NONE = np.uint64(0)


@dataclass
class Frozen:
    """The frozen cells of a series: fingerprints (sorted) → cell id → published QI values."""

    fps: np.ndarray          # FP_DTYPE, sorted
    cell_of: np.ndarray      # uint64 cell id of each fingerprint
    cell_ids: np.ndarray     # uint64, sorted
    values: np.ndarray       # float64, cells × QIs (published values, NaN where not published)
    qi: tuple

    @classmethod
    def empty(cls, qi) -> "Frozen":
        return cls(np.empty(0, FP_DTYPE), np.empty(0, np.uint64), np.empty(0, np.uint64),
                   np.empty((0, len(qi))), tuple(qi))

    def __len__(self) -> int:
        return len(self.fps)

    def lookup(self, fp: np.ndarray) -> np.ndarray:
        """The frozen cell id of each fingerprint (:data:`NONE` where never published)."""
        out = np.full(len(fp), NONE, dtype=np.uint64)
        if not len(self.fps) or not len(fp):
            return out
        pos = np.searchsorted(self.fps, fp)
        inside = pos < len(self.fps)
        hit = np.zeros(len(fp), bool)
        hit[inside] = self.fps[pos[inside]] == fp[inside]
        out[hit] = self.cell_of[pos[hit]]
        return out

    def cell_values(self, cells: np.ndarray) -> np.ndarray:
        """Published values (cells × QIs) of frozen cell ids."""
        pos = np.searchsorted(self.cell_ids, cells)
        return self.values[np.minimum(pos, max(len(self.cell_ids) - 1, 0))]


def _scale(X: np.ndarray):
    mean = np.nanmean(X, axis=0) if len(X) else np.zeros(X.shape[1])
    sd = np.nanstd(X, axis=0) if len(X) else np.ones(X.shape[1])
    sd = np.where(sd > 0, sd, 1.0)
    return mean, sd


def _nearest_alive(tree, point, alive, me, n):
    q = 2
    while True:
        _, idx = tree.query(point, k=min(q, n))
        idx = np.atleast_1d(idx)
        for j in idx:
            if j != me and j < n and alive[j]:
                return int(j)
        if q >= n:
            return None
        q *= 4


def _merge_fragments(Cz, sizes, k):
    """Root fragment of every fragment after merging those below k into their nearest ones."""
    from scipy.spatial import cKDTree

    F = len(sizes)
    parent = np.arange(F)
    size = sizes.astype(np.int64).copy()
    alive = np.ones(F, bool)
    n_alive = F
    heap = [(int(s), i) for i, s in enumerate(size) if s < k]
    heapq.heapify(heap)
    tree = cKDTree(Cz) if heap else None
    while heap and n_alive > 1:
        s, i = heapq.heappop(heap)
        if not alive[i] or size[i] != s or s >= k:
            continue
        j = _nearest_alive(tree, Cz[i], alive, i, F)
        if j is None:
            break
        keep, drop = (j, i) if size[j] >= size[i] else (i, j)
        alive[drop] = False
        n_alive -= 1
        parent[drop] = keep
        size[keep] += size[drop]
        if size[keep] < k:
            heapq.heappush(heap, (int(size[keep]), keep))
    for i in range(F):  # path compression
        r = i
        while parent[r] != r:
            r = parent[r]
        parent[i] = r
    return parent, size


def series_values(df: pd.DataFrame, observed: list, qi: tuple, k: int, frozen: Frozen, form_cells):
    """Published values (rows × ``observed``, float64) of one group of a re-release, and its counts.

    ``form_cells(frame)`` forms new cells of at least k among ``frame``'s records with the
    group's method and returns their published values (rows × ``observed``)."""
    n = len(df)
    X = df[observed].to_numpy(np.float64, na_value=np.nan)
    fp = np.empty(n, FP_DTYPE)
    fp["hi"], fp["lo"] = df[FP[0]].to_numpy(np.uint64), df[FP[1]].to_numpy(np.uint64)
    cell = frozen.lookup(fp)
    found = cell != NONE
    cols = [qi.index(c) for c in observed]
    other = [j for j in range(len(qi)) if qi[j] not in observed]
    known = found.copy()
    if found.any():
        full = frozen.cell_values(cell[found])
        same = ~np.isnan(full[:, cols]).any(axis=1)
        if other:
            same &= np.isnan(full[:, other]).all(axis=1)
        known[np.flatnonzero(found)[~same]] = False
    out = np.full((n, len(observed)), np.nan)
    mean, sd = _scale(X)
    frag, inv, counts = np.unique(cell[known], return_inverse=True, return_counts=True)
    C = frozen.cell_values(frag)[:, cols] if len(frag) else np.empty((0, len(observed)))
    Cz = (C - mean) / sd
    roots, size = _merge_fragments(Cz, counts, k) if len(frag) else (np.empty(0, int), np.empty(0, int))
    merged = int(np.sum(roots != np.arange(len(frag))))
    kidx = np.flatnonzero(known)
    out[kidx] = C[roots[inv]]
    new = np.flatnonzero(~known)
    joined = absorbed = 0
    alive = np.flatnonzero(roots == np.arange(len(frag)))
    if len(alive) == 1 and size[alive[0]] < k:  # the group's only frozen cell takes its nearest new records
        from scipy.spatial import cKDTree

        need = int(k - size[alive[0]])
        if need > len(new):
            raise RuntimeError("a group of a re-release has fewer than k records")
        Z = (X[new] - mean) / sd
        _, idx = cKDTree(Z).query(Cz[alive[0]], k=need)
        take = new[np.atleast_1d(idx)]
        out[take] = C[alive[0]]
        absorbed = need
        new = np.setdiff1d(new, take)
    new_cells = 0
    if len(new) >= k:
        out[new] = form_cells(df.iloc[new])
        new_cells = len(np.unique(out[new], axis=0))
    elif len(new):
        if not len(alive):
            raise RuntimeError("a group of a re-release has fewer than k records")
        from scipy.spatial import cKDTree

        _, idx = cKDTree(Cz[alive]).query((X[new] - mean) / sd, k=1)
        out[new] = C[alive[np.atleast_1d(idx)]]
        joined = len(new)
    counts_ = {"republished": int(len(kidx)), "new": int(n - len(kidx)), "frozen_cells": int(len(alive)),
               "merged_cells": merged, "new_cells": int(new_cells), "joined_frozen": int(joined + absorbed)}
    return out, counts_
