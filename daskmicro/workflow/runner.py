"""Execute one run of a workflow: read the input, anonymize, commit the release atomically.

The same function runs in ``daskmicro run`` (on a LocalCluster or a given cluster, in the
caller's process) and on a worker of the cluster for ``daskmicro submit`` (with the worker's own
client, :func:`distributed.worker_client`).  Paths are therefore read and written by whichever
machine runs it: on a real cluster they must be on storage every machine sees.

Every run, an incremental survey's too, is the spec's :class:`~daskmicro.config.RunConfig` through
the one planner (:func:`daskmicro.plan.run`): its one commit writes the release next to its
target and moves it into place only when complete and verified, together with its report; a run
that fails or is cancelled leaves nothing behind.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..errors import InputError, ParameterError
from .slots import UTC, fill, run_key as _run_key, slot_id
from .workflow_spec import WorkflowSpec

__all__ = ["execute_run", "Cancelled", "output_paths", "preflight"]


class Cancelled(Exception):
    """The run was cancelled before it committed anything."""


def output_paths(spec: WorkflowSpec, slot: dt.datetime | None) -> tuple[Path, Path, bool]:
    """(release path, report path, release is a directory) of one run; a path on an object store
    as its URL (checked on its store by the run, :mod:`daskmicro.plan`; a release there with no
    report path given has its report where the run puts it)."""
    from ..io import lake

    from ..io.objectstore import is_remote, local_path

    rep = spec.data.get("report", {}).get("path")
    rep = fill(rep, spec.name, slot) if rep else None
    report = (rep if is_remote(rep) else Path(local_path(rep))) if rep else None
    text = fill(spec.data["output"]["path"], spec.name, slot)
    if is_remote(text):
        return text, report, not text.lower().endswith((".parquet", ".pq"))
    out = Path(local_path(text))
    is_dir = lake.is_lake_target(out)
    if report is None:
        report = out / "_report.json" if is_dir else out.with_suffix(".report.json")
    return out, report, is_dir


def _input_path(text: str):
    """The spec's input: a local path (``file://`` URLs included), or an object-store URL as written."""
    from ..io.objectstore import is_remote, local_path

    return text if is_remote(text) else Path(local_path(text))


def _check_targets(sources, out: Path, report: Path, is_dir: bool, overwrite: bool) -> None:
    """Every local path the run writes against what it reads (its input and the spec file itself)
    and each other (:mod:`daskmicro.io.paths`); a report directly inside a directory release is
    written into it with the commit.  Paths on an object store are checked there by the run
    (:mod:`daskmicro.plan`)."""
    from ..io.paths import Output, check_outputs

    outputs = [Output(out, "output", directory=is_dir)] if isinstance(out, Path) else []
    if isinstance(report, Path) and not (is_dir and isinstance(out, Path) and report.parent == out):
        outputs.append(Output(report, "report"))
    check_outputs(sources, outputs, overwrite, hint="set output.overwrite: true to replace it")


def _quote(text: str, what: str) -> str:
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    raise ParameterError(f"input.filters: {what} holds both kinds of quote; it cannot be written as a filter")


def filter_texts(filters: list, name: str, slot) -> list:
    """``input.filters`` (``[column, op, value]``, placeholders filled for the slot) as the lake
    path's filter expressions (:mod:`daskmicro.io.filters`), pushed down to pyarrow."""
    out = []
    for col, op, value in filters:
        def one(v):
            v = fill(v, name, slot) if isinstance(v, str) else v
            return _quote(v, "a value") if isinstance(v, str) else repr(v)
        column = _quote(str(col), "a column name")
        if isinstance(value, list):
            out.append(f"{column} {op} ({', '.join(one(v) for v in value)})")
        else:
            out.append(f"{column} {op} {one(value)}")
    return out


def _check(should_stop) -> None:
    if should_stop is not None and should_stop():
        raise Cancelled("cancelled")


def execute_run(spec: WorkflowSpec, slot: dt.datetime | None = None, client=None, *, progress=None,
                should_stop=None, key: str | None = None) -> dict:
    """Run ``spec`` for one slot and commit its release; returns a summary dict.

    Parameters
    ----------
    spec : WorkflowSpec
        A validated spec (:func:`daskmicro.workflow.load_workflow`).
    slot : datetime, optional
        The scheduled time of the run (fills ``{slot}``, ``{date}``, ... in paths); None for an
        unscheduled run.
    client : distributed.Client, optional
        Where the Dask work runs; a LocalCluster is started for the run when None.
    progress : callable, optional
        ``progress(stage, seconds)`` after each stage.
    should_stop : callable, optional
        Polled between stages; when it returns True the run stops with :class:`Cancelled`
        before anything is committed.
    key : str, optional
        The run key recorded in the report (default :func:`daskmicro.workflow.run_key`).

    Returns
    -------
    dict
        ``key``, ``slot``, ``output``, ``report``, ``rows``, ``cells``, ``information_loss`` (rounded,
        as the published report gives it: the summary is shown by ``daskmicro status``), ``seconds``.
    """
    from ..finish import RunPaths

    d = spec.data
    key = key or _run_key(spec, slot)
    source, out, report_path = preflight(spec, slot)
    started = time.time()
    tick = time.perf_counter()

    def stage(name):
        nonlocal tick
        now = time.perf_counter()
        if progress is not None:
            progress(name, now - tick)
        tick = now

    workflow = {"name": spec.name, "key": key, "slot": slot.isoformat() if slot else None,
                "spec": spec.source, "spec_digest": spec.digest, "started": dt.datetime.fromtimestamp(started, UTC).isoformat(),
                "strata": list(d["input"]["strata"] or [])}
    _check(should_stop)
    paths = RunPaths(input=source, output=out, report_path=report_path, storage_options=d["input"].get("storage_options"))
    summary = _planned(spec, slot, paths, client, progress, should_stop, workflow)
    stage("commit")
    summary.update(key=key, slot=slot_id(slot), seconds=round(time.time() - started, 3))
    return summary


def preflight(spec: WorkflowSpec, slot: dt.datetime | None = None) -> tuple[Path, Path, Path]:
    """What a run of ``spec`` checks before any work, in this order, with no cluster: an interrupted
    commit of its outputs resolved; the input exists (and is no uncommitted release); every path it
    writes is allowed.  Returns (input, output, report path)."""
    from ..io import recovery as rec

    out, report_path, is_dir = output_paths(spec, slot)
    for line in rec.recover(*(p for p in (out, report_path) if isinstance(p, Path))):
        print(f"daskmicro: {line}", file=sys.stderr)
    source = _input_path(fill(spec.data["input"]["path"], spec.name, slot))
    if isinstance(source, Path):   # an object-store input is checked when it is listed
        if not source.exists():
            raise InputError(f"input not found: {source} (make it first: see the comments at the top of the spec)")
        rec.refuse_uncommitted(source)
    spec_file = Path(spec.source) if spec.source else None   # read by this run: never a target
    _check_targets([source if isinstance(source, Path) else None, spec_file], out, report_path, is_dir,
                   spec.data["output"]["overwrite"])
    return source, out, report_path


def _planned(spec, slot, paths, client, progress, should_stop, workflow) -> dict:
    """The spec's RunConfig through the one planner (:mod:`daskmicro.plan`) with ``paths``
    (:class:`~daskmicro.finish.RunPaths`), filters pushed down to pyarrow, strata as groups, the
    lake commit with ``_SUCCESS``."""
    from ..config import RunConfig
    from ..plan import echo_stderr, run

    out, report_path = paths.output, paths.report_path
    d = spec.data
    data = dict(d)
    if not (client is None or "address" not in (d.get("cluster") or {})):
        data["cluster"] = {k: v for k, v in d["cluster"].items() if k not in ("address", "tls")}
    if client is not None:
        data["cluster"] = {}
    cfg = RunConfig.from_spec(data, filter_texts(d["input"]["filters"], spec.name, slot))
    if d["method"] == "auto" and cfg.method != "auto":  # pragma: no cover - from_spec keeps the method
        raise ParameterError("method: not understood")
    if isinstance(out, Path) and report_path == out / "_report.json":
        report_path = None  # a directory release holds its own _report.json
    outcome = run(cfg, paths=replace(paths, report_path=report_path), client=client, progress=progress,
                  say=echo_stderr, extra_report={"workflow": workflow}, before_commit=lambda: _check(should_stop))
    if outcome.nothing_to_do:
        return {"output": str(out), "report": str(report_path), "rows": None, "cells": None,
                "information_loss": None, "strata": 0, "nothing_to_do": True}
    r = outcome.report
    return {"output": str(out), "report": str(outcome.report_path or report_path), "rows": int(r.n),
            "cells": int(r.cells), "information_loss": _public_il(r.information_loss)["information_loss"],
            "strata": len((r.strata or {}).get("groups", [])) if d["input"]["strata"] else 0,
            "k": int(r.k), "risk": _public_risk(r.risk)}


def _public_risk(risk):
    """The disclosure risk as the published report gives it (rates rounded), when measured."""
    from ..report.coarse import public_risk

    return public_risk(risk) if risk else None


def _public_il(il) -> dict:
    """The information loss as a public manifest gives it: rounded (:mod:`daskmicro.report.coarse`)."""
    from ..report.coarse import public_information_loss

    out = public_information_loss(il)
    return {"information_loss": out["information_loss"],
            "information_loss_rounding": out["information_loss_rounding"]}
