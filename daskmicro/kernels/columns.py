"""Quasi-identifier columns as numbers: which dtypes are accepted and how they become float64.

The rule itself, below the readers (:mod:`daskmicro.io.qi` re-exports it) so that the kernels'
callers outside :mod:`daskmicro.io` (the privacy specs and their assignment) apply the same one:

* numeric columns only (integers of any width, floats of any width, pandas' nullable integers
  and floats); booleans, strings, dates and objects are refused;
* every value must be held **exactly** by float64: integers only within ±2^53;
* a matrix of QI values holds no missing or infinite value and no magnitude beyond ±MAX_ABS.

Messages name columns and counts, never values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

from ..errors import InputError
from .bounds import MAX_ABS

__all__ = ["EXACT_INT", "check_qi_dtype", "qi_column", "qi_frame_matrix", "qi_matrix"]

#: Largest integer magnitude float64 holds exactly (every integer in [-2^53, 2^53] is a float64).
EXACT_INT = 2 ** 53


def check_qi_dtype(name, dtype) -> None:
    """Refuse a QI column whose dtype is not a number (bool, string, object, datetime, …)."""
    if ptypes.is_bool_dtype(dtype) or not (ptypes.is_integer_dtype(dtype) or ptypes.is_float_dtype(dtype)):
        raise InputError(f"QI column {name!r} is not numeric (dtype {dtype}); quasi-identifiers must be numbers")


def _check_exact(name, series: pd.Series) -> None:
    if not ptypes.is_integer_dtype(series.dtype) or len(series) == 0:
        return
    values = series.dropna() if series.hasnans else series
    if len(values) == 0:
        return
    lo, hi = int(values.min()), int(values.max())  # native integers: no rounding before the test
    if hi > EXACT_INT or lo < -EXACT_INT:
        raise InputError(
            f"QI column {name!r} ({series.dtype}) holds integers beyond ±2^53, which float64 cannot represent "
            "exactly; subtract an offset or rescale the column (e.g. to other units) first"
        )


def qi_column(series: pd.Series, name=None) -> np.ndarray:
    """One QI column as an exact float64 vector (missing values as NaN).

    Raises
    ------
    InputError
        The column is not numeric, or holds integers float64 cannot represent exactly.
    """
    name = series.name if name is None else name
    check_qi_dtype(name, series.dtype)
    _check_exact(name, series)
    return series.to_numpy(dtype=np.float64, na_value=np.nan)


def qi_frame_matrix(df: pd.DataFrame, qi: list) -> np.ndarray:
    """The QI columns of ``df`` as a float64 matrix (rows × len(qi)), each through :func:`qi_column`."""
    X = np.empty((len(df), len(qi)), dtype=np.float64)
    for j, c in enumerate(qi):
        X[:, j] = qi_column(df[c], c)
    return X


def qi_matrix(df: pd.DataFrame, qi: list, names=None) -> np.ndarray:
    """The QI columns as a float64 matrix, refusing missing and infinite values and magnitudes
    beyond ±MAX_ABS (messages give counts, never values; they name ``names``, by default ``qi``)."""
    X = np.empty((len(df), len(qi)), dtype=np.float64)
    missing, infinite = [], []
    for j, (col, c) in enumerate(zip(qi, qi if names is None else names)):
        X[:, j] = qi_column(df[col], c)  # exact float64, or refused (integers beyond ±2^53)
        n_nan = int(np.isnan(X[:, j]).sum())
        n_inf = int(np.isinf(X[:, j]).sum())
        if n_nan:
            missing.append(f"{c!r} ({n_nan})")
        if n_inf:
            infinite.append(f"{c!r} ({n_inf})")
    if missing:
        raise InputError(f"QI column(s) with missing (NaN) values: {', '.join(missing)}; impute or drop them first")
    if infinite:
        raise InputError(f"QI column(s) with infinite values: {', '.join(infinite)}")
    huge = [repr(c) for j, c in enumerate(qi if names is None else names) if np.abs(X[:, j]).max(initial=0.0) > MAX_ABS]
    if huge:
        raise InputError(f"QI column(s) with values beyond ±{MAX_ABS:.0e}: {', '.join(huge)}; squared distances "
                         "would overflow: rescale them (e.g. to other units) first")
    return X
