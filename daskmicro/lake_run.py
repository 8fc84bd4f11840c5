"""``daskmicro anonymize`` on a Parquet lake: checks, strata, missing patterns, atomic commit.

The order of a run, each step refusing in one line before anything is written:

1. open and check the input (:func:`daskmicro.io.source.open_source`): files, schemas, filter,
   projection, ``--drop``;
2. check the QI columns' types, the strata and partition columns, the output target (output inside
   the input is refused; an existing output needs ``--overwrite``; a committed run with the same
   input fingerprint and configuration is a no-op unless ``--force``);
3. pre-scan on the workers (one task per file): rows, missing/infinite values, magnitudes, record
   counts per stratum, missingness pattern and output partition;
4. plan the groups (:mod:`daskmicro.strata`) and estimate the memory of each task against the
   workers' memory limit;
5. microaggregate each group — small groups as one in-process task each, large ones with the
   partitioned pipeline — then write, verify and commit (:mod:`daskmicro.io.commit`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .errors import InputError, ParameterError
from .io import commit as cm
from .io.qi import column_list, unknown_columns
from .io.source import open_source
from .strata import check_strata
from .kernels.bounds import MAX_ABS  # noqa: F401  (largest QI magnitude accepted; importable from here too)

__all__ = ["add_options", "wants_lake_run", "run_from_args", "estimate_task_bytes", "check_memory",
           "SMALL_GROUP_ROWS", "DEFAULT_ROWS_PER_FILE"]

#: Groups up to this many records run as one in-process task (exact MDAV) under method "auto".
SMALL_GROUP_ROWS = 100_000
DEFAULT_ROWS_PER_FILE = 1_000_000
#: A task may use at most this fraction of a worker's memory limit.
MEMORY_FRACTION = 0.6


def add_options(p) -> None:
    """The lake options of ``daskmicro anonymize``."""
    g = p.add_argument_group("lake (Parquet datasets, strata, missing values, atomic commit)")
    g.add_argument("--filter", action="append", default=[], metavar="EXPR", help="row filter, e.g. 'year>=2020' or 'region in (north,south)'; repeat to AND")
    g.add_argument("--columns", metavar="COLS", help="read only these columns (projection)")
    g.add_argument("--drop", metavar="COLS", help="leave out these columns (direct identifiers)")
    g.add_argument("--strata", metavar="COLS", help="microaggregate independently inside each stratum of these columns")
    g.add_argument("--merge-small-strata", action="store_true", help="merge a stratum with fewer than K records into its neighbour (in key order) instead of refusing")
    g.add_argument("--missing", choices=["refuse", "separate"], default=None, help="missing QI values: refuse (default) or microaggregate each missingness pattern on its observed columns")
    g.add_argument("--partition-by", metavar="COLS", help="hive-partition the output by these columns (default: the input's hive keys)")
    g.add_argument("--rows-per-file", type=int, metavar="N", help=f"rows per output file (default {DEFAULT_ROWS_PER_FILE:,})")
    g.add_argument("--force", action="store_true", help="run even when OUTPUT holds a committed run of the same input and configuration")


_LAKE_OPTS = ("filter", "columns", "drop", "strata", "merge_small_strata", "missing", "partition_by",
              "rows_per_file", "force")


def wants_lake_run(args) -> bool:
    """Directory input or output, or any lake option: the run goes through this module."""
    from .io.lake import is_lake_target

    return (Path(args.input).is_dir() or is_lake_target(args.output)
            or any(getattr(args, o, None) not in (None, False, []) for o in _LAKE_OPTS))


def estimate_task_bytes(method: str, n: int, m: int, task_rows: int = 250_000) -> int:
    """Rough peak memory of the largest single task of a method (bytes).

    One-task methods (exact MDAV, PCA-MDAV) hold the whole group: the input rows, the float64 QI
    matrix, its z-scored copy, distance buffers and labels, about ``32·m + 48`` bytes per record.
    The partitioned pipeline holds one top-level task of at most ``task_rows`` records twice over.
    """
    per_row = 32 * max(m, 1) + 48
    if method in ("mdav", "pca-mdav"):
        return int(n * per_row)
    return int(2 * min(n, task_rows) * per_row)


def check_memory(method: str, n: int, m: int, worker_bytes, what: str = "the input") -> None:
    """Refuse (ParameterError naming the method to use) when a task would not fit a worker."""
    if not worker_bytes:
        return
    need = estimate_task_bytes(method, n, m)
    if need > MEMORY_FRACTION * worker_bytes:
        gib = 1024 ** 3
        raise ParameterError(
            f"method {method!r} needs about {need / gib:.2f} GiB in one task for {what} (n = {n:,}), more than "
            f"{MEMORY_FRACTION:.0%} of a worker's {worker_bytes / gib:.2f} GiB; use --method partitioned"
        )


def _worker_memory(client):
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info().get("workers", {}).values()]
    limits = [v for v in limits if v]
    return min(limits) if limits else None


def _check_qi_types(source, qi):
    import pyarrow as pa

    unknown = [c for c in qi if c not in source.columns]
    if unknown:
        raise unknown_columns(unknown, source.columns)
    if len(set(qi)) != len(qi):
        raise ParameterError("a QI column is named more than once")
    for c in qi:
        t = source.schema.field(c).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise InputError(f"QI column {c!r} is not numeric (type {t}); quasi-identifiers must be numbers")


def _participation(args):
    """``--participation P --max-cell-failure PBAR`` on the lake path: a constant π only."""
    text = getattr(args, "participation", None)
    pbar = getattr(args, "max_cell_failure", None)
    if text is None and pbar is None:
        return None
    if text is None or pbar is None:
        raise ParameterError("--participation and --max-cell-failure go together")
    from .anonymize_probabilistic import check_participation_options

    try:
        pi = float(text)
    except (TypeError, ValueError):
        raise ParameterError(
            f"--participation {text}: with a Parquet directory (input or output) or lake options only a constant "
            "probability is supported; a per-record column needs single-file input and method mdav or pca-mdav"
        ) from None
    return check_participation_options(pi, pbar)


def _check_paths(inp, output, lake_out, report_path, args, existing_ok=()) -> None:
    """Every path the run writes, against the input and each other, before any work
    (:func:`daskmicro.io.paths.check_outputs`)."""
    from .io.paths import Output, check_outputs
    from .report import dask_report

    outputs = [Output(output, "output", directory=lake_out)]
    if lake_out:
        outputs.append(Output(report_path, "report") if report_path is not None else None)
    else:
        report_path = report_path or output.with_suffix(".report.json")
        outputs.append(Output(report_path, "report"))
        if not getattr(args, "no_dask_report", False):
            outputs.append(Output(dask_report.performance_report_path(report_path), "Dask performance report"))
    check_outputs([inp], outputs, args.overwrite, existing_ok=existing_ok)


def _config(args, qi, strata, partition_by, missing, rows_per_file) -> dict:
    keys = ("k", "method", "energy_loss", "n_components", "K", "nu", "partition_size", "task_rows",
            "max_task_rows", "seed", "keep_row_id", "merge_small_strata", "participation", "max_cell_failure")
    cfg = {key: getattr(args, key, None) for key in keys}
    cfg.update(qi=qi, strata=strata, partition_by=partition_by, missing=missing, rows_per_file=rows_per_file,
               drop=column_list(args.drop, "--drop"))
    return cfg


def run_from_args(args, client=None) -> int:
    """The lake path of ``daskmicro anonymize`` (see the module docstring)."""
    from . import __version__
    from .anonymize import _check_method, _check_seed
    from .io.lake import is_lake_target

    participation = _participation(args)
    output = Path(args.output)
    lake_out = is_lake_target(args.output)
    if not lake_out and not str(output).lower().endswith((".parquet", ".pq")):
        raise ParameterError(f"OUTPUT must be a .parquet file or a directory: {output}")
    inp = Path(args.input)
    qi = column_list(args.qi, "--qi")
    if not qi:
        raise ParameterError("--qi must name at least one quasi-identifier column")
    if isinstance(args.k, bool) or args.k < 2:
        raise ParameterError(f"k must be an integer ≥ 2, got {args.k}")
    method = _check_method(args.method)
    missing = args.missing or "refuse"
    rows_per_file = DEFAULT_ROWS_PER_FILE if args.rows_per_file is None else args.rows_per_file
    if rows_per_file < 1:
        raise ParameterError(f"--rows-per-file must be ≥ 1, got {rows_per_file}")
    drop = column_list(args.drop, "--drop")
    if set(drop) & set(qi):
        raise ParameterError(f"--drop: column(s) {', '.join(repr(c) for c in qi if c in drop)} are quasi-identifiers")
    source = open_source(inp, args.filter, column_list(args.columns, "--columns") or None, drop)
    _check_qi_types(source, qi)
    strata = check_strata(column_list(args.strata, "--strata"), qi, source.columns)
    if args.partition_by:
        partition_by = column_list(args.partition_by, "--partition-by")
        bad = [c for c in partition_by if c not in source.columns]
        if bad:
            raise ParameterError(f"--partition-by: unknown column(s) {', '.join(map(repr, bad))}")
        bad = [c for c in partition_by if c in qi]
        if bad:
            raise ParameterError(f"--partition-by: column(s) {', '.join(map(repr, bad))} are quasi-identifiers")
    else:
        partition_by = [c for c in source.partition_fields if c in source.columns and c not in qi]
    if partition_by and not lake_out:
        raise ParameterError("--partition-by needs a directory OUTPUT")
    config = _config(args, qi, strata, partition_by, missing, rows_per_file)
    input_fp = source.fingerprint()
    run_fp = cm.fingerprint({"input": input_fp, "configuration": config})
    report_path = Path(args.report) if args.report else None
    committed_same = False
    if lake_out:
        previous = cm.read_manifest(output)
        committed_same = previous is not None and previous.get("fingerprint") == run_fp
        if committed_same and not args.force:
            _check_paths(inp, output, lake_out, report_path, args, existing_ok=[output])
            print(f"nothing to do: {output} holds a committed run of the same input and configuration "
                  f"(committed {previous.get('committed', '?')}); use --force to run again")
            return 0
    _check_paths(inp, output, lake_out, report_path, args, existing_ok=[output] if committed_same else [])
    seed = _check_seed(args.seed)
    if lake_out:
        removed = cm.sweep_stale(output)
        if removed:
            print(f"daskmicro: removed {len(removed)} staging folder(s) of {output} left by an interrupted run: "
                  f"{', '.join(removed)}", file=sys.stderr)

    from .cli import security_from_args
    from .cluster import cluster_client

    from .report import dask_report

    perf = dask_report.DaskPerformanceReport(enabled=not getattr(args, "no_dask_report", False))
    security = security_from_args(args)
    with cluster_client(client, scheduler=args.scheduler, security=security, n_workers=args.workers) as c:
        if client is None:
            print(f"dask dashboard: {c.dashboard_link}", file=sys.stderr, flush=True)
        from .lake_exec import execute

        with perf.record():
            report, files = execute(c, source, qi, args, method, strata, partition_by, missing, rows_per_file,
                                    seed, output, lake_out, participation)
    if perf.error:
        print(f"daskmicro: warning: {perf.error}", file=sys.stderr)
    report.lake.update(input=input_fp, configuration=config, fingerprint=run_fp, files=files)
    report.paths = {"input": str(inp), "output": str(output)}
    return _finish(report, output, lake_out, report_path, __version__, run_fp, input_fp, config, seed, perf)


def _finish(report, output, lake_out, report_path, version, run_fp, input_fp, config, seed, perf=None) -> int:
    from .report import dask_report
    from .io.tables import AtomicBatch

    if lake_out:
        staging = report.lake.pop("staging")
        try:
            report.paths["report"] = str(report_path or output / "_report.json")
            if perf is not None and perf.available:
                perf.write(staging / dask_report.LAKE_NAME)
                report.performance_report = dask_report.LAKE_NAME
            report.to_json(staging / "_report.json")
            manifest = {
                "format": "daskmicro-release/1", "fingerprint": run_fp, "daskmicro_version": version,
                "committed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "input": input_fp,
                "configuration": config, "seed": int(seed),
                "rows": {"in": int(report.n), "out": int(report.rows.rows_out)},
                "metrics": {"information_loss": float(report.information_loss), "cells": int(report.cells),
                            "min_cell_size": int(report.min_cell_size), "max_cell_size": int(report.max_cell_size),
                            "k_min_count": int(report.k_anonymity.min_count)},
                "files": report.lake["files"],
            }
            cm.commit(staging, output, manifest)
        finally:
            if staging.exists():
                import shutil

                shutil.rmtree(staging, ignore_errors=True)
        if report_path is not None:
            report.to_json(report_path)
        print(report.summary())
        print(f"release: {output}/ ({len(report.lake['files'])} file(s), committed with {cm.SUCCESS})")
        return 0
    release = report.lake.pop("frame")
    report_path = report_path or output.with_suffix(".report.json")
    report.paths["report"] = str(report_path)
    perf_path = dask_report.performance_report_path(report_path)
    if perf is not None and perf.available:
        report.performance_report = dask_report.relative_link(perf_path, report_path)
    with AtomicBatch() as batch:
        report.k_anonymity = batch.release(release, output, report.published_columns(), report.k_anonymity.k)
        batch.json(report.to_dict(), report_path)
        if perf is not None:
            perf.stage(batch, perf_path)
    print(report.summary())
    print(f"release: {output}\nreport:  {report_path}")
    return 0
