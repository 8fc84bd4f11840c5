"""The distributed pipeline end to end: ingest → top cells → macroaggregation → split → fan-out →
gather → verify.  Every method of :func:`daskmicro.anonymize` on a cluster is a setting of it:

==================  =============================================================================
method              layout
==================  =============================================================================
``partitioned``     top cells of ≈ ``task_rows`` records, groups of ``partition_size`` records,
                    macrocells of size K; ν of the macrocells distal (MDAV), the rest proximal
                    (PCA-MDAV).  Scales with the cluster; ν = 1 (default) is MDAV everywhere.
``proximal-distal`` Algorithm C as published (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B): MDAV at size K over all records, the ν
                    fraction of macrocells with the highest SSE distal; two tasks.
``mdav``            exact MDAV on all records in one task.
``pca-mdav``        MDAV with PCA (Algorithm B) on all records in one task.
``pcl``             PCL from MDAV (PCL paper §3.3–3.4) on all records in one task.
==================  =============================================================================

Two PCL options apply to every method (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*): ``refine="pcl"`` adds a
refinement stage after the fan-out (each partition's cells improved by at most ``refine_iter``
noiseless PCL iterations, never worse than before), and ``macro="pcl"`` refines the nested
macroaggregation inside each top cell (groups and macrocells) by at most ``macro_iter`` PCL
iterations per level instead of plain MDAV at size K.  Last, ``improve_sweeps`` > 0 (set by the
run's ``quality``) adds the improvement stage (:mod:`daskmicro.graph.improve_stage`): each top cell's
cells improved jointly by moves and swaps between neighbouring cells, across partition borders,
and by ``improve_pcl_iter`` PCL iterations and ``improve_post_sweeps`` passes more after them.
When the top cells do not depend on one another (ν = 1, no SSE threshold, no participation, no
refinement) and there are at least as many as worker threads, each top cell's macroaggregation,
partitions and improvement run as one task instead (:func:`~daskmicro.graph.improve_stage.joint_top_cells`,
one ``cells`` stage): the same cells, without the partitions' trips between workers.

Per-record participation (``participation=`` an object with ``column`` and ``max_cell_failure``;
§V-B of *p-Probabilistic k-Anonymous Microaggregation …*): the π_j column is checked at ingest and fetched by the top
cells; the cutting and the macroaggregation run as without it, and every partition's cells are
grown by :func:`~daskmicro.privacy.probabilistic.grow_cells` with target k until each cell fails
with probability q̄ ≤ p̄ (:mod:`daskmicro.graph.participation`).  ``details["probabilistic"]``
holds the merged §VI-A failure figures.  ``refine="pcl"`` and method ``pcl`` are refused with it:
PCL moves records between cells and does not keep q̄ ≤ p̄.  ``macro="pcl"`` is accepted: it only
shapes the partitions, inside which the cells are grown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..config import DEFAULT_MAX_TASK_ROWS, DEFAULT_TASK_ROWS, DEFAULTS
from ..errors import ParameterError
from .fanout import FanoutConfig, fan_out, top_cells
from .gather import ReleaseOptions, gather_release
from .improve_stage import can_join, improve_cells, joint_top_cells
from .ingest import ingest
from .participation import attach_participation, check_participation, failure_summary

__all__ = ["PipelineConfig", "ReleaseOptions", "DEFAULTS", "SCALABLE", "ONE_TASK", "plan_layout", "run_pipeline",
           "check_layout"]

SCALABLE = ("partitioned",)
ONE_TASK = ("proximal-distal", "mdav", "pca-mdav", "pcl")
#: Default bound on PCL iterations of the refinement stage and of macro="pcl" (per level).
DEFAULT_REFINE_ITER = 2
DEFAULT_MACRO_ITER = 2

# Every default of a run is defined once, in the run description (daskmicro.config).


@dataclass(frozen=True)
class PipelineConfig:
    method: str
    k: int
    K: int | None = None
    nu: float | None = None
    partition_size: int | None = None
    task_rows: int = DEFAULT_TASK_ROWS
    max_task_rows: int = DEFAULT_MAX_TASK_ROWS
    energy_loss: float | None = None
    n_components: int | None = None
    sse_threshold: float | None = None
    proximal_method: str = "pca-mdav"
    distal_method: str = "mdav"
    refine: str | None = None
    refine_iter: int = DEFAULT_REFINE_ITER
    macro: str = "mdav"
    macro_iter: int = DEFAULT_MACRO_ITER
    improve_sweeps: int = 0       # improvement stage (graph.improve_stage): passes over each top cell's cells
    improve_neighbours: int = 8   # ... cells tried per record
    improve_pcl_iter: int = 0     # ... PCL iterations after them (kernels.improve.polish)
    improve_post_sweeps: int = 0  # ... and passes after the PCL iterations

    @classmethod
    def from_settings(cls, settings, method: str, k: int) -> "PipelineConfig":
        """The pipeline of a group planned with ``settings`` (a :class:`~daskmicro.runplan.PipelineSettings`)
        at cell size ``k``."""
        extra = {}
        if settings.refine_iter is not None:
            extra["refine_iter"] = settings.refine_iter
        if settings.macro_iter is not None:
            extra["macro_iter"] = settings.macro_iter
        if settings.improve is not None:
            imp = settings.improve
            extra.update(improve_sweeps=imp.sweeps, improve_neighbours=imp.neighbours,
                         improve_pcl_iter=imp.pcl_iter, improve_post_sweeps=imp.post_sweeps)
        return cls(method=method, k=int(k), K=settings.K, nu=settings.nu, partition_size=settings.partition_size,
                   task_rows=settings.task_rows, max_task_rows=settings.max_task_rows,
                   energy_loss=settings.energy_loss, n_components=settings.n_components,
                   sse_threshold=settings.sse_threshold, refine=settings.refine, macro=settings.macro, **extra)

    def resolved(self, n: int) -> "PipelineConfig":
        """The method's defaults filled in and the layout checked against them and against ``n``;
        raises ParameterError.

        Every option was checked once by the run description (:data:`daskmicro.config.FIELDS`:
        types and ranges, ν in [0, 1]; :data:`daskmicro.config.RULES`: K > k) and the group's plan
        (:meth:`daskmicro.runplan.RunPlan.group_plan`: K above the group's cell size).  What is
        left needs what only the ingest or the method's defaults know: ``n`` against
        ``max_task_rows`` for a one-task method, and the layout with the defaults filled in
        (a default K above k, ``partition_size`` ≥ K, ``task_rows`` ≥ ``partition_size``: a default
        K or partition size is known only here, per method).
        """
        d = DEFAULTS[self.method]
        filled = {name: d[name] for name in ("K", "nu", "partition_size") if getattr(self, name) is None}
        if self.method == "pcl":
            filled["distal_method"] = "pcl"
        cfg = replace(self, **filled)
        if cfg.method in ONE_TASK and n > cfg.max_task_rows:
            raise ParameterError(
                f"method {cfg.method!r} runs in one task and is limited to max_task_rows = {cfg.max_task_rows:,} "
                f"records (got {n:,}); use the scalable method 'partitioned', or raise max_task_rows"
            )
        if "K" in filled and cfg.K is not None and cfg.K <= cfg.k:
            raise ParameterError(f"K (macrocell size) must be larger than k = {cfg.k}, got the default K = {cfg.K}; "
                                 "give a larger K")
        if cfg.method == "partitioned":
            if cfg.partition_size < cfg.K:
                raise ParameterError(f"partition_size must be at least K = {cfg.K}, got {cfg.partition_size}")
            if cfg.task_rows < cfg.partition_size:
                raise ParameterError(
                    f"task_rows must be at least partition_size = {cfg.partition_size}, got {cfg.task_rows}"
                )
        return cfg

    def fanout(self, n: int) -> tuple[FanoutConfig, int]:
        """The fan-out settings and the task size for the top level."""
        if self.method == "partitioned":
            return self._fan(self.partition_size), self.task_rows
        if self.method == "proximal-distal":
            return self._fan(None), max(n, 1)
        # one task, one group, no split: the whole data set is one partition
        return self._fan(n), max(n, 1)

    def _fan(self, partition_size):
        return FanoutConfig(
            k=self.k, K=self.K, nu=self.nu, partition_size=partition_size, task_rows=self.task_rows,
            proximal_method=self.proximal_method, distal_method=self.distal_method,
            energy_loss=self.energy_loss, n_components=self.n_components, sse_threshold=self.sse_threshold,
            macro=self.macro, macro_iter=self.macro_iter,
            keep_parts=self.refine is not None or self.improve_sweeps > 0,
        )


def check_layout(gp) -> None:
    """Refuse the layout of a group that runs the pipeline (its :class:`~daskmicro.runplan.GroupPlan`)
    as :meth:`PipelineConfig.resolved` does, when the run is planned: before it keys anything with
    the release ledger's secret (:meth:`daskmicro.graph.series.SeriesRun.keyed`)."""
    if gp.group.observed and not gp.one_task:
        PipelineConfig.from_settings(gp.pipeline, gp.method, gp.k).resolved(gp.group.n)


class _Timings(dict):
    """Stage → seconds; tells ``progress(stage, seconds)`` as each stage ends."""

    def __init__(self, progress=None):
        super().__init__()
        self._progress = progress

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if self._progress is not None:
            self._progress(key, value)


def plan_layout(cfg: PipelineConfig, ing, keep_parts: bool | None = None):
    """(resolved config, fan-out settings, top-level task size) for the ingested records ``ing``.

    ``keep_parts=True`` keeps each partition's (row ids, Z) for a later stage (refinement, or the
    increment stage of an incremental run, :mod:`daskmicro.graph.incremental_pipeline`).
    """
    from ..kernels import check_k

    try:
        check_k(ing.n, cfg.k)
    except ValueError as exc:
        raise ParameterError(str(exc)) from None
    cfg = cfg.resolved(ing.n)
    fcfg, task_rows = cfg.fanout(ing.n)
    if ing.m_used == 0:
        # every QI column is constant: one cell, nothing to microaggregate
        fcfg = FanoutConfig(k=cfg.k, K=None, nu=1.0, partition_size=ing.n, task_rows=ing.n, distal_method="mdav")
        task_rows = ing.n
    if keep_parts is not None:
        fcfg = replace(fcfg, keep_parts=keep_parts)
    return cfg, fcfg, task_rows


def _staged(client, tops, cfg: PipelineConfig, fcfg: FanoutConfig, timings, column, pbar, m_used):
    """The fan-out, then each later stage that the run asks for as its own tasks (participation
    failures, PCL refinement, improvement); returns (FanoutResult, refine, improve, probabilistic)."""
    fo = fan_out(client, tops, fcfg, timings)
    probabilistic = refine_info = improve_info = None
    if column is not None:
        probabilistic = failure_summary(client, fo, cfg.k, column, pbar, m_used)
    parts = fo.parts
    if cfg.refine is not None and fcfg.keep_parts:
        from .refine import refine

        refine_info = refine(client, fo, cfg.k, cfg.refine, cfg.refine_iter, timings)
    if cfg.improve_sweeps > 0 and parts is not None and column is None:
        fo.parts = parts
        improve_info = improve_cells(client, fo, cfg.k, cfg.improve_sweeps, cfg.improve_neighbours, timings,
                                     cfg.improve_pcl_iter, cfg.improve_post_sweeps)
    fo.parts = None
    return fo, refine_info, improve_info, probabilistic


def run_pipeline(client, ddf, qi: list, cfg: PipelineConfig, release: ReleaseOptions, progress=None,
                 participation=None):
    """Run the pipeline on ``ddf``; returns (Published, details dict for the report).

    ``progress(stage, seconds)``, when given, is called as each stage ends.  ``participation``,
    when given, has attributes ``column`` (a column of ``ddf`` with π_j in (0, 1], not a QI) and
    ``max_cell_failure`` (p̄ in (0, 1)): every cell is grown until it fails with probability
    q̄ ≤ p̄, and ``details["probabilistic"]`` holds the failure figures (see module docstring).
    ``release`` (:class:`~daskmicro.graph.gather.ReleaseOptions`): the seeded order and the
    published row id; ``release.figures``: ``details["figures"]`` holds the range of the published
    values of each partition's cells (the bins of the report's release figures,
    :mod:`daskmicro.kernels.figures`); ``release.check=False`` leaves the release check to a
    caller that verifies the release as published (the run executor, before its commit):
    ``Published.k_anonymity`` and ``rows`` are then None.
    """
    column = pbar = None
    if participation is not None:
        column, pbar = check_participation(participation, cfg)
    timings = _Timings(progress)
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    ing = ingest(client, ddf, qi, participation_column=column)
    timings["ingest"] = time.perf_counter() - t0
    cfg, fcfg, task_rows = plan_layout(cfg, ing)
    tops = top_cells(client, ing, task_rows, timings)  # takes ing.blocks: the workers free them when done
    if column is not None:
        tops = attach_participation(client, tops, ing, timings)  # takes ing.weights
        fcfg = replace(fcfg, max_cell_failure=pbar)
    refine_info = improve_info = probabilistic = None
    if cfg.improve_sweeps > 0 and column is None and cfg.refine is None and can_join(client, fcfg, len(tops)):
        # each top cell's macroaggregation, partitions and improvement in one task: the same cells
        fo, improve_info = joint_top_cells(client, tops, fcfg, cfg.improve_sweeps, cfg.improve_neighbours, timings,
                                           cfg.improve_pcl_iter, cfg.improve_post_sweeps)
    else:
        fo, refine_info, improve_info, probabilistic = _staged(client, tops, cfg, fcfg, timings, column, pbar,
                                                               ing.m_used)
    del tops
    pub = gather_release(client, ddf, qi, ing, fo, release, timings, task_rows)
    timings["total"] = time.perf_counter() - t_all
    sst = float(ing.n * max(ing.m_used, 1))
    details = {
        "method": cfg.method,
        "K": cfg.K,
        "nu": cfg.nu,
        "partition_size": cfg.partition_size,
        "task_rows": task_rows,
        "top_cells": fo.n_top,
        "partitions": len(fo.partitions),
        "partition_rows": [p[3] for p in fo.partitions],
        "partition_sides": [p[2] for p in fo.partitions],
        "macrocells": int(fo.macro_sse.size),
        "distal_macrocells": fo.n_distal_macro,
        "macrocell_sse": sorted((float(v) for v in fo.macro_sse), reverse=True),
        "pca": fo.pca,
        "macro": {"method": fcfg.macro, "max_iter": fcfg.macro_iter if fcfg.macro == "pcl" else None},
        "refine": refine_info,
        "improve": improve_info,
        "timings": dict(timings),
        "workers": len(client.scheduler_info().get("workers", {})),
        "information_loss": 100.0 * pub.sse / sst if ing.m_used else 0.0,
        "constant_columns": [c for c, v in zip(qi, ing.varying) if not v],
        "m_used": ing.m_used,
        "n": ing.n,
    }
    if probabilistic is not None:
        details["probabilistic"] = probabilistic
    if release.figures:
        details["figures"] = pub.figures
    return pub, details
