"""Cells for p-probabilistic k-anonymous microaggregation (pure numpy; no Dask).

Implements the construction of §V–§VI of Rebollo-Monedero et al., *p-Probabilistic k-Anonymous
Microaggregation for the Anonymization of Surveys with Uncertain Participation*
(``003_0edb38f823409d2d.txt``):

* **constant participation π** — the cells are those of MDAV run with the effective anonymity
  n_min of Algorithm A in place of k (§VII-E): every cell holds n_min … 2·n_min − 1 records and,
  since q̄ cannot rise beyond n_min (see :mod:`.effective`), fails with probability ≤ p̄.
* **per-record participation π_j** — no single cell size fits, so cells are grown one record at
  a time, MDAV-style (:func:`grow_cells`): each cell starts at a reference record and takes the
  nearest remaining records until its own attained failure q̄ ≤ p̄ (and q̄ can no longer rise).

The distortion of §VI-B weighs every record by its participation: see :func:`expected_distortion`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, ParameterError
from ..kernels.mdav import as_records, mdav
from ..kernels.moments import varying_columns
from .effective import (
    ActiveCount,
    cell_failure,
    check_anonymity,
    check_max_cell_failure,
    check_participation,
    effective_anonymity,
    table_failure,
)

__all__ = [
    "ProbabilisticCells",
    "probabilistic_cells",
    "grow_cells",
    "expected_distortion",
    "weighted_centroids",
    "WORST_CELLS",
    "participation_chunk_check",
    "participation_refusal",
    "cell_failure_partial",
    "merge_cell_failure",
]

#: Cells listed in the ``worst_cells`` of a merged failure summary.
WORST_CELLS = 5


@dataclass(frozen=True)
class ProbabilisticCells:
    """Cells of a p-probabilistic k-anonymous micropartition and their failure metrics (§VI-A).

    Attributes
    ----------
    labels : ndarray of int64, shape (n,)
        Cell id of every record, numbered in the order the cells were formed.
    k, max_cell_failure : int, float
        Target anonymity and acceptable cell failure p̄.
    participation : float or None
        Constant π, or None when one π_j per record was given.
    n_min : int or None
        Effective anonymity (constant π only).
    cell_sizes : ndarray of int64
        n_c, records per cell.
    expected_active : ndarray of float
        E K_{n_c} = Σ_{j∈c} π_j, expected participants per cell.
    cell_failure, cell_unprotected, cell_record_failure, cell_record_failure_given_active : ndarray
        q̄_c, u_c, r̄_c, r̄′_c of every cell.
    table_failure : float
        t̄ = 1 − Π_c (1 − q̄_c): probability that some cell of the table fails.
    expected_unprotected : float
        Σ_c u_c·q̄_c, expected number of active records left in a failing cell (N·r̄).
    record_failure : float
        r̄ of the table: expected_unprotected / N.
    record_failure_given_active : float
        r̄′ of the table: (1/N)·Σ_j P{record j unprotected | j active}.
    """

    labels: np.ndarray = field(repr=False)
    k: int
    max_cell_failure: float
    participation: float | None
    n_min: int | None
    cell_sizes: np.ndarray = field(repr=False)
    expected_active: np.ndarray = field(repr=False)
    cell_failure: np.ndarray = field(repr=False)
    cell_unprotected: np.ndarray = field(repr=False)
    cell_record_failure: np.ndarray = field(repr=False)
    cell_record_failure_given_active: np.ndarray = field(repr=False)
    table_failure: float
    expected_unprotected: float
    record_failure: float
    record_failure_given_active: float

    @property
    def n_cells(self) -> int:
        return int(self.cell_sizes.size)

    def summary(self) -> dict:
        """Table-level figures as plain Python values (JSON-ready); per-cell arrays are left out."""
        return {
            "k": self.k,
            "max_cell_failure": self.max_cell_failure,
            "participation": self.participation if self.participation is not None else "per-record",
            "n_min": self.n_min,
            "n_records": int(self.labels.size),
            "n_cells": self.n_cells,
            "min_cell_size": int(self.cell_sizes.min()),
            "max_cell_size": int(self.cell_sizes.max()),
            "max_attained_cell_failure": float(self.cell_failure.max()),
            "table_failure": self.table_failure,
            "expected_unprotected": self.expected_unprotected,
            "record_failure": self.record_failure,
            "record_failure_given_active": self.record_failure_given_active,
        }

    def cells(self) -> dict:
        """Per-cell metrics as lists (JSON-ready), indexed by cell id."""
        return {
            "size": self.cell_sizes.tolist(),
            "expected_active": self.expected_active.tolist(),
            "cell_failure": self.cell_failure.tolist(),
            "unprotected": self.cell_unprotected.tolist(),
            "record_failure": self.cell_record_failure.tolist(),
            "record_failure_given_active": self.cell_record_failure_given_active.tolist(),
        }


# --------------------------------------------------------------------------- helpers


def _records(X) -> np.ndarray:
    try:
        return as_records(X)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _participation_for(n: int, participation):
    part = check_participation(participation)
    if not np.isscalar(part) and part.size != n:
        raise ParameterError(f"participation has {part.size} values but X has {n} records")
    return part


def _dist2(Z: np.ndarray, point: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, summed column by column in order (deterministic per row)."""
    d = np.zeros(Z.shape[0])
    for i in range(Z.shape[1]):
        d += (Z[:, i] - point[i]) ** 2
    return d


def _nearest_order(d: np.ndarray, rows: np.ndarray, count: int) -> np.ndarray:
    """Positions of the ``count`` (or more, to keep ties whole) smallest ``d``, sorted by (d, row)."""
    if count < d.size:
        cut = np.partition(d, count - 1)[count - 1]
        pos = np.flatnonzero(d <= cut)
    else:
        pos = np.arange(d.size)
    return pos[np.lexsort((rows[pos], d[pos]))]


# --------------------------------------------------------------------------- construction


def grow_cells(Z, k, participation, max_cell_failure) -> np.ndarray:
    """Micropartition whose every cell has its own attained failure q̄_c ≤ p̄ (per-record π_j).

    The construction follows MDAV-generic, with the fixed cell size replaced by a stopping rule:

    1. while records remain: C ← centroid of the remaining records; P ← remaining record furthest
       from C (lowest row on ties);
    2. grow a cell from P: take the remaining records in increasing distance from P (ties by row),
       adding each π_j to the PMF recursion of Algorithm A, and stop as soon as the cell has at
       least k records, q̄ ≤ p̄, and p(k−1) ≥ p(0) (so that no later addition can raise q̄);
    3. Q ← remaining record furthest from P; grow a cell from Q the same way; back to 1;
    4. if the remaining records run out before a cell meets the rule, they join the cell formed
       last, which stays valid: adding records never raises q̄ once p(k−1) ≥ p(0).

    So cells 0 … C−2 are balls around their reference records taken in order from what is left,
    and the last cell holds everything left over — the shape of an MDAV partition, which the
    specification of :mod:`.spec` can state.  With a constant π every cell but the last has
    exactly n_min records.

    Parameters
    ----------
    Z : array_like, shape (n, m)
        Records in the space where distance is meant (z-scored quasi-identifiers).
    k : int
        Target anonymity, ≥ 2.
    participation : float or array_like, shape (n,)
        π_j of every record (a scalar applies to all).
    max_cell_failure : float
        Acceptable cell failure p̄ in (0, 1).

    Returns
    -------
    labels : ndarray of int64, shape (n,)
        Cell ids, numbered in the order the cells are formed.

    Raises
    ------
    ParameterError
        Bad k, π or p̄, or all n records together still fail the rule.
    """
    Z = _records(Z)
    n = Z.shape[0]
    k = check_anonymity(k)
    pbar = check_max_cell_failure(max_cell_failure)
    part = _participation_for(n, participation)
    pis = np.full(n, part) if np.isscalar(part) else part
    if k > n:
        raise ParameterError(f"k = {k} exceeds the number of records n = {n}")
    log_pbar = math.log(pbar)

    labels = np.full(n, -1, dtype=np.int64)
    rem = np.arange(n)
    total = Z.sum(axis=0)
    cell = 0
    guess = 2 * k
    d_prev = None  # distances of the remaining records to the last P
    while rem.size:
        if d_prev is None:
            d_c = _dist2(Z[rem], total / rem.size)
            ref = rem[int(np.argmax(d_c))]
        else:
            ref = rem[int(np.argmax(d_prev))]
        d_ref = _dist2(Z[rem], Z[ref])
        state = ActiveCount(k)
        taken = 0
        done = False
        while not done and taken < rem.size:
            order = _nearest_order(d_ref, rem, min(rem.size, max(guess, 2 * taken)))
            for pos in order[taken:]:
                state.add(float(pis[rem[pos]]))
                taken += 1
                if state.satisfies(log_pbar):
                    done = True
                    break
        if not done:
            if cell == 0:
                raise ParameterError(
                    f"k = {k} cannot be met with max_cell_failure = {pbar:g}: even all {n} records "
                    f"in one cell fail with a higher probability under the given participation"
                )
            labels[rem] = cell - 1  # leftovers join the cell formed last (it stays valid)
            break
        members = order[:taken]
        labels[rem[members]] = cell
        cell += 1
        guess = max(guess, taken + taken // 4 + 1)
        keep = np.ones(rem.size, dtype=bool)
        keep[members] = False
        total = total - Z[rem[members]].sum(axis=0)
        d_prev = d_ref[keep] if d_prev is None else None
        rem = rem[keep]
        if d_prev is not None and d_prev.size == 0:
            d_prev = None
    return labels


def probabilistic_cells(Z, k, participation, max_cell_failure) -> ProbabilisticCells:
    """Form p-probabilistic k-anonymous cells and compute their failure metrics (§V, §VI-A).

    Parameters
    ----------
    Z : array_like, shape (n, m)
        Z-scored quasi-identifiers (the caller standardizes, as for :func:`daskmicro.mdav`).
    k : int
        Target anonymity, 2 ≤ k ≤ n.
    participation : float or array_like, shape (n,)
        Constant participation π in (0, 1], or one π_j per record.
    max_cell_failure : float
        Acceptable cell failure p̄ in (0, 1).

    Returns
    -------
    ProbabilisticCells
        Labels plus q̄_c, u_c, r̄_c, r̄′_c per cell and t̄, r̄, r̄′ for the table.  Constant π:
        ``mdav(Z, n_min)``; per-record π_j: :func:`grow_cells`.

    Raises
    ------
    InputError
        ``Z`` is not a finite 2-D matrix.
    ParameterError
        Bad k, π or p̄, or the n records cannot meet p̄ (e.g. n_min > n).
    """
    Z = _records(Z)
    n = Z.shape[0]
    k = check_anonymity(k)
    pbar = check_max_cell_failure(max_cell_failure)
    part = _participation_for(n, participation)
    if np.isscalar(part):
        eff = effective_anonymity(k, part, pbar, n_records=n)
        labels = np.asarray(mdav(Z, eff.n_min), dtype=np.int64)
        sizes = np.bincount(labels)
        by_size = {int(s): cell_failure(k, part, int(s)) for s in np.unique(sizes)}
        metrics = [by_size[int(s)] for s in sizes]
        expected = sizes * part
        n_min, pi = eff.n_min, part
    else:
        labels = grow_cells(Z, k, part, pbar)
        sizes = np.bincount(labels)
        order = np.argsort(labels, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(sizes)))
        metrics = [cell_failure(k, part[order[bounds[c]:bounds[c + 1]]]) for c in range(sizes.size)]
        expected = np.bincount(labels, weights=part)
        n_min, pi = None, None
    q = np.array([m.cell_failure for m in metrics])
    u = np.array([m.unprotected for m in metrics])
    r = np.array([m.record_failure for m in metrics])
    ra = np.array([m.record_failure_given_active for m in metrics])
    unprotected = float((u * q).sum())
    return ProbabilisticCells(
        labels=labels,
        k=k,
        max_cell_failure=pbar,
        participation=pi,
        n_min=n_min,
        cell_sizes=sizes.astype(np.int64),
        expected_active=np.asarray(expected, dtype=np.float64),
        cell_failure=q,
        cell_unprotected=u,
        cell_record_failure=r,
        cell_record_failure_given_active=ra,
        table_failure=table_failure(q),
        expected_unprotected=unprotected,
        record_failure=unprotected / n,
        record_failure_given_active=float((ra * sizes).sum() / n),
    )


# --------------------------------------------------------------------------- distortion (§VI-B)


def weighted_centroids(X, labels, weights=None) -> np.ndarray:
    """Centroids x̂_c = Σ π_j x_j / Σ π_j per cell: the minimisers of the expected cell SSE (§VI-B).

    With ``weights`` None (or constant) they are the plain cell means.
    """
    X = _records(X)
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (X.shape[0],) or (labels.size and labels.min() < 0):
        raise ParameterError(f"labels must hold one non-negative cell id per record ({X.shape[0]})")
    w = np.ones(X.shape[0]) if weights is None else np.broadcast_to(np.asarray(weights, dtype=np.float64), (X.shape[0],))
    ncell = int(labels.max()) + 1
    sums = np.zeros((ncell, X.shape[1]))
    np.add.at(sums, labels, X * w[:, None])
    mass = np.bincount(labels, weights=w, minlength=ncell)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / mass[:, None]


def expected_distortion(Z, labels, participation=None) -> float:
    """Distortion D of p-probabilistic microaggregation (§VI-B).

    D = Σ_c Σ_{j∈c} π_j ‖z_j − ẑ_c‖² / (m′ · Σ_j π_j), with ``Z`` the columnwise z-scored
    quasi-identifiers, ẑ_c the π-weighted centroid of cell c and m′ the number of columns with
    non-zero variance.  Under constant π (or ``None``) this is the usual SSE/SST.
    """
    Z = _records(Z)
    part = 1.0 if participation is None else _participation_for(Z.shape[0], participation)
    w = np.full(Z.shape[0], part) if np.isscalar(part) else part
    labels = np.asarray(labels, dtype=np.int64)
    C = weighted_centroids(Z, labels, w)
    resid = Z - C[labels]
    m_used = int(varying_columns(Z).sum())
    if m_used == 0:
        return 0.0
    return float(w @ np.einsum("ij,ij->i", resid, resid)) / (m_used * float(w.sum()))


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
