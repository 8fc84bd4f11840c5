"""Keyed fingerprints of records: 128 bits per record, computed on the workers, no Dask here.

A record is identified by the values of a declared id column, or else by its stratum and QI
values as read (the tuple the release replaces).  Numbers are compared as numbers — an integer
column that becomes float keeps its fingerprints, −0.0 is 0.0 and every NaN is one value — and
text as text.  Each column is hashed to 64 bits, and each record's column hashes are hashed
again with two secret 16-byte keys (SipHash, as pandas' keyed hashing of bytes): without the
ledger's key a fingerprint cannot be tested against a guessed record.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

__all__ = ["order_seed", "FP", "FP_DTYPE", "fingerprints", "with_fingerprints", "split_key", "value_hashes"]

#: The hidden columns that carry a record's fingerprint through a run (never published).
FP = ("__daskmicro_fp_hi", "__daskmicro_fp_lo")
#: One fingerprint as a sortable NumPy record.
FP_DTYPE = np.dtype([("hi", "<u8"), ("lo", "<u8")])

_NULL = np.uint64(0x9E3779B97F4A7C15)


def split_key(secret: bytes) -> tuple:
    """The two 16-character hashing keys of a ledger's secret (32 bytes or more)."""
    import base64

    text = base64.b64encode(secret).decode("ascii")
    if len(text) < 32:
        raise ValueError("a ledger key has at least 24 bytes")
    return text[:16], text[16:32]


def order_seed(keys, seed: int) -> int:
    """The seed of a recorded release's row order: ``seed`` keyed by the ledger's secret (``keys``,
    :func:`split_key`), 63 bits.  The order is a public function of its seed and the row ids
    (:func:`daskmicro.release.publish.shuffle_keys`): keyed, a given seed — guessable or known —
    cannot undo the shuffle without the ledger's key, while the same ledger and seed give the same
    release again."""
    import hashlib

    digest = hashlib.sha256(("daskmicro order|" + "|".join(keys) + f"|{int(seed)}").encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def value_hashes(values: pd.Series) -> np.ndarray:
    """A 64-bit hash of every value of a column, numbers compared as numbers (an integer read as
    float is the same value, −0.0 is 0.0, every missing value is one value, ``True`` is 1) and the
    rest as text: what a fingerprint, or a published value's check, sees of a value."""
    dtype = values.dtype
    if ptypes.is_bool_dtype(dtype) or ptypes.is_numeric_dtype(dtype):
        v = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan).copy()
        v[v == 0] = 0.0
        nan = np.isnan(v)
        v[nan] = 0.0
        h = pd.util.hash_array(v, categorize=False)
        h[nan] = _NULL
        return h
    if ptypes.is_datetime64_any_dtype(dtype):
        v = pd.Series(values).astype("datetime64[ns]").to_numpy().view("i8").astype(np.float64)
        return pd.util.hash_array(v, categorize=False)
    obj = values.astype(object).to_numpy()
    null = pd.isna(obj)
    text = np.where(null, "", obj.astype(str)).astype(object)
    h = pd.util.hash_array(text, categorize=False)
    h[null] = _NULL
    return h


def fingerprints(df: pd.DataFrame, columns, keys) -> np.ndarray:
    """The fingerprint of every row of ``df`` over ``columns`` (a ``FP_DTYPE`` array)."""
    n = len(df)
    out = np.empty(n, FP_DTYPE)
    if n == 0:
        return out
    cols = list(columns)
    mat = np.empty((n, len(cols) + 1), dtype=np.uint64)
    for j, c in enumerate(cols):
        mat[:, j] = value_hashes(df[c])
    mat[:, -1] = np.uint64(len(cols))  # no trailing zero bytes to lose
    rows = np.ascontiguousarray(mat).view(f"S{8 * mat.shape[1]}").ravel().astype(object)
    out["hi"] = pd.util.hash_array(rows, hash_key=keys[0], categorize=False)
    out["lo"] = pd.util.hash_array(rows, hash_key=keys[1], categorize=False)
    return out


def with_fingerprints(df: pd.DataFrame, columns, keys) -> pd.DataFrame:
    """``df`` with the two hidden fingerprint columns (:data:`FP`) added."""
    fp = fingerprints(df, columns, keys)
    out = df.copy()
    out[FP[0]] = fp["hi"]
    out[FP[1]] = fp["lo"]
    return out
