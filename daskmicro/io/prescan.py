"""The pre-scan of one piece of the input: its rows, per-QI missing and infinite counts, largest
magnitudes, and the record counts of each combination of key values (strata and partition
columns) and missingness pattern.  No values leave the worker except key values, which are
published anyway."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError
from .qi import qi_frame_matrix

__all__ = ["scan_frame", "plain_key", "groupable"]


def scan_frame(df: pd.DataFrame, qi: list, keys: list) -> dict:
    """Pre-scan of one piece of the input (see :func:`scan_piece`), whatever it was read from."""
    n = len(df)
    if n == 0:  # nothing to check (a column of an empty file may not even have a numeric type)
        zero = np.zeros(len(qi), dtype=np.int64)
        return {"rows": 0, "missing": zero, "posinf": zero, "neginf": zero, "maxabs": np.zeros(len(qi)), "combos": {}}
    X = qi_frame_matrix(df, list(qi))  # exact float64, or refused (integers beyond ±2^53)
    _check_key_types(df, keys)
    miss = np.isnan(X)
    finite = np.where(np.isfinite(X), np.abs(X), 0.0)
    pattern = np.zeros(n, dtype=np.int64)
    for j in range(len(qi)):
        pattern |= miss[:, j].astype(np.int64) << j
    frame = df[list(keys)].copy() if keys else pd.DataFrame(index=df.index)
    frame = groupable(frame)
    frame.columns = range(len(keys))  # positions: no input column name can clash with the pattern's
    frame[len(keys)] = pattern
    counts = frame.groupby(list(frame.columns), dropna=False, sort=True).size()
    combos = {}
    for key, cnt in counts.items():
        key = key if isinstance(key, tuple) else (key,)
        plain = tuple(plain_key(v) for v in key)   # keys grouped apart may be one value (−0.0 and 0.0)
        combos[plain] = combos.get(plain, 0) + int(cnt)
    return {
        "rows": n,
        "missing": miss.sum(axis=0).astype(np.int64),
        "posinf": np.isposinf(X).sum(axis=0).astype(np.int64),
        "neginf": np.isneginf(X).sum(axis=0).astype(np.int64),
        "maxabs": finite.max(axis=0) if n else np.zeros(len(qi)),
        "combos": combos,
    }


def groupable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its float16 columns as float32, which holds every float16 value exactly:
    pandas cannot group on float16, and a stratum or partition column may be one."""
    half = [c for c in frame.columns if frame[c].dtype == np.float16]
    return frame.astype({c: np.float32 for c in half}) if half else frame


def _check_key_types(df: pd.DataFrame, keys: list) -> None:
    """Refuse a stratum or partition column of nested values (Arrow lists, structs, maps: no key
    of a group), or of Python objects of more than one type (1 beside 1.0, True beside 1, numbers
    beside text): grouped here as equal, they are written and read back as other values, so the
    published tuples would not be the ones counted."""
    for c in keys:
        if df[c].dtype != object:
            continue
        values = df[c].dropna()
        if not pd.api.types.infer_dtype(values, skipna=True).startswith(("mixed", "unknown")):
            continue   # one kind (told in C; the kinds are listed only for the message)
        kinds = {_kind(t) for t in values.map(type).unique()}
        if kinds & {"ndarray", "list", "tuple", "dict"}:
            raise InputError(f"column {c!r} (a stratum or partition column) holds lists, structs or maps, which "
                             "cannot name a stratum: give it a plain type (text, number, date)")
        if len(kinds) > 1:
            raise InputError(f"column {c!r} (a stratum or partition column) mixes values of several types "
                             f"({', '.join(sorted(kinds))}): give it one type")


def _kind(t: type) -> str:
    """The kind of value a Python or NumPy scalar type holds, as written (NumPy's int64 is an int)."""
    if issubclass(t, np.generic):
        return {"b": "bool", "i": "int", "u": "int", "f": "float", "U": "str"}.get(np.dtype(t).kind, t.__name__)
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(t, t.__name__)


def plain_key(v):
    """A stratum key value as a plain Python value: missing as None, −0.0 as 0.0, NumPy scalars
    unwrapped (the form the pre-scan counts and the strata are labelled by)."""
    if v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and np.isnan(v)):
        return None
    if isinstance(v, (float, np.floating)) and v == 0:
        return 0.0   # −0.0 is 0.0 (as counted and written): never a text or a label of its own
    if isinstance(v, np.generic):
        return v.item()
    return v
