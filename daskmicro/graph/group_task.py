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

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..io.qi import qi_matrix
from ..kernels import centroids, information_loss, mdav, standardize
from ..release.publish import replace_qi
from ..runplan import GroupResult

__all__ = ["qi_space", "one_task", "same_partition"]


def qi_space(df: pd.DataFrame, qi: list, n_components=None):
    """(constant mask, varying column names, X of the varying columns, their z-scores).

    Constant columns identify no one: they are left out of the cells' space and published
    unchanged.  With none varying, Z is one column of zeros (every record alike).
    """
    X = qi_matrix(df, qi)
    constant = X.max(axis=0) == X.min(axis=0) if len(X) else np.zeros(len(qi), bool)
    varying = [c for c, const in zip(qi, constant) if not const]
    if n_components is not None and n_components > len(varying):
        raise ParameterError(
            f"n_components = {n_components} exceeds the number of non-constant QI columns ({len(varying)})"
        )
    Xv = X[:, ~constant]
    Z = standardize(Xv)[0] if Xv.shape[1] else np.zeros((len(df), 1))
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
    observed, k, method = list(gp.group.observed), gp.k, gp.method
    energy_loss, n_components, plain_k = gp.energy_loss, gp.n_components, gp.plain_k
    part = gp.participation
    participation_column = part.column if part is not None else None
    max_cell_failure = part.max_cell_failure if part is not None else None
    improve = gp.improve.as_tuple() if gp.improve is not None else None
    n = len(df)
    if k > n:
        raise ParameterError(f"k = {k} exceeds the number of records n = {n}")
    constant, varying, Xv, Z = qi_space(df, observed, n_components)
    # the π_j column was checked on every piece at the pre-scan (graph.executor): read it here
    pis = None if participation_column is None else df[participation_column].to_numpy(np.float64)
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
    if varying:
        out, changes = replace_qi(df, varying, centroids(Xv, labels)[labels])
    else:
        out, changes = df.copy(), {}
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
        information_loss=information_loss(Xv, labels) if Xv.shape[1] else 0.0, seconds=seconds,
        constant_columns=[c for c, const in zip(observed, constant) if const], dtype_changes=changes,
        n_components=None if pca_info is None else int(pca_info.n_components),
        eigenvalues=None if pca_info is None else [float(v) for v in np.asarray(pca_info.eigenvalues)],
        pca_energy_loss=None if pca_info is None else float(pca_info.energy_loss),
        information_loss_at_k=at_k, failure_partials=partials, expected_distortion=expected, improve=improved)
    return out, info


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labellings of the same records form the same cells (whatever the cell ids)."""
    if a.shape != b.shape:
        return False
    if not a.size:
        return True
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    return len(pairs) == len(np.unique(a)) == len(np.unique(b))
