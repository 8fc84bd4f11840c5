"""Per-record participation on the pipeline: π_j to the top cells, failure figures back.

§V-B (uneven participation) and §VI-A (failure metrics) of *p-Probabilistic k-Anonymous Microaggregation …* on the
partitioned pipeline.  The π_j stay on the workers beside the input chunks they were read with
(:func:`~daskmicro.graph.ingest.ingest`); once the top cells exist, each top cell fetches its
records' π_j by row id from the chunks that hold them (one small task per top cell × chunk that
share records), so the top-level cutting and the macroaggregation are those of a run without
participation.  After the fan-out (cells grown by
:func:`~daskmicro.privacy.participation_tasks.grow_partition`), every partition's failure figures come
back — a few numbers each, no record — and are merged in partition order
(:func:`~daskmicro.privacy.failures.merge_cell_failure`): the same figures whatever the
chunking or the number of workers.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ParameterError, VerificationError
from ..privacy import participation_tasks as kpart
from ..privacy.effective import check_max_cell_failure
from ..privacy.failures import merge_cell_failure

__all__ = ["check_participation", "attach_participation", "failure_summary"]


def check_participation(participation, cfg):
    """``(column, p̄)`` of a participation option for :func:`~daskmicro.graph.pipeline.run_pipeline`.

    ``participation`` has attributes ``column`` (label of the π_j column) and
    ``max_cell_failure`` (p̄ in (0, 1)).  Refuses the settings whose cells would not keep q̄ ≤ p̄.
    """
    column = getattr(participation, "column", None)
    if column is None or not hasattr(participation, "max_cell_failure"):
        raise ParameterError("participation must name a column (per-record π_j) and give max_cell_failure")
    pbar = check_max_cell_failure(participation.max_cell_failure)
    if cfg.refine is not None:
        raise ParameterError(
            f"refine={cfg.refine!r} cannot be combined with a participation column: PCL moves records between "
            f"cells and does not keep every cell's failure q̄ ≤ max_cell_failure"
        )
    if cfg.method == "pcl" or "pcl" in (cfg.proximal_method, cfg.distal_method):
        raise ParameterError(
            "method 'pcl' cannot be combined with a participation column: PCL moves records between cells and "
            "does not keep every cell's failure q̄ ≤ max_cell_failure"
        )
    for side, method in (("proximal", cfg.proximal_method), ("distal", cfg.distal_method)):
        if method not in kpart.GROW_METHODS:
            raise ParameterError(
                f"{side} method {method!r} cannot be combined with a participation column: cells are grown until "
                f"q̄ ≤ max_cell_failure only in the space of {' or '.join(kpart.GROW_METHODS)}"
            )
    return column, pbar


def attach_participation(client, tops: list, ing, timings: dict) -> list:
    """The top cells with their records' π_j (``ing.weights`` is cleared, the workers free it when done)."""
    t0 = time.perf_counter()
    bounds = np.array(list(ing.row0s) + [ing.n], dtype=np.int64)
    counts = client.gather(client.map(kpart.rowid_counts, tops, bounds=bounds))
    weights, ing.weights = ing.weights, None
    out = []
    for top, cnt in zip(tops, counts):
        pieces = []
        for b in np.flatnonzero(cnt):
            ids = client.submit(kpart.rowids_between, top, int(bounds[b]), int(bounds[b + 1]))
            pieces.append(client.submit(kpart.take_values, weights[b], int(bounds[b]), ids))
        out.append(client.submit(kpart.attach_weights, top, *pieces))
    del weights
    timings["participation"] = time.perf_counter() - t0
    return out


def _failure(res) -> dict:
    return res.info["failure"]


def failure_summary(client, fo, k: int, column, pbar: float, m_used: int) -> dict:
    """``details["probabilistic"]``: the merged failure figures of every partition's cells.

    Raises VerificationError when some cell fails with probability above p̄ (nothing is released).
    """
    partials = client.gather(client.map(_failure, fo.results))
    prob = {
        "mode": "per-record participation",
        "k": int(k),
        "max_cell_failure": pbar,
        "participation": "per-record",
        "participation_column": str(column),
    }
    prob.update(merge_cell_failure(partials, k, pbar, m_used=m_used))
    prob["partials"] = partials  # to merge with other groups' cells (daskmicro.report.run_report)
    bad = prob["cells_above_max_cell_failure"]
    if bad:
        raise VerificationError(
            f"{bad} cell(s) fail with probability above max_cell_failure = {pbar:g}; nothing is released"
        )
    if prob["min_cell_size"] < k:
        raise VerificationError(f"a cell holds {prob['min_cell_size']} records, fewer than k = {k}; nothing is released")
    return prob
