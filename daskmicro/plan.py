"""The one planner: every run — API, CLI, workflow spec — goes through :func:`run`.

::

    RunConfig ─► source (pandas | Dask | file | lake; filters and columns pushed down)
              ─► paths checked (every output against every input and each other), before any work
              ─► executor: the given client, a scheduler address, a LocalCluster — or, for a small
                 run with no cluster asked for, this process (the same plan, :mod:`daskmicro.graph.local`)
              ─► pre-scan → groups (strata × missingness, merges) → cells per group
                 (participation, refinement as stages) → release verified as published
                 (:mod:`daskmicro.graph.executor`)
              ─► one commit (:mod:`daskmicro.io.commit` for a directory with ``_SUCCESS`` and a
                 fingerprint; an atomic batch for a file; nothing for an in-memory release)
              ─► one report (:mod:`daskmicro.report.run_report`), one timing model.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .config import ONE_TASK_METHODS, RunConfig
from .errors import InputError, ParameterError
from .finish import Outcome, RunPaths, commit_file, commit_lake, write_run_record
from .io import commit as cm
from .outputs import check_run_outputs, locate, on_store, recover_outputs, sink_of

__all__ = ["run", "log_notice", "RunPaths", "Outcome", "open_input", "needs_cluster"]

#: What a trial run (the release ledger off) says once its release is made.
TRIAL = "release ledger off: this is a trial run, not recorded; its output must not be published"
#: Given seeds below this can be found by trying every value (the release's row order is a public
#: function of the seed and the row ids: :func:`daskmicro.release.publish.shuffle_keys`); a trial
#: run's order is not keyed by a ledger's secret (:func:`daskmicro.series.fingerprint.order_seed`).
GUESSABLE_SEEDS = 1 << 48
GUESSABLE = ("warning: the seed given (--seed, seed=) to this trial run is small enough to guess by trying every "
             "value, and with it anyone holding the release can undo its row shuffle (each row's input position); "
             "leave the seed out, or record the release in a ledger, which keys its order with its secret")


def log_notice(line: str) -> None:
    """What a run says to a caller of the Python API (the command line prints it): on the
    ``daskmicro`` logger, a warning as a warning (shown unless logging is set up otherwise), the
    other notices (a trial run, a new series, a recovery) as information."""
    import logging

    logger = logging.getLogger("daskmicro")
    (logger.warning if line.startswith("warning") else logger.info)(line)


#: A CSV input up to this size is counted (lines) to choose in-process or cluster execution.
CSV_COUNT_BYTES = 64 << 20


# --------------------------------------------------------------------------- source


def open_input(cfg: RunConfig, data=None, input=None, storage_options=None):
    """The source of a run (a frame, a path or an object-store URL), checked against the config's columns."""
    from .io.frames import open_frame
    from .io.source import open_source

    if (data is None) == (input is None):
        raise ParameterError("give the data (a DataFrame) or an input path, not both")
    if data is not None:
        source = open_frame(data, list(cfg.columns) if cfg.columns else None, list(cfg.drop), list(cfg.filters))
    else:
        named = list(cfg.qi) + list(cfg.strata) + list(cfg.partition_by or ())
        if cfg.per_record_participation:
            named.append(cfg.participation)
        if cfg.id_column is not None:
            named.append(cfg.id_column)
        source = open_source(input, list(cfg.filters), list(cfg.columns) if cfg.columns else None,
                             list(cfg.drop), needed=named, storage_options=storage_options)
    _check_columns(cfg, source)
    return source


def _check_columns(cfg: RunConfig, source) -> None:
    from .io.layout import check_hidden_names
    from .io.qi import check_qi_dtype, unknown_columns
    from .strata import check_strata

    cols = source.columns
    check_hidden_names(cols)
    unknown = [c for c in cfg.qi if c not in cols]
    if unknown:
        raise unknown_columns(unknown, cols)
    meta = getattr(source, "meta", None)
    for c in cfg.qi:
        if meta is not None:
            check_qi_dtype(c, meta[c].dtype)
        else:
            import pyarrow as pa

            t = source.schema.field(c).type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)):  # null: no rows
                raise InputError(f"QI column {c!r} is not numeric (type {t}); quasi-identifiers must be numbers")
    check_strata(list(cfg.strata), list(cfg.qi), cols)
    if cfg.partition_by:
        bad = [c for c in cfg.partition_by if c not in cols]
        if bad:
            raise ParameterError(f"partition_by: unknown column(s) {', '.join(map(repr, bad))}")
    if cfg.per_record_participation:
        if cfg.participation not in cols:
            raise ParameterError(f"participation column {cfg.participation!r} is not in the input")
    if cfg.id_column is not None and cfg.id_column not in cols:
        raise ParameterError(f"id_column (--id-column): column {cfg.id_column!r} is not in the input")
    from .release.publish import ROW_ID

    if cfg.keep_row_id and ROW_ID in cols:
        raise ParameterError(f"keep_row_id: the input already has a column named {ROW_ID!r}")


def _rows_hint(source) -> int | None:
    """Rows of the input when known without reading it (pandas length, Parquet footers)."""
    if getattr(source, "rows_hint", None) is not None:
        return source.rows_hint
    if getattr(source, "dask", False):
        return None
    if getattr(source, "fmt", None) == "csv" and len(source.files) == 1:
        import os

        if os.path.getsize(source.files[0]) <= CSV_COUNT_BYTES:
            with open(source.files[0], "rb") as fh:
                return max(0, sum(1 for _ in fh) - 1)
        return None
    if getattr(source, "fmt", None) == "parquet":
        import pyarrow.parquet as pq

        try:
            return sum(pq.ParquetFile(f).metadata.num_rows for f in source.files)
        except Exception:
            return None
    return None


def needs_cluster(cfg: RunConfig, source, client=None) -> bool:
    """Whether the run needs a Dask cluster: a client or scheduler is given, the input is a Dask
    DataFrame or a directory, or a group of the run's size would go through the pipeline.  Else
    the plan runs in this process."""
    if client is not None or cfg.scheduler or cfg.memory_limit is not None or cfg.spill_directory is not None:
        return True  # worker memory settings are settings of a cluster's workers
    if getattr(source, "remote", False):
        return True  # an object store's input is read by the workers, never through this process
    path = getattr(source, "path", None)
    if getattr(source, "dask", False) or len(source.files) > 1 or (path is not None and Path(path).is_dir()):
        return True
    n = _rows_hint(source)
    if n is None:
        return cfg.method not in ONE_TASK_METHODS
    from .graph.executor import SMALL_GROUP_ROWS

    return cfg.group_method(n, SMALL_GROUP_ROWS) not in ONE_TASK_METHODS


# --------------------------------------------------------------------------- the run


def run(cfg: RunConfig, data=None, *, paths: RunPaths = RunPaths(), client=None, progress=None, say=None,
        extra_report=None, before_commit=None) -> Outcome:
    """Run ``cfg`` on ``data`` (a pandas or Dask DataFrame) or ``input`` (a file or a directory),
    ``input``, ``output``, ``report_path`` and ``storage_options`` given by ``paths``.

    ``output`` None returns the release in memory (pandas for a pandas input, Dask for a Dask
    input); a ``.parquet`` path writes one file and its report atomically; any other path is a
    directory release committed with ``_SUCCESS`` (a re-run of the same input and config is a
    no-op unless ``cfg.force``).  ``say(line)`` gets the run's notices (stderr in the CLI).
    ``extra_report`` is merged into the report before it is written (the workflow section);
    ``before_commit()`` is called just before anything is committed (it may raise to cancel).
    ``input`` may be an ``s3://``, ``abfs://`` or ``gs://`` URL read with ``storage_options`` (:mod:`daskmicro.io.objectstore`;
    never recorded) or a ``file://`` URL.  ``output`` may be such a prefix: a directory
    release committed there by one ``_SUCCESS`` object (:mod:`daskmicro.io.objectcommit`), or an
    ``…/NAME.parquet`` object PUT whole (:mod:`daskmicro.io.objectfile`); ``report_path`` may
    be an object of a store too.
    """
    from .runtime.cluster import cluster_client, given_client_refusal
    from .graph.executor import SMALL_GROUP_ROWS
    from .graph.series import discarded_on_failure, series_report
    from .runplan import RunPlan
    from .graph.local import InProcess
    from .runtime import dask_report
    from .report.run_report import build_report

    say = say or log_notice
    storage_options = paths.storage_options
    input, output, report_path = locate(paths.input, paths.output, paths.report_path, storage_options, cfg)
    if cfg.all_numeric:   # qi "all-numeric": the input's numeric columns but those named (io.qi.all_numeric)
        cfg = resolve_all_numeric(cfg, data, input, storage_options)
    for line in recover_outputs(output, report_path):  # first: whatever this run then does or refuses
        say(line)
    plan = RunPlan.from_config(cfg, SMALL_GROUP_ROWS)   # resolved once: the executor never sees cfg
    survey = plan.incremental is not None   # records followed as they arrive (daskmicro.incremental)
    source, executor = _source(cfg, plan, data, input, storage_options)
    sink = sink_of(output)
    output = Path(output) if output is not None and not on_store(output) else output
    if cfg.partition_by and sink != "lake":
        raise ParameterError("partition_by (--partition-by) needs a directory OUTPUT")
    # a survey's records are only known at its close: its run is never the same as a committed one
    input_fp = cm.fingerprint({"survey": str(input), "opened": time.time()}) if survey else source.fingerprint()
    run_fp = cm.fingerprint({"input": input_fp, "configuration": cfg.fingerprint_dict()})
    existing_ok = []
    if sink == "lake" and not survey:
        previous = cm.read_manifest(output)
        same = previous is not None and previous.get("fingerprint") == run_fp
        if same:
            existing_ok = [output]
            if not cfg.force:
                check_run_outputs(cfg, sink, output, report_path, input, False, existing_ok)
                return Outcome(None, None, output, nothing_to_do=True, previous=previous)
    if client is not None and (cfg.memory_limit is not None or cfg.spill_directory is not None):
        raise given_client_refusal()
    cluster = survey or needs_cluster(cfg, source, client)   # a survey's two stages are work on a cluster
    workers = worker_settings(cfg, source)
    if cluster and client is None and not cfg.scheduler and sink == "memory":
        client = _memory_run_client(source, workers)
    perf = dask_report.DaskPerformanceReport(enabled=cluster and cfg.dask_report and sink != "memory")
    report_path, perf_path = check_run_outputs(cfg, sink, output, report_path, input, perf.enabled, existing_ok)
    started = time.perf_counter()
    series = open_series(plan, say, sink, source)   # the ledger's frozen cells read: part of the run's time
    opened = time.perf_counter() - started
    if cluster:
        security = _security(cfg)
        with cluster_client(client, scheduler=cfg.scheduler, security=security, **workers) as c:
            if client is None and c.dashboard_link:
                say(f"dask dashboard: {c.dashboard_link}")
            with perf.record(), discarded_on_failure(series):
                ex = executor(c, source, plan, sink, output, progress, series)
                if survey and client is None and not cfg.scheduler and sink == "memory":
                    ex.frame = _local(c, ex.frame)   # the run's own cluster closes with it
            report = build_report(cfg, ex, source, c)
    else:
        with discarded_on_failure(series):
            ex = executor(InProcess(), source, plan, sink, output, progress, series)
        report = build_report(cfg, ex, source, None)
    report.series = series_report(series, ex.infos)
    report.timings = ({"release ledger": opened} if series is not None else {}) | report.timings
    if perf.error:
        say(f"warning: {perf.error}")
    report.timings["total"] = time.perf_counter() - started
    report.lake = {"input": input_fp, "configuration": cfg.fingerprint_dict(), "fingerprint": run_fp,
                   "files": ex.files} if sink == "lake" else None
    report.paths = {"input": str(input) if input is not None else None,
                    "output": str(output) if output is not None else None}
    if series is None and not cfg.seed_drawn and cfg.seed < GUESSABLE_SEEDS:
        say(GUESSABLE)
    if sink == "memory":  # pandas, or a Dask DataFrame built on the workers for a Dask input
        series.commit() if series is not None else say(TRIAL)
        return Outcome(ex.frame, report)
    if before_commit is not None:
        try:
            before_commit()
        except BaseException:
            if ex.staging is not None:
                cm.discard_staging(ex.staging)
            if series is not None:
                series.discard()
            raise
    try:
        if series is not None:
            series.commit()   # in the ledger before it is on disk: a published release is always recorded
    except BaseException:
        if ex.staging is not None:
            cm.discard_staging(ex.staging)
        raise
    if sink == "lake":
        outcome = commit_lake(cfg, ex, report, output, report_path, perf, run_fp, extra_report)
    else:
        outcome = commit_file(_file_schema(source, plan, ex), ex, report, output, report_path, perf, perf_path,
                              extra_report)
    outcome.run_record = write_run_record(report, say)
    if series is None:
        say(TRIAL)
    return outcome


def _file_schema(source, plan, ex):
    """The Arrow schema a single-file release promises: the input's types (as a directory release's
    files have them), integer QIs as float64, merged strata as text, no column read for the run only."""
    from .graph.release import promised_schema

    rp = plan.release
    if getattr(source, "schema", None) is None:   # a frame survey: pandas types only
        return None
    return promised_schema(source, list(plan.qi), [], rp.keep_row_id, ex.labels, list(rp.hidden))


def resolve_all_numeric(cfg: RunConfig, data=None, input=None, storage_options=None) -> RunConfig:
    """``cfg`` with its QIs resolved from the input's columns (``qi="all-numeric"``), checked again."""
    import dataclasses

    from .io.qi import all_numeric

    if data is not None:
        columns = list(data.columns)
        numeric = [getattr(data.dtypes[c], "kind", "O") in "iuf" for c in columns]
    else:
        import pyarrow as pa

        from .io.source import open_source

        schema = open_source(input, storage_options=storage_options).schema
        columns = list(schema.names)
        numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) for t in schema.types]
    if cfg.columns:   # a projection: only the columns read
        numeric = [num and c in cfg.columns for c, num in zip(columns, numeric)]
    roles = [*cfg.strata, *(cfg.partition_by or ()), *cfg.drop, *cfg.keep,
             *(c for c in (cfg.participation if cfg.per_record_participation else None, cfg.id_column,
                           cfg.incremental_options.time_column if cfg.method == "incremental" else None)
               if c is not None)]
    out = dataclasses.replace(cfg, qi=tuple(all_numeric(columns, numeric, cfg.qi_except, roles)))
    out.check_rules()
    return out


def _source(cfg, plan, data, input, storage_options=None):
    """The run's source and its executor: a survey followed as its records arrive
    (:mod:`daskmicro.incremental`), or the input read in pieces (:mod:`daskmicro.graph.executor`)."""
    if plan.incremental is not None:
        from .graph.incremental_run import execute_incremental, open_survey_input

        return open_survey_input(plan, data, input, storage_options), execute_incremental
    from .graph.executor import execute

    return open_input(cfg, data, input, storage_options), execute


# --------------------------------------------------------------------------- the release ledger


def open_series(plan, say, sink=None, source=None):
    """The run's side of its ledger series (:class:`daskmicro.graph.series.SeriesRun`), or None for a
    trial run (ledger off; :data:`TRIAL` is said once its release is made).  The columns a
    directory release (``sink``) of ``source`` is partitioned by are strata of the series, as its
    own strata are (a record's fingerprint holds them: the same data partitioned otherwise is
    another series).  The ledger is read only: its key is made where the run first keys anything
    (:meth:`~daskmicro.graph.series.SeriesRun.keyed`), the series' folder when its release is recorded."""
    if plan.series is None:
        return None
    from .graph.series import SeriesRun
    from .io.ledger import Ledger

    sp = plan.series
    try:
        ledger = Ledger.open(sp.ledger)
        secret = ledger.secret()
        parts = [] if source is None else plan.partition_columns(sink, getattr(source, "partition_fields", []),
                                                                  source.columns)
        folder, desc = ledger.series(plan.qi, list(dict.fromkeys([*plan.strata, *parts])), sp.id_column)
        # a series of its own for the same people would be intersected with theirs: starting one is
        # refused unless asked for (continuing a series is not: its frozen values protect it)
        others = [] if Ledger.releases(folder) else ledger.overlapping(plan.qi, folder)
        if others and not sp.new_series:
            raise ParameterError(
                f"ledger (--ledger): it holds releases with other QIs, strata or id column sharing QI columns with "
                f"these ({len(others)} series); releases of the same people made two ways can be intersected: use the "
                "same QIs, strata and id column, or --new-series (new_series=True) if these are other people or the "
                "earlier releases were withdrawn")
        after = Ledger.latest(folder)   # before reading: a release recorded from now on refuses this one's commit
        frozen = Ledger.load(folder, plan.qi)
    except OSError as exc:
        from .errors import describe

        raise ParameterError(f"ledger (--ledger): cannot use {sp.ledger}: {describe(exc)}") from None
    if len(frozen) and not sp.new_series and plan.participation is not None:
        raise ParameterError(
            "participation (--participation COLUMN): a re-release of a series with per-record participation "
            "probabilities is not supported (the failure probability of a frozen cell would have to be worked out "
            "from the probabilities its records have now); release with a constant participation, or start a new "
            "series (--new-series) if the earlier releases were withdrawn")
    if sp.new_series and len(frozen):
        say(f"new series: {len(frozen):,} records published before are aggregated afresh; this release and the earlier "
            "ones together can give their values back")
    return SeriesRun(keys=None, columns=sp.record_columns(plan.qi, plan.strata), frozen=frozen, stage=None,
                     new_series=sp.new_series, after=after,
                     alone=list(plan.qi) if after == 0 and not sp.new_series else None, ledger=ledger, folder=folder,
                     desc=desc, secret=secret)


def worker_settings(cfg: RunConfig, source) -> dict:
    """The LocalCluster a run starts when it is given no cluster: its workers, their memory limit
    (``cfg.memory_limit``, else from the task size: :func:`daskmicro.cluster.worker_memory_limit`
    of the largest of a top-level task's z-scored records and a written file's rows) and where
    they spill."""
    from .runtime.cluster import default_workers, worker_memory_limit

    n_workers = cfg.workers or default_workers()
    limit = cfg.memory_limit
    if limit is None:
        task = cfg.task_rows_or_default * 8 * (len(cfg.qi) + 3)
        write = cfg.rows_per_file * 8 * (len(source.columns) + 2)
        limit = worker_memory_limit(max(task, write), n_workers)
    return {"n_workers": n_workers, "memory_limit": limit, "spill_directory": cfg.spill_directory}


def _memory_run_client(source, workers):
    """The client of an in-memory (API) run that needs a cluster: the caller's default client if
    there is one; for a Dask input, whose release lives on the workers, a LocalCluster that
    outlives the run (it becomes the default client, as a bare ``distributed.Client()`` would);
    else None (a LocalCluster for the run alone)."""
    from distributed import Client, default_client

    try:
        return default_client()
    except ValueError:
        pass
    if getattr(source, "dask", False):
        from .runtime.cluster import local_cluster

        return Client(local_cluster(**workers))
    return None


def _local(client, frame):
    from .io.frames import is_dask_frame

    return client.compute(frame).result() if is_dask_frame(frame) else frame


def _security(cfg):
    if cfg.tls_ca_file is None:
        return None
    for label, path in (("--tls-ca-file", cfg.tls_ca_file), ("--tls-cert", cfg.tls_cert), ("--tls-key", cfg.tls_key)):
        if not Path(path).is_file():
            raise ParameterError(f"{label}: file not found: {path}")
    from distributed.security import Security

    return Security(tls_ca_file=cfg.tls_ca_file, tls_client_cert=cfg.tls_cert, tls_client_key=cfg.tls_key,
                    require_encryption=True)


def echo_stderr(line: str) -> None:
    print(f"daskmicro: {line}", file=sys.stderr, flush=True)
