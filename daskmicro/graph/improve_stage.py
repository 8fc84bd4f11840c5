"""Improvement stage of the pipeline: the cells of each top cell improved jointly, one task each.

After the fan-out (and the PCL refinement, when asked) every top cell's partitions are joined and
their cells improved by moves and swaps between neighbouring cells, and with ``quality="high"`` by
PCL iterations and moves again (:func:`daskmicro.kernels.improve.improve_partitions`,
:func:`~daskmicro.kernels.improve.polish`): the same pass lowers the SSE inside the
partitions and across the borders between them, which the per-partition tasks cannot see.  A
top cell's records all live in its tasks, so the stage depends only on the records: the result
does not depend on the chunking or the number of workers.

:func:`joint_top_cells` runs a top cell's macroaggregation, partitions and improvement as one task
(:func:`daskmicro.kernels.topcell.top_cell_cells`) where :func:`can_join` allows it: the same
cells as the fan-out followed by :func:`improve_cells`, without the partitions' trips between
workers and through the scheduler.
"""

from __future__ import annotations

import operator
import time

import numpy as np

from ..runtime.allocator import reusing
from ..kernels import improve as ki
from ..kernels import topcell as kt
from .fanout import FanoutConfig, FanoutResult
from .release import worker_threads

__all__ = ["improve_cells", "joint_top_cells", "can_join", "stage_figures"]


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
    return _summary(infos, sweeps, neighbours, pcl_iter, post_sweeps)


def joint_top_cells(client, tops: list, cfg: FanoutConfig, sweeps: int, neighbours: int, timings: dict,
                    pcl_iter: int = 0, post_sweeps: int = 0) -> tuple[FanoutResult, dict]:
    """Macroaggregation, fan-out and improvement of each top cell in one task
    (:func:`daskmicro.kernels.topcell.top_cell_cells`): the same cells as :func:`fan_out` followed by
    :func:`improve_cells`, for top cells that do not depend on one another (:func:`can_join`).
    Returns the fan-out's result (each partition's improved cells) and the stage summary; records
    ``timings["cells"]``.  Empties ``tops``.
    """
    t0 = time.perf_counter()
    params = dict(cfg.method_params.get(cfg.distal_method, {}))
    improve = ki.ImproveSettings(sweeps, neighbours, pcl_iter, post_sweeps)
    given, done = tops, client.map(_joint, tops, partition_size=cfg.partition_size,
                                   method=cfg.distal_method, k=cfg.k, params=params, improve=improve,
                                   macro=cfg.macro, macro_iter=cfg.macro_iter)
    given.clear()
    layouts = client.gather(client.map(_layout, done))  # waits, surfacing any task error here
    results, partitions = [], []
    for t, (fut, (_, _, _, groups, rows, _)) in enumerate(zip(done, layouts)):
        for j, (g, r) in enumerate(zip(groups, rows)):
            results.append(client.submit(_result, fut, j))
            partitions.append((t, g, "distal", r))
    sse = np.concatenate([lay[2] for lay in layouts]) if layouts else np.zeros(0)
    size = np.concatenate([lay[1] for lay in layouts]) if layouts else np.zeros(0, dtype=np.int64)
    timings["cells"] = time.perf_counter() - t0
    fo = FanoutResult(results=results, partitions=partitions, n_top=len(done), macro_sse=sse, macro_size=size,
                      n_distal_macro=int(sse.size), pca=None, timings=timings, k=cfg.k)
    return fo, _summary([lay[5] for lay in layouts], sweeps, neighbours, pcl_iter, post_sweeps)


def can_join(client, cfg: FanoutConfig, n_top: int) -> bool:
    """Whether :func:`joint_top_cells` may replace the fan-out and the improvement stage: every top
    cell independent of the others (ν = 1: no proximal/distal split, whose macrocell ranking and
    PCA span all top cells; no SSE threshold; groups by ``partition_size``; no participation
    column) and at least as many top cells as worker threads, so that one task per top cell keeps
    every thread busy."""
    independent = (cfg.nu >= 1.0 and cfg.sse_threshold is None and cfg.partition_size is not None
                   and cfg.max_cell_failure is None)
    return independent and n_top >= max(worker_threads(client), 1)


def _joint(top, **kw):
    with reusing():
        return kt.top_cell_cells(top, **kw)


def _layout(cells):
    rows = [int(r.rowids.size) for r in cells.results]
    info = cells.results[0].info.get("improve", {}) if cells.results else {}
    return cells.macro_group, cells.macro_size, cells.macro_sse, cells.groups, rows, info


def _result(cells, j):
    return cells.results[j]


def _summary(infos, sweeps, neighbours, pcl_iter, post_sweeps) -> dict:
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
    with reusing():
        return ki.improve_partitions(parts, results, k, sweeps, neighbours, pcl_iter, post_sweeps)


def stage_figures(stage) -> dict | None:
    """The pipeline's improvement stage as a group's ``improve`` figures (settings, changed)."""
    if not stage:
        return None
    changed = bool(stage.get("steps")) or float(stage.get("sse_after", 0.0)) < float(stage.get("sse_before", 0.0))
    return {"sweeps": int(stage["sweeps"]), "neighbours": int(stage["neighbours"]),
            "pcl_iter": int(stage["pcl_iter"]), "post_sweeps": int(stage.get("post_sweeps") or 0), "changed": changed}
