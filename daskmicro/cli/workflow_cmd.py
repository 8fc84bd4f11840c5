"""Command-line workflows: ``daskmicro run | submit | status | cancel``.

``run SPEC`` executes a workflow spec here and now (a LocalCluster unless the spec or
``--scheduler`` names a cluster) and blocks until the release is committed.  ``submit SPEC``
hands the runs to a running cluster and returns at once; the cluster waits for each slot,
runs it and commits it with no client connected (:mod:`daskmicro.workflow.submit`).
``status`` lists runs, ``cancel`` stops one.  Errors are one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from ..errors import ParameterError
from .common import add_output_options

__all__ = ["add_parsers"]

_RUN_EPILOG = """\
examples:
  daskmicro run workflows/census-demo.yaml
  daskmicro run workflows/census-demo.yaml --quiet      # no progress lines, only the summary
  daskmicro run workflows/census-demo.yaml --verbose    # and how Dask ran it: stages, layout, dashboard
  daskmicro run workflows/nightly-lake.yaml --slot 2026-11-22T02:00:00Z
  daskmicro run spec.yaml --scheduler tls://sched:8786 --tls-ca-file ca.pem --tls-cert me.pem --tls-key me-key.pem

A scheduled spec runs its latest slot that has come (or --slot); if none has come yet, the
command waits for the next one.  The spec's schema: workflows/SCHEMA.md.
"""

_SUBMIT_EPILOG = """\
examples:
  daskmicro submit workflows/nightly-lake.yaml --scheduler tcp://scheduler:8786
  daskmicro submit spec.yaml --scheduler tcp://scheduler:8786 --until 2026-12-31T00:00:00Z
  daskmicro submit spec.yaml --scheduler tcp://scheduler:8786 --slot 2026-11-22T02:00:00Z --retry

Runs have stable keys (NAME-DIGEST-SLOT): a run submitted before, by this or another submitter,
is skipped.  Paths in the spec must be visible to the workers (shared storage).
"""


def _duration(text: str) -> float:
    from ..workflow.durations import parse_duration

    try:
        return parse_duration(text)
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _time(text: str) -> dt.datetime:
    from ..workflow.slots import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_STATUS_EPILOG = """\
examples:
  daskmicro status                                    # runs in the local state file
  daskmicro status --scheduler tcp://scheduler:8786   # and as the cluster records them
  daskmicro status --scheduler tcp://scheduler:8786 --json
"""

_CANCEL_EPILOG = """\
examples:
  daskmicro cancel nightly-lake-3f9c2a1b7d-20261122T020000Z --scheduler tcp://scheduler:8786
  daskmicro cancel nightly-lake-3f9c2a1b7d-follow --scheduler tcp://scheduler:8786   # stop the follower

Keys are NAME-DIGEST-SLOT, as 'daskmicro status' lists them.
"""


def _add_connection(p, required_hint: str) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--scheduler", metavar="ADDRESS", help=required_hint)
    g.add_argument("--tls-ca-file", metavar="PEM", help="TLS: CA certificate to trust")
    g.add_argument("--tls-cert", metavar="PEM", help="TLS: client certificate")
    g.add_argument("--tls-key", metavar="PEM", help="TLS: client private key")
    p.add_argument("--state", metavar="PATH", help="the submitter's local state file (default: $DASKMICRO_STATE or ~/.local/state/daskmicro/runs.json)")


def add_parsers(sub) -> None:
    """Register ``run``, ``submit``, ``status`` and ``cancel`` on the CLI's sub-parsers."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("run", help="run a workflow spec now and wait for its release",
                       description="Run a workflow spec (YAML) and commit its release; blocks until done.",
                       epilog=_RUN_EPILOG, formatter_class=fmt)
    p.add_argument("spec", metavar="SPEC", help="workflow spec file (YAML)")
    p.add_argument("--slot", type=_time, metavar="TIME", help="scheduled specs: the slot to run (ISO 8601)")
    p.add_argument("--workers", type=int, metavar="N", help="LocalCluster worker processes (default: cluster.workers or cores)")
    p.add_argument("--local", action="store_true", help="run on a LocalCluster even if the spec names cluster.address")
    add_output_options(p)
    _add_connection(p, "run on this cluster instead of cluster.address / a LocalCluster")
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("submit", help="submit a workflow to a running Dask cluster and return",
                       description="Submit the runs of a workflow spec to a running Dask cluster. The command returns "
                                   "at once; the cluster waits for each slot and runs it without this client.",
                       epilog=_SUBMIT_EPILOG, formatter_class=fmt)
    p.add_argument("spec", metavar="SPEC", help="workflow spec file (YAML)")
    p.add_argument("--horizon", type=_duration, default=600.0, metavar="DUR", help="submit scheduled runs this long before their slot (default 10m)")
    p.add_argument("--catch-up", type=_duration, default=3600.0, metavar="DUR", help="still submit slots missed by at most this long (default 1h)")
    p.add_argument("--until", type=_time, metavar="TIME", help="last slot to submit (default: until cancelled)")
    p.add_argument("--no-follow", action="store_true", help="submit only the slots within the horizon; leave no follower task on the cluster")
    p.add_argument("--slot", type=_time, metavar="TIME", help="submit only this slot")
    p.add_argument("--retry", action="store_true", help="resubmit runs the cluster records as failed or cancelled")
    _add_connection(p, "the cluster to submit to (default: cluster.address of the spec)")
    p.set_defaults(handler=_cmd_submit)

    p = sub.add_parser("status", help="list submitted workflow runs and their state",
                       description="List workflow runs known to the cluster (with --scheduler) and to the local state file.",
                       epilog=_STATUS_EPILOG, formatter_class=fmt)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_connection(p, "ask this cluster (default: local state file only)")
    p.set_defaults(handler=_cmd_status)

    p = sub.add_parser("cancel", help="cancel a submitted workflow run",
                       description="Stop a submitted run (or a schedule's follower, key ...-follow) before it commits.",
                       epilog=_CANCEL_EPILOG, formatter_class=fmt)
    p.add_argument("run_key", metavar="RUN_KEY", help="key of the run, as listed by 'daskmicro status'")
    _add_connection(p, "the cluster running it (required)")
    p.set_defaults(handler=_cmd_cancel)


def _security(args, spec=None):
    from .common import security_from_args

    sec = security_from_args(args)
    if sec is None and spec is not None and "tls" in spec.cluster and not args.scheduler:
        from ..runtime.cluster import tls_security

        tls = spec.cluster["tls"]
        sec = tls_security(tls["ca_file"], tls["cert"], tls["key"])
    return sec


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _cmd_run(args) -> int:
    from .common import StageProgress
    from ..runtime.cluster import cluster_client
    from ..workflow.runner import execute_run, output_paths, preflight
    from ..workflow.slots import check_slot, latest_slot, next_slot
    from ..workflow.loader import load_workflow
    from ..workflow.workflow_spec import Clock

    spec = load_workflow(args.spec)
    check_slot(spec.schedule, args.slot)
    if args.workers is not None and args.workers < 1:
        raise ParameterError(f"--workers: expected an integer ≥ 1, got {args.workers}")
    clock = Clock.from_env()
    slot = args.slot
    if slot is None and spec.schedule:
        now = clock.now()
        slot = latest_slot(spec.schedule, now) or next_slot(spec.schedule, now)
        if slot is None:
            raise ParameterError("the schedule has no slot within a year of now: give --slot")
    out, _, _ = output_paths(spec, slot)
    if args.local and args.scheduler:
        raise ParameterError("--local and --scheduler exclude each other")
    address = None if args.local else (args.scheduler or spec.cluster.get("address"))
    security = None if args.local else _security(args, spec)
    if slot is not None and args.slot is None:   # an explicit --slot runs now; the next slot is waited for
        wait = clock.real_time(slot) - time.time()
        if wait > 0:
            _say(f"waiting {wait:.0f} s for slot {slot.isoformat()}")
            time.sleep(wait)
    preflight(spec, slot)   # a missing input or a refused output is said before any cluster starts
    # the same progress as anonymize: a live line on a terminal, stage lines in a pipe, none with --quiet
    verbose = getattr(args, "verbose", False)
    with StageProgress(quiet=getattr(args, "quiet", False), verbose=verbose) as progress:
        progress.say(f"run {spec.key(slot)} → {out}")
        with cluster_client(scheduler=address, security=security,
                            n_workers=args.workers or spec.cluster.get("workers")) as client:
            progress.say(f"dask dashboard: {client.dashboard_link}")
            summary = execute_run(spec, slot, client, progress=progress)
    _print_summary(summary, verbose, spec.data["input"].get("storage_options"))
    return 0


def _print_summary(summary: dict, verbose: bool, storage_options=None) -> None:
    """The summary of a committed run: the one summary (:mod:`daskmicro.report.terminal`) of the
    report it committed, as published, then where the files are and the run key."""
    from pathlib import Path

    from ..report.terminal import summary_text, where_lines

    if summary.get("nothing_to_do"):
        print(f"nothing to do: {summary['output']} holds a committed run of the same input and configuration")
        print(f"run key: {summary['key']}")
        return
    from ..io.objectstore import is_remote

    report, output = summary["report"], summary["output"]
    if is_remote(report):   # the report as committed on the store
        from ..io.objectfile import ObjectTarget

        doc = json.loads(ObjectTarget(report, storage_options, "report").fetch())
    else:
        report = Path(report)
        doc = json.loads(report.read_text())
    output = output if is_remote(output) else Path(output)
    print(summary_text(doc, verbose=verbose))
    if verbose:
        print(f"  committed in {summary['seconds']:.1f} s")
    files = len((doc.get("lake") or {}).get("files") or []) if doc.get("lake") else None
    print("\n".join(where_lines(output, report, files=files, version=(doc.get("delta") or {}).get("version"))))
    print(f"run key: {summary['key']}")


def _connect(args, spec=None, required: bool = True):
    from ..runtime.cluster import cluster_client

    address = args.scheduler or (spec.cluster.get("address") if spec is not None else None)
    if not address:
        if required:
            raise ParameterError("--scheduler: give the address of the cluster (or cluster.address in the spec)")
        return None
    return cluster_client(scheduler=address, security=_security(args, spec))


def _cmd_submit(args) -> int:
    from ..workflow.loader import load_workflow
    from ..workflow.slots import check_slot
    from ..workflow.workflow_spec import Clock
    from ..workflow.submit import submit_spec

    spec = load_workflow(args.spec)
    check_slot(spec.schedule, args.slot)
    with _connect(args, spec) as client:
        results = submit_spec(spec, client, clock=Clock.from_env(), horizon=args.horizon, catch_up=args.catch_up,
                              until=args.until, follow=not args.no_follow, slot=args.slot, retry=args.retry,
                              state=args.state)
    for r in results:
        detail = r.get("output") if r["action"] == "submitted" else r.get("why")
        print(f"{r['action']:<9} {r['key']}  {detail}")
    if not results:
        print("no slot within the horizon; nothing submitted")
    return 0


def _cmd_status(args) -> int:
    from ..workflow.submit import list_runs

    conn = _connect(args, required=False)
    if conn is None:
        runs = list_runs(None, state=args.state)
    else:
        with conn as client:
            runs = list_runs(client, state=args.state)
    if args.json:
        print(json.dumps(runs, indent=1, default=str))
        return 0
    if not runs:
        print("no runs")
        return 0
    for r in runs:
        detail = r.get("error") or r.get("output") or ""
        print(f"{r['key']:<48} {r.get('state', '?'):<12} {detail}")
    return 0


def _cmd_cancel(args) -> int:
    from ..workflow.submit import cancel_run

    with _connect(args) as client:
        rec = cancel_run(client, args.run_key)
    print(f"cancel requested: {args.run_key} (was {rec.get('state')})")
    return 0
