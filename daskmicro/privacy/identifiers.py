"""Every published column accounted for: identifiers are never published by accident.

A column of a run is a quasi-identifier (masked), a stratum or partition column (counted in every
published tuple), a column never published (the participation column), a column the user drops,
or a column published as it is.  A published column that singles records out defeats the release
however well the QIs are masked: a social security number, an e-mail address, an employee number,
a timestamp to the second.  So a column published as it is is refused, before any cell is formed,
when

* its name looks like an identifier (a word such as ``id``, ``ssn``, ``email``, ``phone``,
  ``name``, ``address``, ``passport``, ``iban``, ``uuid`` in it), whatever its type, or
* it is of a type identifiers are stored in — text, bytes, integers, categories, dates and times,
  lists, structs and maps, or floats whose values are all whole numbers (an id read from a CSV file with missing values) —
  and its values are distinct for nearly every record that has one (at least
  :data:`UNIQUE_SHARE` of them, and more than k).

A boolean column, or a float column with a fractional value (an income, a survey weight, a
measurement), is a confidential attribute rather than an identifier: the value rule leaves it
alone.  The user keeps a refused column knowingly (``keep`` / ``--keep COL`` / ``input.keep``) or
leaves it out (``drop`` / ``--drop COL`` / ``input.drop``).  The one-line message names the column
and both fixes, never a value.

Distinct values are counted without gathering them: each piece of the input hashes its non-null
values (64-bit, :func:`pandas.util.hash_pandas_object`) and keeps the :data:`SKETCH` smallest
distinct hashes; merged sketches keep the smallest again, and the number of distinct values is
exact below :data:`SKETCH` and estimated above it (the k-minimum-values estimate, about 2 %
standard error).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..errors import InputError

__all__ = ["ID_WORDS", "UNIQUE_SHARE", "SKETCH", "looks_like_identifier", "judged_by_values", "check_names",
           "sketch", "merge", "distinct", "check_values"]

#: Words of a column name that mark it as an identifier.
ID_WORDS = frozenset({
    "id", "ids", "uid", "uuid", "guid", "ssn", "sin", "nino", "nhs", "npi", "tin", "passport", "iban", "email",
    "mail", "phone", "telephone", "mobile", "fax", "name", "firstname", "lastname", "surname", "fullname",
    "address", "street", "username", "login", "ip", "imei", "licence", "license", "account",
})
#: A published column with distinct values for at least this share of its non-null records is an identifier.
UNIQUE_SHARE = 0.9
#: Smallest distinct hashes kept per column and piece.
SKETCH = 4096
_TOP = float(2 ** 64)


def _words(name: str, acronyms: bool) -> list:
    split = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Za-z])(?=[0-9])" + (r"|(?<=[A-Z])(?=[A-Z][a-z])" if acronyms else "")
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", re.sub(split, " ", str(name))) if w]


def _is_word(w: str) -> bool:
    return w in ID_WORDS or (w.endswith("s") and w[:-1] in ID_WORDS) or (w.endswith("es") and w[:-2] in ID_WORDS)


def looks_like_identifier(name) -> bool:
    """Whether a column's name holds a word of :data:`ID_WORDS`, maybe plural, in any case
    (``emp_id``, ``userEmail``, ``SSN``, ``SSNNumber``, ``UUIDs``, ``phone2``); a word that merely
    contains one (``idea``, ``valid``) does not count."""
    for acronyms in (True, False):
        words = _words(name, acronyms)
        if any(_is_word(w) for w in words) or _is_word("".join(words)):
            return True
    return False


def _refusal(column, why: str) -> InputError:
    return InputError(f"column {column!r} {why}, and would be published as it is: leave it out (--drop {column}; "
                      f"drop= in the API, input.drop in a spec) or publish it knowingly (--keep {column}; keep=, "
                      "input.keep)")


def check_names(columns) -> None:
    """Refuse the first published column whose name looks like an identifier."""
    for c in columns:
        if looks_like_identifier(c):
            raise _refusal(c, "is named like an identifier")


def _boolean(dtype) -> bool:
    if isinstance(dtype, pd.CategoricalDtype):
        return _boolean(dtype.categories.dtype)
    return getattr(dtype, "kind", "O") == "b"


def _fractional(values: pd.Series) -> bool:
    """Whether a float (or complex) series holds a finite value that is not a whole number."""
    x = values.to_numpy(dtype=np.complex128 if values.dtype.kind == "c" else np.float64, na_value=np.nan)
    parts = (x.real, x.imag) if x.dtype.kind == "c" else (x,)
    return any(bool(np.any(np.isfinite(p) & (p != np.floor(p)))) for p in parts)


def judged_by_values(values: pd.Series) -> bool:
    """Whether the value rule applies to this piece of a column: not boolean, and not a float
    column holding a fractional value (a continuous attribute)."""
    if _boolean(values.dtype):
        return False
    if getattr(values.dtype, "kind", "O") in "fc" and not isinstance(values.dtype, pd.CategoricalDtype):
        return not _fractional(values.dropna())
    return True


def _plain(v):
    """A nested value (NumPy arrays, lists, tuples, dicts of them) as plain lists and dicts: one text
    per value, however it was read (an Arrow list comes back as an array, a map as a list of tuples)."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def sketch(df: pd.DataFrame, columns: list) -> dict:
    """``{column: (non-null values, smallest distinct hashes of them)}`` of one piece; ``None`` for
    a column the value rule leaves alone (:func:`judged_by_values`)."""
    out = {}
    for c in columns:
        values = df[c]
        if not judged_by_values(values):
            out[c] = None
            continue
        values = values[values.notna().to_numpy()]
        try:
            h = pd.util.hash_pandas_object(values, index=False).to_numpy(dtype=np.uint64)
        except TypeError:   # nested values (Arrow lists, structs, maps): hashed by their text
            h = pd.util.hash_pandas_object(values.map(lambda v: repr(_plain(v))), index=False).to_numpy(dtype=np.uint64)
        out[c] = (len(values), np.unique(h)[:SKETCH])
    return out


def merge(*parts) -> dict:
    """One sketch of several pieces; a column left alone in any piece is left alone."""
    out = {}
    for c in parts[0]:
        got = [p[c] for p in parts]
        out[c] = None if any(g is None for g in got) else (
            sum(g[0] for g in got), np.unique(np.concatenate([g[1] for g in got]))[:SKETCH])
    return out


def distinct(hashes: np.ndarray) -> float:
    """Distinct values behind a merged sketch: exact below :data:`SKETCH`, else estimated."""
    if len(hashes) < SKETCH:
        return float(len(hashes))
    return (SKETCH - 1) * _TOP / (float(hashes[-1]) + 1.0)


def check_values(merged: dict, k: int) -> None:
    """Refuse the first judged column whose values are distinct for nearly every record that has one."""
    for c, got in merged.items():
        if got is None:
            continue
        n, hashes = got
        d = distinct(hashes)
        if n and d > k and d >= UNIQUE_SHARE * n:
            raise _refusal(c, f"holds a distinct value for {min(d / n, 1.0):.0%} of the {n:,} records that have "
                              "one (it singles them out)")
