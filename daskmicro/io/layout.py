"""Which output file each release row goes to: exactly ``rows_per_file`` rows a file.

Every row carries a seeded key, a bijective mix of its global row id
(:func:`daskmicro.release.publish.shuffle_keys`), so keys are distinct and their order is a seeded
shuffle that depends only on the row ids and the seed.  In each output partition (hive
directory) the rows are cut by key rank: file ``i`` holds the rows of ranks ``i·R … (i+1)·R − 1``
for ``R = rows_per_file``, so every file holds exactly R rows except the partition's last.

The cut keys (the keys at ranks R, 2R, …) are found without gathering the keys: one pass counts,
per partition, the keys in each of 4096 ranges of their top 12 bits (a histogram per input
file, merged on the workers); the ranges holding a cut are known from the cumulative counts, and
a second pass returns only the keys in those ranges (about n / 4096 per cut), from which the
client picks the exact ones.  The passes read only the row ids and the partition columns.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import InputError
from ..release.publish import shuffle_keys
from . import hive
from .prescan import groupable
from .source import RID

__all__ = ["HIST_BITS", "KEY_COLUMN", "hidden_columns", "check_hidden_names", "plan_files", "file_index", "split_piece", "pick", "piece_keys", "key_histogram", "merge_histograms",
           "keys_in_ranges", "merge_range_keys", "cut_ranges", "cut_keys"]

#: Bits of a key used by the histogram pass (4096 ranges).
HIST_BITS = 12
#: Column holding each row's shuffle key while the release is cut into files.
KEY_COLUMN = "__daskmicro_key__"
_SHIFT = np.uint64(64 - HIST_BITS)


def hidden_columns() -> tuple:
    """The columns a run adds to the pieces of its input and never publishes: the row id, the
    shuffle key, the ledger's fingerprints and a record's frozen cell."""
    from ..series.fingerprint import FP
    from ..series.frozen import CELL

    return (RID, KEY_COLUMN, *FP, CELL)


def check_hidden_names(columns) -> None:
    """Refuse an input column named like one of :func:`hidden_columns`: the run's own column would
    replace it (a kept column published as the records' input positions) or be replaced by it."""
    clash = [c for c in hidden_columns() if c in set(columns)]
    if clash:
        raise InputError(f"input column(s) {', '.join(map(repr, clash))}: these names are reserved for the "
                         "columns a run adds to every record; rename them first")


def _plain(v):
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _groups(df: pd.DataFrame, partition_by: list):
    """(partition value tuple, row positions) of ``df`` for each output partition it touches."""
    if not partition_by:
        return [((), np.arange(len(df)))]
    codes = groupable(df[list(partition_by)]).groupby(partition_by, dropna=False, sort=False).indices
    return [(tuple(_plain(v) for v in (k if isinstance(k, tuple) else (k,))), idx) for k, idx in codes.items()]


def plan_files(partition_by: list, partition_counts: dict, rows_per_file: int, cuts: dict | None = None) -> dict:
    """``{partition value tuple: (relative directory, number of files, cut keys)}``.

    With ``cuts`` (:func:`cut_keys`) file ``i`` of a partition holds the keys in
    ``[cuts[i-1], cuts[i])``; without, the partition is one file.
    """
    out, seen = {}, set()
    for key, n in partition_counts.items():
        rel = hive.relative_dir(partition_by, key) if partition_by else ""
        if rel in seen:  # two values with one text (1 and "1" in one object column): one directory
            raise InputError(f"partition column(s) {', '.join(map(repr, partition_by))}: two different values "
                             "would be written as one hive directory (mixed types in one column); cast the column first")
        seen.add(rel)
        c = np.empty(0, np.uint64) if cuts is None else cuts.get(key, np.empty(0, np.uint64))
        out[key] = (rel, max(1, math.ceil(n / rows_per_file)) if cuts is not None else 1, c)
    return out


def split_piece(df: pd.DataFrame, seed: int, partition_by: list, files: dict) -> dict:
    """Cut one release piece by (partition value tuple, file); rows carry their shuffle key."""
    keys = shuffle_keys(seed, df[RID].to_numpy(dtype=np.int64))
    df = df.assign(**{KEY_COLUMN: keys})
    out = {}
    for key, idx in _groups(df, partition_by):
        g = df.iloc[idx]
        b = np.searchsorted(files[key][2], g[KEY_COLUMN].to_numpy(), side="right")
        for i in np.unique(b):
            out[(key, int(i))] = g[b == i]
    return out


def file_index(df: pd.DataFrame, seed: int, partition_by: list, files: dict, first: dict):
    """(shuffle keys, output file number) of every row of a release piece: the file of a row is
    its partition's first file (``first``, in the run's file order) plus its key's file there."""
    keys = shuffle_keys(seed, df[RID].to_numpy(dtype=np.int64))
    out = np.empty(len(df), dtype=np.int64)
    for key, idx in _groups(df, partition_by):
        out[idx] = first[key] + np.searchsorted(files[key][2], keys[idx], side="right")
    return keys, out


def pick(split: dict, key):
    return split.get(key)


def piece_keys(df: pd.DataFrame, seed: int, partition_by: list) -> dict:
    """``{partition value tuple: keys}`` of the rows of one piece."""
    keys = shuffle_keys(seed, df[RID].to_numpy(dtype=np.int64))
    return {key: keys[idx] for key, idx in _groups(df, partition_by)}


def key_histogram(df: pd.DataFrame, seed: int, partition_by: list) -> dict:
    """Per partition, the number of keys in each of the ``2**HIST_BITS`` top-bit ranges."""
    return {key: np.bincount((k >> _SHIFT).astype(np.int64), minlength=1 << HIST_BITS)
            for key, k in piece_keys(df, seed, partition_by).items()}


def merge_histograms(*hists) -> dict:
    out: dict = {}
    for h in hists:
        for key, counts in h.items():
            out[key] = out[key] + counts if key in out else counts.copy()
    return out


def cut_ranges(hist: dict, rows_per_file: int) -> dict:
    """``{partition: [(range, rank of the cut inside the range), …]}`` for the cuts R, 2R, …"""
    out = {}
    for key, counts in hist.items():
        n = int(counts.sum())
        ranks = np.arange(rows_per_file, n, rows_per_file, dtype=np.int64)
        before = np.concatenate([[0], np.cumsum(counts)])
        bins = np.searchsorted(before, ranks, side="right") - 1
        out[key] = [(int(b), int(r - before[b])) for b, r in zip(bins, ranks)]
    return out


def keys_in_ranges(df: pd.DataFrame, seed: int, partition_by: list, wanted: dict) -> dict:
    """``{(partition, range): keys}`` of one piece, only for the ranges that hold a cut."""
    out = {}
    for key, k in piece_keys(df, seed, partition_by).items():
        ranges = sorted({b for b, _ in wanted.get(key, ())})
        if not ranges:
            continue
        top = (k >> _SHIFT).astype(np.int64)
        for b in ranges:
            out[(key, b)] = k[top == b]
    return out


def merge_range_keys(*parts) -> dict:
    out: dict = {}
    for p in parts:
        for key, k in p.items():
            out.setdefault(key, []).append(k)
    return {key: np.sort(np.concatenate(v)) for key, v in out.items()}


def cut_keys(wanted: dict, range_keys: dict) -> dict:
    """``{partition: cut keys}``: the key of each cut rank, in increasing order."""
    return {key: np.array([range_keys[(key, b)][r] for b, r in cuts], dtype=np.uint64)
            for key, cuts in wanted.items()}
