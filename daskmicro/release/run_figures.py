"""The release figures of a run, from what the run already holds (no Dask here).

Thin adapters between the executor and the kernel (:mod:`daskmicro.kernels.figures`): the bins'
range comes from the published values of each group as its cells are made —
:func:`group_range` of a one-task group's released records, :func:`cells_range` of a pipeline
partition's centroids — and the counts from the release as it is verified (:func:`piece_figures`
of each written file, range of a file, or in-memory partition); :func:`report_figures` gives the
report's ``release_figures`` section.  No original value is read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..kernels import figures as kf

__all__ = ["published_matrix", "group_range", "cells_range", "piece_figures", "report_figures"]


def _column(values) -> np.ndarray:
    if isinstance(values, (pd.Series, pd.api.extensions.ExtensionArray)):
        return pd.Series(values).to_numpy(dtype=np.float64, na_value=np.nan)
    return np.asarray(values, dtype=np.float64)


def _matrix(columns, qi, n: int) -> np.ndarray:
    """The published values of ``qi`` (a DataFrame, or a mapping of columns to arrays or Series of
    ``n`` rows) as a float64 matrix, NaN where missing."""
    Y = np.empty((int(n), len(qi)), dtype=np.float64)
    for j, c in enumerate(qi):
        Y[:, j] = _column(columns[c])
    return Y


def published_matrix(released: pd.DataFrame, qi) -> np.ndarray:
    """The published values of the QI columns ``qi`` of ``released`` as a float64 matrix, NaN where missing."""
    return _matrix(released, list(qi), len(released))


def group_range(released: pd.DataFrame, qi) -> tuple:
    """The bins' range of a one-task group: ``(qi, value_range)`` of its released records."""
    return tuple(qi), kf.value_range(published_matrix(released, qi))


def cells_range(result, qi, mean, std, varying) -> tuple:
    """The bins' range of one pipeline partition from its cells: the centroids in original units
    (z-scored by the group's ``mean`` and ``std``, varying columns only; a constant column
    publishes its one value, the mean)."""
    qi = list(qi)
    varying = np.asarray(varying, dtype=bool)
    values = np.tile(np.asarray(mean, dtype=np.float64), (max(int(result.n_cells), 0), 1))
    if varying.any() and len(values):
        values[:, varying] = result.centroid * std[varying] + mean[varying]
    return tuple(qi), kf.value_range(values)


def piece_figures(columns, qi, bins, n: int | None = None) -> dict | None:
    """Summary of one piece of the release as verified (a DataFrame, or a mapping of columns to
    arrays of ``n`` rows) over the QI columns it holds."""
    if bins is None:
        return None
    n = len(columns) if n is None else int(n)
    qi = [c for c in qi if c in bins.columns and c in columns]
    if not qi:
        return None
    return kf.summarize(_matrix(columns, qi, n), bins.subset(qi))


def report_figures(summaries, qi, bins, k: int) -> dict | None:
    """The report's ``release_figures`` section from the pieces' summaries (None when none has any)."""
    return kf.publish(kf.merge(list(summaries or []), list(qi)), bins, int(k))
