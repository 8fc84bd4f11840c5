"""p-Probabilistic k-anonymous release through :func:`daskmicro.anonymize`.

Implements the use of effective anonymity in microaggregation from Rebollo-Monedero et al.,
*p-Probabilistic k-Anonymous Microaggregation for the Anonymization of Surveys with Uncertain
Participation* (``003_0edb38f823409d2d.txt``): §V-B (constant participation π reduces the problem
to ordinary microaggregation with the effective anonymity n_min in place of k), §V-B's uneven
participation π_j (cells grown record by record in a fixed order until their own failure
probability q̄ is at most p̄), and the failure metrics of §VI-A (q̄, u, r̄, r̄′ per cell and the table
failure t̄).

``anonymize(..., participation=π, max_cell_failure=p̄)`` hands over to :func:`anonymize_probabilistic`:

* constant π, any method: n_min from Algorithm A (:func:`~daskmicro.privacy.effective.effective_anonymity`),
  then the chosen method runs with k replaced by n_min and the release is verified with n_min;
* a participation column (one π_j per record, in (0, 1]), methods ``mdav`` and ``pca-mdav`` in
  process: :func:`~daskmicro.privacy.probabilistic.grow_cells` on the z-scored QI (or on their
  principal components), and every cell's q̄ is recomputed and checked against p̄ before release.
  The Dask pipeline methods do not carry a per-record column through their stages, so they
  refuse a participation column.

The participation column is not a quasi-identifier: it is published untouched, like every other
non-QI column.  The released QI values are the plain means of each cell's records (every record
of the input is present); the π-weighted distortion of §VI-B is reported alongside.

``report.probabilistic`` (JSON-ready) holds: ``mode``, ``k``, ``max_cell_failure`` (p̄),
``participation`` (π, or ``"per-record"`` with ``participation_column`` and its min / mean /
max), ``n_min`` (constant π), ``n_cells``, ``cell_failure_max`` and ``cell_failure_mean`` (q̄_c),
``cells_above_max_cell_failure`` (always 0 in a release: it is verified), ``table_failure`` (t̄),
``expected_unprotected`` (Σ_c u_c·q̄_c), ``record_failure`` (r̄), ``record_failure_given_active``
(r̄′), ``worst_cells`` (size, expected participants and q̄ of the cells most likely to fail),
``expected_distortion`` (§VI-B, per-record π_j) and, when the π = 1 reference ran,
``information_loss_at_k`` (same method, plain k) and ``distortion_ratio``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

from .errors import InputError, ParameterError, VerificationError
from .privacy.effective import (
    cell_failure,
    check_anonymity,
    check_max_cell_failure,
    effective_anonymity,
)

__all__ = [
    "ParticipationModel",
    "check_participation_options",
    "participation_values",
    "cell_failure_summary",
    "anonymize_probabilistic",
    "REFERENCE_AUTO_ROWS",
    "IN_PROCESS_METHODS",
]

#: With ``reference=None`` the π = 1 reference run is made for in-process runs up to this many rows.
REFERENCE_AUTO_ROWS = 50_000
#: Methods that accept a per-record participation column.
IN_PROCESS_METHODS = ("mdav", "pca-mdav")
#: Cells listed in ``report.probabilistic["worst_cells"]``.
WORST_CELLS = 5


@dataclass(frozen=True)
class ParticipationModel:
    """Validated participation options: a constant π or a column of π_j, and p̄."""

    max_cell_failure: float
    constant: float | None = None
    column: object = None

    @property
    def per_record(self) -> bool:
        return self.constant is None


def check_participation_options(participation, max_cell_failure) -> ParticipationModel | None:
    """Validate ``participation`` and ``max_cell_failure`` as given to :func:`daskmicro.anonymize`.

    Returns None when neither is given.  A number is a constant participation π in (0, 1]; any
    other value is taken as the label of a column of the input holding π_j per record.  The two
    options go together; p̄ must lie in (0, 1).
    """
    if participation is None and max_cell_failure is None:
        return None
    if participation is None:
        raise ParameterError("max_cell_failure needs participation (a probability in (0, 1] or a column name)")
    if max_cell_failure is None:
        raise ParameterError("participation needs max_cell_failure, the acceptable cell failure p̄ in (0, 1)")
    pbar = check_max_cell_failure(max_cell_failure)
    if isinstance(participation, (bool, np.bool_)):
        raise ParameterError(f"participation must be a probability in (0, 1] or a column name, got {participation!r}")
    if isinstance(participation, (int, float, np.integer, np.floating)):
        value = float(participation)
        if not (0.0 < value <= 1.0):  # also refuses NaN
            raise ParameterError(f"participation must be in (0, 1], got {value!r}")
        return ParticipationModel(max_cell_failure=pbar, constant=value)
    if isinstance(participation, (list, tuple, np.ndarray, pd.Series, pd.Index, dict, set)):
        raise ParameterError("participation must be a number in (0, 1] or the name of a column of the input")
    return ParticipationModel(max_cell_failure=pbar, column=participation)


def participation_values(df: pd.DataFrame, column, qi) -> np.ndarray:
    """The π_j of ``df[column]`` as float64, refusing a QI column, missing or out-of-range values."""
    if column in qi:
        raise ParameterError(f"participation column {column!r} is also a QI column; it must be a separate column")
    if column not in df.columns:
        raise ParameterError(f"participation column {column!r} is not in the input")
    if int((df.columns == column).sum()) > 1:
        raise InputError(f"participation column name {column!r} occurs more than once in the input")
    s = df[column]
    if ptypes.is_bool_dtype(s.dtype) or not ptypes.is_numeric_dtype(s.dtype):
        raise InputError(
            f"participation column {column!r} is not numeric (dtype {s.dtype}); it must hold probabilities"
        )
    values = s.to_numpy(dtype=np.float64, na_value=np.nan)
    n_nan = int(np.isnan(values).sum())
    if n_nan:
        raise InputError(f"participation column {column!r} has {n_nan} missing value(s)")
    bad = int(((values <= 0.0) | (values > 1.0)).sum())
    if bad:
        raise InputError(f"participation column {column!r} has {bad} value(s) outside (0, 1]")
    return values


def _check_reference(reference):
    if reference is None or isinstance(reference, (bool, np.bool_)):
        return None if reference is None else bool(reference)
    raise ParameterError(f"plain_k_reference must be True, False or None, got {reference!r}")


def _n_min(k: int, pi: float, pbar: float, n: int) -> int:
    n_min = effective_anonymity(k, pi, pbar).n_min
    if n_min > n:
        raise ParameterError(
            f"k = {k} with participation {pi:g} and max_cell_failure {pbar:g} needs cells of n_min = {n_min} "
            f"records, more than the {n} records of the input"
        )
    return n_min


# --------------------------------------------------------------------------- failure metrics (§VI-A)


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


def _model_dict(k: int, model: ParticipationModel, n_min, pis) -> dict:
    out = {
        "mode": "per-record participation" if model.per_record else "constant participation",
        "k": k,
        "max_cell_failure": model.max_cell_failure,
    }
    if model.per_record:
        out.update(participation="per-record", participation_column=str(model.column),
                   participation_min=float(pis.min()), participation_mean=float(pis.mean()),
                   participation_max=float(pis.max()))
    else:
        out.update(participation=model.constant, n_min=int(n_min))
    return out


def _add_reference(prob: dict, information_loss: float, reference_il) -> None:
    if reference_il is None:
        return
    prob["information_loss_at_k"] = float(reference_il)
    prob["distortion_ratio"] = float(information_loss / reference_il) if reference_il > 0 else None


# --------------------------------------------------------------------------- entry point


def anonymize_probabilistic(df, qi, k, method, energy_loss, n_components, seed, keep_row_id, options, client,
                            progress, participation, max_cell_failure, reference):
    """p-Probabilistic k-anonymous release; called by :func:`daskmicro.anonymize` (see its docstring).

    ``method`` is already normalised and ``seed`` drawn; ``options`` are the checked pipeline
    options.  Returns ``(release, report)`` with ``report.probabilistic`` filled in (§VI-A metrics).
    """
    from .anonymize import AUTO_EXACT_ROWS, _is_dask_frame

    model = check_participation_options(participation, max_cell_failure)
    reference = _check_reference(reference)
    if model is None:
        raise ParameterError("plain_k_reference applies only with participation and max_cell_failure")
    k = check_anonymity(k)
    dask_in = _is_dask_frame(df)
    if not dask_in and not isinstance(df, pd.DataFrame):
        raise InputError(f"input must be a pandas or Dask DataFrame, got {type(df).__name__}")
    on_cluster = dask_in or client is not None or method in ("partitioned", "proximal-distal") or (
        method == "auto" and len(df) > AUTO_EXACT_ROWS
    )
    if on_cluster:
        if model.per_record:
            raise per_record_refusal(method)
        return _on_cluster(df, qi, k, method, energy_loss, n_components, seed, keep_row_id, options, client,
                           progress, model, reference)
    if any(v is not None for v in options[:3]):
        raise ParameterError(
            f"K, nu and partition_size apply to the partitioned and proximal-distal methods, not {method!r}"
        )
    return _in_process(df, qi, k, "mdav" if method == "auto" else method, energy_loss, n_components,
                                seed, keep_row_id, model, reference)


def _on_cluster(df, qi, k, method, energy_loss, n_components, seed, keep_row_id, options, client, progress,
                model: ParticipationModel, reference):
    from .anonymize_cluster import anonymize_on_cluster

    if isinstance(df, pd.DataFrame):
        n = len(df)
    else:  # one pass over the partitions (the pipeline counts again when it ingests)
        n = int(client.compute(df.shape[0]).result() if client is not None else df.shape[0].compute())
    if n == 0:
        raise InputError("input has no rows")
    n_min = _n_min(k, model.constant, model.max_cell_failure, n)
    K = options[0]
    if K is not None and K <= n_min:
        raise ParameterError(f"K (macrocell size) must be larger than the effective anonymity n_min = {n_min}, got {K}")
    release, report = anonymize_on_cluster(df, qi, n_min, method, energy_loss, n_components, seed, keep_row_id,
                                           options, client, progress)
    reference_il = None
    if reference:
        started = time.perf_counter()
        _, ref = anonymize_on_cluster(df, qi, k, method, energy_loss, n_components, seed, keep_row_id, options,
                                      client)
        reference_il = ref.information_loss
        if report.timings is not None:
            report.timings["reference"] = time.perf_counter() - started
    sizes, counts = zip(*sorted((int(s), int(c)) for s, c in report.cell_size_counts.items()))
    report.k = k
    prob = _model_dict(k, model, n_min, None)
    prob.update(cell_failure_summary(k, model.max_cell_failure, sizes, counts, participation=model.constant, n=n))
    _check_failures(prob, model.max_cell_failure)
    _add_reference(prob, report.information_loss, reference_il)
    report.probabilistic = prob
    return release, report


def _check_failures(prob: dict, pbar: float) -> None:
    """Verification: no cell may fail with probability above p̄ (recomputed from the final cells)."""
    bad = prob["cells_above_max_cell_failure"]
    if bad:
        raise VerificationError(
            f"{bad} cell(s) fail with probability above max_cell_failure = {pbar:g} "
            f"(largest q̄ = {prob['cell_failure_max']:.3g}); nothing is released"
        )


def per_record_refusal(method: str) -> ParameterError:
    """The error for a participation column with a method that runs on the Dask pipeline."""
    hint = ("method 'auto' runs the pipeline on Dask or lake inputs and beyond 100,000 rows" if method == "auto"
            else f"use a constant participation with method {method!r}")
    return ParameterError(
        f"a participation column (per-record π_j) is supported by methods {' and '.join(IN_PROCESS_METHODS)} "
        f"on a pandas DataFrame without a cluster; {hint}"
    )


def resolve_cli_participation(text: str, columns) -> object:
    """``--participation P|COLUMN``: a column of the input if one has that name, else a number."""
    if text in columns:
        return text
    try:
        value = float(text)
    except ValueError:
        raise ParameterError(
            f"--participation: {text!r} is neither a number in (0, 1] nor a column of the input"
        ) from None
    if not math.isfinite(value):
        raise ParameterError(f"--participation must be in (0, 1], got {text!r}")
    return value


# --------------------------------------------------------------------------- in process


def _in_process(df: pd.DataFrame, qi, k: int, method: str, energy_loss, n_components, seed: int, keep_row_id,
                model: ParticipationModel, reference):
    """Validate, form the cells (n_min or grown), publish, shuffle, verify; mirrors :func:`anonymize`."""
    from .anonymize import _check_frame, _check_pca_options, _check_qi, _pca_kernels, _publish_shuffled, _qi_space
    from .kernels import information_loss, mdav
    from .privacy.probabilistic import grow_cells
    from .privacy.verify import verify_k_anonymity, verify_rows
    from .publish import ROW_ID
    from .report.run import Report

    n = _check_frame(df)
    qi = _check_qi(df, qi)
    pis = participation_values(df, model.column, qi) if model.per_record else None
    n_min = None if model.per_record else _n_min(k, model.constant, model.max_cell_failure, n)
    if k > n:
        raise ParameterError(f"k = {k} exceeds the number of records n = {n}")
    energy_loss, n_components = _check_pca_options(method, energy_loss, n_components)
    if keep_row_id and ROW_ID in df.columns:
        raise ParameterError(f"keep_row_id: the input already has a column named {ROW_ID!r}")

    constant, varying, Xv, Z = _qi_space(df, qi, n_components)

    pca_info = None
    if method == "pca-mdav" and Xv.shape[1]:
        _, pca_reduce = _pca_kernels()
        pca_info = pca_reduce(Z, energy_loss=energy_loss, n_components=n_components)
        space = pca_info.scores  # cells are formed among the leading principal components (Algorithm B)
    else:
        space = Z
    start = time.perf_counter()
    if model.per_record:
        labels = grow_cells(space, k, pis, model.max_cell_failure)
    else:
        labels = mdav(space, n_min)
    seconds = time.perf_counter() - start
    labels = np.asarray(labels, dtype=np.int64)

    sizes = np.bincount(labels)
    if model.per_record:
        order = np.argsort(labels, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(sizes)))
        groups = [pis[order[bounds[c]:bounds[c + 1]]] for c in range(sizes.size)]
        prob = cell_failure_summary(k, model.max_cell_failure, sizes, pis_by_cell=groups, n=n)
    else:
        distinct, counts = np.unique(sizes, return_counts=True)
        prob = cell_failure_summary(k, model.max_cell_failure, distinct, counts, participation=model.constant, n=n)
    prob = {**_model_dict(k, model, n_min, pis), **prob}
    _check_failures(prob, model.max_cell_failure)

    release, dtype_changes = _publish_shuffled(df, varying, Xv, labels, seed, keep_row_id)
    k_check = verify_k_anonymity(release, qi, k if model.per_record else n_min).raise_if_failed()
    row_check = verify_rows(n, release).raise_if_failed()

    il = information_loss(Xv, labels) if Xv.shape[1] else 0.0
    if model.per_record and Xv.shape[1]:
        from .privacy.probabilistic import expected_distortion

        prob["expected_distortion"] = expected_distortion(Z, labels, pis)
    if reference or (reference is None and n <= REFERENCE_AUTO_ROWS):
        ref_labels = mdav(space, k)
        _add_reference(prob, il, information_loss(Xv, ref_labels) if Xv.shape[1] else 0.0)

    counts = np.unique(sizes, return_counts=True)
    report = Report(
        n=n, m=len(qi), m_used=len(varying), k=k, method=method, qi=list(qi),
        cells=int(sizes.size), min_cell_size=int(sizes.min()), max_cell_size=int(sizes.max()),
        information_loss=il, seconds=seconds, seed=seed,
        constant_columns=[c for c, const in zip(qi, constant) if const], dtype_changes=dtype_changes,
        energy_loss=energy_loss,
        n_components=None if pca_info is None else int(pca_info.n_components),
        eigenvalues=None if pca_info is None else [float(v) for v in np.asarray(pca_info.eigenvalues)],
        pca_energy_loss=None if pca_info is None else float(pca_info.energy_loss),
        k_anonymity=k_check, rows=row_check, keep_row_id=bool(keep_row_id),
        cell_size_counts={int(s): int(c) for s, c in zip(*counts)},
        probabilistic=prob,
    )
    return release, report
