"""The cluster side of every run (:mod:`daskmicro.plan`): pre-scan, groups, cells, write, verify.

One executor for every input kind and every output: the source's pieces (files of a lake, or
chunks of a pandas / Dask DataFrame) are scanned once on the workers, the groups (strata ×
missingness patterns, merges) are planned from the counts, each group's cells are formed — one
task for small groups (:func:`daskmicro.graph.group_task.one_task`), the partitioned pipeline
(:func:`daskmicro.graph.pipeline.run_pipeline`) for large ones — and the release is cut into its
output pieces by seeded key ranges: files written and read back (a directory release), or frames
(a single file or an in-memory release), verified on the published values, stratum columns and
QIs together.  Every task gets its inputs as futures or delayed objects, so a worker lost
mid-run costs time, not the release.  ``client`` may be a distributed Client or
:class:`daskmicro.graph.local.InProcess` (the same plan in this process).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..config import AUTO_EXACT_ROWS, DEFAULT_TASK_ROWS
from ..errors import InputError, ParameterError
from ..io import commit as cm
from ..io import hive
from ..io import layout as lay
from ..io.shuffle import COUNTS_DIR, SHUFFLE_DIR
from ..kernels.bounds import MAX_ABS
from ..kernels.figures import merge_ranges
from ..privacy import identifiers
from ..strata import merged_labels, plan_groups, publish_strata
from ..runtime.warmup import kernel_sets, warm_workers
from .group_cells import form_cells
from .gather import GATHER_TASKS
from .release import Release, collect, dask_release, file_cuts, promised_schema, write_and_verify
from .risk_stage import risk_tap

__all__ = ["Execution", "execute", "check_scan", "SMALL_GROUP_ROWS", "MEMORY_FRACTION", "estimate_task_bytes",
           "check_memory", "worker_memory"]

#: Groups up to this many records run as one task (exact MDAV) under method "auto" (the run
#: description's threshold; a name here so that tests can lower it).
SMALL_GROUP_ROWS = AUTO_EXACT_ROWS
#: A task may use at most this fraction of a worker's memory limit.
MEMORY_FRACTION = 0.6


@dataclass
class Execution:
    """What the executor hands back to the planner."""

    n: int
    k: int                      # the cell size used: k, or n_min under constant participation
    groups: list
    infos: list                 # per group: the figures of its cells (None: nothing observed)
    labels: dict                # merged strata labels
    k_check: object
    rows_check: object
    tuple_sizes: tuple          # (distinct published tuple sizes, counts)
    timings: dict
    frame: object = None        # single-file / in-memory release (pandas, or Dask for a Dask input)
    staging: object = None      # directory release: the verified staging directory
    files: list = field(default_factory=list)
    inputs: list = field(default_factory=list)   # per group: its pieces (for the reference)
    meta: object = None
    compile: dict | None = None  # the kernel warm-up, apart from the stages (warmup.warm_workers)
    bins: object = None         # the release figures' bins, from the published values (kernels.figures.Bins)
    figures: list = field(default_factory=list)  # summaries of the release figures, per piece verified
    strata: list = field(default_factory=list)   # stratum columns, partition columns of the release included
    incremental: dict | None = None  # an incremental survey: its schedule and stage times (daskmicro.incremental)
    risk: dict | None = None    # disclosure risk on a sample (graph.risk_stage), when asked for


# --------------------------------------------------------------------------- memory


def estimate_task_bytes(method: str, n: int, m: int, task_rows: int = DEFAULT_TASK_ROWS) -> int:
    """Rough peak memory of the largest single task of a method (bytes): a one-task method holds
    the whole group (about ``32·m + 48`` bytes per record), the pipeline one top-level task of at
    most ``task_rows`` records twice over, or a gather task (:data:`~daskmicro.graph.gather.GATHER_TASKS`
    × ``task_rows`` records' ids, cell labels and published values: about ``8·m + 56`` bytes each)."""
    per_row = 32 * max(m, 1) + 48
    if method in ("mdav", "pca-mdav", "pcl"):
        return int(n * per_row)
    return int(max(2 * min(n, task_rows) * per_row, min(n, GATHER_TASKS * task_rows) * (8 * max(m, 1) + 56)))


def check_memory(method: str, n: int, m: int, worker_bytes, what: str = "the input",
                 task_rows: int = DEFAULT_TASK_ROWS) -> None:
    """Refuse (ParameterError naming what to change) when a task would not fit a worker."""
    if not worker_bytes:
        return
    need = estimate_task_bytes(method, n, m, task_rows)
    if need > MEMORY_FRACTION * worker_bytes:
        gib = 1024 ** 3
        fix = ("use --method partitioned" if method in ("mdav", "pca-mdav", "pcl")
               else "lower task_rows or raise the workers' memory limit (--memory-limit)")
        raise ParameterError(
            f"method {method!r} needs about {need / gib:.2f} GiB in one task for {what} (n = {n:,}), more than "
            f"{MEMORY_FRACTION:.0%} of a worker's {worker_bytes / gib:.2f} GiB; {fix}"
        )


def worker_memory(client):
    """The smallest memory limit of the cluster's workers (None: unknown or in process)."""
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info().get("workers", {}).values()]
    limits = [v for v in limits if v]
    return min(limits) if limits else None


# --------------------------------------------------------------------------- pre-scan


def check_scan(scans, qi, missing, what=None) -> int:
    """Rows of the input; refuses infinite, huge or (unless separated) missing QI values."""
    n = sum(s["rows"] for s in scans)
    if n == 0:
        raise InputError("input has no rows" + (f": {what}" if what else ""))
    miss = np.sum([s["missing"] for s in scans], axis=0)
    pinf = np.sum([s["posinf"] for s in scans], axis=0)
    ninf = np.sum([s["neginf"] for s in scans], axis=0)
    big = np.max([s["maxabs"] for s in scans], axis=0)
    if (pinf + ninf).any():
        cols = ", ".join(f"{c!r} (+inf {int(p)}, -inf {int(q)})" for c, p, q in zip(qi, pinf, ninf) if p + q)
        raise InputError(f"QI column(s) with infinite values: {cols}")
    huge = [repr(c) for c, v in zip(qi, big) if v > MAX_ABS]
    if huge:
        raise InputError(f"QI column(s) with values beyond ±{MAX_ABS:.0e}: {', '.join(huge)}; squared distances "
                         "would overflow: rescale them first")
    if missing == "refuse" and miss.any():
        cols = ", ".join(f"{c!r} ({int(v)})" for c, v in zip(qi, miss) if v)
        raise InputError(f"QI column(s) with missing (NaN) values: {cols}; impute or drop them, or use "
                         "missing='separate' (--missing separate)")
    return n


def _pi_check(df, column):
    from ..privacy.failures import participation_chunk_check

    return participation_chunk_check(df[column])


def _check_participation_column(client, source, column) -> None:
    """The π_j column checked on the workers before any cell is formed (counts only)."""
    import dask

    from ..privacy.failures import participation_refusal

    check = dask.delayed(_pi_check, pure=True)
    checks = client.gather(client.compute([check(source.read_task(i, [column], 0), column)
                                           for i in range(len(source.files))]))
    err = participation_refusal(column, checks)
    if err is not None:
        raise err


# --------------------------------------------------------------------------- group tasks


def _check_tasks(client, plans, task_rows: int) -> None:
    from .pipeline import check_layout

    wmem = worker_memory(client)
    for gp in plans:
        check_memory(gp.method, gp.group.n, len(gp.group.observed), wmem, gp.group.label, task_rows)
        check_layout(gp)


# --------------------------------------------------------------------------- the run


@dataclass
class _Layout:
    """What the pre-scan decided: rows, cell size, groups, strata labels, output partitions."""

    n: int
    k: int
    groups: list
    labels: dict
    partition_by: list
    part_counts: dict
    row0s: np.ndarray
    qi: list
    strata: list            # the strata columns, then the partition columns that are not strata
    rows: list
    plans: list = field(default_factory=list)   # one GroupPlan per group (daskmicro.runplan)
    holds: list = field(default_factory=list)   # per input piece: the positions of the groups it holds


def execute(client, source, plan, sink: str, output=None, progress=None, series=None) -> Execution:
    """Run ``plan`` (a :class:`~daskmicro.runplan.RunPlan`) on ``source`` with ``client``; ``sink``
    is "lake" (a directory at ``output``), "file" or "memory" (a frame).  ``series`` (a
    :class:`~daskmicro.graph.series.SeriesRun`): the release ledger's side of the run.  Nothing is
    committed here (see :mod:`daskmicro.plan`)."""
    timings = {}
    t0 = time.perf_counter()
    lay_ = _prescan(client, source, plan, sink)
    timings["pre-scan"] = _tick(progress, "pre-scan", t0)
    # the kernels of the methods that run, compiled or loaded on every worker before the stages
    q = plan.quality
    sets = kernel_sets({gp.method for gp in lay_.plans}, nu=plan.nu, refine=plan.refine, macro=plan.macro,
                       improve=q["improve_sweeps"] > 0, polish=q["improve_sweeps"] > 0 and q["improve_pcl_iter"] > 0)
    compiled = warm_workers(client, sets, progress)
    t0 = time.perf_counter()
    # one timing model: a run that is one pipeline shows the pipeline's stages, any other run one
    # "cells" stage; each stage is timed once and the same figures go to stdout, JSON and HTML
    g0 = lay_.groups[0]
    one_pipeline = len(lay_.groups) == 1 and bool(g0.observed) and not lay_.plans[0].one_task
    stage = _StageRecorder(timings, progress) if one_pipeline else None
    plan = plan if series is None else series.keyed(plan)   # the ledger's key: after every check above
    releases, infos, inputs, meta = form_cells(client, source, plan, lay_, stage, series)
    if stage is None:
        timings["cells"] = _tick(progress, "cells", t0)
    t0 = time.perf_counter()
    # the release figures' bins: the range of the published values, from the cells just made
    bins = merge_ranges(lay_.qi, [r for i in infos if i is not None for r in (i.figures or [])])
    ex = Execution(n=lay_.n, k=lay_.k, groups=lay_.groups, infos=infos, labels=lay_.labels, k_check=None,
                   rows_check=None, tuple_sizes=None, timings=timings, inputs=inputs, meta=meta, compile=compiled,
                   bins=bins, strata=lay_.strata)
    _release(client, source, plan.release, lay_, sink, output, releases, ex)
    if series is not None:
        series.collect()   # every piece's ledger rows written before anything is committed
    name = "write + verify" if sink == "lake" else "collect + verify"
    timings[name] = _tick(progress, name, t0)
    return ex


def _prescan(client, source, plan, sink) -> _Layout:
    """Scan every piece once (counts only), check the values, plan the groups.

    A partitioned directory release publishes each hive partition as a directory that readers
    may read on its own and that they read back as a column: the partition columns are strata
    (no cell spans two partitions), so the release is k-anonymous as a hive reader sees it."""
    qi = list(plan.qi)
    partition_by = plan.partition_columns(sink, source.partition_fields, source.columns)   # never a withheld column
    hive.check_names(partition_by)
    strata = list(dict.fromkeys(list(plan.strata) + partition_by))
    # every column published as it is is accounted for: no identifier by accident
    as_is = [c for c in source.columns
             if c not in set(qi) | set(strata) | set(plan.release.hidden) | set(plan.release.keep)]
    identifiers.check_names(as_is)
    keys = strata
    source.attach(client)
    scans = client.gather(client.compute([source.scan_task(i, qi, keys) for i in range(len(source.files))]))
    n = check_scan(scans, qi, plan.missing, getattr(source, "path", None))
    _check_distinct(client, source, as_is, plan.k)
    _check_partition_values(scans, keys, partition_by)
    if plan.participation is not None:
        _check_participation_column(client, source, plan.participation.column)
    k = plan.n_min(n)
    counts = {}
    for s in scans:
        for combo, c in s["combos"].items():
            skey = tuple(combo[keys.index(col)] for col in strata)
            counts[(skey, combo[-1])] = counts.get((skey, combo[-1]), 0) + c
    groups = plan_groups(counts, strata, qi, k, plan.merge_small_strata)
    labels = merged_labels(groups, strata)   # merged strata publish one label
    part_counts = _partition_counts(scans, keys, strata, partition_by, labels)
    plans = [plan.group_plan(g, k) for g in groups]
    _check_tasks(client, plans, plan.pipeline.task_rows)
    row0s = np.concatenate([[0], np.cumsum([s["rows"] for s in scans])[:-1]]).astype(np.int64)
    position = {(key, g.pattern): i for i, g in enumerate(groups) for key in g.strata}
    holds = [{position[(tuple(combo[keys.index(col)] for col in strata), combo[-1])] for combo in s["combos"]}
             for s in scans]
    return _Layout(qi=qi, n=n, k=k, groups=groups, labels=labels, partition_by=partition_by, part_counts=part_counts,
                   row0s=row0s, strata=strata, plans=plans, rows=[s["rows"] for s in scans], holds=holds)


def _release(client, source, rp, lay_: _Layout, sink, output, releases, ex: Execution) -> None:
    """Cut the release into its published pieces, verify them as published (stratum columns + QIs,
    the tuple an intruder sees) and fill in ``ex`` (with the disclosure-risk sample measured on the
    pieces as they are written or collected, when the run asks for it)."""
    import dask

    tap = risk_tap(client, source, lay_, rp.seed) if rp.risk else None
    qi, strata, n, k, partition_by = list(lay_.qi), lay_.strata, lay_.n, lay_.k, lay_.partition_by
    published = list(dict.fromkeys(strata + qi))
    expected = cm.range_checksum(n)
    # columns read for the run only (per-record participation probabilities) are never published
    hidden = list(rp.hidden)
    names = [c for c in source.columns if c not in hidden] + (["row_id"] if rp.keep_row_id else [])
    rel = Release(names=tuple(names), qi=tuple(qi), columns=tuple(published), k=k, seed=rp.seed,
                  keep_row_id=rp.keep_row_id, n=n, expected=expected, bins=ex.bins, tap=tap)
    live = [i for i in range(len(source.files)) if lay_.rows[i]]
    if sink == "lake":  # exact file sizes: cut keys by rank (io/layout)
        keyed = [source.read_task(i, list(dict.fromkeys(partition_by + (strata if lay_.labels else []))),
                                  int(lay_.row0s[i])) for i in live]
        if lay_.labels:
            keyed = [dask.delayed(publish_strata, pure=True)(p, strata, lay_.labels) for p in keyed]
        files = lay.plan_files(partition_by, lay_.part_counts, rp.rows_per_file,
                               file_cuts(client, keyed, rp.seed, partition_by, rp.rows_per_file))
        schema = promised_schema(source, qi, partition_by, rp.keep_row_id, lay_.labels, hidden)
        ex.staging = cm.open_staging(output, [rel for rel, _, _ in files.values()] + [SHUFFLE_DIR, COUNTS_DIR])
        inflight: list = []
        try:
            listing = write_and_verify(client, releases, files, schema, rel, partition_by, ex.staging, inflight)
        except BaseException:
            cm.discard_staging(ex.staging, client, inflight)  # cancel the writes first, then remove
            raise
        ex.files, ex.k_check, ex.rows_check = listing["files"], listing["k_check"], listing["rows_check"]
        ex.tuple_sizes, ex.figures = listing["tuple_sizes"], listing["figures"]
    elif sink == "memory" and getattr(source, "dask", False):  # a Dask release: parts stay on the workers
        keyed = [source.read_task(i, [], int(lay_.row0s[i])) for i in live]
        per_part = -(-n // max(1, len(live)))   # as many partitions as the input has (non-empty)
        files = lay.plan_files([], {(): n}, per_part, file_cuts(client, keyed, rp.seed, [], per_part))
        ex.frame, ex.k_check, ex.rows_check, ex.tuple_sizes, ex.figures = dask_release(client, releases, files, rel)
    else:
        ex.frame, ex.k_check, ex.rows_check, ex.tuple_sizes, ex.figures = collect(client, releases, rel)
    ex.risk = tap.result() if tap is not None else None


class _StageRecorder:
    """``progress(stage, seconds)`` for the pipeline of a one-pipeline run: its stages become the
    run's (its own total is the run's business)."""

    def __init__(self, timings: dict, progress=None):
        self.timings, self.progress = timings, progress

    def __call__(self, name, seconds):
        if name == "total":
            return
        self.timings[name] = seconds
        if self.progress is not None:
            self.progress(name, seconds)


def _tick(progress, name, t0) -> float:
    seconds = time.perf_counter() - t0
    if progress is not None:
        progress(name, seconds)
    return seconds


def _check_distinct(client, source, columns, k) -> None:
    """Refuse a column published as it is whose values single the records out (counted on the
    workers as merged hash sketches, :mod:`daskmicro.privacy.identifiers`)."""
    import dask

    if not columns:
        return
    sk = dask.delayed(identifiers.sketch, pure=True)
    parts = [sk(source.read_task(i, columns, 0), columns) for i in range(len(source.files))]
    while len(parts) > 1:
        parts = [dask.delayed(identifiers.merge, pure=True)(*parts[i:i + 8]) for i in range(0, len(parts), 8)]
    identifiers.check_values(client.compute(parts[0]).result(), k)


def _check_partition_values(scans, keys, partition_by) -> None:
    """Refuse partition values that hive readers would read back as other values (:mod:`daskmicro.io.hive`)."""
    for col in partition_by:
        counts: dict = {}
        for s in scans:
            for combo, c in s["combos"].items():
                v = hive.value_text(combo[keys.index(col)])
                counts[v] = counts.get(v, 0) + c
        for text, c in counts.items():
            hive.check_value(col, text, c)


def _partition_counts(scans, keys, strata, partition_by, labels) -> dict:
    """Records per output partition value tuple, merged strata under their published label."""
    out = {}
    for s in scans:
        for combo, c in s["combos"].items():
            skey = tuple(combo[keys.index(col)] for col in strata)
            pkey = tuple(labels[col].get(skey, None if combo[keys.index(col)] is None else str(combo[keys.index(col)]))
                         if col in labels else combo[keys.index(col)] for col in partition_by)
            out[pkey] = out.get(pkey, 0) + c
    return out
