"""Every published column accounted for: identifiers are never published by accident.

A column of a run is a quasi-identifier (masked), a stratum or partition column (counted in every
published tuple), a column the user drops, or a column published as it is.  A published column
that singles records out defeats the release however well the QIs are masked: a social security
number, an e-mail address, an employee number, a timestamp to the second.  So a column published
as it is is refused, before any cell is formed, when

* its name looks like an identifier (a word such as ``id``, ``ssn``, ``email``, ``phone``,
  ``name``, ``address``, ``passport``, ``iban``, ``uuid`` in it), or
* its values are distinct for nearly every record (at least :data:`UNIQUE_SHARE` of them),

unless the user keeps it knowingly (``keep`` / ``--keep COL``).  The message names the column and
the two fixes, never a value.

Distinct values are counted without gathering them: each piece of the input hashes its values
(64-bit, :func:`pandas.util.hash_pandas_object`) and keeps the :data:`SKETCH` smallest distinct
hashes; merged sketches keep the smallest again, and the number of distinct values is exact below
:data:`SKETCH` and estimated above it (the k-minimum-values estimate, about 2 % standard error).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..errors import InputError

__all__ = ["ID_WORDS", "UNIQUE_SHARE", "SKETCH", "looks_like_identifier", "check_names", "sketch", "merge",
           "distinct", "check_values"]

#: Words of a column name that mark it as an identifier.
ID_WORDS = frozenset({
    "id", "ids", "uid", "uuid", "guid", "ssn", "sin", "nino", "nhs", "npi", "tin", "passport", "iban", "email",
    "mail", "phone", "telephone", "mobile", "fax", "name", "firstname", "lastname", "surname", "fullname",
    "address", "street", "username", "login", "ip", "imei", "licence", "license", "account",
})
#: A published column with distinct values for at least this share of the records is an identifier.
UNIQUE_SHARE = 0.9
#: Smallest distinct hashes kept per column and piece.
SKETCH = 4096
_TOP = float(2 ** 64)


def _words(name: str) -> list:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", str(name))
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]


def looks_like_identifier(name) -> bool:
    """Whether a column's name holds a word of :data:`ID_WORDS` (``emp_id``, ``userEmail``, ``SSN``)."""
    words = _words(name)
    return any(w in ID_WORDS for w in words) or "".join(words) in ID_WORDS


def _refusal(column, why: str) -> InputError:
    return InputError(f"column {column!r} {why}, and would be published as it is: leave it out (drop / "
                      f"--drop {column}) or publish it knowingly (keep / --keep {column})")


def check_names(columns) -> None:
    """Refuse the first published column whose name looks like an identifier."""
    for c in columns:
        if looks_like_identifier(c):
            raise _refusal(c, "is named like an identifier")


def sketch(df: pd.DataFrame, columns: list) -> dict:
    """``{"rows": n, column: smallest distinct value hashes}`` of one piece (nulls count as one value)."""
    out = {"rows": len(df)}
    for c in columns:
        h = pd.util.hash_pandas_object(df[c], index=False).to_numpy(dtype=np.uint64)
        out[c] = np.unique(h)[:SKETCH]
    return out


def merge(*parts) -> dict:
    out = {"rows": sum(p["rows"] for p in parts)}
    for c in (c for c in parts[0] if c != "rows"):
        out[c] = np.unique(np.concatenate([p[c] for p in parts]))[:SKETCH]
    return out


def distinct(hashes: np.ndarray) -> float:
    """Distinct values behind a merged sketch: exact below :data:`SKETCH`, else estimated."""
    if len(hashes) < SKETCH:
        return float(len(hashes))
    return (SKETCH - 1) * _TOP / (float(hashes[-1]) + 1.0)


def check_values(merged: dict, k: int) -> None:
    """Refuse the first column whose values are distinct for nearly every record."""
    n = merged["rows"]
    for c, hashes in merged.items():
        if c == "rows":
            continue
        d = distinct(hashes)
        if n and d > k and d >= UNIQUE_SHARE * n:
            raise _refusal(c, f"holds a distinct value for {min(d / n, 1.0):.0%} of the {n:,} records "
                              "(it singles them out)")
