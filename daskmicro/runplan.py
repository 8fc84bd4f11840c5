"""The run model's typed seams: a :class:`~daskmicro.config.RunConfig` resolved once.

:func:`daskmicro.plan.run` turns the run description into one frozen :class:`RunPlan`; the executor
(:mod:`daskmicro.graph`) receives that plan and never the description.  Once the pre-scan has
formed the groups (strata × missingness patterns, merges), :meth:`RunPlan.group_plan` resolves each
group into one frozen :class:`GroupPlan` — its method, cell size, improvement, participation and
pipeline settings — and every group task and pipeline runs from its plan alone and returns one
:class:`GroupResult`, whichever path it took.  Every option is
read here, once; a rule that needs the data (a cell size against the records of a group) is
checked here too, once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .config import ONE_TASK_METHODS, RunConfig
from .errors import ParameterError

__all__ = ["Participation", "Improve", "PipelineSettings", "GroupPlan", "ReleasePlan", "SeriesPlan", "RunPlan",
           "GroupResult", "REFERENCE_AUTO_ROWS"]

#: With ``plain_k_reference=None`` the plain-k reference of a participation run is computed for
#: one-task groups of at most this many records.
REFERENCE_AUTO_ROWS = 50_000


@dataclass(frozen=True)
class Participation:
    """Per-record participation probabilities (p-probabilistic k-anonymity): their column and the
    acceptable probability p̄ that a cell ends with 1 … k − 1 participants."""

    column: object
    max_cell_failure: float


@dataclass(frozen=True)
class Improve:
    """The improvement pass after a method (:func:`daskmicro.kernels.improve.polish`)."""

    sweeps: int
    neighbours: int
    pcl_iter: int
    post_sweeps: int

    def as_tuple(self) -> tuple:
        return self.sweeps, self.neighbours, self.pcl_iter, self.post_sweeps


@dataclass(frozen=True)
class PipelineSettings:
    """A large group's partitioned / proximal-distal pipeline, every option resolved."""

    K: int | None
    nu: float | None
    partition_size: int | None
    task_rows: int
    max_task_rows: int
    energy_loss: float | None
    n_components: int | None
    sse_threshold: float | None
    refine: str | None
    refine_iter: int | None
    macro: str
    macro_iter: int | None
    improve: Improve | None


@dataclass(frozen=True)
class GroupPlan:
    """One group's work: ``method`` at cell size ``k``; ``one_task`` or ``pipeline`` settings."""

    group: object                   # daskmicro.strata.Group
    method: str
    k: int
    energy_loss: float | None
    n_components: int | None
    participation: Participation | None
    plain_k: int | None             # one task: also the information loss at plain k (participation runs)
    reference_k: int | None         # pipeline: the same pipeline again at plain k (participation runs)
    improve: Improve | None         # one task: the improvement pass after the method
    pipeline: PipelineSettings | None

    @property
    def one_task(self) -> bool:
        return self.method in ONE_TASK_METHODS


@dataclass(frozen=True)
class ReleasePlan:
    """How the release is published: order, layout, extra and withheld columns."""

    seed: int
    keep_row_id: bool
    partition_by: tuple | None      # None: the input's hive keys (directory releases)
    rows_per_file: int
    hidden: tuple                   # columns read for the run and never published
    keep: tuple = ()                # published as they are although they look like identifiers
    risk: bool = False              # disclosure risk measured on a sample of the release (graph.risk_stage)


@dataclass(frozen=True)
class SeriesPlan:
    """The release ledger of a run (:mod:`daskmicro.io.ledger`): where it is, what identifies a
    record, and whether records published before are aggregated afresh (``new_series``)."""

    ledger: str
    id_column: str | None
    new_series: bool

    def record_columns(self, qi, strata) -> list:
        """The columns a record's fingerprint is made of: its stratum and its id, or its stratum and
        QIs (a record that moved to another stratum is another record: its row would be the one
        two releases differ by)."""
        ids = [self.id_column] if self.id_column is not None else list(qi)
        return list(dict.fromkeys([*strata, *ids]))


@dataclass(frozen=True)
class RunPlan:
    """A run description resolved once, for the executor (:mod:`daskmicro.graph.executor`)."""

    qi: tuple
    strata: tuple
    missing: str
    merge_small_strata: bool
    k: int
    method: str
    exact_rows: int                 # "auto": groups up to this many records run exact MDAV in one task
    auto_pipeline: bool             # "auto" with pipeline options (PCL stages, K, ν, …): always the pipeline
    constant_participation: float | None
    participation: Participation | None
    max_cell_failure: float | None
    plain_k_reference: bool | None
    energy_loss: float | None
    n_components: int | None
    nu: float | None
    refine: str | None
    macro: str
    quality: dict
    pipeline: PipelineSettings
    release: ReleasePlan
    series: SeriesPlan | None = None    # None: a trial run (ledger off)
    incremental: object = None          # an incremental survey: daskmicro.incremental.options.IncrementalPlan

    def keyed_order(self, keys) -> "RunPlan":
        """This plan with the release's row order keyed by a ledger's secret (``keys``), as a
        recorded release's is (:func:`daskmicro.series.fingerprint.order_seed`)."""
        from .series.fingerprint import order_seed

        return replace(self, release=replace(self.release, seed=order_seed(keys, self.release.seed)))

    @classmethod
    def from_config(cls, cfg: RunConfig, exact_rows: int) -> "RunPlan":
        q = cfg.improve_settings
        participation = (Participation(cfg.participation, cfg.max_cell_failure) if cfg.per_record_participation
                         else None)
        pipeline = PipelineSettings(
            K=cfg.K, nu=cfg.nu, partition_size=cfg.partition_size, task_rows=cfg.task_rows_or_default,
            max_task_rows=cfg.max_task_rows_or_default, energy_loss=cfg.energy_loss, n_components=cfg.n_components,
            sse_threshold=cfg.sse_threshold, refine=cfg.refine, refine_iter=cfg.refine_iter, macro=cfg.macro,
            macro_iter=cfg.macro_iter, improve=None)
        release = ReleasePlan(seed=int(cfg.seed), keep_row_id=bool(cfg.keep_row_id),
                              partition_by=None if cfg.partition_by is None else tuple(cfg.partition_by),
                              rows_per_file=int(cfg.rows_per_file),
                              hidden=tuple(c for c in (cfg.participation if participation is not None else None,
                                                       cfg.id_column) if c is not None),
                              keep=tuple(cfg.keep), risk=bool(cfg.risk))
        ledger = cfg.ledger_path
        series = None if ledger == "off" else SeriesPlan(ledger, cfg.id_column, bool(cfg.new_series))
        incremental = None
        if cfg.method == "incremental":
            from .incremental.options import IncrementalPlan

            incremental = IncrementalPlan.from_config(cfg)
        return cls(qi=tuple(cfg.qi), strata=tuple(cfg.strata), missing=cfg.missing,
                   merge_small_strata=bool(cfg.merge_small_strata), k=int(cfg.k), method=cfg.method,
                   exact_rows=int(exact_rows), auto_pipeline=cfg.group_method(0, 0) == "partitioned",
                   constant_participation=cfg.constant_participation,
                   participation=participation, max_cell_failure=cfg.max_cell_failure,
                   plain_k_reference=cfg.plain_k_reference, energy_loss=cfg.energy_loss,
                   n_components=cfg.n_components, nu=cfg.nu, refine=cfg.refine, macro=cfg.macro,
                   quality=dict(q), pipeline=pipeline, release=release, series=series, incremental=incremental)

    # ------------------------------------------------------------------ per group

    def group_method(self, n: int) -> str:
        """The method a group of ``n`` records runs (``auto`` by its size)."""
        if self.method != "auto":
            return self.method
        return "mdav" if n <= self.exact_rows and not self.auto_pipeline else "partitioned"

    def partition_columns(self, sink: str, partition_fields, columns) -> list:
        """The columns a release into ``sink`` is partitioned by (published as strata): those asked
        for, else, for a directory, the input's hive keys that are read and neither QIs nor withheld."""
        if sink != "lake":
            return []
        asked = self.release.partition_by
        if asked is not None:
            return list(asked)
        return [c for c in partition_fields if c in columns and c not in self.qi and c not in self.release.hidden]

    def n_min(self, n: int) -> int:
        """The cell size of the run: k, or the effective anonymity n_min under constant π
        (*p-Probabilistic k-Anonymous Microaggregation*, §V-B)."""
        pi = self.constant_participation
        if pi is None:
            return self.k
        from .privacy.effective import effective_anonymity

        n_min = effective_anonymity(self.k, pi, self.max_cell_failure).n_min
        if n_min > n:
            raise ParameterError(
                f"k = {self.k} with participation {pi:g} and max_cell_failure {self.max_cell_failure:g} needs cells "
                f"of n_min = {n_min} records, more than the {n} records of the input")
        return n_min

    def group_plan(self, g, k: int) -> GroupPlan:
        """The frozen plan of group ``g`` at the run's cell size ``k`` (checks its size limits)."""
        m = self.group_method(g.n)
        q = self.quality
        improve = Improve(q["improve_sweeps"], q["improve_neighbours"], q["improve_pcl_iter"],
                          q["improve_post_sweeps"]) if q["improve_sweeps"] else None
        if m in ONE_TASK_METHODS:
            if g.n > self.pipeline.max_task_rows:
                raise ParameterError(
                    f"method {m!r} runs in one task and is limited to max_task_rows = {self.pipeline.max_task_rows:,} "
                    f"records ({g.label}: n = {g.n:,}); use the scalable method 'partitioned' (with refine='pcl' "
                    "for PCL), or raise max_task_rows")
            plain = None
            if self.participation is not None or self.constant_participation is not None:
                auto_ok = self.plain_k_reference is None and g.n <= REFERENCE_AUTO_ROWS
                plain = int(self.k) if (self.plain_k_reference or auto_ok) else None
            return GroupPlan(group=g, method=m, k=int(k), energy_loss=self.energy_loss,
                             n_components=self.n_components, participation=self.participation, plain_k=plain,
                             reference_k=None, improve=improve if q["one_task"] else None, pipeline=None)
        p = self.pipeline
        size = p.partition_size
        if size is None and m == "partitioned" and (p.K is None or p.K <= q["partition_size"]):
            size = q["partition_size"]
        if p.K is not None and p.K <= k:
            raise ParameterError(f"K (macrocell size) must be larger than k = {k} (the cell size), got {p.K}")
        # "balanced" improves the scalable method only: proximal-distal stays Algorithm C as published
        pipe_improve = improve if (m == "partitioned" or q["one_task"]) else None
        settings = PipelineSettings(**{**p.__dict__, "partition_size": size, "improve": pipe_improve})
        reference = int(self.k) if (self.plain_k_reference and (self.participation is not None
                                                                or self.constant_participation is not None)) else None
        return GroupPlan(group=g, method=m, k=int(k), energy_loss=self.energy_loss, n_components=self.n_components,
                         participation=self.participation, plain_k=None, reference_k=reference, improve=None,
                         pipeline=settings)


@dataclass(frozen=True)
class GroupResult:
    """What one group's cells came to: the same type from the one-task and the pipeline paths,
    read by the report (:mod:`daskmicro.report.run_report`).  Figures only, never a data value."""

    n: int
    m_used: int
    method: str
    cells: int
    min_cell_size: int
    max_cell_size: int
    cell_size_counts: dict
    information_loss: float
    seconds: float
    constant_columns: list
    dtype_changes: dict
    n_components: int | None = None
    eigenvalues: list | None = None
    pca_energy_loss: float | None = None
    pipeline: dict | None = None          # the pipeline's layout and stage figures
    macrocell_sse: list | None = None
    nu: float | None = None
    n_distal: int | None = None
    figures: list | None = None           # the range of this group's published values (daskmicro.release.run_figures)
    information_loss_at_k: float | None = None   # participation runs: the same records at plain k
    failure_partials: list | None = None  # per-record participation: the cells' failure figures
    expected_distortion: float | None = None
    series: dict | None = None            # a re-release: records republished with frozen values, new cells
    improve: dict | None = None           # the quality's improvement pass, when one ran: its settings, changed
