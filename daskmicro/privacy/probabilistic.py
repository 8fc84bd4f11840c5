"""Cells for p-probabilistic k-anonymous microaggregation (pure numpy; no Dask).

Implements the construction of §V–§VI of Rebollo-Monedero et al., *p-Probabilistic k-Anonymous
Microaggregation for the Anonymization of Surveys with Uncertain Participation*
(Information Sciences 2017):

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
from ..kernels.sized import Sized
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
]


@dataclass(frozen=True)
class ProbabilisticCells(Sized):
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
