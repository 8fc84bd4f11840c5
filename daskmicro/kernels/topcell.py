"""All the cells of one top cell in one task: macroaggregation, each partition's cells and their
joint improvement, one after the other on the same records.

The partitioned pipeline (:mod:`daskmicro.graph.fanout`) runs these steps as separate tasks —
one macroaggregation per top cell, one task per partition, one improvement per top cell
(:mod:`daskmicro.graph.improve_stage`) — so that the partitions of a few large top cells spread over
many workers.  When every top cell is independent of the others (no proximal/distal split across
top cells: ν = 1, no SSE threshold, no participation column) and there are at least as many top
cells as worker threads, that spread buys nothing: each top cell's improvement waits for all of
its partitions anyway, and the separate tasks only add their records' trips between workers and
through the scheduler.  :func:`top_cell_cells` does the same steps in the same order on the same
arrays, so the cells are identical to the staged tasks' (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B for
the nested macroaggregation and the per-partition MDAV; :func:`.improve.improve_partitions` for
the joint pass).  No Dask here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .improve import ImproveSettings, improve_partitions
from .partition import TopCell, extract, macro_summary, macroaggregate, run_partition
from .sized import Sized

__all__ = ["TopCellCells", "top_cell_cells"]


@dataclass
class TopCellCells(Sized):
    """What :func:`top_cell_cells` returns: the macrocell summary of the top cell (each macrocell's
    group, size and SSE, as :func:`.partition.macro_summary`), the group of each partition, and the
    partitions' improved :class:`~daskmicro.kernels.cells.PartitionResult` in group order."""

    macro_group: np.ndarray
    macro_size: np.ndarray
    macro_sse: np.ndarray
    groups: list
    results: list


def top_cell_cells(top: TopCell, partition_size: int, method: str, k: int, params: dict | None,
                   improve: ImproveSettings, macro: str = "mdav", macro_iter: int = 2) -> TopCellCells:
    """Groups of ``partition_size`` records (one macrocell each), the cells of every group by
    ``method``, then the joint pass over all of them (``improve``: ``sweeps`` × ``neighbours`` moves
    and swaps, ``pcl_iter`` PCL iterations, ``post_sweeps`` more): the steps and the results of
    ``macroaggregate`` → ``extract`` + ``run_partition`` per group → ``improve_partitions``."""
    top = macroaggregate(top, partition_size, None, macro=macro, macro_iter=macro_iter)
    group, size, sse, _ = macro_summary(top)
    groups = [int(g) for g in np.unique(group)]
    parts = [extract(top, g, None) for g in groups]
    del top
    results = [run_partition(p, method, k, params) for p in parts]
    results = improve_partitions(parts, results, k, improve.sweeps, improve.neighbours, improve.pcl_iter,
                                 improve.post_sweeps)
    return TopCellCells(macro_group=group, macro_size=size, macro_sse=sse, groups=groups, results=results)
