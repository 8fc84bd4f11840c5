"""Execute one run of a workflow: read the input, anonymize, commit the release atomically.

The same function runs in ``daskmicro run`` (on a LocalCluster or a given cluster, in the
caller's process) and on a worker of the cluster for ``daskmicro submit`` (with the worker's own
client, :func:`distributed.worker_client`).  Paths are therefore read and written by whichever
machine runs it: on a real cluster they must be on storage every machine sees.

The release is written next to its target and moved into place only when complete and verified
(the CLI's helpers in :mod:`daskmicro.io.lake` and :mod:`daskmicro.io.tables`), together with its
report; a run that fails or is cancelled leaves nothing behind.
"""

from __future__ import annotations

import datetime as dt
import inspect
import sys
import time
from pathlib import Path

from ..io.frames import is_dask_frame
from ..errors import InputError, ParameterError, VerificationError
from .slots import UTC, fill, run_key as _run_key, slot_id
from .workflow_spec import WorkflowSpec

__all__ = ["execute_run", "Cancelled", "output_paths"]


class Cancelled(Exception):
    """The run was cancelled before it committed anything."""


def output_paths(spec: WorkflowSpec, slot: dt.datetime | None) -> tuple[Path, Path, bool]:
    """(release path, report path, release is a directory) of one run."""
    from ..io import lake

    out = Path(fill(spec.data["output"]["path"], spec.name, slot))
    is_dir = lake.is_lake_target(out)
    rep = spec.data.get("report", {}).get("path")
    if rep:
        report = Path(fill(rep, spec.name, slot))
    else:
        report = out / "_report.json" if is_dir else out.with_suffix(".report.json")
    return out, report, is_dir


def _check_targets(source: Path, out: Path, report: Path, is_dir: bool, overwrite: bool) -> None:
    """Every path the run writes against the input and each other (:mod:`daskmicro.io.paths`); a
    report directly inside a directory release is written into it with the commit."""
    from ..io.paths import Output, check_outputs

    outputs = [Output(out, "output", directory=is_dir)]
    if not (is_dir and report.parent == out):
        outputs.append(Output(report, "report"))
    check_outputs([source], outputs, overwrite, hint="set output.overwrite: true to replace it")


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


def _incremental(spec: WorkflowSpec, source: Path, client, slot, started: float):
    import daskmicro

    fn = getattr(daskmicro, "anonymize_incremental", None)
    if fn is None:
        raise ParameterError("method: incremental needs daskmicro.anonymize_incremental, not in this build yet")
    inc = dict(spec.data["incremental"])
    params = inspect.signature(fn).parameters
    kw = {"nu": inc.get("nu"), "zeta": inc.get("zeta"), "seed": spec.data["parameters"].get("seed"), "client": client}
    if "close_at" in inc:
        kw["close_at"] = dt.datetime.fromisoformat(inc["close_at"])
    else:
        kw["close_at"] = dt.datetime.fromtimestamp(started + inc["close_at_seconds"], UTC)
    for key in ("base_method", "increment", "reference", "arrivals"):
        if key in inc and key in params:
            kw[key] = inc[key]
    pipeline = {key: v for key, v in spec.data["parameters"].items() if key != "seed"}
    if inc.get("base_method") == "partitioned":  # the spec validated these against the base method
        kw["base_options"] = pipeline
    if "deadline" in inc:
        kw["timeout"] = inc["deadline"]
    return fn(str(source), spec.data["qi"], spec.data["k"], **kw)


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
    from ..runtime.cluster import cluster_client

    d = spec.data
    key = key or _run_key(spec, slot)
    from ..io import recovery as rec

    out, report_path, is_dir = output_paths(spec, slot)
    # first, whatever the run then does or refuses: an interrupted commit of its outputs resolved
    for line in rec.recover(out, report_path):
        print(f"daskmicro: {line}", file=sys.stderr)
    source = Path(fill(d["input"]["path"], spec.name, slot))
    rec.refuse_uncommitted(source)
    _check_targets(source, out, report_path, is_dir, d["output"]["overwrite"])
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
    cl = d.get("cluster", {})
    _check(should_stop)
    if d["method"] != "incremental":
        summary = _planned(spec, slot, source, out, report_path, client, progress, should_stop, workflow)
        stage("commit")
        summary.update(key=key, slot=slot_id(slot), seconds=round(time.time() - started, 3))
        return summary
    if not source.exists():
        raise InputError(f"input not found: {source}")
    with cluster_client(client, n_workers=cl.get("workers"), memory_limit=cl.get("memory_limit"),
                        spill_directory=cl.get("spill_directory")) as c:
        release, report = _incremental(spec, source, c, slot, started)
        parts = [(None, release, report)]
        stage("anonymize")
        _check(should_stop)
        summary = _commit(c, parts, out, report_path, is_dir, workflow, should_stop)
        stage("commit")
    summary.update(key=key, slot=slot_id(slot), seconds=round(time.time() - started, 3))
    return summary


def _planned(spec, slot, source, out, report_path, client, progress, should_stop, workflow) -> dict:
    """A non-incremental run: the spec's RunConfig through the one planner (:mod:`daskmicro.plan`),
    filters pushed down to pyarrow, strata as groups, the lake commit with ``_SUCCESS``."""
    from ..config import RunConfig
    from ..plan import echo_stderr, run

    d = spec.data
    data = dict(d)
    if not (client is None or "address" not in (d.get("cluster") or {})):
        data["cluster"] = {k: v for k, v in d["cluster"].items() if k not in ("address", "tls")}
    if client is not None:
        data["cluster"] = {}
    cfg = RunConfig.from_spec(data, filter_texts(d["input"]["filters"], spec.name, slot))
    if d["method"] == "auto" and cfg.method != "auto":  # pragma: no cover - from_spec keeps the method
        raise ParameterError("method: not understood")
    if report_path == out / "_report.json":
        report_path = None  # a directory release holds its own _report.json
    outcome = run(cfg, input=source, output=out, report_path=report_path, client=client, progress=progress,
                  say=echo_stderr, extra_report={"workflow": workflow}, before_commit=lambda: _check(should_stop))
    if outcome.nothing_to_do:
        return {"output": str(out), "report": str(report_path), "rows": None, "cells": None,
                "information_loss": None, "strata": 0, "nothing_to_do": True}
    r = outcome.report
    return {"output": str(out), "report": str(outcome.report_path or report_path), "rows": int(r.n),
            "cells": int(r.cells), "information_loss": _public_il(r.information_loss)["information_loss"],
            "strata": len((r.strata or {}).get("groups", [])) if d["input"]["strata"] else 0}


def _public_il(il) -> dict:
    """The information loss as a public manifest gives it: rounded (:mod:`daskmicro.report.coarse`)."""
    from ..report.coarse import public_information_loss

    out = public_information_loss(il)
    return {"information_loss": out["information_loss"],
            "information_loss_rounding": out["information_loss_rounding"]}


def _manifest(staging: Path, report, n: int, workflow: dict) -> dict:
    """The ``_SUCCESS`` manifest of an incremental directory release (:func:`daskmicro.io.commit.commit`)."""
    import time as _time

    from .._version import __version__
    from ..io import commit

    files = [{"path": str(p.relative_to(staging)), "bytes": p.stat().st_size}
             for p in sorted(staging.rglob("*.parquet"))]
    return {"format": "daskmicro-release/1",
            "fingerprint": commit.fingerprint({"workflow": workflow["spec_digest"], "key": workflow["key"]}),
            "daskmicro_version": __version__, "committed": _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime()),
            "configuration": {"workflow": workflow["name"], "key": workflow["key"]},
            "rows": {"in": int(n), "out": int(n)},
            "metrics": {**_public_il(report.information_loss), "cells": int(report.cells),
                        "min_cell_size": int(report.min_cell_size), "max_cell_size": int(report.max_cell_size)},
            "files": files}


def _commit(client, parts, out: Path, report_path: Path, is_dir: bool, workflow: dict, should_stop) -> dict:
    """Write the incremental release and its report into place atomically (one commit: a directory
    with ``_SUCCESS``, a file with its report in one batch)."""
    import pandas as pd

    from ..io import commit, lake
    from ..io.tables import AtomicBatch, write_json_atomic

    reports = [r.to_dict() for _, _, r in parts]
    n = sum(r.n for _, _, r in parts)
    if len(parts) == 1:
        doc = dict(reports[0])
    else:
        doc = {"n": n, "k": parts[0][2].k, "strata": [{"stratum": s, "report": rd} for (s, _, _), rd in zip(parts, reports)]}
    doc["workflow"] = workflow
    doc["paths"] = {"output": str(out), "report": str(report_path)}
    inside = is_dir and report_path.parent == out
    first = parts[0][2]
    columns = list(dict.fromkeys(list(workflow.get("strata") or []) + list(first.qi)))
    if is_dir:
        staging = commit.open_staging(out)
        futures = []
        try:
            frames = []
            for _, release, _ in parts:
                if is_dask_frame(release):
                    futures.extend(client.compute(release.to_delayed()))
                else:
                    frames.append(release)
            if frames:
                futures.extend(client.scatter(frames))
            # every part read back and counted as written, stratum columns + QIs together
            rows, k_check = lake.write_parts(client, futures, staging, columns, first.k_anonymity.k)
            if rows != n:
                raise VerificationError(f"wrote {rows} rows but the input has {n}")
            k_check.raise_if_failed()
            if inside:
                write_json_atomic(doc, staging / report_path.name)
            _check(should_stop)
            # the lake commit every directory release uses: rename, then _SUCCESS with a fingerprint
            commit.commit(staging, out, _manifest(staging, first, n, workflow))
        except BaseException:
            commit.discard_staging(staging, client, futures)
            raise
        if not inside:
            write_json_atomic(doc, report_path)
    else:
        frames = []
        for _, release, _ in parts:
            frames.append(release.compute() if is_dask_frame(release) else release)
        table = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        if len(table) != n:
            raise VerificationError(f"release has {len(table)} rows but the input has {n}")
        _check(should_stop)
        with AtomicBatch() as batch:
            # verified again as read back from the staged file, stratum columns + QIs together
            batch.release(table, out, columns, first.k_anonymity.k)
            batch.json(doc, report_path)
    from ..io.runrecord import write_run_record

    try:  # the seeds and the source's path: private, never beside the release
        record = str(write_run_record({"format": "daskmicro-run-record/1", "workflow": workflow,
                                       "output": str(out), "parts": [r.run_record() for _, _, r in parts]}))
    except OSError:
        record = None
    cells = sum(r.cells for _, _, r in parts)
    il = None
    if len(parts) == 1:
        il = _public_il(parts[0][2].information_loss)["information_loss"]
    return {"output": str(out), "report": str(report_path), "rows": int(n), "cells": int(cells),
            "information_loss": il, "strata": len(parts) if parts[0][0] is not None else 0, "run_record": record}
