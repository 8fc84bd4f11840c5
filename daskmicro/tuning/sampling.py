"""Seeded samples of the quasi-identifier columns of a pandas or Dask DataFrame.

Used by ``daskmicro sweep`` and by the reference information loss of a report, both of which
run exact MDAV on a sample when the whole table is too large for it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError

__all__ = ["qi_sample", "check_sample_size"]


def check_sample_size(size, name: str = "sample") -> int:
    """A sample size must be an integer ≥ 1."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ParameterError(f"{name} must be an integer ≥ 1, got {size!r}")
    return int(size)


def qi_sample(df, qi: list, size: int, seed: int = 0) -> tuple[pd.DataFrame, int]:
    """A uniform random sample, without replacement, of ``size`` rows of ``df[qi]``.

    Parameters
    ----------
    df : pandas.DataFrame or dask.dataframe.DataFrame
    qi : list of column labels (already checked to exist)
    size : int
        Rows wanted; the whole table when it has no more rows than that.
    seed : int
        Seed of the draw: the same table, size and seed give the same rows, in input order.

    Returns
    -------
    sample : pandas.DataFrame
        The sampled QI columns with a fresh RangeIndex.
    n : int
        Number of rows of the whole table.
    """
    size = check_sample_size(size)
    rng = np.random.default_rng(seed)
    if isinstance(df, pd.DataFrame):
        n = len(df)
        if n == 0:
            raise InputError("input has no rows")
        if size >= n:
            return df[qi].reset_index(drop=True), n
        rows = np.sort(rng.choice(n, size=size, replace=False))
        return df[qi].iloc[rows].reset_index(drop=True), n
    # Dask: a Bernoulli sample a little larger than needed (read by the workers), then exactly
    # `size` rows of it; a sample that comes out too small (≈ 1e-9 odds) is redrawn in full.
    n = int(len(df))
    if n == 0:
        raise InputError("input has no rows")
    cols = df[qi]
    if size >= n:
        return cols.compute().reset_index(drop=True), n
    frac = min(1.0, (size + 6.0 * math.sqrt(size) + 50.0) / n)
    part = cols.sample(frac=frac, random_state=int(seed) % (2**32)).compute() if frac < 1.0 else cols.compute()
    if len(part) < size:
        part = cols.compute()
    part = part.reset_index(drop=True)
    rows = np.sort(rng.choice(len(part), size=size, replace=False))
    return part.iloc[rows].reset_index(drop=True), n
