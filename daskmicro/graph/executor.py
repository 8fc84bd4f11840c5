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

import operator
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..config import AUTO_EXACT_ROWS, DEFAULT_TASK_ROWS
from ..errors import InputError, ParameterError
from ..io import commit as cm
from ..io import hive
from ..io import layout as lay
from ..io.shuffle import COUNTS_DIR, SHUFFLE_DIR
from ..io.source import RID
from ..kernels.bounds import MAX_ABS
from ..kernels.figures import merge_ranges
from ..privacy import identifiers
from ..release.publish import canonical_values
from ..runplan import GroupResult
from ..strata import group_mask, merged_labels, plan_groups, publish_strata
from ..runtime.warmup import kernel_sets, warm_workers
from .gather import GATHER_TASKS
from .improve_stage import stage_figures
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


def _select(df, strata, qi, group):
    return df[group_mask(df, strata, qi, group)]


def _run_one_task(gp, qi, *parts):
    """One group as one task (its :class:`~daskmicro.runplan.GroupPlan`), records in global row id
    order (independent of the chunking); its info holds the range of the published values of the
    QI columns ``qi`` (the bins of the report's release figures)."""
    from ..release.run_figures import group_range
    from .group_task import one_task

    df = pd.concat(parts, ignore_index=True).sort_values(RID, kind="stable").reset_index(drop=True)
    out, info = one_task(df, gp)
    return out, replace(info, figures=[group_range(out, qi)])


def _check_tasks(client, plans, task_rows: int) -> None:
    from .pipeline import check_layout

    wmem = worker_memory(client)
    for gp in plans:
        check_memory(gp.method, gp.group.n, len(gp.group.observed), wmem, gp.group.label, task_rows)
        check_layout(gp)


def _pipeline_group(client, gp, sel, meta, seed, progress):
    """A large group through the partitioned pipeline (its :class:`~daskmicro.runplan.GroupPlan`);
    (release pieces, figures of its cells)."""
    import dask.dataframe as dd

    from .pipeline import PipelineConfig, ReleaseOptions, run_pipeline

    g, m = gp.group, gp.method
    sub = dd.from_delayed(sel, meta=meta, verify_meta=False)
    # check=False: the group's release is not checked on its own; the run's release is, as published
    # (written files, or the collected frame, stratum columns included) before anything is committed
    cfg = PipelineConfig.from_settings(gp.pipeline, m, gp.k)
    pub, details = run_pipeline(client, sub, list(g.observed), cfg, ReleaseOptions(seed, figures=True, check=False),
                                progress, participation=gp.participation)
    reference_il = None
    if gp.reference_k is not None:  # asked for: the same pipeline at plain k
        plain_cfg = PipelineConfig.from_settings(gp.pipeline, m, gp.reference_k)
        _, plain = run_pipeline(client, sub, list(g.observed), plain_cfg, ReleaseOptions(seed, check=False))
        reference_il = plain["information_loss"]
    t = details.pop("timings")  # the run's timings hold them once (one timing model)
    pca = details.get("pca") or {}
    prob = details.get("probabilistic")
    partials = prob.pop("partials") if prob is not None else None
    info = GroupResult(
        n=details["n"], m_used=details["m_used"], method=m, cells=pub.cells, min_cell_size=pub.min_cell_size,
        max_cell_size=pub.max_cell_size, cell_size_counts=pub.cell_size_counts,
        information_loss=details["information_loss"],
        seconds=sum(t.get(s, 0.0) for s in ("top_level", "macroaggregation", "split", "fan_out", "refine", "improve",
                                            "cells")),
        constant_columns=details["constant_columns"], dtype_changes={}, n_components=pca.get("n_components"),
        eigenvalues=pca.get("eigenvalues"), pca_energy_loss=pca.get("energy_loss"),
        macrocell_sse=details["macrocell_sse"] if details["macrocells"] > 1 else None, nu=details["nu"],
        n_distal=details["distal_macrocells"], figures=details.pop("figures", None), pipeline=details,
        information_loss_at_k=reference_il, failure_partials=partials,
        expected_distortion=prob.get("expected_distortion") if prob is not None else None,
        improve=stage_figures(details.get("improve")))
    return pub.chunks, info  # per input chunk: the release stage cuts them into its pieces


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
    releases, infos, inputs, meta = _cells(client, source, plan, lay_, stage, series)
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
    return _Layout(qi=qi, n=n, k=k, groups=groups, labels=labels, partition_by=partition_by, part_counts=part_counts,
                   row0s=row0s, strata=strata, plans=plans, rows=[s["rows"] for s in scans])


def _cells(client, source, plan, lay_: _Layout, stage, series=None):
    """Every group's cells: one task for a small group, the pipeline for a large one; in a
    re-release, the records published before keep their frozen cells and a group's new records
    run as a group of their own (:mod:`daskmicro.graph.series`).  Returns the release pieces
    (futures or delayed, still keyed by row id), the groups' figures, their inputs."""
    import dask
    from dask.delayed import Delayed

    from . import series as gs
    qi, strata, n = list(plan.qi), lay_.strata, lay_.n
    pieces = [source.read_task(i, source.columns, int(lay_.row0s[i])) for i in range(len(source.files))
              if lay_.rows[i]]
    frozen, freezes = None, {}
    if series is not None:
        # a partition column is published as a stratum: a record that moved partition is another record
        series.columns = list(dict.fromkeys([*strata, *series.columns]))
        series.published, series.strata, series.labels = (gs.published(source.columns, qi, strata, plan.release.hidden),
                                                          strata, lay_.labels)
        frozen = client.scatter(series.frozen.for_workers(), broadcast=True) if series.rerelease else None
        pieces = gs.fingerprinted(client, pieces, series, qi, frozen)
        if frozen is not None:
            freezes = gs.plan_groups(client, pieces, lay_.plans, strata, qi, lay_.k, series, frozen)
    meta = client.compute(dask.delayed(operator.methodcaller("head", 0))(pieces[0])).result()
    select = dask.delayed(_select, pure=True)
    releases, infos, inputs, sse = [], [], [], {}
    for i, gp in enumerate(lay_.plans):
        g = gp.group
        sel = pieces if g.n == n else [select(p, strata, qi, g) for p in pieces]
        inputs.append(sel)
        if not g.observed:  # every QI missing: nothing to aggregate, the records pass through
            releases.extend(sel)
            infos.append(None)
            continue
        if i in freezes:  # records published before keep their frozen cells
            gf = freezes[i]
            if not gf.new:
                infos.append(None)
                continue
            sel, g_new = gs.new_selection(pieces, gf, strata, qi, frozen)
            gp = plan.group_plan(g_new, lay_.k)   # the group's method at the count of its new records
        rels, info = _group_cells(client, gp, sel, meta, plan, lay_, stage)
        releases.extend(rels)
        infos.append(info)
        if i in freezes:
            sse[i] = gs.new_sse(client, rels, freezes[i], sel)
    infos = [i.result() if hasattr(i, "result") else i for i in infos]
    if freezes:
        frames, partials = gs.frozen_pieces(client, pieces, freezes, strata, qi, frozen)
        releases.extend(frames)
        for i, gf in freezes.items():
            total = sum(f.result() for f in sse.get(i, []))
            infos[i] = gs.group_result(gf, partials, infos[i], total, meta.dtypes)
    if lay_.labels:
        releases = [dask.delayed(publish_strata, pure=True)(r, strata, lay_.labels) if isinstance(r, Delayed)
                    else client.submit(publish_strata, r, strata, lay_.labels) for r in releases]
    # one bit pattern per published value (−0.0 → 0.0, one NaN): the file holds what was counted
    published = list(dict.fromkeys(strata + qi))
    releases = [dask.delayed(canonical_values, pure=True)(r, published) if isinstance(r, Delayed)
                else client.submit(canonical_values, r, published) for r in releases]
    if series is not None:
        releases = gs.recorded(releases, series, client, qi)
        meta = meta.drop(columns=[c for c in (*gs.FP, gs.CELL) if c in meta.columns])
    return releases, infos, inputs, meta


def _group_cells(client, gp, sel, meta, plan, lay_: _Layout, stage):
    """One group's cells (its :class:`~daskmicro.runplan.GroupPlan`): (release pieces, figures)."""
    qi = list(plan.qi)
    if gp.one_task:
        pair = client.submit(_run_one_task, gp, qi, *client.compute(sel))
        return [client.submit(operator.itemgetter(0), pair)], client.submit(operator.itemgetter(1), pair)
    # lazy: each part is built where it is split
    return _pipeline_group(client, gp, sel, meta, plan.release.seed, stage)


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
