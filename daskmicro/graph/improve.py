"""Improvement stage of the pipeline: the cells of each top cell improved jointly, one task each.

After the fan-out (and the PCL refinement, when asked) every top cell's partitions are joined and
their cells improved by moves and swaps between neighbouring cells, and with ``quality="high"`` by
PCL iterations and moves again (:func:`daskmicro.kernels.improve.improve_partitions`,
:func:`~daskmicro.kernels.improve.polish`): the same pass lowers the SSE inside the
partitions and across the borders between them, which the per-partition tasks cannot see.  A
top cell's records all live in its tasks, so the stage depends only on the records: the result
does not depend on the chunking or the number of workers.
"""

from __future__ import annotations

import operator
import time

from ..kernels import improve as ki
from .fanout import FanoutResult

__all__ = ["improve_cells"]


def _info(results):
    return results[0].info.get("improve", {})


def improve_cells(client, fo: FanoutResult, k: int, sweeps: int, neighbours: int, timings: dict,
                  pcl_iter: int = 0, post_sweeps: int = 0) -> dict:
    """Replace ``fo.results`` by improved results; returns the stage summary for the report.

    ``fo.parts`` must hold the partitions' records (fan-out with ``keep_parts=True``).
    """
    if fo.parts is None or len(fo.parts) != len(fo.results):
        raise ValueError("improve: the fan-out did not keep the partitions' records (keep_parts=True)")
    t0 = time.perf_counter()
    by_top: dict[int, list] = {}
    for i, (t, *_rest) in enumerate(fo.partitions):
        by_top.setdefault(t, []).append(i)
    results = list(fo.results)
    joint = []
    for t in sorted(by_top):
        idx = by_top[t]
        done = client.submit(_run, [fo.parts[i] for i in idx], [fo.results[i] for i in idx], k, sweeps, neighbours,
                             pcl_iter, post_sweeps)
        joint.append(done)
        for j, i in enumerate(idx):
            results[i] = client.submit(operator.getitem, done, j)
    infos = client.gather(client.map(_info, joint))
    fo.results = results
    timings["improve"] = time.perf_counter() - t0
    before = sum(i.get("sse_before", 0.0) for i in infos)
    after = sum(i.get("sse_after", 0.0) for i in infos)
    return {
        "sweeps": int(sweeps),
        "neighbours": int(neighbours),
        "pcl_iter": int(pcl_iter),
        "post_sweeps": int(post_sweeps) if pcl_iter else 0,
        "top_cells": len(infos),
        "sse_before": before,
        "sse_after": after,
        "sse_ratio": after / before if before > 0 else 1.0,
        "steps": sum(int(i.get("steps", 0)) for i in infos),
        # CPU seconds of each part of the pass, summed over the top cells (kernels.improve.polish)
        "seconds": _seconds(infos),
    }


def _seconds(infos) -> dict:
    parts = [i.get("seconds", {}) for i in infos]
    return {part: sum(p.get(part, 0.0) for p in parts) for part in ("moves", "pcl", "moves after")
            if any(part in p for p in parts)}


def _run(parts, results, k, sweeps, neighbours, pcl_iter, post_sweeps):
    return ki.improve_partitions(parts, results, k, sweeps, neighbours, pcl_iter, post_sweeps)
