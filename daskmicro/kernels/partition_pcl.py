"""PCL inside the partitioned pipeline: per-partition method, refinement stage, macroaggregation.

Task bodies that put the probability-constrained Lloyd algorithm (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*,
§3.3; :func:`daskmicro.kernels.pcl.pcl`) into the fan-out of Algorithm C
(*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B):

* :func:`pcl_method` — the ``"pcl"`` entry of the per-partition registry
  (:data:`daskmicro.kernels.partition.PARTITION_METHODS`): PCL started from MDAV, as the
  standalone :func:`~daskmicro.kernels.pcl.pcl`;
* :func:`refine_partition` — the refinement stage: noiseless PCL started from the partition's
  MDAV / PCA-MDAV cells, a bounded number of iterations, never worse than its start (PCL keeps
  the best partition it has seen, the starting one included);
* :func:`nested_pcl` — macroaggregation with PCL at large cell sizes (§3.5 and the clustering
  use of §5): nested MDAV as in :func:`~daskmicro.kernels.macro.nested_mdav`, each level's cells
  refined by noiseless PCL inside their parent cell, so the levels stay nested.

Pure numpy / numba; no Dask.  Every step depends only on the records and their order (ascending
row ids in the pipeline), so the output does not depend on chunking or worker count.
"""

from __future__ import annotations

import time

import numpy as np

from .cells import PartitionResult
from .macro import cell_stats, mdav_large, nested_mdav
from .pcl import pcl

__all__ = ["REFINE_METHODS", "pcl_method", "refine_labels", "refine_partition", "nested_pcl"]

#: Refinement methods of the pipeline's refinement stage.
REFINE_METHODS = ("pcl",)


def pcl_method(Z, k, **params):
    """Per-partition method ``"pcl"``: :func:`~daskmicro.kernels.pcl.pcl` from MDAV (PCL §3.3–3.4).

    ``params`` may hold any keyword of :func:`~daskmicro.kernels.pcl.pcl` (``max_iter``,
    ``noisy``, …); the fan-out's PCA parameters (``components``, ``mean``), meant for PCA-MDAV,
    are ignored: PCL works on the z-scored records themselves.
    """
    allowed = ("max_iter", "tol", "noisy", "n_noisy", "cooling", "sigma", "n_candidates", "seed")
    return pcl(Z, k, init="mdav", **{p: v for p, v in params.items() if p in allowed})


def refine_labels(Z, k, labels, max_iter):
    """Noiseless PCL (§3.3) started from ``labels``; returns (labels, info dict).

    The number of cells is kept; every cell holds ≥ k records; the SSE returned is never above
    the starting one (PCL returns the best partition seen).  A partition with a single cell, or
    with zero SSE, is returned as it is.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    new, info = pcl(Z, k, init=labels, max_iter=max_iter, noisy=False, return_info=True)
    return np.asarray(new, dtype=np.int64), {
        "sse_before": float(info.sse_start),
        "sse_after": float(info.sse),
        "n_iter": int(info.n_iter),
        "converged": bool(info.converged),
        "n_repaired": int(info.n_repaired),
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
    }


def refine_partition(part, result, k: int, method: str = "pcl", max_iter: int = 2):
    """The refinement stage for one partition: its cells from the fan-out, improved by PCL.

    Parameters
    ----------
    part : (row ids, Z)
        The partition's records, as given to :func:`~daskmicro.kernels.partition.run_partition`.
    result : PartitionResult
        The cells the per-partition method formed on ``part``.
    k : int
        Minimum cell size.
    method : {"pcl"}
        Refinement method.
    max_iter : int
        Bound on PCL iterations (each: cost adjustment, cost-sensitive assignment, centroids).

    Returns
    -------
    PartitionResult
        Same rows, refined labels and cell summaries; ``info["refine"]`` holds the SSE before
        and after, the iterations run and the seconds spent.
    """
    if method not in REFINE_METHODS:
        raise ValueError(f"unknown refinement method {method!r}; known: {', '.join(REFINE_METHODS)}")
    rowids, Z = part
    if not np.array_equal(rowids, result.rowids):
        raise ValueError("refine_partition: the cells and the records come from different partitions")
    labels, info = refine_labels(Z, k, result.labels, max_iter)
    size, sums, sse = cell_stats(Z, labels)
    info["sse_before"] = float(result.sse.sum())  # the fan-out's own figure, as published without refinement
    info["sse_after"] = float(sse.sum())
    return PartitionResult(
        rowids=rowids, labels=labels, size=size, centroid=sums / size[:, None], sse=sse,
        info={**result.info, "refine": info},
    )


def nested_pcl(X, sizes, max_iter: int) -> list[np.ndarray]:
    """Nested macroaggregation by MDAV then PCL: one label array per level of ``sizes``.

    Level ``l`` cuts every cell of level ``l − 1`` by MDAV at ``sizes[l]`` (cells of
    ``sizes[l]`` … 2·``sizes[l]``−1 records, :func:`~daskmicro.kernels.macro.mdav_large`) and
    refines that cut by at most ``max_iter`` noiseless PCL iterations with minimum size
    ``sizes[l]`` — PCL used for clustering with large k (PCL paper §3.5, §5).  Cells stay at
    least ``sizes[l]`` records but, unlike MDAV's, may hold more than 2·``sizes[l]``−1.  Labels
    are numbered as in :func:`~daskmicro.kernels.macro.nested_mdav`: the cells of one parent are
    consecutive and each level refines the previous one.  A parent with fewer than
    2·``sizes[l]`` records stays one cell.
    """

    def cut(Xi, size):
        sub = mdav_large(Xi, size)
        return pcl(Xi, size, init=sub, max_iter=max_iter, noisy=False) if max_iter > 0 else sub

    return nested_mdav(X, sizes, cut=cut)
