"""Scheduled submission of workflow runs to a running Dask cluster, status and cancellation.

A submitted run is one task on the cluster, submitted with :func:`distributed.fire_and_forget`
under the run's stable key, so it goes on after the submitting client has gone.  The task
secedes from the worker's thread pool (:func:`distributed.worker_client`), waits until its slot
time (the time-delayed stage), then runs the whole pipeline with the worker's client and commits
the release atomically.  For a scheduled spec a *follower* task (key ``NAME-DIGEST-follow``)
stays on the cluster and submits each coming slot ``horizon`` ahead, until ``until`` or until it
is cancelled, so a cron schedule keeps firing with no submitter connected.

Each run is recorded twice:

* on the scheduler, in its metadata under ``daskmicro-runs`` / KEY (state ``submitted``,
  ``waiting``, ``running``, ``committed``, ``failed`` or ``cancelled``, with times, the output
  and a count of executions), which every client and task of the cluster sees;
* in the submitter's local state file (JSON; ``DASKMICRO_STATE`` or
  ``~/.local/state/daskmicro/runs.json``), which survives a restart of the submitter and of the
  scheduler.

A run whose key is known to either is not submitted again (``retry=True`` resubmits runs the
scheduler knows as failed or cancelled).  A run that already committed and is re-executed, e.g.
after its worker died, returns without writing.  Cancellation sets a flag the task polls while it
waits and between stages; a run stopped that way commits nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

from ..errors import ParameterError, describe
from .slots import UTC, Clock, parse_time, run_key, slot_id
from .workflow_spec import WorkflowSpec

__all__ = ["submit_spec", "refuse_unshared_ledger", "list_runs", "cancel_run", "follow_key", "state_path", "LocalState", "RUNS", "CANCEL"]

RUNS = "daskmicro-runs"
CANCEL = "daskmicro-cancel"
ACTIVE = ("submitted", "waiting", "running", "committed", "following")
_POLL = 0.25


def follow_key(spec: WorkflowSpec) -> str:
    return f"{spec.name}-{spec.digest[:10]}-follow"


def state_path(path=None) -> Path:
    if path:
        return Path(path)
    env = os.environ.get("DASKMICRO_STATE")
    if env:
        return Path(env)
    return Path(os.path.expanduser("~/.local/state/daskmicro/runs.json"))


class LocalState:
    """The submitter's record of submitted runs: a JSON file replaced atomically on each change."""

    def __init__(self, path=None):
        self.path = state_path(path)

    def load(self) -> dict:
        """The runs recorded; a file that is not a state file (another JSON document) is refused, never
        read as empty and then replaced by :meth:`add`."""
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ParameterError(f"state file {self.path} is unreadable: {exc}") from None
        runs = doc.get("runs") if isinstance(doc, dict) and set(doc) == {"runs"} else None
        if not isinstance(runs, dict) or not all(isinstance(r, dict) for r in runs.values()):
            raise ParameterError(f"state file {self.path} is not a daskmicro state file (a JSON object "
                                 '{"runs": {KEY: {...}}}): name another with --state or $DASKMICRO_STATE')
        return runs

    def add(self, records: dict) -> None:
        if not records:
            return
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            runs = self.load()
            runs.update(records)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"runs": runs}, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)


# --------------------------------------------------------------------------- scheduler-side records


def _now_iso() -> str:
    return dt.datetime.now(UTC).isoformat(timespec="seconds")


def _remote(client) -> dict:
    return client.get_metadata(RUNS, default={}) or {}


def _update(client, key: str, /, **fields) -> dict:
    rec = dict(client.get_metadata([RUNS, key], default={}) or {})
    rec.update(fields, updated=_now_iso())
    client.set_metadata([RUNS, key], rec)
    return rec


def _cancelled(client, key: str) -> bool:
    return bool(client.get_metadata([CANCEL, key], default=False))


def _one_line(exc: BaseException) -> str:
    return describe(exc)[:500]


def _wait_until(client, key: str, real_time: float) -> bool:
    """Sleep until ``real_time``; False when the run was cancelled meanwhile."""
    while True:
        if _cancelled(client, key):
            return False
        left = real_time - time.time()
        if left <= 0:
            return True
        time.sleep(min(_POLL, left))


def _run_task(spec_data: dict, source, digest: str, slot_iso, key: str, clock: tuple):
    """The task that runs on the cluster: wait for the slot, execute, commit, record."""
    from distributed import get_worker, worker_client

    from .runner import Cancelled, execute_run

    spec = WorkflowSpec(spec_data, source, digest)
    slot = parse_time(slot_iso) if slot_iso else None
    clk = Clock(*clock)
    with worker_client() as client:   # secedes: a waiting run holds no slot of the worker's pool
        rec = client.get_metadata([RUNS, key], default={}) or {}
        if rec.get("state") == "committed":
            return rec
        executions = int(rec.get("executions", 0))
        _update(client, key, state="waiting", worker=get_worker().address)
        if slot is not None and not _wait_until(client, key, clk.real_time(slot)):
            return _update(client, key, state="cancelled")
        _update(client, key, state="running", started=_now_iso(), executions=executions + 1)
        try:
            summary = execute_run(spec, slot, client, key=key, should_stop=lambda: _cancelled(client, key),
                                  progress=lambda stage, s: _update(client, key, stage=stage))
        except Cancelled:
            return _update(client, key, state="cancelled")
        except Exception as exc:  # recorded for `daskmicro status`; the task itself ends normally
            return _update(client, key, state="failed", error=_one_line(exc), finished=_now_iso())
        summary = {k: v for k, v in summary.items() if k not in ("key", "slot")}
        return _update(client, key, state="committed", finished=_now_iso(), **summary)


def _submit_one(client, spec: WorkflowSpec, slot, clock: Clock, local: dict, retry: bool, submitter: str) -> dict:
    from distributed import fire_and_forget

    from .runner import output_paths

    key = run_key(spec, slot)
    remote = client.get_metadata([RUNS, key], default=None)
    if remote and (remote.get("state") in ACTIVE or not retry):
        return {"key": key, "slot": slot_id(slot), "action": "skipped", "why": f"already {remote.get('state')} on the cluster"}
    if key in local and not remote:
        return {"key": key, "slot": slot_id(slot), "action": "skipped", "why": "already submitted (local state)"}
    out, _, _ = output_paths(spec, slot)
    _update(client, key, state="submitted", slot=slot.isoformat() if slot else None, name=spec.name,
            output=str(out), submitted=_now_iso(), submitter=submitter, error=None)
    future = client.submit(_run_task, spec.data, spec.source, spec.digest, slot.isoformat() if slot else None, key,
                           clock.as_tuple(), key=key, pure=False)
    fire_and_forget(future)
    return {"key": key, "slot": slot_id(slot), "action": "submitted", "output": str(out)}


def _follow_task(spec_data: dict, source, digest: str, key: str, clock: tuple, horizon: float, after: float,
                 until: float | None):
    """Long-running task: submit each slot of the schedule ``horizon`` seconds before it comes."""
    from distributed import Lock, worker_client

    spec = WorkflowSpec(spec_data, source, digest)
    clk = Clock(*clock)
    done_until = dt.datetime.fromtimestamp(after, UTC)
    end = dt.datetime.fromtimestamp(until, UTC) if until is not None else None
    with worker_client() as client:
        _update(client, key, state="following", name=spec.name)
        while True:
            if _cancelled(client, key):
                return _update(client, key, state="cancelled")
            window_end = clk.now() + dt.timedelta(seconds=horizon)
            if end is not None:
                window_end = min(window_end, end)
            if window_end > done_until:
                slots = spec.slots(done_until, window_end)
                if slots:
                    with Lock("daskmicro-submit", scheduler_rpc=client.scheduler, loop=client.loop):
                        for slot in slots:
                            _submit_one(client, spec, slot, clk, {}, False, "follower")
                done_until = window_end
            if end is not None and done_until >= end:
                return _update(client, key, state="finished", finished=_now_iso())
            time.sleep(_POLL)


def refuse_unshared_ledger(spec: WorkflowSpec) -> None:
    """Refuse a recorded spec that names no ledger: a submitted run records its release in the
    release ledger of the worker that runs it, by default that machine's own state directory, so
    slots run on other workers would not see each other's releases and would publish the same
    people aggregated afresh (two releases that intersect)."""
    from ..io.ledger import OFF, default_ledger

    if (spec.data.get("series") or {}).get("ledger") is None and default_ledger().strip().lower() != OFF:
        raise ParameterError("series.ledger: a submitted run records its release in the release ledger of the "
                             "worker that runs it (by default its machine's own), so runs on other workers would not "
                             "see each other's releases of the same people; name a ledger on storage every worker "
                             "sees (series.ledger: PATH), or series.ledger: off for trial runs")


def submit_spec(spec: WorkflowSpec, client, *, clock: Clock | None = None, horizon: float = 600.0,
                catch_up: float = 3600.0, until: dt.datetime | None = None, follow: bool = True,
                slot: dt.datetime | None = None, retry: bool = False, state=None) -> list[dict]:
    """Submit the runs of ``spec`` to the cluster of ``client``; returns one dict per run considered.

    Parameters
    ----------
    spec : WorkflowSpec
    client : distributed.Client
        Connected to the cluster that will run the workflow (it may close right after).
    clock : Clock, optional
        The time source (a compressed one in tests); the real clock by default.
    horizon : float
        Scheduled runs are submitted up to this many seconds before their slot and wait on the
        cluster (default 10 minutes).
    catch_up : float
        Slots missed by at most this many seconds are still submitted and start at once.
    until : datetime, optional
        Last slot to submit; without it the follower keeps going until cancelled.
    follow : bool
        Scheduled specs: leave a follower task on the cluster that submits later slots.
    slot : datetime, optional
        Submit only this slot (one-off re-run of a scheduled spec).
    retry : bool
        Resubmit runs the scheduler records as failed or cancelled.
    state : LocalState or path, optional
        The submitter's local state (default :func:`state_path`).
    """
    from distributed import Lock, fire_and_forget

    refuse_unshared_ledger(spec)
    clock = clock or Clock()
    local_state = state if isinstance(state, LocalState) else LocalState(state)
    local = local_state.load()
    now = clock.now()
    address = getattr(client.scheduler, "address", None) or str(client.scheduler)
    if spec.schedule and "at" in spec.schedule:   # one-off times: the follower ends after the last one
        last = parse_time(spec.schedule["at"][-1])
        until = last if until is None else min(until, last)
    if slot is not None:
        slots, follow = [slot], False
    elif spec.schedule:
        window_end = now + dt.timedelta(seconds=horizon)
        if until is not None:
            window_end = min(window_end, until)
        slots = spec.slots(now - dt.timedelta(seconds=catch_up), window_end)
    else:
        slots, follow = [None], False
    results = []
    with Lock("daskmicro-submit", scheduler_rpc=client.scheduler, loop=client.loop):
        for s in slots:
            results.append(_submit_one(client, spec, s, clock, local, retry, "client"))
        if follow and spec.schedule and (until is None or until > window_end):
            key = follow_key(spec)
            remote = client.get_metadata([RUNS, key], default=None)
            if remote and remote.get("state") in ("submitted", "following"):
                results.append({"key": key, "slot": "follow", "action": "skipped", "why": "a follower is already running"})
            else:
                _update(client, key, state="submitted", name=spec.name, slot=None, submitted=_now_iso(),
                        output=None, error=None)
                fut = client.submit(_follow_task, spec.data, spec.source, spec.digest, key, clock.as_tuple(), horizon,
                                    window_end.timestamp(), until.timestamp() if until else None, key=key, pure=False)
                fire_and_forget(fut)
                results.append({"key": key, "slot": "follow", "action": "submitted",
                                "output": f"submits slots up to {until.isoformat() if until else 'cancellation'}"})
    records = {r["key"]: {"name": spec.name, "slot": r["slot"], "spec": spec.source, "scheduler": address,
                          "submitted": _now_iso(), "output": r.get("output")}
               for r in results if r["action"] == "submitted"}
    # runs of this spec the cluster knows (e.g. submitted by the follower) become known locally too
    prefix = f"{spec.name}-{spec.digest[:10]}-"
    for key, rec in _remote(client).items():
        if rec and key.startswith(prefix) and key not in local and key not in records and not key.endswith("-follow"):
            records[key] = {"name": spec.name, "slot": key[len(prefix):], "spec": spec.source, "scheduler": address,
                            "submitted": rec.get("submitted"), "output": rec.get("output"), "by": rec.get("submitter")}
    local_state.add(records)
    _confirm(client, [r["key"] for r in results if r["action"] == "submitted"])
    return results


def _confirm(client, keys, timeout: float = 10.0) -> None:
    """Wait until the scheduler holds every submitted task, so that closing the client loses nothing."""
    if not keys:
        return

    def on_scheduler(dask_scheduler, keys):
        return [k for k in keys if k not in dask_scheduler.tasks]

    deadline = time.time() + timeout
    pending = list(keys)
    while pending and time.time() < deadline:
        pending = [k for k in client.run_on_scheduler(on_scheduler, keys=pending)
                   if (client.get_metadata([RUNS, k], default={}) or {}).get("state") == "submitted"]
        if pending:
            time.sleep(0.1)


def list_runs(client=None, state=None) -> list[dict]:
    """Runs known to the scheduler of ``client`` and to the local state, newest slot last."""
    runs: dict = {}
    for key, rec in LocalState(state).load().items():
        runs[key] = {"key": key, "state": "submitted (local record)", **rec}
    if client is not None:
        for key, rec in _remote(client).items():
            if not rec:
                continue
            runs[key] = {**runs.get(key, {}), "key": key, **rec}
        for key in (client.get_metadata(CANCEL, default={}) or {}):
            if key in runs and runs[key].get("state") in ("submitted", "waiting", "running", "following"):
                runs[key]["state"] += " (cancel requested)"
    return sorted(runs.values(), key=lambda r: (str(r.get("slot") or ""), r["key"]))


def cancel_run(client, key: str) -> dict:
    """Ask the run (or follower) ``key`` to stop; returns its record.  Committed runs are not undone."""
    rec = client.get_metadata([RUNS, key], default=None)
    if rec is None:
        raise ParameterError(f"RUN_KEY: no run {key!r} on this cluster (see 'daskmicro status')")
    if rec.get("state") in ("committed", "failed", "cancelled", "finished"):
        raise ParameterError(f"RUN_KEY: run {key!r} has already ended ({rec['state']})")
    client.set_metadata([CANCEL, key], True)
    return rec
