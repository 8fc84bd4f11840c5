"""Distributed input: the QI columns of a Dask DataFrame as z-scored chunks on the workers.

A first pass over the partitions checks the values (missing, infinite) and computes per column
the count, min, max and sum in double-double precision; the client combines the sums exactly
into the correctly rounded global mean.  A second pass sums the deviations from that mean and
their squares (:func:`~daskmicro.kernels.moments.centered_sums`), which the client combines
exactly into the (population) standard deviation — the corrected two-pass algorithm, stable
for columns with a large offset and a small spread (epoch milliseconds), and the same to the
last bit for every chunking.  A column is constant when its min equals its max (exact).  A
third pass writes the z-scored chunks.  Only per-chunk summaries reach the client.

With a participation column (per-record π_j, §V-B of *p-Probabilistic k-Anonymous Microaggregation …*) the column
is read with the QIs, checked in the first pass (numeric, no missing value, all in (0, 1]; the
refusal names the column and counts only) and kept as one float64 vector per chunk beside the
z-scored chunks.  It is not a QI: the release publishes it untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError
from ..io.qi import qi_frame_matrix
from ..kernels.bounds import MAX_ABS
from ..kernels.macro import dd_colsum, dd_combine
from ..kernels.moments import centered_m2, centered_sums, population_std

__all__ = ["Ingested", "ingest"]


@dataclass
class Ingested:
    """Where the z-scored records live and how to undo the scaling.

    ``blocks`` are futures of float64 matrices (rows × varying QI columns), ``row0s`` the first
    global row id of each block and ``lengths`` its row count (blocks may be empty).
    """

    blocks: list
    row0s: list
    lengths: list
    n: int
    mean: np.ndarray        # per QI column (original units)
    std: np.ndarray         # population std; 0 for constant columns
    varying: np.ndarray     # bool per QI column
    weights: list | None = None   # futures of the π_j of each block (participation column), or None

    @property
    def m_used(self) -> int:
        return int(self.varying.sum())


def _qi_values(part: pd.DataFrame, qi: list) -> np.ndarray:
    return qi_frame_matrix(part, qi)  # exact float64, or refused (integers beyond ±2^53)


def _summary(X: np.ndarray):
    nan = np.isnan(X).sum(axis=0)
    inf = np.isinf(X).sum(axis=0)
    if nan.any() or inf.any() or X.shape[0] == 0:
        lo = hi = np.full(X.shape[1], np.nan)
        return X.shape[0], nan, inf, None, lo, hi
    return X.shape[0], nan, inf, dd_colsum(X), X.min(axis=0), X.max(axis=0)


def _participation_check(part: pd.DataFrame, column):
    from ..privacy.failures import participation_chunk_check

    return participation_chunk_check(part[column])


def _deviations(X: np.ndarray, mean: np.ndarray):
    return centered_sums(X, mean)


def _zscore(X: np.ndarray, mean: np.ndarray, std: np.ndarray, varying: np.ndarray):
    return np.ascontiguousarray((X[:, varying] - mean[varying]) / std[varying])


def _weights(part: pd.DataFrame, column) -> np.ndarray:
    return part[column].to_numpy(dtype=np.float64)


def _check_participation_column(ddf, qi: list, column) -> None:
    """Client-side checks of a participation column that need no data (from the frame's meta)."""
    from pandas.api import types as ptypes

    from ..privacy.failures import participation_refusal

    if column in qi:
        raise ParameterError(f"participation column {column!r} is also a QI column; it must be a separate column")
    if column not in ddf.columns:
        raise ParameterError(f"participation column {column!r} is not in the input")
    if int((ddf.columns == column).sum()) > 1:
        raise InputError(f"participation column name {column!r} occurs more than once in the input")
    dtype = ddf._meta[column].dtype
    if ptypes.is_bool_dtype(dtype) or not ptypes.is_numeric_dtype(dtype):
        raise participation_refusal(column, [], dtype=dtype)


def ingest(client, ddf, qi: list, participation_column=None) -> Ingested:
    """Check and z-score the QI columns of ``ddf`` on the cluster (see module docstring).

    ``participation_column``: label of a column of π_j in (0, 1] to check and keep beside the
    z-scored chunks (``Ingested.weights``).  The tasks get fresh keys (``pure=False``), and so does
    everything computed from them: a run repeated on the same client never reuses a key the
    scheduler may still be forgetting.
    """
    column = participation_column
    if column is not None:
        _check_participation_column(ddf, qi, column)
    parts = client.compute(ddf[list(qi) + ([column] if column is not None else [])].to_delayed())
    matrices = client.map(_qi_values, parts, qi=qi, pure=False)   # each chunk's QIs made float64 once
    checks = None if column is None else client.map(_participation_check, parts, column=column, pure=False)
    if column is None:
        del parts   # each chunk goes once its matrix is made
    stats = client.gather(client.map(_summary, matrices, pure=False))
    lengths = [s[0] for s in stats]
    n = int(sum(lengths))
    if n == 0:
        raise InputError("input has no rows")
    if column is not None:
        from ..privacy.failures import participation_refusal

        error = participation_refusal(column, client.gather(checks))
        if error is not None:
            raise error
    nan = np.sum([s[1] for s in stats], axis=0)
    inf = np.sum([s[2] for s in stats], axis=0)
    if nan.any():
        cols = ", ".join(f"{c!r} ({int(v)})" for c, v in zip(qi, nan) if v)
        raise InputError(f"QI column(s) with missing (NaN) values: {cols}; impute or drop them first")
    if inf.any():
        cols = ", ".join(f"{c!r} ({int(v)})" for c, v in zip(qi, inf) if v)
        raise InputError(f"QI column(s) with infinite values: {cols}")
    full = [s for s in stats if s[0]]
    mean = dd_combine([s[3] for s in full]) / n
    lo = np.min([s[4] for s in full], axis=0)
    hi = np.max([s[5] for s in full], axis=0)
    huge = [repr(c) for c, a, b in zip(qi, lo, hi) if max(-a, b) > MAX_ABS]  # the in-process paths' bound
    if huge:
        raise InputError(f"QI column(s) with values beyond ±{MAX_ABS:.0e}: {', '.join(huge)}; squared distances "
                         "would overflow: rescale them (e.g. to other units) first")
    varying = hi > lo  # exact, on the original values
    m2 = centered_m2(client.gather(client.map(_deviations, matrices, mean=mean, pure=False)), n)
    std = population_std(m2, n, ~varying)
    # with min < max some deviation is non-zero, so M2 > 0 short of underflow (subnormal spreads,
    # whose squares vanish): such a column still varies and publishes centroids, on scale 1 (its
    # z-scores ≈ 0, as the in-process paths make them); constancy is decided by min == max above
    std = np.where(varying & ~(std > 0), 1.0, std)
    blocks = client.map(_zscore, matrices, mean=mean, std=std, varying=varying, pure=False)
    weights = None if column is None else client.map(_weights, parts, column=column, pure=False)
    row0s = list(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int))
    del matrices
    return Ingested(blocks=blocks, row0s=row0s, lengths=lengths, n=n, mean=mean, std=std, varying=varying,
                    weights=weights)
