"""Building the published table: QI columns replaced by centroids, rows shuffled, ids optional.

The release order is one global order: rows sorted by seeded keys of their global row ids
(:func:`shuffle_keys`).  A distributed release cuts the key space into equal ranges
(:func:`key_bucket`), one per output partition: every input chunk sends each of its rows to
the partition of its key range (:func:`split_chunk`) and each output partition sorts its rows
by key (:func:`release_bucket`).  The concatenated partitions are then in key order, which
depends only on the seed and the row ids — not on the chunking or the number of workers — and
a release position says nothing about an input position.

Shared by the in-memory path (:mod:`daskmicro.anonymize`) and the Dask pipeline
(:mod:`daskmicro.graph.gather`), so both follow the same conventions (DESIGN.md): centroids in
original units; float QI columns keep their dtype, integer ones become float64 (reported);
every non-QI column untouched; rows shuffled with a recorded seed; ``row_id`` only on request.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

__all__ = ["ROW_ID", "replace_qi", "canonical_values", "missing_values", "shuffle_keys", "key_bucket", "publish_chunk", "split_chunk",
           "release_bucket"]

ROW_ID = "row_id"

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def replace_qi(df: pd.DataFrame, columns: list, values: np.ndarray):
    """Copy of ``df`` with ``columns`` set to ``values`` (rows × columns); returns it and dtype changes."""
    out = df.copy()
    changes = {}
    for j, c in enumerate(columns):
        dtype = df[c].dtype
        # assign arrays, not Series: positional, whatever the index of df
        if ptypes.is_float_dtype(dtype):
            out[c] = pd.Series(values[:, j]).astype(dtype).array
        else:
            out[c] = values[:, j]
            changes[c] = {"from": str(dtype), "to": "float64"}
    return out, changes


def canonical_values(df: pd.DataFrame, columns) -> pd.DataFrame:
    """``df`` with every float value of ``columns`` in one bit pattern per value: −0.0 as +0.0 and
    every NaN as the one quiet NaN.

    The published tuple (stratum columns and QIs) is verified by value, where −0.0 equals 0.0 and
    NaN matches NaN; the file keeps the bits, and a sign bit or a NaN payload that only some
    records carry (or ``-0.0`` in a CSV export) would single them out inside a group counted as
    ≥ k.  Applied to every release piece before it is cut, written and verified.
    """
    out = None
    for c in columns:
        dtype = df[c].dtype
        if not ptypes.is_float_dtype(dtype):
            continue
        values = _canonical_column(df[c]) if isinstance(dtype, np.dtype) else _canonical_extension(df[c])
        if values is not None:
            out = df.copy() if out is None else out
            out[c] = values
    return df if out is None else out


def _canonical_column(series: pd.Series):
    """A NumPy float column's values in canonical bits, or None when they already are."""
    v = series.to_numpy()
    fix = (v == 0) & np.signbit(v)
    nan = np.isnan(v)
    if not (fix.any() or nan.any()):
        return None
    v = v.copy()
    v[fix] = 0.0
    v[nan] = np.nan
    return v


def missing_values(series) -> np.ndarray:
    """Whether each value of a column is missing: null (None, NA, NaT) or a float NaN, whatever
    the column's dtype — an Arrow or nullable float column can hold a NaN beside its nulls, which
    ``isna()`` does not see.  The one notion of missing the pre-scan, the groups and the published
    values share (both are published as one missing value, :func:`canonical_values`)."""
    missing = pd.isna(series)
    missing = np.asarray(missing.to_numpy() if hasattr(missing, "to_numpy") else missing, dtype=bool)
    dtype = getattr(series, "dtype", None)
    if dtype is not None and not isinstance(dtype, np.dtype) and pd.api.types.is_float_dtype(dtype):
        missing = missing | np.isnan(series.to_numpy(dtype=np.float64, na_value=np.nan))
    return missing


def _canonical_extension(series: pd.Series):
    """A float column of an extension dtype (pandas' nullable ``Float64``, Arrow's ``double``) in
    canonical bits — −0.0 as +0.0, a NaN held beside missing values as missing — in its own dtype,
    or None when it already is.  The verification hashes these values as NumPy's are hashed."""
    missing = series.isna().to_numpy(dtype=bool)
    v = series.to_numpy(dtype=np.float64, na_value=np.nan)
    fix = (v == 0) & np.signbit(v)
    nan = np.isnan(v) & ~missing
    if not (fix.any() or nan.any()):
        return None
    out = series.copy()
    out[fix] = 0.0
    out[nan] = None
    return out.array


def shuffle_keys(seed: int, rowids: np.ndarray) -> np.ndarray:
    """Pseudo-random uint64 keys of row ids under ``seed`` (splitmix64 finaliser).

    Sorting by these keys shuffles rows in an order that depends only on the seed and the row
    ids — not on the chunking or the number of workers.
    """
    with np.errstate(over="ignore"):
        z = rowids.astype(np.uint64) + np.uint64(seed % (1 << 64)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def key_bucket(keys: np.ndarray, n_buckets: int) -> np.ndarray:
    """Bucket 0 … n_buckets − 1 of each uint64 key: equal key ranges, non-decreasing in the key."""
    return (((keys >> np.uint64(32)) * np.uint64(n_buckets)) >> np.uint64(32)).astype(np.int64)


def publish_chunk(part: pd.DataFrame, values, columns: list) -> pd.DataFrame:
    """The release rows of one input chunk, in input order: ``columns`` replaced by ``values``
    (rows × columns: each row's cell centroid in original units); every other column untouched."""
    if len(part) != len(values):
        raise RuntimeError(f"an input chunk has {len(part)} rows but {len(values)} published rows")
    return replace_qi(part, columns, values)[0]


def split_chunk(part: pd.DataFrame, values, row0: int, columns: list, seed: int, n_buckets: int) -> list:
    """The release rows of one input chunk, centroids in, split by the key range of their row ids.

    ``values`` holds the published values of each row of ``part`` (row order; one column per
    name in ``columns``) and ``row0`` the global row id of the chunk's first row.  Returns, for
    each of the ``n_buckets`` output partitions, a (frame, row ids) pair (rows in input order).
    """
    out = publish_chunk(part, values, columns)
    rowids = np.arange(row0, row0 + len(part), dtype=np.int64)
    bucket = key_bucket(shuffle_keys(seed, rowids), n_buckets)
    order = np.argsort(bucket, kind="stable")
    cuts = np.searchsorted(bucket[order], np.arange(n_buckets + 1))
    pieces = []
    for b in range(n_buckets):
        idx = order[cuts[b]:cuts[b + 1]]
        pieces.append((out.take(idx).reset_index(drop=True), rowids[idx]))
    return pieces


def release_bucket(*pieces, seed: int, keep_row_id: bool) -> pd.DataFrame:
    """One output partition from the (frame, row ids) pieces of its key range, rows in key order."""
    frame = pd.concat([p[0] for p in pieces], ignore_index=True)
    rowids = np.concatenate([p[1] for p in pieces]).astype(np.int64, copy=False)
    order = np.argsort(shuffle_keys(seed, rowids), kind="stable")
    frame = frame.take(order).reset_index(drop=True)
    if keep_row_id:
        frame[ROW_ID] = rowids[order]
    return frame
