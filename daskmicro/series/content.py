"""The columns a series publishes as they are: what a re-release may publish next to frozen values.

Two releases of a series differ row by row only by whole cells of at least k records when, besides
the frozen QI values, every published cell's rows projected on the columns both releases publish
are the same multiset.  A record whose other columns (neither QIs, strata nor withheld) were
revised would otherwise be the one row each release has and the other has not.

The ledger records, for every published cell, the sum modulo 2**64 over its rows of

* for each column published as it is, a hash of the record's value mixed with its keyed
  fingerprint (so that two records swapping their values change the sum, and a sum cannot be
  tested against guessed values without the ledger's key): an *entry* ``c:NAME``;
* with two such columns or more, the same over the whole row of those columns (an entry
  ``j:[NAMES]``): records sharing a fingerprint (equal stratum and QIs, or a repeated id) are told
  apart by no per-column sum, and two of them swapping the values of one column but not of
  another change the rows and no column's sum.

A re-release computes the same sums from its input for every published cell it holds, keyed by
the cell and the latest release holding its records, and compares them with that release's
(:func:`check_content`).  A release that leaves a column out carries that column's sums of the
cells it republishes forward (:func:`carried`), so that a column published again is compared with
the values it last published.  Values are hashed as fingerprints hash them
(:func:`daskmicro.series.fingerprint.value_hashes`): numbers as numbers, text as text.  No Dask.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd

from pandas.api import types as ptypes

from .fingerprint import FP, FP_DTYPE, value_hashes
from .frozen import CELL, NONE, Frozen, classify

__all__ = ["column_entry", "joint_entry", "strata_entry", "published_hashes", "entry_columns", "recorded_entries", "passed_through", "row_terms",
           "sums_by", "content_table", "long_form", "aggregate", "scan_content", "compared_entries", "now_sums",
           "check_content", "carried", "empty_long", "LONG", "UNKNOWN"]

#: The columns of the long form of recorded sums: one row per release, cell and entry.
LONG = ("release", "cell", "entry", "count", "sum")
#: The entry a release carries for cells whose values of those columns were never recorded.
UNKNOWN = "u:"
_RESERVED = "__daskmicro"


def column_entry(name: str) -> str:
    return "c:" + name


def joint_entry(names) -> str:
    return "j:" + json.dumps(sorted(names))


def strata_entry(strata) -> str:
    """The entry of a record's strata as published (a merged stratum publishes its group's label)."""
    return "s:" + json.dumps(list(strata))


def entry_columns(entry: str) -> list:
    """The columns an entry sums over."""
    if entry == UNKNOWN:
        return []
    return [entry[2:]] if entry.startswith("c:") else list(json.loads(entry[2:]))


def recorded_entries(columns, strata=()) -> list:
    """The entries a release publishing ``columns`` as they are, and ``strata``, records for each of
    its cells."""
    cols = sorted(columns)
    return ([column_entry(c) for c in cols] + ([joint_entry(cols)] if len(cols) >= 2 else [])
            + ([strata_entry(strata)] if len(strata) else []))


def published_hashes(values: pd.Series) -> np.ndarray:
    """:func:`value_hashes` of a stratum column as published, text that reads as a number hashed as
    that number: a release merging small strata publishes every stratum as text (``3`` as ``"3"``)
    and its merged ones as their group's label (``"1|2"``), one merging none publishes them as read."""
    if not (ptypes.is_object_dtype(values.dtype) or ptypes.is_string_dtype(values.dtype)):
        return value_hashes(values)
    obj = values.astype(object)
    num = pd.to_numeric(obj, errors="coerce")
    out = value_hashes(obj)
    numeric = np.flatnonzero(num.notna().to_numpy())
    out[numeric] = value_hashes(num.iloc[numeric].astype(np.float64))
    return out


def passed_through(columns, exclude) -> list:
    """The columns published as they are (sorted): ``columns`` but ``exclude`` and run-only ones."""
    skip = set(exclude) | set(FP) | {CELL}
    return sorted(c for c in columns if c not in skip and not str(c).startswith(_RESERVED))


def empty_long() -> pd.DataFrame:
    """No recorded sums, in the long form :data:`LONG`."""
    return pd.DataFrame({"release": np.empty(0, np.int64), "cell": np.empty(0, np.uint64),
                         "entry": np.empty(0, object), "count": np.empty(0, np.int64), "sum": np.empty(0, np.uint64)})


def _tag(entry: str) -> np.uint64:
    return np.uint64(int.from_bytes(hashlib.sha256(entry.encode()).digest()[:8], "little"))


def row_terms(df: pd.DataFrame, hi: np.ndarray, lo: np.ndarray, entries) -> np.ndarray:
    """Rows × entries: each row's hash of its values of each entry's columns, mixed with its
    fingerprint (``hi``, ``lo``)."""
    n = len(df)
    out = np.empty((n, len(entries)), np.uint64)
    hashes = {}
    for j, e in enumerate(entries):
        cols = [(e[0], c) for c in entry_columns(e)]
        for key in cols:
            if key not in hashes:
                hashes[key] = (published_hashes if key[0] == "s" else value_hashes)(df[key[1]])
        mat = np.empty((n, 3 + len(cols)), np.uint64)
        mat[:, 0], mat[:, 1], mat[:, 2] = hi, lo, _tag(e)
        for i, key in enumerate(cols):
            mat[:, 3 + i] = hashes[key]
        rows = np.ascontiguousarray(mat).view(f"S{8 * mat.shape[1]}").ravel().astype(object)
        out[:, j] = pd.util.hash_array(rows, categorize=False) if n else np.empty(0, np.uint64)
    return out


def sums_by(keys, terms: np.ndarray) -> tuple:
    """Per distinct key (``keys``: uint64 arrays of equal length), its rows and the sums modulo
    2**64 of their ``terms``: (distinct keys, counts, sums)."""
    k = np.empty(len(terms), dtype=[(f"k{i}", "<u8") for i in range(len(keys))])
    for i, a in enumerate(keys):
        k[f"k{i}"] = a
    uniq, inv, counts = np.unique(k, return_inverse=True, return_counts=True)
    sums = np.zeros((len(uniq), terms.shape[1]), np.uint64)
    np.add.at(sums, inv.ravel(), terms)
    return [uniq[f"k{i}"] for i in range(len(keys))], counts.astype(np.int64), sums


def content_table(df: pd.DataFrame, cells: np.ndarray, fp_columns, columns, strata=()) -> dict:
    """The sums one published release piece records (columns of an Arrow table): per cell id, its
    rows ``n`` and one sum per entry of ``columns`` and ``strata``."""
    entries = recorded_entries(columns, strata)
    hi, lo = df[fp_columns[0]].to_numpy(np.uint64), df[fp_columns[1]].to_numpy(np.uint64)
    (ids,), counts, sums = sums_by([cells], row_terms(df, hi, lo, entries))
    out = {"cell": ids, "n": counts}
    out.update({e: sums[:, j] for j, e in enumerate(entries)})
    return out


def long_form(table: pd.DataFrame, release: int) -> pd.DataFrame:
    """A recorded table of sums (a piece's, one row per cell; or carried ones, one row per cell and
    entry) in the long form :data:`LONG`."""
    if "entry" in table.columns:
        out = table[["cell", "entry", "count", "sum"]].copy()
    else:
        entries = [c for c in table.columns if c not in ("cell", "n")]
        out = pd.DataFrame({
            "cell": np.tile(table["cell"].to_numpy(np.uint64), len(entries)),
            "entry": np.repeat(np.array(entries, dtype=object), len(table)),
            "count": np.tile(table["n"].to_numpy(np.int64), len(entries)),
            "sum": np.concatenate([table[e].to_numpy(np.uint64) for e in entries]) if entries else np.empty(0, np.uint64)})
    out.insert(0, "release", np.int64(release))
    return out


def aggregate(long: pd.DataFrame, keys=("release", "cell", "entry")) -> pd.DataFrame:
    """The long form with one row per key: counts added, sums added modulo 2**64."""
    keys = list(keys)
    if long.empty:
        return pd.DataFrame({c: long[c] for c in keys + ["count", "sum"]})
    codes = long.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(codes, return_index=True)[1]   # the first row of each key, in the keys' order
    count = np.zeros(len(first), np.int64)
    np.add.at(count, codes, long["count"].to_numpy(np.int64))
    total = np.zeros(len(first), np.uint64)
    np.add.at(total, codes, long["sum"].to_numpy(np.uint64))
    out = long.iloc[first][keys].reset_index(drop=True)
    out["count"], out["sum"] = count, total
    return out.astype({"cell": np.uint64, **({"release": np.int64} if "release" in keys else {})})


def scan_content(df: pd.DataFrame, qi: tuple, frozen: Frozen, entries) -> dict:
    """One input piece's sums of ``entries`` over its records published before, per frozen cell
    and latest release holding them."""
    fp = np.empty(len(df), FP_DTYPE)
    fp["hi"], fp["lo"] = df[FP[0]].to_numpy(np.uint64), df[FP[1]].to_numpy(np.uint64)
    cell = df[CELL].to_numpy(np.uint64) if CELL in df.columns else classify(df, qi, frozen)
    known = np.flatnonzero(cell != NONE)
    sub = df.iloc[known]
    terms = row_terms(sub, fp["hi"][known], fp["lo"][known], entries)
    keys, counts, sums = sums_by([cell[known], frozen.origin_of(fp[known]).astype(np.uint64)], terms)
    return {"cell": keys[0], "release": keys[1].astype(np.int64), "n": counts, "sums": sums}


def compared_entries(frozen: Frozen, columns, strata=()) -> list:
    """The entries a re-release publishing ``columns`` as they are, and ``strata``, computes from its
    input: those it records, and the whole rows over the columns of an earlier release that it
    publishes all."""
    now = recorded_entries(columns, strata)
    if frozen.content is None or frozen.content.empty:
        return now
    earlier = [e for e in pd.unique(frozen.content["entry"]) if e.startswith("j:")]
    return now + sorted(e for e in earlier if e not in now and set(entry_columns(e)) <= set(columns))


def now_sums(parts: list, entries) -> tuple:
    """Every piece's :func:`scan_content` added up: the cells published before present, with the
    latest release holding them and their rows (``release``, ``cell``, ``count``), and their sums
    in the long form."""
    keys = [pd.DataFrame({"release": p["release"], "cell": p["cell"], "count": p["n"]}) for p in parts]
    keys = pd.concat(keys, ignore_index=True) if keys else empty_long()[["release", "cell", "count"]]
    groups = aggregate(keys.assign(entry="", sum=np.uint64(0)).astype({"count": np.int64}))
    groups = groups[["release", "cell", "count"]]
    frames = [pd.DataFrame({"release": p["release"], "cell": p["cell"], "entry": e, "count": p["n"],
                            "sum": p["sums"][:, j]}) for p in parts for j, e in enumerate(entries) if len(p["n"])]
    if not frames:
        return groups, empty_long()
    return groups, aggregate(pd.concat(frames, ignore_index=True))


def _twins(frozen: Frozen) -> np.ndarray:
    """The cells holding records that share a fingerprint (more rows than fingerprints)."""
    if frozen.rows is None:
        return np.empty(0, np.uint64)
    rows, n_rows = np.unique(frozen.rows, return_counts=True)
    fps, n_fps = np.unique(frozen.cell_of, return_counts=True)
    pos = np.minimum(np.searchsorted(fps, rows), max(len(fps) - 1, 0))
    return rows[(fps[pos] != rows) | (n_rows > n_fps[pos])] if len(fps) else rows


def _refuse(groups: pd.DataFrame, what: str) -> None:
    from ..errors import ParameterError

    raise ParameterError(
        f"{len(groups)} group(s) published before in this series ({int(groups['count'].sum())} record(s)) {what}; "
        "comparing the releases would single those records' rows out: publish the same values as before, or start "
        "a new series (--new-series) once the earlier releases are withdrawn")


def check_content(frozen: Frozen, groups: pd.DataFrame, now: pd.DataFrame, columns) -> None:
    """Refuse a re-release that would publish, for a cell published before, other rows of the
    columns published as they are than the latest release holding its records recorded
    (``groups``, ``now``: :func:`now_sums` of this run's input).  Counts only in the message, never
    values."""
    columns = set(columns)
    if groups.empty:
        return
    stored = frozen.content if frozen.content is not None else empty_long()
    both = now.merge(stored.astype({"cell": np.uint64, "release": np.int64}), on=["release", "cell", "entry"],
                     suffixes=("", "_was"))
    changed = both[(both["count"] == both["count_was"]) & (both["sum"] != both["sum_was"])]
    strata = changed[changed["entry"].str.startswith("s:")]
    if len(strata):
        _refuse(_groups_of(strata, groups), "would be published with other values of their strata than before (small "
                "strata merged otherwise: their intersection is a stratum of fewer than k)")
    if len(changed):
        _refuse(_groups_of(changed, groups), "would be published with other values of their columns published as "
                "they are than the release that last published those columns")
    if not columns:
        return   # nothing published as it is: the rows are the frozen cells' values and strata
    unknown = _unknown(frozen, groups)
    if len(unknown):
        _refuse(unknown, "were last published by a release whose ledger holds no trace of their columns published "
                "as they are (a ledger written by an earlier version): their values cannot be compared with these")
    lost = both[both["count"] != both["count_was"]]
    held = stored.merge(groups[["release", "cell"]], on=["release", "cell"])
    seen = set(now["entry"])
    joints = held[[e.startswith("j:") and e not in seen and len(columns & set(entry_columns(e))) >= 2
                   for e in held["entry"]]]
    blind = joints[np.isin(joints["cell"].to_numpy(np.uint64), _twins(frozen))]
    if len(lost) or len(blind):
        _refuse(_groups_of(pd.concat([lost, blind]), groups),
                "hold records sharing a fingerprint, or share their published values with groups left out, whose "
                "rows over the columns published as they are now cannot be compared with those published before "
                "(publish the same columns as before, or identify records by a column of distinct values: "
                "--id-column)")


def _unknown(frozen: Frozen, groups: pd.DataFrame) -> pd.DataFrame:
    """The cells whose latest release recorded no trace of the columns published as they are (a
    ledger written before they were recorded), or carried that none was recorded (:data:`UNKNOWN`)."""
    recorded = frozen.recorded or {}
    none = np.array([recorded.get(int(r)) is None for r in groups["release"]], bool)
    if frozen.content is not None and len(frozen.content):
        marked = frozen.content[frozen.content["entry"] == UNKNOWN][["release", "cell"]]
        none |= groups.merge(marked.assign(m=True), on=["release", "cell"], how="left")["m"].notna().to_numpy()
    return groups[none]


def _groups_of(rows: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    return groups.merge(rows[["release", "cell"]].drop_duplicates(), on=["release", "cell"])


def carried(frozen: Frozen, groups: pd.DataFrame, cells: np.ndarray, roots: np.ndarray, columns,
            strata=()) -> pd.DataFrame:
    """The sums a re-release publishing ``columns`` as they are carries forward for the cells it
    republishes (``groups``: from its :func:`now_sums`): every other entry recorded before, added
    up per cell id it publishes (``cells`` merged into ``roots``, cell ids; a cell not among them
    keeps its id).  One row per cell and entry (``cell``, ``entry``, ``count``, ``sum``)."""
    empty = pd.DataFrame({"cell": np.empty(0, np.uint64), "entry": np.empty(0, object),
                          "count": np.empty(0, np.int64), "sum": np.empty(0, np.uint64)})
    if groups.empty:
        return empty
    stored = frozen.content if frozen.content is not None else empty_long()
    held = stored.merge(groups[["release", "cell"]], on=["release", "cell"])
    held = held[~held["entry"].isin(recorded_entries(columns, strata))]
    unknown = _unknown(frozen, groups)   # stays unknown, whatever this release publishes
    if len(unknown):
        held = pd.concat([held, unknown.assign(entry=UNKNOWN, sum=np.uint64(0))[list(LONG)]], ignore_index=True)
    if held.empty:
        return empty
    ids = held["cell"].to_numpy(np.uint64)
    pos = pd.Index(np.asarray(cells, np.uint64)).get_indexer(ids)
    held = held.assign(cell=np.where(pos >= 0, np.asarray(roots, np.uint64)[np.maximum(pos, 0)], ids))
    return aggregate(held[["cell", "entry", "count", "sum"]], keys=("cell", "entry"))
