"""The cells of one group in one task: z-score its QIs, run a one-task kernel, put centroids in.

A *group* is what the planner (:mod:`daskmicro.plan`) microaggregates on its own: a stratum ×
missingness pattern, or the whole table.  :func:`one_task` forms all the cells of a group in one
call — exact MDAV (Algorithm A of *Efficient k-Anonymous Microaggregation … via PCA*), MDAV with PCA (Algorithm B, §III-C), PCL from MDAV
(*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*, §3.3–3.4), or, with a per-record participation π_j, cells grown until each one's failure
probability q̄ ≤ p̄ (*p-Probabilistic k-Anonymous Microaggregation …*, §V-B) — and returns the group's records with their observed QIs
replaced by the cell centroids in original units, plus the group's report.  It runs on a worker
or, as an optimisation of the same plan, in the caller's process; no Dask here.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..io.qi import qi_frame_matrix, qi_matrix
from ..kernels import centroids, information_loss, mdav, standardize
from ..kernels.figures import value_range
from ..release.publish import replace_qi
from ..release.run_figures import published_matrix
from ..runplan import GroupResult

__all__ = ["qi_space", "matrix_space", "one_task", "matrix_cells", "batch_task", "same_partition"]


def qi_space(df: pd.DataFrame, qi: list, n_components=None):
    """(constant mask, varying column names, X of the varying columns, their z-scores) of the QI
    columns ``qi`` of ``df`` (:func:`matrix_space`)."""
    return matrix_space(qi_matrix(df, qi), qi, n_components)


def matrix_space(X: np.ndarray, qi: list, n_components=None):
    """:func:`qi_space` of the QI matrix ``X`` (rows × ``qi``, float64, no missing value).

    Constant columns identify no one: they are left out of the cells' space and published
    unchanged.  With none varying, Z is one column of zeros (every record alike).
    """
    constant = X.max(axis=0) == X.min(axis=0) if len(X) else np.zeros(len(qi), bool)
    varying = [c for c, const in zip(qi, constant) if not const]
    if n_components is not None and n_components > len(varying):
        raise ParameterError(
            f"n_components = {n_components} exceeds the number of non-constant QI columns ({len(varying)})"
        )
    Xv = X[:, ~constant]
    Z = standardize(Xv)[0] if Xv.shape[1] else np.zeros((len(X), 1))
    return constant, varying, Xv, Z


def _labels(method, space, k, energy_loss, n_components, pis, pbar):
    """(labels, PCA info or None) of one kernel call."""
    pca_info = None
    if method == "pca-mdav" and space.shape[1] and np.any(space):
        from ..kernels.pca import pca_mdav, pca_reduce

        pca_info = pca_reduce(space, energy_loss=energy_loss, n_components=n_components)
        if pis is not None:  # Algorithm B's space, cells grown there
            from ..privacy.probabilistic import grow_cells

            return grow_cells(pca_info.scores, k, pis, pbar), pca_info
        return pca_mdav(space, k, energy_loss=energy_loss, n_components=n_components), pca_info
    if pis is not None:
        from ..privacy.probabilistic import grow_cells

        return grow_cells(space, k, pis, pbar), None
    if method == "pcl":
        from ..kernels.pcl import pcl

        return pcl(space, k, init="mdav", seed=0), None
    return mdav(space, k), None


def one_task(df: pd.DataFrame, gp):
    """Microaggregate one group in one task, as its plan ``gp`` says.

    Parameters
    ----------
    df : pandas.DataFrame
        The group's records (any columns; the row order is the order the kernel sees).
    gp : daskmicro.runplan.GroupPlan
        The group's plan: the QI columns to microaggregate (``gp.group.observed``, those observed
        in this group); the cell size ``gp.k`` (k, or the effective anonymity n_min under constant
        participation); ``gp.method`` ("mdav", "pca-mdav" or "pcl") with ``energy_loss`` /
        ``n_components``; ``gp.participation`` (per-record participation: the column of π_j and
        p̄; cells are grown until q̄ ≤ p̄); ``gp.plain_k`` (participation runs: also the
        information loss of MDAV at this plain k, π = 1, for the report's distortion ratio);
        ``gp.improve`` (after the method, lower the SSE by moves and swaps between neighbouring
        cells and PCL iterations, :func:`daskmicro.kernels.improve.polish`; the run's
        ``quality``; not with participation).

    Returns
    -------
    (pandas.DataFrame, GroupResult)
        The records with centroids in place of ``observed`` (same row order, same other columns)
        and the group's figures (:class:`~daskmicro.runplan.GroupResult`).
    """
    observed = list(gp.group.observed)
    if gp.k > len(df):
        raise ParameterError(f"k = {gp.k} exceeds the number of records n = {len(df)}")
    part = gp.participation
    # the π_j column was checked on every piece at the pre-scan (graph.executor): read it here
    pis = None if part is None else df[part.column].to_numpy(np.float64)
    values, varying, info = matrix_cells(qi_matrix(df, observed), pis, gp)
    out, changes = replace_qi(df, varying, values) if varying else (df.copy(), {})
    return out, replace(info, dtype_changes=changes)


def matrix_cells(X: np.ndarray, pis, gp):
    """:func:`one_task` on the group's QI matrix ``X`` (rows × ``gp.group.observed``, float64, no
    missing value) and participation ``pis`` (or None): (the centroids of each record, rows ×
    varying columns, in original units; the varying columns' names; the group's figures, without
    dtype changes — those are the frame's)."""
    observed, k, method = list(gp.group.observed), gp.k, gp.method
    energy_loss, n_components, plain_k = gp.energy_loss, gp.n_components, gp.plain_k
    part = gp.participation
    max_cell_failure = part.max_cell_failure if part is not None else None
    improve = gp.improve.as_tuple() if gp.improve is not None else None
    n = len(X)
    constant, varying, Xv, Z = matrix_space(X, observed, n_components)
    start = time.perf_counter()
    labels, pca_info = _labels(method, Z, k, energy_loss, n_components, pis, max_cell_failure)
    improved = None
    if improve is not None and pis is None and varying:
        from ..kernels.improve import polish

        formed = np.asarray(labels, dtype=np.int64)
        labels = polish(Z, labels, k, *improve)
        sweeps, neighbours, pcl_iter, post_sweeps = (int(v) for v in improve)
        improved = {"sweeps": sweeps, "neighbours": neighbours, "pcl_iter": pcl_iter,
                    "post_sweeps": post_sweeps if pcl_iter else 0,
                    "changed": not same_partition(formed, np.asarray(labels, dtype=np.int64))}
    seconds = time.perf_counter() - start
    labels = np.asarray(labels, dtype=np.int64)
    values = centroids(Xv, labels)[labels] if varying else np.zeros((n, 0))
    sizes = np.bincount(labels)
    sizes = sizes[sizes > 0]
    partials = expected = at_k = None
    if pis is not None:
        from ..privacy.failures import cell_failure_partial

        partials = [cell_failure_partial(k, max_cell_failure, labels, pis)]
        if Xv.shape[1]:
            from ..privacy.probabilistic import expected_distortion

            expected = expected_distortion(Z, labels, pis)
    if plain_k is not None:
        at_k = information_loss(Xv, mdav(Z, plain_k)) if Xv.shape[1] else 0.0
    info = GroupResult(
        n=n, m_used=len(varying), method=method, cells=int(sizes.size), min_cell_size=int(sizes.min()),
        max_cell_size=int(sizes.max()),
        cell_size_counts={int(s): int(c) for s, c in zip(*np.unique(sizes, return_counts=True))},
        information_loss=information_loss(Z, labels, standardized=True) if Xv.shape[1] else 0.0, seconds=seconds,
        constant_columns=[c for c, const in zip(observed, constant) if const], dtype_changes={},
        n_components=None if pca_info is None else int(pca_info.n_components),
        eigenvalues=None if pca_info is None else [float(v) for v in np.asarray(pca_info.eigenvalues)],
        pca_energy_loss=None if pca_info is None else float(pca_info.energy_loss),
        information_loss_at_k=at_k, failure_partials=partials, expected_distortion=expected, improve=improved)
    return values, varying, info


def batch_task(df: pd.DataFrame, spans: list, gps: list, qi: list):
    """:func:`one_task` for several groups whose records ``df`` holds one group after another
    (``spans``: each group's (start, stop) rows; ``gps``: their plans), with the frame work done
    once for all of them: one QI matrix read, each group's cells from its rows of it
    (:func:`matrix_cells`), one write of each changed column.  Each group publishes what its own
    task would: its varying columns' centroids in the column's float dtype (an integer column as
    float64, reported), every other value as it was.  Returns (the records, one figures entry per
    group: None for a group with no observed QI, whose records pass through), the figures with
    the range of the group's published values of ``qi`` (the report's release figures)."""
    qi = list(qi)
    col = {c: j for j, c in enumerate(qi)}
    X = qi_frame_matrix(df, qi)             # NaN where missing: no group reads a missing column
    Y, changed = X.copy(), np.zeros(X.shape, dtype=bool)
    pis = {c: df[c].to_numpy(np.float64) for c in {gp.participation.column for gp in gps if gp.participation}}
    found = []
    for gp, (a, b) in zip(gps, spans):
        if not gp.group.observed:
            found.append(None)
            continue
        if gp.k > b - a:
            raise ParameterError(f"k = {gp.k} exceeds the number of records n = {b - a}")
        part = gp.participation
        obs = [col[c] for c in gp.group.observed]
        values, varying, info = matrix_cells(X[a:b][:, obs], None if part is None else pis[part.column][a:b], gp)
        vj = [col[c] for c in varying]
        Y[a:b, vj] = values
        changed[a:b, vj] = True
        found.append((info, vj))
    out = df.copy()
    for j in np.flatnonzero(changed.any(axis=0)):
        c, rows = qi[j], changed[:, j]
        if pd.api.types.is_float_dtype(df[c].dtype):   # the column's own float type, values elsewhere untouched
            column = df[c].copy()
            column.iloc[np.flatnonzero(rows)] = pd.Series(Y[rows, j]).astype(df[c].dtype).array
            out[c] = column.array
        else:   # an integer column becomes float64 (nullable where it was: its missing values stay missing)
            out[c] = pd.array(Y[:, j], dtype="Float64") if isinstance(df[c].dtype, pd.api.extensions.ExtensionDtype) \
                else Y[:, j]
    published = published_matrix(out, qi)
    became = {c: {"from": str(df[c].dtype), "to": "float64"} for c in qi if not pd.api.types.is_float_dtype(df[c].dtype)}
    infos = []
    for (a, b), got in zip(spans, found):
        if got is None:
            infos.append(None)
            continue
        info, vj = got
        changes = {qi[j]: became[qi[j]] for j in vj if qi[j] in became}
        infos.append(replace(info, dtype_changes=changes, figures=[(tuple(qi), value_range(published[a:b]))]))
    return out, infos


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labellings of the same records form the same cells (whatever the cell ids)."""
    if a.shape != b.shape:
        return False
    if not a.size:
        return True
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    return len(pairs) == len(np.unique(a)) == len(np.unique(b))
