"""Algorithm C in one process: MDAV with PCA on proximal data, with the pipeline's kernels.

Rebollo-Monedero et al., *Efficient k-Anonymous Microaggregation … via PCA*, §IV-B (Algorithm C):

1. macroaggregation — MDAV at a large cell size K ≫ k cuts the records into macrocells;
2. the C_D = round(ν·C) macrocells of highest SSE (out of C) are *distal*, the rest *proximal*;
3. distal records are microaggregated by MDAV, proximal records by MDAV with PCA (Algorithm B)
   with one basis fitted on all proximal records.

:func:`algorithm_c` runs exactly the per-task kernels of the Dask pipeline
(:mod:`daskmicro.kernels.partition`) in this process, one partition after the other, and times
each stage.  It is what ``daskmicro sweep`` measures and what estimates the information loss of
a cluster method on a sample; with ``partition_size`` it also reproduces the ``partitioned``
layout of a single top cell.  No Dask here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .partition import TopCell, extract, macro_summary, macroaggregate, proximal_moments, run_partition
from .mdav import as_records, check_k
from .pca import pca_basis

__all__ = ["AlgorithmCResult", "algorithm_c", "distal_macrocells"]


@dataclass
class AlgorithmCResult:
    """Outcome of :func:`algorithm_c`.

    Attributes
    ----------
    labels : ndarray of int64
        Cell of every record, numbered 0 … cells−1.
    macrocells : int
        Number C of macrocells (1 when no split was needed).
    n_distal : int
        Number C_D of distal macrocells.
    n_components : int or None
        m̃ of the proximal PCA (None when every record is distal).
    energy_loss : float or None
        Attained ε² of that PCA.
    macrocell_sse : ndarray
        SSE (z-space) of every macrocell, in formation order.
    timings : dict
        Seconds per stage: ``macroaggregation``, ``split`` (PCA fit), ``microaggregation``.
    """

    labels: np.ndarray
    macrocells: int
    n_distal: int
    n_components: int | None
    energy_loss: float | None
    macrocell_sse: np.ndarray
    timings: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Total wall time of the three stages."""
        return float(sum(self.timings.values()))


def distal_macrocells(sse, nu: float | None = None, sse_threshold: float | None = None) -> np.ndarray:
    """Boolean mask of the distal macrocells (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B step 2).

    The round(ν·C) macrocells with the highest SSE (ties to the lower index), or, with
    ``sse_threshold``, those whose SSE exceeds it — the same rule as the Dask pipeline.
    """
    sse = np.asarray(sse, dtype=np.float64)
    C = sse.size
    if sse_threshold is not None:
        return sse > float(sse_threshold)
    n_distal = int(round(float(nu) * C))
    distal = np.zeros(C, dtype=bool)
    if n_distal:
        order = np.lexsort((np.arange(C), -sse))
        distal[order[:n_distal]] = True
    return distal


def algorithm_c(
    Z,
    k: int,
    K: int = 1000,
    nu: float = 0.4,
    *,
    partition_size: int | None = None,
    energy_loss: float | None = None,
    n_components: int | None = None,
    sse_threshold: float | None = None,
) -> AlgorithmCResult:
    """MDAV with PCA on proximal data (Algorithm C of *Efficient k-Anonymous Microaggregation … via PCA*, §IV-B), sequentially in this process.

    Parameters
    ----------
    Z : array_like (n, m)
        Records, z-scored by the caller.
    k : int
        Anonymity parameter, 2 ≤ k ≤ n.
    K : int, default 1000
        Macrocell size, > k.  Not used when ν is 0 or 1 (no split is needed: ν = 1 is exact
        MDAV, ν = 0 is MDAV with PCA on all records, Algorithm B).
    nu : float in [0, 1], default 0.4
        Fraction ν of macrocells declared distal.
    partition_size : int, optional
        ``None``: the paper's two partitions (all distal records, all proximal records).  An
        integer: the ``partitioned`` layout of the pipeline for one top cell — nested MDAV
        first forms groups of ``partition_size`` … 2·``partition_size``−1 records, each group
        is split into its distal and proximal side.
    energy_loss, n_components
        Choice of m̃ for the proximal PCA (:func:`~daskmicro.kernels.pca.pca_basis`); default
        ε² = 0.1.
    sse_threshold : float, optional
        Instead of ν: macrocells whose SSE exceeds it are distal.

    Returns
    -------
    AlgorithmCResult
    """
    Z = as_records(Z)
    n = Z.shape[0]
    k = check_k(n, k)
    nu = float(nu)
    if not 0.0 <= nu <= 1.0:
        raise ValueError(f"nu must be in [0, 1], got {nu}")
    split = sse_threshold is not None or 0.0 < nu < 1.0
    if split and (K is None or int(K) <= k):
        raise ValueError(f"K (macrocell size) must be larger than k = {k}, got {K}")
    if partition_size is not None and int(partition_size) < k:
        raise ValueError(f"partition_size must be at least k = {k}, got {partition_size}")
    timings = {}

    t0 = time.perf_counter()
    top = TopCell(rowids=np.arange(n, dtype=np.int64), Z=Z)
    if partition_size is None:
        if split:
            top = macroaggregate(top, None, int(K))
        else:
            top.group = np.zeros(n, dtype=np.int64)
            top.macro = np.zeros(n, dtype=np.int64)
    else:
        top = macroaggregate(top, int(partition_size), int(K) if split else None)
    group_of, msize, msse, _ = macro_summary(top)
    timings["macroaggregation"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    distal = distal_macrocells(msse, nu, sse_threshold)
    params, m_tilde, loss = {}, None, None
    if not distal.all():
        moments = proximal_moments(top, distal)
        mean = moments.mean
        comps, _, m_tilde, loss = pca_basis(moments.covariance(), energy_loss, n_components)
        params = {"components": comps, "mean": mean}
    timings["split"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    labels = np.empty(n, dtype=np.int64)
    offset = 0
    for g in np.unique(group_of):
        in_g = group_of == g
        for method, mask, prm in (("pca-mdav", in_g & ~distal, params), ("mdav", in_g & distal, {})):
            if not msize[mask].sum():
                continue
            res = run_partition(extract(top, int(g), mask), method, k, prm)
            labels[res.rowids] = res.labels + offset
            offset += res.n_cells
    timings["microaggregation"] = time.perf_counter() - t0
    return AlgorithmCResult(
        labels=labels,
        macrocells=int(msse.size),
        n_distal=int(distal.sum()),
        n_components=None if m_tilde is None else int(m_tilde),
        energy_loss=None if loss is None else float(loss),
        macrocell_sse=msse,
        timings=timings,
    )
