"""Strata and missing-value patterns: independent microaggregation inside groups of records.

A *stratum* is the set of records sharing the values of the ``strata`` columns (as sdcMicro's
``strata_variables``); each is microaggregated on its own, so no cell mixes two strata.  With
``missing="separate"`` the records of each stratum are further split by *missingness pattern*
(which QI columns are missing): each pattern group is microaggregated on its observed columns
and the gaps stay missing (never a sentinel value).  A group is the unit of work of the fan-out.

Small strata.  A stratum with fewer than k records is refused (named by its position in key
order and its columns, never by its values: a stratum's values are data) unless
``merge_small_strata`` is set: then, with strata ordered by their key values, the smallest
stratum under k is merged with its adjacent stratum holding fewer records (the previous one on a
tie), repeatedly, until every group has at least k records.  Adjacency in key order is the
"nearest neighbour": for ordered keys (years, age bands, regions coded in order) it joins
neighbouring values.  A pattern group with fewer than k records is refused, naming the pattern's
missing columns and the stratum.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import ParameterError
from .io.prescan import groupable, plain_key
from .release.publish import missing_values

__all__ = ["Group", "MISSING", "plan_groups", "check_strata", "pattern_of", "group_mask", "group_codes", "group_rows", "rows_by_code", "rows_mask", "strata_summary",
           "merged_labels", "publish_strata"]

MISSING = ("refuse", "separate")


@dataclass
class Group:
    """One unit of microaggregation: a set of strata and one missingness pattern."""

    strata: list          # stratum key tuples (one unless merged)
    pattern: int          # bit j set = QI column j missing
    observed: list        # QI columns observed in this group
    n: int
    label: str            # for reports and errors: stratum positions, columns and missing columns, no values

    def to_dict(self) -> dict:
        return {"group": self.label, "n": int(self.n), "observed": list(self.observed)}


def pattern_of(X_missing: np.ndarray) -> np.ndarray:
    """Pattern codes (bit j = column j missing) of a boolean missing matrix (rows × QI)."""
    code = np.zeros(X_missing.shape[0], dtype=np.int64)
    for j in range(X_missing.shape[1]):
        code |= X_missing[:, j].astype(np.int64) << j
    return code


def _sort_key(t):
    return tuple((v is None, "" if v is None else v) for v in t)


def stratum_label(cols, positions, count: int) -> str:
    """How messages and reports name strata: by their positions in key order (1-based) among
    ``count`` and their columns — never by their values, which are data (a label, a date, a
    measurement)."""
    if not cols:
        return "all records"
    where = f"column{'s' if len(cols) > 1 else ''} {', '.join(map(str, cols))}"
    if len(positions) == 1:
        return f"stratum {positions[0]} of {count} ({where})"
    return f"strata {'+'.join(map(str, positions))} of {count} ({where})"


def check_strata(strata, qi, columns, partition_by=()) -> list:
    """Validate the strata columns: known, not QI, not repeated."""
    if strata is None:
        return []
    if isinstance(strata, str):
        strata = [strata]
    strata = list(strata)
    unknown = [c for c in strata if c not in columns]
    if unknown:
        raise ParameterError(f"strata: unknown column(s) {', '.join(map(repr, unknown))}")
    both = [c for c in strata if c in qi]
    if both:
        raise ParameterError(f"strata: column(s) {', '.join(map(repr, both))} are also quasi-identifiers")
    if len(set(strata)) != len(strata):
        raise ParameterError("strata: a column is named more than once")
    return strata


def _merge_small(units: list, sizes: list, k: int) -> list:
    """Merge units (lists of stratum keys, in key order, with their record counts ``sizes``) until
    every one holds at least k records: the smallest unit under k (the first in key order on a tie)
    joins its neighbour holding fewer records (the previous one on a tie), repeatedly.  A heap of
    the units under k and links to the neighbours: a step costs log(units), not a scan of them.
    A unit is named by the position of its first stratum, which keeps the key order of the units."""
    m = len(units)
    units, sizes = [list(u) for u in units], list(sizes)
    prev, nxt, alive = list(range(-1, m - 1)), list(range(1, m + 1)), [True] * m
    nxt[-1] = -1
    heap = [(s, i) for i, s in enumerate(sizes) if s < k]
    heapq.heapify(heap)
    while heap:
        s, i = heapq.heappop(heap)
        if not alive[i] or s != sizes[i]:
            continue   # merged since, or grown: its current entry is elsewhere in the heap
        neighbours = [c for c in (prev[i], nxt[i]) if c != -1]
        if not neighbours:
            break      # one unit left: the whole input (refused later if under k)
        j = min(neighbours, key=lambda c: (sizes[c], c))
        lo, hi = min(i, j), max(i, j)
        units[lo] += units[hi]
        sizes[lo] += sizes[hi]
        alive[hi] = False
        nxt[lo] = nxt[hi]
        if nxt[hi] != -1:
            prev[nxt[hi]] = lo
        if sizes[lo] < k:
            heapq.heappush(heap, (sizes[lo], lo))
    return [u for u, a in zip(units, alive) if a]


def plan_groups(counts: dict, strata: list, qi: list, k: int, merge_small: bool = False) -> list:
    """The groups of a run from record counts per (stratum key tuple, pattern).

    Parameters
    ----------
    counts : dict
        ``{(stratum key tuple, pattern code): records}``.
    strata, qi : list
        Strata columns and QI columns (pattern bits follow ``qi``).
    k : int
    merge_small : bool
        Merge strata under k with a neighbour (module docstring) instead of refusing.

    Raises
    ------
    ParameterError
        A stratum (or, after merging, the whole input) or a pattern group with fewer than k records.
    """
    sizes: dict = {}
    for (key, _), n in counts.items():
        sizes[key] = sizes.get(key, 0) + n
    units = [[key] for key in sorted(sizes, key=_sort_key)]
    position = {u[0]: i + 1 for i, u in enumerate(units)}
    count = len(units)
    total = lambda u: sum(sizes[s] for s in u)  # noqa: E731
    if strata:
        small = [u for u in units if total(u) < k]
        if small and not merge_small:
            u = small[0]
            raise ParameterError(
                f"{stratum_label(strata, [position[u[0]]], count)} in key order has {total(u)} record(s), fewer "
                f"than k = {k} ({len(small)} such strata; use --merge-small-strata to merge them with a neighbour)"
            )
        units = _merge_small(units, [total(u) for u in units], k)
    if sum(sizes.values()) < k:
        raise ParameterError(f"k = {k} exceeds the number of records n = {sum(sizes.values())}")
    patterns: dict = {}   # per stratum key: its records per pattern
    for (key, pat), n in counts.items():
        patterns.setdefault(key, {})
        patterns[key][pat] = patterns[key].get(pat, 0) + n
    groups = []
    for u in units:
        label = stratum_label(strata, [position[s] for s in u], count)
        by_pattern: dict = {}
        for key in u:
            for pat, n in patterns[key].items():
                by_pattern[pat] = by_pattern.get(pat, 0) + n
        for pat in sorted(by_pattern):
            n = by_pattern[pat]
            missing_cols = [c for j, c in enumerate(qi) if pat >> j & 1]
            observed = [c for j, c in enumerate(qi) if not pat >> j & 1]
            glabel = label if not missing_cols else f"{label}; missing {','.join(missing_cols)}"
            if n < k:
                raise ParameterError(
                    f"{n} record(s) with missing {', '.join(map(repr, missing_cols))} in {label}: fewer than "
                    f"k = {k}; impute them or drop those records"
                )
            groups.append(Group(strata=list(u), pattern=int(pat), observed=observed, n=int(n), label=glabel))
    return groups


def _text(v):
    return None if v is None else str(v)


def merged_labels(groups: list, strata: list) -> dict:
    """How merged strata are published: ``{column: {stratum key tuple: label}}``.

    A stratum column is part of every published tuple, so a stratum merged into a neighbour must
    not keep its own value: its records would be the only ones with that value, unique however
    well their QIs are aggregated.  For each group of merged strata, every stratum column whose
    values differ inside the group publishes one label for all its records: the values in key
    order joined by ``|`` (e.g. ``2019|2020``).  Such a column is published as text in every row
    (other strata keep their value, as text).  Empty when nothing was merged.
    """
    labels: dict = {}
    for g in groups:
        if len(g.strata) < 2:
            continue
        for j, c in enumerate(strata):
            values = list(dict.fromkeys(key[j] for key in g.strata))
            if len(values) > 1:
                label = "|".join("<NA>" if v is None else str(v) for v in values)
                labels.setdefault(c, {}).update({key: label for key in g.strata})
    return labels


def publish_strata(df: pd.DataFrame, strata: list, labels: dict) -> pd.DataFrame:
    """``df`` with each merged stratum column of ``labels`` published as text (:func:`merged_labels`)."""
    if not labels:
        return df
    df = df.copy()
    keys = [tuple(plain_key(v) for v in row) for row in df[strata].itertuples(index=False, name=None)]
    for c, mapping in labels.items():
        j = strata.index(c)
        df[c] = pd.array([mapping.get(key, _text(key[j])) for key in keys], dtype=object)
    return df


def group_mask(df: pd.DataFrame, strata: list, qi: list, group: Group) -> np.ndarray:
    """Boolean mask of the rows of ``df`` in ``group``."""
    n = len(df)
    if strata:
        keys = df[strata]
        mask = np.zeros(n, dtype=bool)
        for key in group.strata:
            m = np.ones(n, dtype=bool)
            for c, v in zip(strata, key):
                col = keys[c]
                m &= missing_values(col) if v is None else (col == v).fillna(False).to_numpy(dtype=bool)
            mask |= m
    else:
        mask = np.ones(n, dtype=bool)
    miss = np.column_stack([missing_values(df[c]) for c in qi]) if qi else np.zeros((n, 0), bool)
    return mask & (pattern_of(miss) == group.pattern)


def group_codes(df: pd.DataFrame, strata: list, qi: list, where: dict) -> np.ndarray:
    """Per row of ``df``, the position of its group: ``where`` maps (stratum key tuple, pattern) to
    a position; −1 for a row of no group there.  Rows are grouped as the pre-scan counted them
    (:func:`daskmicro.io.prescan.scan_frame`: equal key values, missing ones alike, −0.0 as 0.0),
    one Python step per distinct key and pattern, not per row or per group."""
    n = len(df)
    miss = np.column_stack([missing_values(df[c]) for c in qi]) if qi else np.zeros((n, 0), bool)
    frame = groupable(df[list(strata)]) if strata else pd.DataFrame(index=df.index)
    frame = frame.set_axis(range(len(strata)), axis=1)
    frame[len(strata)] = pattern_of(miss)
    # group numbers, then each group's key read off its first row (a mapping keyed by the values
    # would fold a NaN and a null of one column, which group apart, into one entry)
    ids = frame.groupby(list(frame.columns), dropna=False, sort=False, observed=True).ngroup().to_numpy()
    numbers, first = np.unique(ids, return_index=True)
    found = np.full(int(numbers.max()) + 1 if len(numbers) else 0, -1, dtype=np.int64)
    for number, row in zip(numbers.tolist(), first.tolist()):
        if number >= 0:
            key = tuple(plain_key(frame.iat[row, j]) for j in range(frame.shape[1]))
            found[number] = where.get((key[:-1], key[-1]), -1)
    return np.where(ids >= 0, found[np.maximum(ids, 0)], -1) if n else np.zeros(0, dtype=np.int64)


def group_rows(df: pd.DataFrame, strata: list, qi: list, groups) -> dict:
    """``{group index: positions of its rows in df}`` for ``groups`` — ``(index, Group)`` pairs — that
    ``df`` holds, from one grouping of ``df`` (:func:`group_codes`), not one pass per group."""
    where = {(key, g.pattern): i for i, g in groups for key in g.strata}
    return rows_by_code(group_codes(df, strata, qi, where))


def rows_by_code(codes: np.ndarray) -> dict:
    """``{code: positions holding it, ascending}`` for every code ≥ 0 of ``codes`` (one sort)."""
    order = np.argsort(codes, kind="stable")
    found, starts, counts = np.unique(codes[order], return_index=True, return_counts=True)
    return {int(i): order[a:a + c] for i, a, c in zip(found.tolist(), starts.tolist(), counts.tolist()) if i >= 0}


def rows_mask(n: int, rows) -> np.ndarray:
    """A boolean mask of ``n`` rows, True at ``rows``."""
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask


def strata_summary(strata, missing, merge_small, groups, reports) -> dict:
    """The ``strata`` section of a report: one entry per group (names, counts, IL; no QI values)."""
    entries = []
    for g, r in zip(groups, reports):
        e = g.to_dict()
        if r is not None:
            e.update(method=str(r.method), improved=bool((r.improvement or {}).get("changed")), cells=int(r.cells),
                     information_loss=float(r.information_loss))
        entries.append(e)
    return {"columns": list(strata), "missing": missing, "merge_small_strata": bool(merge_small),
            "information_loss": "record-weighted mean over groups, each z-scored on its own", "groups": entries}
