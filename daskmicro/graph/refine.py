"""Refinement stage of the pipeline: every partition's cells improved by PCL, one task each.

After the fan-out has formed each partition's cells (MDAV, PCA-MDAV, …), one task per partition
runs noiseless PCL started from those cells (:func:`daskmicro.kernels.partition_pcl.
refine_partition`; the PCL paper, *An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*, §3.3, used as the refinement step
proposed for the prepartitioned pipeline).  The stage is separate from the fan-out so that its
wall time is measured on its own; the tasks run where their partition's data already are.
"""

from __future__ import annotations

import time

from ..kernels import partition_pcl as kr
from .fanout import FanoutResult

__all__ = ["refine"]


def _refine_info(res) -> dict:
    return res.info["refine"]


def refine(client, fo: FanoutResult, k: int, method: str, max_iter: int, timings: dict) -> dict:
    """Replace ``fo.results`` by refined results; returns the stage summary for the report.

    ``fo.parts`` must hold the partitions' records (fan-out with ``keep_parts=True``); they are
    released when the stage ends.
    """
    if fo.parts is None or len(fo.parts) != len(fo.results):
        raise ValueError("refine: the fan-out did not keep the partitions' records (keep_parts=True)")
    t0 = time.perf_counter()
    refined = client.map(kr.refine_partition, fo.parts, fo.results, k=k, method=method, max_iter=max_iter)
    infos = client.gather(client.map(_refine_info, refined))
    fo.results = refined
    fo.parts = None
    timings["refine"] = time.perf_counter() - t0
    before = sum(i["sse_before"] for i in infos)
    after = sum(i["sse_after"] for i in infos)
    iters = [i["n_iter"] for i in infos]
    return {
        "method": method,
        "max_iter": int(max_iter),
        "partitions": len(infos),
        "sse_before": before,
        "sse_after": after,
        "sse_ratio": after / before if before > 0 else 1.0,
        "iterations_max": max(iters) if iters else 0,
        "iterations_mean": sum(iters) / len(iters) if iters else 0.0,
        "converged_partitions": sum(bool(i["converged"]) for i in infos),
        "repaired_cells": sum(i["n_repaired"] for i in infos),
        "task_seconds": sum(i["seconds"] for i in infos),
        "task_cpu_seconds": sum(i["cpu_seconds"] for i in infos),
    }
