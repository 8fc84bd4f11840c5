"""Failure figures of a micropartition under uncertain participation (*p-Probabilistic k-Anonymous Microaggregation …*, §VI-A).

Given the cells of a release and the participation of their records — a constant π, or one π_j
per record — :func:`cell_failure_summary` gives the table-level figures every report of a
p-probabilistic run shows: the largest and mean cell failure q̄_c (the probability that a cell
ends with between 1 and k − 1 participants), the table failure t̄ = 1 − Π_c (1 − q̄_c), the
expected number of unprotected records Σ_c u_c·q̄_c, the record failures r̄ and r̄′, and the
cells most likely to fail.  Runs whose cells are formed on the workers merge
per-partition figures instead (:func:`cell_failure_partial` on the workers, :func:`merge_cell_failure`).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError, ParameterError
from .effective import cell_failure
from .probabilistic import weighted_centroids

__all__ = ["cell_failure_summary", "WORST_CELLS", "participation_chunk_check", "participation_refusal",
           "cell_failure_partial", "merge_cell_failure"]

#: Cells listed in ``worst_cells``.
WORST_CELLS = 5


def cell_failure_summary(k, max_cell_failure, sizes, counts=None, pis_by_cell=None, participation=None, n=None) -> dict:
    """Table-level failure figures of a micropartition (§VI-A) as a JSON-ready dict.

    Parameters
    ----------
    k : int
        Target anonymity.
    max_cell_failure : float
        p̄, recorded and used to count the cells that exceed it.
    sizes : array_like of int
        Cell sizes n_c (distinct sizes with ``counts`` under constant π, one per cell otherwise).
    counts : array_like of int, optional
        Number of cells of each size (default one each).
    pis_by_cell : list of ndarray, optional
        The π_j of the records of each cell (per-record participation).
    participation : float, optional
        Constant π (when ``pis_by_cell`` is None).
    n : int, optional
        Number of records N (default Σ counts·sizes).

    Returns
    -------
    dict
        ``n_cells``, ``cell_failure_max``, ``cell_failure_mean``, ``cells_above_max_cell_failure``,
        ``table_failure`` t̄ = 1 − Π_c (1 − q̄_c), ``expected_unprotected`` Σ_c u_c·q̄_c,
        ``record_failure`` r̄, ``record_failure_given_active`` r̄′ and ``worst_cells`` (largest q̄_c).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    counts = np.ones(sizes.size, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
    if pis_by_cell is None:
        metrics = [cell_failure(k, participation, int(s)) for s in sizes]
        active = sizes * float(participation)
    else:
        metrics = [cell_failure(k, p) for p in pis_by_cell]
        active = np.array([float(np.sum(p)) for p in pis_by_cell])
    q = np.array([m.cell_failure for m in metrics])
    u = np.array([m.unprotected for m in metrics])
    ra = np.array([m.record_failure_given_active for m in metrics])
    n = int((sizes * counts).sum()) if n is None else int(n)
    n_cells = int(counts.sum())
    unprotected = float((counts * u * q).sum())
    if q.size and q.max() >= 1.0:
        t = 1.0
    else:
        t = float(-np.expm1((counts * np.log1p(-q)).sum()))
    worst = np.lexsort((-sizes, -q))[:WORST_CELLS]
    return {
        "n_cells": n_cells,
        "cell_failure_max": float(q.max()),
        "cell_failure_mean": float((counts * q).sum() / n_cells),
        "cells_above_max_cell_failure": int(counts[q > max_cell_failure].sum()),
        "table_failure": t,
        "expected_unprotected": unprotected,
        "record_failure": unprotected / n,
        "record_failure_given_active": float((counts * ra * sizes).sum() / n),
        "worst_cells": [
            {"size": int(sizes[i]), "expected_active": float(active[i]), "cell_failure": float(q[i]),
             "cells": int(counts[i])}
            for i in worst
        ],
    }


# --------------------------------------------------------------------------- partitioned runs


def participation_chunk_check(values) -> tuple:
    """Checks of one chunk of a participation column, run where the chunk lives.

    Returns ``(rows, numeric, n_missing, n_outside)``: ``numeric`` is False for a non-numeric
    (or boolean) dtype, and the two counts are of missing values and values outside (0, 1].
    No value leaves the worker.
    """
    from pandas.api import types as ptypes

    dtype = getattr(values, "dtype", np.asarray(values).dtype)
    n = len(values)
    if ptypes.is_bool_dtype(dtype) or not ptypes.is_numeric_dtype(dtype):
        return n, False, 0, 0
    v = np.asarray(values.to_numpy(dtype=np.float64, na_value=np.nan) if hasattr(values, "to_numpy") else values,
                   dtype=np.float64)
    nan = np.isnan(v)
    return n, True, int(nan.sum()), int((~nan & ((v <= 0.0) | (v > 1.0))).sum())


def participation_refusal(column, checks, dtype=None):
    """The one-line error for merged :func:`participation_chunk_check` results, or None.

    Names the column and counts only, never a value.
    """
    if dtype is not None or not all(c[1] for c in checks):
        shown = f" (dtype {dtype})" if dtype is not None else ""
        return InputError(f"participation column {column!r} is not numeric{shown}; it must hold probabilities")
    n_nan = sum(c[2] for c in checks)
    if n_nan:
        return InputError(f"participation column {column!r} has {n_nan} missing value(s)")
    bad = sum(c[3] for c in checks)
    if bad:
        return InputError(f"participation column {column!r} has {bad} value(s) outside (0, 1]")
    return None


def cell_failure_partial(k, max_cell_failure, labels, pis, Z=None) -> dict:
    """Failure figures of the cells of one partition (§VI-A), to merge with :func:`merge_cell_failure`.

    ``labels`` numbers the partition's cells 0 … C−1, ``pis`` holds every record's π_j and ``Z``
    (optional) its coordinates for the π-weighted distortion of §VI-B.  Only sums, extremes and
    the partition's worst cells are returned: a few numbers, whatever the partition size.
    """
    labels = np.asarray(labels, dtype=np.int64)
    pis = np.asarray(pis, dtype=np.float64)
    sizes = np.bincount(labels)
    order = np.argsort(labels, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    metrics = [cell_failure(k, pis[order[bounds[c]:bounds[c + 1]]]) for c in range(sizes.size)]
    q = np.array([m.cell_failure for m in metrics])
    u = np.array([m.unprotected for m in metrics])
    ra = np.array([m.record_failure_given_active for m in metrics])
    active = np.bincount(labels, weights=pis, minlength=sizes.size)
    worst = np.lexsort((np.arange(q.size), -sizes, -q))[:WORST_CELLS]
    num = 0.0
    if Z is not None and np.asarray(Z).ndim == 2 and np.asarray(Z).shape[1]:
        Z = np.asarray(Z, dtype=np.float64)
        resid = Z - weighted_centroids(Z, labels, pis)[labels]
        num = math.fsum(pis * np.einsum("ij,ij->i", resid, resid))
    return {
        "n_records": int(labels.size),
        "n_cells": int(sizes.size),
        "min_cell_size": int(sizes.min()),
        "max_cell_size": int(sizes.max()),
        "q_max": float(q.max()),
        "q_sum": math.fsum(q),
        "q_one": bool(q.max() >= 1.0),
        "log_survival": math.fsum(np.log1p(-q)) if q.max() < 1.0 else 0.0,  # Σ log(1 − q̄_c)
        "above": int((q > max_cell_failure).sum()),
        "unprotected": math.fsum(u * q),
        "active_failure": math.fsum(ra * sizes),
        "pi_min": float(pis.min()),
        "pi_max": float(pis.max()),
        "pi_sum": math.fsum(pis),
        "distortion": num,
        "worst": [(float(q[i]), int(sizes[i]), float(active[i])) for i in worst],
    }


def merge_cell_failure(partials, k, max_cell_failure, m_used: int | None = None) -> dict:
    """Table-level failure figures from the :func:`cell_failure_partial` of every partition.

    The same figures as :func:`daskmicro.privacy.failures.cell_failure_summary` for one
    π_j per record — ``n_cells``, ``cell_failure_max``, ``cell_failure_mean``,
    ``cells_above_max_cell_failure``, ``table_failure`` t̄ = 1 − Π_c (1 − q̄_c) (as
    −expm1(Σ log1p(−q̄_c))), ``expected_unprotected``, ``record_failure``,
    ``record_failure_given_active`` and ``worst_cells`` — plus ``min_cell_size``,
    ``max_cell_size``, ``participation_min`` / ``_mean`` / ``_max`` and, with ``m_used`` (the
    number of varying QI columns) given, the π-weighted ``expected_distortion`` of §VI-B.
    Sums are merged with ``math.fsum`` in the order of ``partials``: the result depends only on
    the partitions, never on how the input was chunked.
    """
    partials = list(partials)
    if not partials:
        raise ParameterError("no cells to summarise")
    n = sum(p["n_records"] for p in partials)
    n_cells = sum(p["n_cells"] for p in partials)
    unprotected = math.fsum(p["unprotected"] for p in partials)
    pi_sum = math.fsum(p["pi_sum"] for p in partials)
    if any(p["q_one"] for p in partials):
        t = 1.0
    else:
        t = float(-math.expm1(math.fsum(p["log_survival"] for p in partials)))
    worst = sorted(
        ((-w[0], -w[1], i, j, w) for i, p in enumerate(partials) for j, w in enumerate(p["worst"])),
    )[:WORST_CELLS]
    out = {
        "n_cells": int(n_cells),
        "min_cell_size": min(p["min_cell_size"] for p in partials),
        "max_cell_size": max(p["max_cell_size"] for p in partials),
        "cell_failure_max": max(p["q_max"] for p in partials),
        "cell_failure_mean": math.fsum(p["q_sum"] for p in partials) / n_cells,
        "cells_above_max_cell_failure": int(sum(p["above"] for p in partials)),
        "table_failure": t,
        "expected_unprotected": unprotected,
        "record_failure": unprotected / n,
        "record_failure_given_active": math.fsum(p["active_failure"] for p in partials) / n,
        "worst_cells": [
            {"size": w[1], "expected_active": w[2], "cell_failure": w[0], "cells": 1} for *_, w in worst
        ],
        "participation_min": min(p["pi_min"] for p in partials),
        "participation_mean": pi_sum / n,
        "participation_max": max(p["pi_max"] for p in partials),
    }
    if m_used is not None:
        num = math.fsum(p["distortion"] for p in partials)
        out["expected_distortion"] = num / (m_used * pi_sum) if m_used else 0.0
    return out
