"""The end of every run (:func:`daskmicro.plan.run`): the one commit of its release — a
directory with ``_SUCCESS`` and a fingerprint (:mod:`daskmicro.io.commit`), or a file and its
report in one atomic batch — and the private run record beside no output."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .errors import VerificationError
from .io import commit as cm

__all__ = ["RunPaths", "Outcome", "commit_lake", "commit_file", "write_run_record", "write_report_file"]


@dataclass(frozen=True)
class RunPaths:
    """Where :func:`run` reads and writes: ``input`` (a file, a directory or a URL; None when the
    data is given as a frame), ``output`` (None: the release in memory), ``report_path`` (None: the
    default beside the output), and ``storage_options`` for an object-store input or output."""

    input: object = None
    output: object = None
    report_path: object = None
    storage_options: dict | None = None


@dataclass
class Outcome:
    """The result of :func:`run`: the release (in-memory runs), the report, what was written."""

    release: object
    report: object
    output: Path | None = None
    report_path: Path | None = None
    performance_report: Path | None = None
    nothing_to_do: bool = False
    previous: dict | None = None
    run_record: Path | None = None   # the private run record (seed, input files), outside every output
    table_version: int | None = None  # a Delta release: the version of the table it committed



def write_run_record(report, say):
    """The private run record of a committed release (:mod:`daskmicro.io.runrecord`); its path."""
    from .io.runrecord import record_text, write_run_record

    try:
        path = write_run_record(report.run_record())
    except OSError as exc:
        from .errors import describe

        say(record_text(None, describe(exc)))
        return None
    say(record_text(path))
    return path


def _report_dict(report, extra):
    doc = report.to_dict()
    for key, value in (extra or {}).items():
        doc[key] = value
    return doc


def _public_il(il) -> dict:
    from .report.coarse import public_information_loss

    out = public_information_loss(il)
    return {"information_loss": out["information_loss"],
            "information_loss_rounding": out["information_loss_rounding"]}


def _manifest(cfg, ex, report, run_fp) -> dict:
    """The ``_SUCCESS`` manifest of a directory release (no input identity, no seed: private)."""
    from ._version import __version__

    return {
        "format": "daskmicro-release/1", "fingerprint": run_fp, "daskmicro_version": __version__,
        # the input's identity and the seed are private (the run record): a hash of them only
        "committed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "configuration": {key: v for key, v in cfg.fingerprint_dict().items() if key != "seed"},
        "rows": {"in": int(report.n), "out": int(report.rows.rows_out)},
        # the information loss as the report publishes it: rounded (daskmicro.report.coarse)
        "metrics": {**_public_il(report.information_loss), "cells": int(report.cells),
                    "min_cell_size": int(report.min_cell_size), "max_cell_size": int(report.max_cell_size),
                    "k_min_count": int(report.k_anonymity.min_count)},
        "files": ex.files,
    }


def commit_lake(cfg, ex, report, output, report_path, perf, run_fp, extra):
    import shutil

    from .io.objectcommit import is_remote_target
    from .runtime import dask_report

    if cfg.table_format == "delta":   # a Delta table: local, or on a store
        return _commit_delta(ex, report, output, report_path, perf, extra, recorded=cfg.ledger_path != "off")
    if is_remote_target(output):
        return _commit_remote(cfg, ex, report, output, report_path, perf, run_fp, extra)
    staging = ex.staging
    try:
        report.paths["report"] = str(report_path or output / "_report.json")
        if perf.available:
            perf.write(staging / dask_report.LAKE_NAME)
            report.performance_report = dask_report.LAKE_NAME
        doc = _report_dict(report, extra)
        from .io.tables import write_json_atomic

        write_json_atomic(doc, staging / "_report.json")
        cm.commit(staging, output, _manifest(cfg, ex, report, run_fp))
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    if report_path is not None:
        write_report_file(doc, report_path)
    return Outcome(None, report, output, report_path or output / "_report.json",
                   output / dask_report.LAKE_NAME if perf.available else None)


def _commit_delta(ex, report, output, report_path, perf, extra, recorded: bool):
    """A directory release as one version of a Delta table (:mod:`daskmicro.io.delta`), local or on
    an object store (:mod:`daskmicro.io.deltastore`): the verified staged files committed by one
    transaction and checked again as read back from where the table is; the staging area removed
    whatever the outcome; then the report (with the table version) beside the table's log."""
    import shutil

    from .io.delta import commit_delta
    from .io.deltastore import is_delta_target
    from .io.formats import dump_json
    from .io.tables import write_json_atomic
    from .runtime import dask_report

    on_store = is_delta_target(output)
    try:
        done = commit_delta(ex.staging, output, ex.files, report.published_columns(), report.k_anonymity.k,
                            int(report.n), recorded)
    finally:
        if on_store:
            ex.staging.discard()
        else:
            shutil.rmtree(ex.staging, ignore_errors=True)
    if report.lake is not None:
        report.lake = {**report.lake, "files": done["files"]}
    inside = output.report_url if on_store else output / "_report.json"
    report.paths["report"] = str(report_path or inside)
    page = None
    if perf.available:   # beside the table's log, as the report
        if on_store:
            output.put_beside(dask_report.LAKE_NAME, perf.page(), "the Dask performance report")
            page = f"{output.url}/{dask_report.LAKE_NAME}"
        else:
            page = perf.write(output / dask_report.LAKE_NAME)
        report.performance_report = dask_report.LAKE_NAME
    doc = _report_dict(report, {**(extra or {}), "delta": {"table_format": "delta", "version": done["version"],
                                                         "k_check": done["k_check"].to_dict()}})
    if on_store:
        output.put_report(dump_json(doc).encode("utf-8"))
    else:
        write_json_atomic(doc, inside)
    if report_path is not None:
        write_report_file(doc, report_path)
    return Outcome(None, report, output, report_path or inside, page, table_version=done["version"])


def _commit_remote(cfg, ex, report, output, report_path, perf, run_fp, extra):
    """A directory release on an object store: its report (and the Dask performance report) into
    the run prefix, the ``_SUCCESS`` PUT that commits it (:mod:`daskmicro.io.objectcommit`), then
    the local copy of the report."""
    from .io.formats import dump_json
    from .runtime import dask_report

    run = ex.staging
    try:
        report.paths["report"] = str(report_path) if report_path is not None else run.url("_report.json")
        if perf.available:
            run.put(dask_report.LAKE_NAME, perf.page())
            report.performance_report = dask_report.LAKE_NAME
        doc = _report_dict(report, extra)
        run.put("_report.json", dump_json(doc).encode("utf-8"))
        output.commit(run, _manifest(cfg, ex, report, run_fp))
    finally:
        if not run.done:
            run.discard()
    if report_path is not None:
        write_report_file(doc, report_path)
    return Outcome(None, report, output, report_path if report_path is not None else run.url("_report.json"),
                   run.url(dask_report.LAKE_NAME) if perf.available else None)


def write_report_file(doc: dict, report_path) -> None:
    """A report (or a report's copy) at ``report_path``: a local file, replaced atomically, or an
    object of a store (:class:`~daskmicro.io.objectfile.ObjectTarget`, checked before the run)."""
    from .io.objectfile import is_object_target

    if is_object_target(report_path):
        report_path.write(_json_bytes(doc))
    else:
        from .io.tables import write_json_atomic

        write_json_atomic(doc, report_path)


def _commit_object(ex, report, output, report_path, perf, perf_path, extra, schema=None):
    """A single-file release as one object of a store (:mod:`daskmicro.io.objectfile`): its bytes
    built and verified in memory as a reader reads them, PUT on the condition checked before the
    run, read back and compared byte for byte; then its report and the Dask performance report.
    A new release that cannot be read back, or whose report cannot follow it, is taken back
    (deleted); one whose read-back differs is another writer's object, left to it."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from .io.tables import arrow_table, verify_written_table

    report.paths["report"] = str(report_path)
    if perf.available:
        report.performance_report = _page_link(perf_path, report_path)
    buf = io.BytesIO()
    pq.write_table(arrow_table(ex.frame, schema), buf)
    data = buf.getvalue()
    # verified as the bytes users get: the rows and every published tuple in its written dtype
    report.k_anonymity = verify_written_table(pa.BufferReader(data), "parquet", report.published_columns(),
                                              report.k_anonymity.k, len(ex.frame))
    doc = _report_dict(report, extra)
    new = not output.replaces
    output.write(data)
    try:
        output.read_back(data)
        write_report_file(doc, report_path)
        _write_page(perf, perf_path)
    except VerificationError:
        raise  # read back other bytes: another writer's object since, not this run's to delete
    except BaseException:
        if new:
            output.delete()
        raise
    return Outcome(None, report, output, report_path, perf_path if perf.available else None)


def commit_file(schema, ex, report, output, report_path, perf, perf_path, extra):
    """A single-file release and its report: on this machine in one atomic batch (with the Dask
    performance report), as one object of a store (:func:`_commit_object`); a report on a store
    follows the local release, and takes a new one back with it if it cannot be written.  A Parquet
    release's columns take their Arrow types from ``schema`` (the promised schema, or None) where
    it gives them."""
    from .io.objectfile import is_object_target
    from .io.tables import AtomicBatch

    if is_object_target(output):
        return _commit_object(ex, report, output, report_path, perf, perf_path, extra, schema)
    report.paths["report"] = str(report_path)
    if perf.available:
        report.performance_report = _page_link(perf_path, report_path)
    new = not Path(output).exists()
    with AtomicBatch() as batch:
        # verified again as read back from the staged file: the bytes users get
        report.k_anonymity = batch.release(ex.frame, output, report.published_columns(), report.k_anonymity.k, schema)
        doc = _report_dict(report, extra)
        if not is_object_target(report_path):
            batch.json(doc, report_path)
        if not is_object_target(perf_path):
            perf.stage(batch, perf_path)
    if is_object_target(report_path):
        try:
            report_path.write(_json_bytes(doc))
            _write_page(perf, perf_path)
        except BaseException:
            if new:
                Path(output).unlink(missing_ok=True)
            raise
    return Outcome(None, report, output, report_path, perf_path if perf.available else None)


def _page_link(perf_path, report_path) -> str:
    """The Dask performance report as the run report links it: relative to the report's folder (on
    a store: its name when the two lie side by side, else its URL)."""
    from .io.objectfile import is_object_target
    from .runtime import dask_report

    if is_object_target(perf_path) or is_object_target(report_path):
        perf, rep = str(perf_path), str(report_path)
        return perf.rsplit("/", 1)[1] if perf.rsplit("/", 1)[0] == rep.rsplit("/", 1)[0] else perf
    return dask_report.relative_link(perf_path, report_path)


def _write_page(perf, perf_path) -> None:
    """The Dask performance report at ``perf_path`` when recorded: an object of a store (checked
    before the run) or a local file."""
    from .io.objectfile import is_object_target

    if not perf.available or perf_path is None:
        return
    if is_object_target(perf_path):
        perf_path.write(perf.page())
    else:
        perf.write(perf_path)


def _json_bytes(doc: dict) -> bytes:
    from .io.formats import dump_json

    return dump_json(doc).encode("utf-8")
