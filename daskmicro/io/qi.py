"""Quasi-identifier columns as numbers: which dtypes are accepted and how they become float64.

Every path that reads QI values (in process, the Dask ingest, the lake pre-scan, specs and their
assignment, the incremental stages) goes through :func:`qi_column` (defined in
:mod:`daskmicro.kernels.columns`, below the readers, so that :mod:`daskmicro.privacy` uses it too),
so one rule decides what the kernels see:

* numeric columns only (integers of any width, floats of any width, pandas' nullable integers
  and floats); booleans, strings, dates and objects are refused;
* every value must be held **exactly** by float64, the kernels' type.  Floats of any width
  (float16, float32, float64) are; integers are only within ±2^53.  A larger integer would be
  rounded, so two different published values could look equal to the kernels (a column seen
  as constant and published raw, or a cell whose records publish different values).  Such a
  column is refused in one line naming it — never silently rounded.

Messages name columns and counts, never values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError
from ..kernels.columns import EXACT_INT, check_qi_dtype, qi_column, qi_frame_matrix, qi_matrix  # the one rule

__all__ = [
    "EXACT_INT", "all_numeric", "check_qi", "check_qi_dtype", "column_list", "qi_column", "qi_frame_matrix", "qi_matrix", "repeated",
    "unknown_columns",
]


def check_qi(df: pd.DataFrame, qi) -> list:
    """The QI column names of ``df`` as a list, checked: at least one, none twice, each in ``df``
    exactly once, each numeric (one name or a sequence of names is accepted)."""
    if qi is None:
        raise ParameterError("qi must name at least one quasi-identifier column")
    if isinstance(qi, str) or not isinstance(qi, (list, tuple, pd.Index, np.ndarray)):
        qi = [qi]
    qi = list(qi)
    if not qi:
        raise ParameterError("qi must name at least one quasi-identifier column")
    twice = repeated(qi)
    if twice:
        raise ParameterError(f"QI column(s) named more than once: {_names(twice)}")
    unknown = [c for c in qi if c not in df.columns]
    if unknown:
        raise unknown_columns(unknown, df.columns)
    ambiguous = [c for c in qi if int((df.columns == c).sum()) > 1]
    if ambiguous:
        raise InputError(f"QI column name(s) occurring more than once in the input: {_names(ambiguous)}")
    for c in qi:
        check_qi_dtype(c, df[c].dtype)
    return qi


def _names(columns) -> str:
    return ", ".join(repr(c) for c in columns)


def repeated(names) -> list:
    """The names that occur more than once in ``names``, in order of first repetition."""
    seen, out = set(), []
    for name in names:
        if name in seen and name not in out:
            out.append(name)
        seen.add(name)
    return out


def unknown_columns(names, columns, what: str = "QI") -> ParameterError:
    """The error for column names not in the input; names are matched exactly, never stripped.

    A name that differs from an input column only by surrounding white space, letter case,
    punctuation or underscores gets a hint, so ``--qi "age, income"`` or ``--qi NET_PROFIT`` (for
    ``NET.PROFIT``) says which column was meant instead of guessing.
    """
    columns = [c for c in columns if isinstance(c, str)]
    hints = []
    for name in names:
        key = str(name).strip().lower()
        close = [c for c in columns if c.strip().lower() == key]
        if not close:
            loose = _loose(str(name))
            close = [c for c in columns if loose and _loose(c) == loose]
        if close:
            hints.append(f"{name!r} → {close[0]!r}")
    text = f"unknown {what} column(s), not in the input: {', '.join(repr(c) for c in names)}"
    if hints:
        text += f" (names are matched exactly; did you mean {', '.join(hints)}?)"
    return ParameterError(text)


def _loose(name: str) -> str:
    """``name`` in lower case with only its letters and digits: ``NET_PROFIT`` and ``net.profit`` alike."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def column_list(text, option: str) -> list:
    """Column names of a comma-separated option, exactly as written (no stripping: ``" x"`` names
    the column ``" x"``); an empty name (``a,,b`` or a trailing comma) is refused."""
    if not text:
        return []
    names = str(text).split(",")
    if any(n == "" for n in names):
        raise ParameterError(f"{option}: empty column name in {len(names)} comma-separated name(s); "
                             "remove the extra comma")
    return names



def all_numeric(columns, numeric, excepted, roles) -> list:
    """The QIs of ``qi="all-numeric"``: every column of ``columns`` whose ``numeric`` flag is set,
    but those of ``excepted`` (``qi_except``; each must be a column of the input) and of ``roles``
    (strata, partitioning, participation, id, dropped and kept columns), in the input's order.

    A numeric column named like an identifier (``record_id``, ``phone``) is not made a QI silently:
    it is refused, naming the fix (name it in ``qi_except``, then drop or keep it)."""
    from ..privacy.identifiers import looks_like_identifier

    columns = list(columns)
    missing = [c for c in excepted if c not in columns]
    if missing:
        raise unknown_columns(missing, columns, what="qi_except (--qi-except)")
    skip = set(excepted) | set(roles)
    qi = [c for c, num in zip(columns, numeric) if num and c not in skip]
    named = [c for c in qi if looks_like_identifier(c)]
    if named:
        raise ParameterError(
            f"qi 'all-numeric': numeric column(s) named like an identifier: {_names(named)}; an identifier is not a "
            "quasi-identifier: name it in qi_except (--qi-except) and leave it out (--drop) or publish it knowingly "
            "(--keep)")
    if not qi:
        raise ParameterError("qi 'all-numeric': the input has no numeric column left to use as a quasi-identifier")
    return qi
