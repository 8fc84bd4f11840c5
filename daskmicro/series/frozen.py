"""Cells of a re-release: records published before keep their frozen cell values.

For one group (a stratum × missingness pattern, as the planner forms them), given the ledger's
frozen cells:

1. a record published before (its fingerprint is in the ledger, with a cell whose observed QIs
   are this group's) takes its frozen cell's published values;
2. frozen cells with fewer than k of their records present (after a larger k) merge with the
   nearest frozen cell present, and the merged cell takes the values of its larger part — values
   published before;
3. records never published form new cells of at least k among themselves with the group's
   method.  A group with fewer than k of them, or whose records published before are fewer than k
   in all, is refused (:func:`check_growth`): the new records would be the only rows that differ
   from the last release (their pass-through columns singled out by the difference of the two), or
   the records published before could keep their values only in a tuple shared by fewer than k.

A re-release must also hold, of each published cell, all of its records or none of them
(:func:`check_whole_cells`): the rows of a cell's records that are left out would be singled out of
the earlier releases by the difference, and a record that came back would be the one row a
release adds.  Releases of a series thus differ by whole cells of at least k records.

So a record's re-published values are values published before, the difference of two
releases' totals over any grouping is a combination of published cell values, and the rows two
releases differ by form cells of at least k.  No Dask here.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..release.publish import missing_values
from .fingerprint import FP, FP_DTYPE

__all__ = ["NONE", "CELL", "Frozen", "classify", "known_cells", "scan_group", "merge_cells", "GroupFreeze", "frozen_rows",
           "check_growth", "check_whole_cells"]

NONE = np.uint64(0)
#: The hidden column that carries a record's frozen cell through a re-release (never published).
CELL = "__daskmicro_cell"


@dataclass
class Frozen:
    """The frozen cells of a series: fingerprints (sorted) → cell id → published QI values, and
    what the latest release holding each fingerprint published of the other columns."""

    fps: np.ndarray          # FP_DTYPE, sorted
    cell_of: np.ndarray      # uint64 cell id of each fingerprint
    cell_ids: np.ndarray     # uint64, sorted
    values: np.ndarray       # float64, cells × QIs (published values, NaN where not published)
    qi: tuple
    rows: np.ndarray | None = None   # uint64 cell of every published row of the fingerprints (repeats counted)
    rows_lo: np.ndarray | None = None   # uint64 second half of each such row's fingerprint
    origin: np.ndarray | None = None    # int64 number of the latest release holding each fingerprint
    content: pd.DataFrame | None = None   # the other columns' sums of those releases' cells (series.content)
    recorded: dict | None = None   # release number → the columns it published as they are (None: unknown)

    @classmethod
    def empty(cls, qi) -> "Frozen":
        return cls(np.empty(0, FP_DTYPE), np.empty(0, np.uint64), np.empty(0, np.uint64),
                   np.empty((0, len(qi))), tuple(qi))

    def __len__(self) -> int:
        return len(self.fps)

    def positions(self, fp: np.ndarray) -> np.ndarray:
        """The position in :attr:`fps` of each fingerprint (−1 where never published).

        Searched by the first 64 bits (a plain integer search) and checked on all 128; the rare
        fingerprints whose first 64 bits the ledger holds twice are searched on all 128."""
        out = np.full(len(fp), -1, dtype=np.int64)
        if not len(self.fps) or not len(fp):
            return out
        hi = self.fps["hi"]
        pos = np.searchsorted(hi, fp["hi"])
        inside = pos < len(hi)
        hit = np.zeros(len(fp), bool)
        hit[inside] = self.fps[pos[inside]] == fp[inside]
        out[hit] = pos[hit]
        twice = hi[1:][hi[1:] == hi[:-1]]
        if len(twice):
            again = np.flatnonzero(~hit & np.isin(fp["hi"], twice))
            p2 = np.searchsorted(self.fps, fp[again])
            ok = (p2 < len(hi))
            ok[ok] = self.fps[p2[ok]] == fp[again[ok]]
            out[again[ok]] = p2[ok]
        return out

    def lookup(self, fp: np.ndarray) -> np.ndarray:
        """The frozen cell id of each fingerprint (:data:`NONE` where never published)."""
        pos = self.positions(fp)
        out = np.full(len(fp), NONE, dtype=np.uint64)
        out[pos >= 0] = self.cell_of[pos[pos >= 0]]
        return out

    def origin_of(self, fp: np.ndarray) -> np.ndarray:
        """The number of the latest release holding each fingerprint (0 where never published, or
        where the ledger was read without it)."""
        pos = self.positions(fp)
        out = np.zeros(len(fp), dtype=np.int64)
        if self.origin is not None:
            out[pos >= 0] = self.origin[pos[pos >= 0]]
        return out

    def for_workers(self) -> "Frozen":
        """What the workers need of the frozen cells (the recorded sums of the other columns stay
        with the client)."""
        return replace(self, content=None, recorded=None)

    def cell_values(self, cells: np.ndarray) -> np.ndarray:
        """Published values (cells × QIs) of frozen cell ids."""
        pos = np.searchsorted(self.cell_ids, cells)
        return self.values[np.minimum(pos, max(len(self.cell_ids) - 1, 0))]


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


def classify(df: pd.DataFrame, qi: tuple, frozen: Frozen) -> np.ndarray:
    """The frozen cell of each record of a piece carrying its fingerprints (:data:`NONE` for a
    record never published, or published with other missing QIs than it has now)."""
    fp = np.empty(len(df), FP_DTYPE)
    fp["hi"], fp["lo"] = df[FP[0]].to_numpy(np.uint64), df[FP[1]].to_numpy(np.uint64)
    cell = frozen.lookup(fp)
    found = np.flatnonzero(cell != NONE)
    if len(found):
        was = np.isnan(frozen.cell_values(cell[found]))
        now = np.column_stack([missing_values(df[c]) for c in qi])[found]
        cell[found[(was != now).any(axis=1)]] = NONE
    return cell


def known_cells(df: pd.DataFrame, observed: list, qi: tuple, frozen: Frozen) -> np.ndarray:
    """The frozen cell of each record of one group: the :data:`CELL` column a piece was given
    (:func:`classify`), else looked up."""
    if CELL in df.columns:
        return df[CELL].to_numpy(np.uint64)
    return classify(df, qi, frozen)


def scan_group(df: pd.DataFrame, observed: list, qi: tuple, frozen: Frozen) -> dict:
    """One piece's share of one group: its new records, its records per frozen cell, the moments
    of its observed QIs."""
    from ..kernels.moments import chunk_moments

    cell = known_cells(df, observed, qi, frozen)
    known = cell != NONE
    cells, inv, counts = np.unique(cell[known], return_inverse=True, return_counts=True)
    return {"new": int(np.sum(~known)), "cells": cells, "counts": counts,
            "sums": cell_sums(inv, df[FP[1]].to_numpy(np.uint64)[known], len(cells)),
            "moments": chunk_moments(df[observed].to_numpy(np.float64, na_value=np.nan)) if observed else None}


def merge_cells(C: np.ndarray, counts: np.ndarray, k: int, mean, sd):
    """Frozen cells present in a group (their published values ``C`` and present records), merged
    until every one has k: (root of each cell, present records per root)."""
    if not len(counts):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return _merge_fragments((C - mean) / sd, counts, k)


@dataclass
class GroupFreeze:
    """What the frozen cells decide for one group of a re-release, for every piece."""

    index: int                  # the group's position in the run
    group: object               # daskmicro.strata.Group
    cells: np.ndarray           # frozen cells present (sorted)
    roots: np.ndarray           # root (position in ``cells``) of each
    values: np.ndarray          # published values of each cell (cells × observed)
    mean: np.ndarray            # the group's moments (z-scale of every distance)
    sd: np.ndarray
    constant: np.ndarray        # observed QIs constant in the group
    new: int                    # new records, forming cells of their own (0 or ≥ k)

    @property
    def alive(self) -> np.ndarray:
        return np.flatnonzero(self.roots == np.arange(len(self.roots)))


def frozen_rows(df: pd.DataFrame, gf: GroupFreeze, mask: np.ndarray, qi: tuple, frozen: Frozen):
    """The rows of one piece in group ``gf`` published before and their frozen values (rows ×
    observed), the root cell of each, the rest (new records forming cells), and how many of the
    rows were published before."""
    observed = list(gf.group.observed)
    sub = np.flatnonzero(mask)
    cell = known_cells(df.iloc[sub], observed, qi, frozen)
    known = cell != NONE
    root = np.full(len(sub), -1, np.int64)
    pos = np.searchsorted(gf.cells, cell[known])
    root[known] = gf.roots[pos]
    take = root >= 0
    return sub[take], gf.values[root[take]], root[take], sub[~take], int(known.sum())


def check_growth(label: str, k: int, new: int, short: int | None) -> None:
    """Refuse a re-released group (``label``) whose new records (``new``) are fewer than k, or whose
    records published before are all in one frozen cell short of k (``short``: how many; None when
    not).  Counts only in the message, never values."""
    from ..errors import ParameterError

    if short is not None:
        raise ParameterError(
            f"{label}: only {short} of the records published before in this series are left in this group, fewer "
            f"than k = {k}: they cannot keep the values published before (fewer than k would share them) and new "
            "values would give the earlier ones away; start a new series (--new-series) only if the earlier "
            "releases were withdrawn")
    if 0 < new < k:
        raise ParameterError(
            f"{label}: {new} record(s) not published before in this series, fewer than k = {k}: they would be the "
            "only rows that differ from the last release, singled out by the difference of the two with every "
            "column they publish; release them once at least k new records have come in")


def cell_sums(inv: np.ndarray, lo: np.ndarray, n: int) -> np.ndarray:
    """Per cell (``inv``: each row's cell position), the sum modulo 2**64 of its rows' keyed
    fingerprint halves ``lo``: equal sums and counts mean, but for a chance of 2**-64, the same
    multiset of records."""
    out = np.zeros(n, np.uint64)
    np.add.at(out, inv, lo.astype(np.uint64, copy=False))
    return out


def check_whole_cells(frozen: Frozen, cells: np.ndarray, present: np.ndarray, sums=None) -> None:
    """Refuse a re-release holding some but not all the records of a published cell, or more rows
    of it than were published (``cells``: frozen cell ids found among this run's records,
    ``present``: how many of each, repeats summed; ``sums``: their :func:`cell_sums`, which tell
    one record repeated for another).  A cell's records are the rows published with
    the cell's values in the latest release holding their fingerprint, repeats counted: records
    sharing a fingerprint (equal stratum and QIs, or a repeated id) are told apart by no column the
    ledger holds, so one more or one fewer of them, or one published in another cell before (all
    of them take one cell now), would be the one row two releases differ by.  A cell whose
    published values are all missing (records with every QI missing, published as they are) is
    judged the same way: one of them more or fewer would be the row two releases differ by."""
    from ..errors import ParameterError

    if not len(frozen) or not len(cells):
        return
    cells, inv = np.unique(cells, return_inverse=True)
    present = np.bincount(inv, weights=present, minlength=len(cells)).astype(np.int64)
    rows = frozen.cell_of if frozen.rows is None else frozen.rows
    ids, where, members = np.unique(rows, return_inverse=True, return_counts=True)
    pos = np.minimum(np.searchsorted(ids, cells), len(ids) - 1)
    size = np.where(ids[pos] == cells, members[pos], 0)
    extra = present > size
    if sums is not None and frozen.rows_lo is not None:
        now = cell_sums(inv, np.asarray(sums, np.uint64), len(cells))
        then = cell_sums(where, frozen.rows_lo, len(ids))[pos]
        extra |= (present == size) & (now != then)
    if extra.any():
        raise ParameterError(
            f"{int(extra.sum())} group(s) published before in this series would hold other or more records than "
            "were published in them: records sharing a fingerprint (equal stratum and QI values, or a repeated id) "
            "repeated a different number of times, or published in another group before; comparing the releases "
            "would single their rows out; release the same records as before, identify records by a column of "
            "distinct values (--id-column), or start a new series (--new-series) if the earlier releases were "
            "withdrawn")
    partial = present < size
    if partial.any():
        gone = int((size - present)[partial].sum())
        raise ParameterError(
            f"{gone} record(s) published before in this series are missing from this release, from {int(partial.sum())} "
            "published group(s) whose other records are in it: comparing the releases would single the missing "
            "records' rows out; a re-release holds all the records of a published group or none of them (withdraw "
            "whole groups), or start a new series (--new-series) if the earlier releases were withdrawn")
