"""The executor of an incremental survey run, called by the one planner (:func:`daskmicro.plan.run`).

Implements the two-stage scheme of Rebollo-Monedero et al., *Incremental k-Anonymous
Microaggregation in Large-Scale Electronic Surveys With Optimized Scheduling* (IEEE Access 2018):
a base stage microaggregates the first fraction 1 − ν of the records while the rest are still
arriving (§III-B), and a small increment stage adds the last ν when the survey closes (2MDAV,
§IV-A, or nearest-neighbour assignment with cell splitting, §IV-D).  ν comes from the scheduling
formulas of §IV-B (:mod:`daskmicro.graph.incremental_schedule`).  Both stages are Dask work on the same
cluster, submitted at those two moments (:mod:`daskmicro.graph.incremental` and its partitioned
twins).  The executor hands back the same :class:`~daskmicro.graph.executor.Execution` as every other
run: the planner commits it with the one commit and reports it with the one report.

Every record carries its keyed fingerprint from the task that reads it (a recorded series): the
release's pieces write their ledger rows before anything is committed, and a survey holding
records published before in the same series is refused (the two stages aggregate every record
afresh, so republishing them would give their earlier values away).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError, VerificationError
from ..incremental.options import FIXED_INCREMENTS, check_increment_size
from ..incremental.report import incremental_section
from ..io.frames import is_dask_frame
from ..privacy import identifiers
from ..runplan import GroupResult
from .incremental import default_kernel, pca_mdav_kernel
from .incremental_schedule import choose_nu
from .series import survey_links

__all__ = ["SurveyInput", "open_survey_input", "execute_incremental"]


@dataclass(frozen=True)
class SurveyInput:
    """The survey a run follows, and its schedule when it is known before a cluster is up."""

    src: object
    sched: dict | None

    columns = property(lambda self: self.src.columns() or [])
    schema = property(lambda self: self.src.schema())


def open_survey_input(plan, data=None, input=None, storage_options=None) -> SurveyInput:
    """The survey of the run (a timestamped DataFrame, or a lake being filled: a directory or a
    prefix of an object store read with ``storage_options``), checked against the plan's columns;
    ν planned now when no calibration on the cluster is needed."""
    from ..io.layout import check_hidden_names
    from ..io.qi import unknown_columns
    from ..io.survey import open_survey

    if (data is None) == (input is None):
        raise ParameterError("give the data (a DataFrame) or an input path, not both")
    source = data if data is not None else input
    if data is not None and is_dask_frame(data):
        raise InputError("source must be a Parquet lake directory or a pandas DataFrame, not a Dask DataFrame")
    ip, k = plan.incremental, plan.k
    opts = ip.options
    src = open_survey(source, time_column=opts.time_column, close_at=opts.close_at, expected_rows=opts.expected_rows,
                      storage_options=storage_options)
    cols = src.columns()
    if cols is not None:
        check_hidden_names(cols)
        unknown = [c for c in plan.qi if c not in cols]
        if unknown:
            raise unknown_columns(unknown, cols)
        id_column = [plan.series.id_column] if plan.series is not None and plan.series.id_column else []
        for what, names in (("id_column (--id-column)", id_column), ("keep (--keep)", plan.release.keep),
                            ("drop (--drop)", ip.drop)):
            bad = [c for c in names if c not in cols]
            if bad:
                raise ParameterError(f"{what}: column(s) {', '.join(map(repr, bad))} not in the survey")
        identifiers.check_names(_as_is([c for c in cols if c not in ip.drop], plan))
    total = src.total_rows
    if total is not None and k > total:
        raise ParameterError(f"k = {k} exceeds the number of records of the survey ({total})")
    if total is None:
        raise ParameterError(f"the lake {source} has no _arrivals.json manifest: give expected_rows (total records "
                             "of the survey)")
    if opts.nu is None and opts.zeta is None and src.survey_seconds() is None:
        raise ParameterError("give nu or zeta: the survey's duration is unknown for a lake without a simulator manifest")
    needs_cluster = opts.nu is None and opts.time_model is None and (opts.zeta is None or ip.base_options is not None)
    sched = None if needs_cluster else choose_nu(opts.nu, opts.zeta, opts.time_model, src, None, _base(plan))
    if sched is not None and sched["nu"] is not None:
        check_increment_size(sched["nu"], total, k, opts.increment)
    return SurveyInput(src, sched)


def _as_is(columns, plan) -> list:
    """The columns published as they are (neither QIs, nor withheld, nor kept on purpose)."""
    skip = set(plan.qi) | set(plan.release.hidden) | set(plan.release.keep)
    return [c for c in columns if c not in skip]


def _base(plan) -> tuple:
    ip = plan.incremental
    return (base_kernel(ip.options), ip.options.base_name, ip.base_options, ip.options.increment, len(plan.qi),
            plan.k)


def base_kernel(options):
    """The one-task base kernel ``f(Z, k) -> labels`` of the options (None for a partitioned base)."""
    b = options.base_method
    if callable(b):
        return b
    return {"mdav": default_kernel, "pca-mdav": pca_mdav_kernel, "partitioned": None}[b]


def _prepare(df: pd.DataFrame, drop: tuple, fp_columns, keys) -> pd.DataFrame:
    """A survey chunk as read on its worker: dropped columns left out, fingerprints added."""
    from ..series.fingerprint import with_fingerprints

    if drop:
        df = df.drop(columns=[c for c in drop if c in df.columns])
    return with_fingerprints(df, fp_columns, keys) if fp_columns else df


def execute_incremental(client, survey: SurveyInput, plan, sink: str, output=None, progress=None, series=None):
    """Run both stages on ``client`` and return the planner's
    :class:`~daskmicro.graph.executor.Execution`: the verified release (a frame, or the files of a
    directory release in its staging directory) and the figures of the report."""
    from .incremental import IncrementalGraph, warm_up
    from .incremental_fixed import FixedIncrementalGraph
    from .incremental_pipeline import PipelineIncrementalGraph

    ip, src, qi, k = plan.incremental, survey.src, list(plan.qi), plan.k
    opts = ip.options
    t_call = time.time()
    deadline = None if opts.timeout is None else t_call + opts.timeout

    def step(event: str) -> None:
        if progress is not None:
            progress(event, time.time() - t_call)

    kernel = base_kernel(opts)
    warm_up(client, "nn" if opts.increment in FIXED_INCREMENTS else opts.increment, kernel or default_kernel)
    step("workers ready")
    sched = survey.sched
    if sched is None:  # calibrate the time model on the cluster
        sched = choose_nu(opts.nu, opts.zeta, opts.time_model, src, client, _base(plan))
        if sched["nu"] is not None:
            check_increment_size(sched["nu"], src.total_rows, k, opts.increment)
    step("schedule")
    plan = plan if series is None else series.keyed(plan)   # the ledger's key: after every check above
    fp = (series.columns, series.keys) if series is not None else (None, None)
    prepare = functools.partial(_prepare, drop=(*plan.incremental.drop, *src.withheld()), fp_columns=fp[0], keys=fp[1])
    seed = plan.release.seed
    if ip.base_options is None:
        graph = IncrementalGraph(client, qi, k, opts.increment, kernel, seed, prepare=prepare)
    else:
        cls = FixedIncrementalGraph if opts.increment in FIXED_INCREMENTS else PipelineIncrementalGraph
        graph = cls(client, qi, k, opts.increment, ip.base_options, seed, prepare=prepare)
    done = _stages(src, graph, sched, opts, k, deadline, step)
    return _execution(client, plan, done, sink, output, series, step)


@dataclass
class StagesDone:
    """What both stages of a survey came to: the verified release and its figures."""

    src: object
    graph: object
    sched: dict
    release: object
    results: tuple          # (base StageResult, increment StageResult, metrics)
    counts: tuple           # (records of the base stage, of the increment)
    method: str             # the increment algorithm used (2MDAV falls back to nn below k late records)
    ref: dict | None        # the one-pass reference run, when asked for
    checks: tuple           # (dtype changes, k-anonymity check, row check)
    t_release: float


def _stages(src, graph, sched, opts, k, deadline, step) -> StagesDone:
    """Base stage at the base trigger, increment at the close, verified release (§III-B)."""
    from .incremental_fixed import PROBE_FRACTION

    try:
        if sched["nu"] is None:  # a fixed increment's late path, timed on the survey's first records
            sched.update(graph.plan_nu(src.wait_base(PROBE_FRACTION, deadline, on_new=graph.ingest), sched,
                                       src.total_rows))
        base_chunk = src.wait_base(1.0 - sched["nu"], deadline, on_new=graph.ingest)
        graph.submit_base(base_chunk)
        step("base stage submitted")
        inc_chunk = src.wait_close(base_chunk, deadline, on_new=graph.ingest, on_poll=graph.collect)
        n_base, n_inc = src.rows(base_chunk), src.rows(inc_chunk)
        method = opts.increment
        if method == "2mdav" and 0 < n_inc < k:
            method = "nn"  # too few late records for their own cells
        graph.submit_increment(inc_chunk, method)
        step("increment stage submitted")
        release, changes, k_check = graph.results()
        k_check.raise_if_failed()
        row_check = graph.check_rows(n_base + n_inc, release).raise_if_failed()
        t_release = time.time()
        step("release verified")
        results = graph.stage_results()
        ref = graph.reference() if opts.reference else None
        if ref is not None:
            step("reference done")
    except BaseException:
        graph.cancel()
        raise
    return StagesDone(src, graph, sched, release, results, (n_base, n_inc), method, ref, (changes, k_check, row_check),
                      t_release)


# --------------------------------------------------------------------------- the release


def _ledger_piece(df, stage, index, qi, hidden, frozen, refuse_known, link=None):
    """One release piece's ledger rows written (its fingerprints and withheld columns dropped);
    a piece holding records published before in the series is refused, and so is one whose
    records share their rows of the columns published as they are with the series' records
    (``link``: :func:`~daskmicro.graph.series.survey_links`): records whose QIs were revised."""
    from ..io.ledger import record_piece
    from ..series.content import passed_through
    from ..series.fingerprint import FP, FP_DTYPE
    from ..series.link import count_links, linked_error

    if refuse_known and len(frozen) and len(df):
        fp = np.empty(len(df), FP_DTYPE)
        fp["hi"], fp["lo"] = df[FP[0]].to_numpy(np.uint64), df[FP[1]].to_numpy(np.uint64)
        known = int(np.count_nonzero(frozen.lookup(fp)))
        if known:
            raise ParameterError(
                f"{known} record(s) of this survey were published before in this series: an incremental run "
                "aggregates every record afresh, which would give their earlier values away; release the survey "
                "with another method (records published before keep their values), or start a new series "
                "(--new-series) if the earlier releases were withdrawn")
    if link is not None and len(df):
        held, key, groups = link
        linked = count_links(df, held, key)
        if linked:
            raise linked_error(len(df), groups, f"{linked} of them share their row of the columns published as they "
                               "are with a record published before")
    return record_piece(df, stage, index, list(qi), FP, tuple(hidden), passed_through(df.columns, [*qi, *hidden]))


def _withheld(df, hidden):
    return df.drop(columns=[c for c in hidden if c in df.columns])


def _recorded(client, release, plan, series, n: int):
    """The release with its ledger rows written on the workers (a recorded series), else with its
    withheld columns dropped."""
    import dask

    hidden = tuple(plan.release.hidden)
    if series is None:
        return release.map_partitions(_withheld, hidden) if is_dask_frame(release) else _withheld(release, hidden)
    from ..series.content import passed_through
    from ..series.fingerprint import FP

    stage = str(series.stage)
    refuse = not series.new_series
    series.published = passed_through(release.columns, [*plan.qi, *hidden])   # as each piece records them
    link = survey_links(series, plan.qi, n)
    if not is_dask_frame(release):
        return _ledger_piece(release, stage, 0, plan.qi, hidden, series.frozen, refuse, link)
    import dask.dataframe as dd

    frozen = client.scatter(series.frozen.for_workers(), broadcast=True) if len(series.frozen) else series.frozen
    link = None if link is None else client.scatter(link, broadcast=True)
    rec = dask.delayed(_ledger_piece, pure=True)
    parts = client.compute([rec(p, stage, i, plan.qi, hidden, frozen, refuse, link)
                            for i, p in enumerate(release.to_delayed())])
    client.gather(client.map(len, parts))   # every piece recorded before the release goes further (errors here)
    meta = _withheld(release._meta, hidden + tuple(FP))
    return dd.from_delayed(parts, meta=meta, verify_meta=False)


def _check_values(client, release, plan, k) -> None:
    """A column published as it is whose values single the records out is refused
    (:mod:`daskmicro.privacy.identifiers`), as in every run."""
    import dask

    cols = _as_is(list(release.columns), plan)
    if not cols:
        return
    if not is_dask_frame(release):
        identifiers.check_values(identifiers.sketch(release, cols), k)
        return
    sk = dask.delayed(identifiers.sketch, pure=True)
    parts = [sk(p, cols) for p in release.to_delayed()]
    while len(parts) > 1:
        parts = [dask.delayed(identifiers.merge, pure=True)(*parts[i:i + 8]) for i in range(0, len(parts), 8)]
    identifiers.check_values(client.compute(parts[0]).result(), k)


def _execution(client, plan, done: StagesDone, sink, output, series, step):
    from .executor import Execution
    from ..strata import Group

    qi, k = list(plan.qi), plan.k
    base_res, inc_res, metrics = done.results
    n = sum(done.counts)
    changes, k_check, row_check = done.checks
    release = _recorded(client, done.release, plan, series, n)
    if sink != "lake":   # a directory release checks its values in the pass that writes them
        _check_values(client, release, plan, k)
    info = GroupResult(
        n=n, m_used=metrics["m_used"], method="incremental", cells=metrics["cells"],
        min_cell_size=metrics["min_cell_size"], max_cell_size=metrics["max_cell_size"],
        cell_size_counts=dict(metrics["cell_size_counts"] or {}), information_loss=metrics["information_loss"],
        seconds=base_res.seconds + inc_res.seconds, constant_columns=list(metrics["constant_columns"]),
        dtype_changes=dict(changes or {}))
    section = incremental_section(done, plan.incremental.options, metrics["information_loss"])
    sizes = np.array(sorted(info.cell_size_counts), dtype=np.int64)
    ex = Execution(n=n, k=k, groups=[Group(strata=[()], pattern=0, observed=qi, n=n, label="all records")], infos=[info],
                   labels={}, k_check=k_check, rows_check=row_check,
                   tuple_sizes=(sizes, np.array([info.cell_size_counts[s] for s in sizes], dtype=np.int64)),
                   timings={"base stage": base_res.seconds, "increment stage": inc_res.seconds,
                            "close to release": done.t_release - float(done.src.closed_at)},
                   incremental=section)
    if sink == "lake":
        _write_lake(client, release, plan, output, n, ex, done.graph.counted_fingerprint())
    elif sink == "file":
        ex.frame = release.compute() if is_dask_frame(release) else release
    else:
        ex.frame = release
    step("release written" if sink == "lake" else "release ready")
    return ex


def _write_lake(client, release, plan, output, n, ex, counted=None) -> None:
    """A directory release: written into its staging directory (a run prefix on an object store),
    read back and checked before the planner commits it: k-anonymity over the published QIs and
    rows in = rows out, the columns published as they are by the identifier rule.  A release whose
    tuples were counted before it was written (``counted``: their fingerprint, the verdict made on
    those counts) is checked to hold, as read back, exactly those tuples; any other is counted as
    read back (merged by hash bucket on the workers)."""
    from ..io import commit as cm
    from ..io.lake import write_parts
    from ..privacy.verify import add_fingerprints
    from .release import bucketed_verdict

    staging = cm.open_staging(output)
    try:
        parts = release.to_delayed() if is_dask_frame(release) else release
        files, checks, marks = write_parts(client, parts, staging, list(plan.qi), counted=counted is not None,
                                           sketch=tuple(_as_is(list(release.columns), plan)))
        rows = sum(f["rows"] for f in files)
        if rows != n:
            raise VerificationError(f"wrote {rows} rows but the survey has {n}")
        if marks is not None:
            identifiers.check_values(marks, plan.k)
        if counted is None:
            ex.k_check, _ = bucketed_verdict(client, checks, plan.k, rows)
        elif add_fingerprints(*client.gather(checks)) != counted:
            raise VerificationError("the release's files as read back do not hold the tuples counted before they "
                                    "were written")
        ex.k_check.raise_if_failed()
    except BaseException:
        cm.discard_staging(staging)
        raise
    ex.staging, ex.files = staging, files
