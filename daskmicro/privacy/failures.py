"""Failure figures of a micropartition under uncertain participation (``003`` §VI-A).

Given the cells of a release and the participation of their records — a constant π, or one π_j
per record — :func:`cell_failure_summary` gives the table-level figures every report of a
p-probabilistic run shows: the largest and mean cell failure q̄_c (the probability that a cell
ends with between 1 and k − 1 participants), the table failure t̄ = 1 − Π_c (1 − q̄_c), the
expected number of unprotected records Σ_c u_c·q̄_c, the record failures r̄ and r̄′, and the
cells most likely to fail.  Runs whose cells are formed on the workers merge
per-partition figures instead (:func:`daskmicro.privacy.probabilistic.merge_cell_failure`).
"""

from __future__ import annotations

import numpy as np

from .effective import cell_failure

__all__ = ["cell_failure_summary", "WORST_CELLS"]

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

