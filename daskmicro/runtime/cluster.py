"""Where the Dask work runs: a given client, a scheduler address, or a LocalCluster for the run.

A ``LocalCluster`` of worker *processes* (one thread each, as many as there are cores, at most
8) is started only when nothing else is given, and closed when the run ends.  Addresses may be
``tcp://`` or ``tls://``; TLS needs a :class:`distributed.security.Security` (the CLI builds one
from ``--tls-ca-file/--tls-cert/--tls-key``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import re
import time
import warnings

from ..errors import ParameterError, describe_text

__all__ = ["cluster_client", "connect_timeout", "default_workers", "local_cluster", "WORKER_ENV", "CONNECT_TIMEOUT",
           "TaskLogFilter", "quiet_task_logs", "worker_memory_limit", "given_client_refusal", "WORKER_BASE_BYTES",
           "TASK_FACTOR", "QUIET_ENV", "quiet_run", "memory_bytes", "tls_security"]

#: Seconds allowed to reach a Dask scheduler and complete Dask's handshake with it, unless the
#: caller gives ``timeout=`` or the environment sets ``DASKMICRO_CONNECT_TIMEOUT``.
CONNECT_TIMEOUT = 15.0
#: Longest connect timeout accepted, in seconds.
MAX_CONNECT_TIMEOUT = 3600.0

#: Environment of the worker processes of a LocalCluster started by daskmicro.  Arrow's default
#: allocator (mimalloc) keeps what it freed after a Parquet read; the system allocator, which
#: Dask's nanny already trims, gives it back.  Measured on 4,000,000 rows (bench_pipeline.py's
#: profile): peak memory over the run 2.1× instead of 3.8× the raw QI bytes.  On a cluster of
#: your own, set the same variable in the workers' environment.  ``DASKMICRO_LOCAL_WORKER`` marks the
#: workers as daskmicro's own (see :class:`TaskLogFilter`).
WORKER_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "DASKMICRO_LOCAL_WORKER": "1"}


#: Memory of a worker before its largest task: the interpreter, numpy, pandas, pyarrow, the
#: compiled kernels, what the allocator keeps after the first tasks, and the data a task's
#: inputs bring in from disk or other workers (benchmarks/mem_profile.py, benchmarks/README.md).
WORKER_BASE_BYTES = 2 << 30
#: Least memory a worker process is started with (the interpreter, Dask and the compiled kernels
#: before any data): a LocalCluster of more workers than the machine's memory holds at this is refused.
MIN_WORKER_BYTES = 256 << 20
#: Memory a worker needs per byte of the largest task's data (its inputs, copies and results at
#: once; a 16,000,000-row run peaked at 2.9 GiB per worker with tasks of 120 MB).
TASK_FACTOR = 16


def given_client_refusal() -> ParameterError:
    """The refusal of worker memory settings for a run given a client (its workers keep their own)."""
    return ParameterError("memory_limit and spill_directory set up the workers of the LocalCluster daskmicro starts; "
                          "the workers of a given client keep their own (LocalCluster(memory_limit=…, "
                          "local_directory=…), dask worker --memory-limit)")


def memory_bytes(size: str) -> int:
    """Bytes of a memory size in Dask's notation (``"2GiB"``, ``"1.5 GB"``, ``"500MB"``), as a worker's
    ``memory_limit`` reads it; raises ValueError on anything else."""
    from dask.utils import parse_bytes

    return parse_bytes(size)


def tls_security(ca_file, cert, key):
    """The :class:`distributed.security.Security` of a TLS connection to a scheduler: CA file, client
    certificate and key, encryption required."""
    from distributed.security import Security

    return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True)


def worker_memory_limit(task_bytes: int, n_workers: int) -> int:
    """The memory limit daskmicro gives each worker of its LocalCluster when none is asked for.

    At least what the largest task needs (:data:`WORKER_BASE_BYTES` + :data:`TASK_FACTOR` × its
    bytes) and at least half the machine's share (so that small tasks on a large machine do not
    spill for nothing), at most the share itself (Dask's own default: this machine's memory over
    the workers).  The workers together so take at most half the machine unless their tasks need
    more, whatever the data size: held results beyond 60 % of the limit are spilled to disk.
    """
    from distributed.system import MEMORY_LIMIT

    share = MEMORY_LIMIT // max(1, n_workers)
    need = WORKER_BASE_BYTES + TASK_FACTOR * max(0, int(task_bytes))
    return int(min(share, max(need, share // 2)))


#: Set (to ``1``) while a run is quiet (:func:`quiet_run`); the worker processes of a LocalCluster
#: started meanwhile inherit it and log nothing at all.
QUIET_ENV = "DASKMICRO_QUIET"

#: Loggers of ``distributed`` that report a failed task (worker) or its result (client, scheduler).
_TASK_LOGGERS = ("distributed.worker", "distributed.client", "distributed.scheduler")

#: Exception texts of daskmicro's refusals (bad input or parameters): a task raising one is not a
#: failure to log on the worker, since the client re-raises it and the CLI prints it in one line.
_REFUSALS = ("InputError(", "ParameterError(")


#: What a worker logs, with a traceback, when a heartbeat finds the scheduler gone: on the workers of a
#: LocalCluster that daskmicro started, only ever the race of the cluster's own shutdown (the scheduler
#: lives in the process that closes it), which would follow a one-line refusal on the terminal.
_HEARTBEAT_LOST = "Failed to communicate with scheduler during heartbeat"


def _frames(tb) -> str:
    """The functions of a traceback's text, outermost first: no source line, file or value."""
    return " < ".join(reversed(re.findall(r"\bin (\w[\w.<>]*)", str(tb)))) or "(withheld)"


def _local_quiet() -> bool:
    return os.environ.get(QUIET_ENV) == "1" and os.environ.get("DASKMICRO_LOCAL_WORKER") == "1"


class TaskLogFilter(logging.Filter):
    """Keeps data out of Dask's logs: a failed task is logged by ``distributed.worker`` with
    ``repr`` of its arguments — pieces of the input or of the release — the exception's text and
    its traceback; the arguments are withheld, the exception is given by its type alone
    (:func:`daskmicro.errors.describe_text`: another library's message may quote a row) and the
    traceback by its functions; a task refusing its input (:class:`InputError`,
    :class:`ParameterError`) is not logged at all.  On daskmicro's own LocalCluster workers
    (``DASKMICRO_LOCAL_WORKER=1``, :data:`WORKER_ENV`) the heartbeat lost at the cluster's shutdown
    is not logged either, and nothing is during a quiet run (:func:`quiet_run`).  Everything else
    passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _local_quiet():
            return False
        text = record.msg if isinstance(record.msg, str) else ""
        if text.startswith(_HEARTBEAT_LOST) and os.environ.get("DASKMICRO_LOCAL_WORKER") == "1":
            return False
        if text.startswith("Compute Failed") and isinstance(record.args, tuple) and len(record.args) == 5:
            key, state, _task, exc, tb = record.args
            if str(exc).startswith(_REFUSALS):  # refused input: the caller gets it as one line, not a log
                return False
            record.args = (key, state, "(arguments withheld by daskmicro: they hold data)", describe_text(exc),
                           _frames(tb))
        return True


def quiet_task_logs() -> None:
    """Install :class:`TaskLogFilter` in this process (idempotent); in a worker process of a quiet
    run's LocalCluster, silence logging and warnings altogether."""
    for name in _TASK_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, TaskLogFilter) for f in log.filters):
            log.addFilter(TaskLogFilter())
    if _local_quiet():
        logging.disable(logging.CRITICAL)
        warnings.simplefilter("ignore")


@contextlib.contextmanager
def quiet_run(quiet: bool = True):
    """Nothing on stderr but what the caller prints itself while the block runs: no log record of
    any library (Dask's task failures, its nanny and scheduler lines at shutdown), no warning, in
    this process and in the worker processes of a LocalCluster started inside the block (they
    inherit :data:`QUIET_ENV`).  Restores logging, warnings and the environment on exit."""
    if not quiet:
        yield
        return
    previous_env = os.environ.get(QUIET_ENV)
    previous_level = logging.root.manager.disable
    os.environ[QUIET_ENV] = "1"
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous_level)
        if previous_env is None:
            os.environ.pop(QUIET_ENV, None)
        else:
            os.environ[QUIET_ENV] = previous_env


def _quiet_workers(client) -> None:
    """Install the filter here and on every worker of ``client``, present and future."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class QuietTaskLogs(WorkerPlugin):
        name = "daskmicro-quiet-task-logs"

        def setup(self, worker):
            quiet_task_logs()

    quiet_task_logs()
    try:
        client.register_plugin(QuietTaskLogs())
    except Exception:  # a worker that cannot take plugins keeps Dask's own logging
        pass


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


#: Dask's housekeeping on daskmicro's own LocalCluster, sampled less often than Dask's defaults
#: (10 ms, 1 s, 20 ms): each worker samples its running task's stack for the profile every 10 ms,
#: and each server (scheduler, nannies, workers) times its event loop every 20 ms — on an idle
#: 2-worker cluster about 7 % of a core, and as much taken from the tasks of a run.  The profiles
#: (the dashboard's, a performance report's) are still taken, from fewer samples.  A value set in
#: Dask's configuration (a file, a ``DASK_…`` variable) is kept.
HOUSEKEEPING = {"distributed.worker.profile.interval": ("10ms", "100ms"),
                "distributed.worker.profile.cycle": ("1000ms", "10s"),
                "distributed.admin.tick.interval": ("20ms", "200ms")}


def housekeeping() -> dict:
    """The :data:`HOUSEKEEPING` settings whose value is still Dask's default."""
    import dask

    return {key: ours for key, (default, ours) in HOUSEKEEPING.items() if dask.config.get(key, default) == default}


def local_cluster(n_workers: int | None = None, processes: bool = True, dashboard_address=":0",
                  spill_directory=None, **kwargs):
    """A ``distributed.LocalCluster`` of single-threaded workers set up as daskmicro runs them.

    Worker processes get :data:`WORKER_ENV`; ``spill_directory`` is the workers' local directory
    (where they spill); ``kwargs`` (``memory_limit`` …) go to ``LocalCluster`` unchanged; the
    cluster's servers sample less often (:data:`HOUSEKEEPING`).
    """
    import dask
    from distributed import LocalCluster
    from distributed.system import MEMORY_LIMIT

    most = max(1, MEMORY_LIMIT // MIN_WORKER_BYTES)
    if n_workers is not None and processes and n_workers > most:
        raise ParameterError(f"workers (--workers, cluster.workers): {n_workers:,} worker processes do not fit in this "
                             f"machine's memory ({MEMORY_LIMIT >> 20:,} MiB, at least {MIN_WORKER_BYTES >> 20} MiB "
                             f"each): ask for at most {most:,}")
    if spill_directory is not None:
        kwargs["local_directory"] = str(spill_directory)
    quiet = os.environ.get(QUIET_ENV) == "1"
    if processes:
        extra = {QUIET_ENV: "1", "PYTHONWARNINGS": "ignore"} if quiet else {}
        kwargs["env"] = {**WORKER_ENV, **extra, **kwargs.get("env", {})}
    kwargs.setdefault("silence_logs", logging.CRITICAL + 10 if quiet else logging.ERROR)
    if processes and _script_run_again_by_a_worker():
        # this process is a worker starting: it imported the user's script, which started a run
        sys.stderr.write(f"daskmicro: a worker process of the local cluster ran the script again: {UNGUARDED}\n")
        raise SystemExit(1)
    try:
        with fork_server() if processes else contextlib.nullcontext(), dask.config.set(housekeeping()):
            return LocalCluster(n_workers=n_workers or default_workers(), threads_per_worker=1, processes=processes,
                                dashboard_address=dashboard_address, **kwargs)
    except RuntimeError as exc:   # Dask's "Nanny failed to start." after the workers exited above
        if not (processes and "failed to start" in str(exc) and getattr(sys.modules.get("__main__"), "__file__", None)):
            raise
        raise RuntimeError(f"the local cluster's worker processes failed to start; {UNGUARDED}") from None


#: Why a script's run failed when its worker processes ran the script again.
UNGUARDED = ("a script that runs daskmicro on a local cluster must start the run under "
             "`if __name__ == \"__main__\":` (each worker process imports the script)")


def _script_run_again_by_a_worker() -> bool:
    """Whether this process is a worker process that imported the main script: multiprocessing
    runs it as the module ``__mp_main__`` while it starts a spawned or forked-server process, a
    module of its own (a main process has none, or — Dask's alias — its ``__main__`` under that name)."""
    mp_main = sys.modules.get("__mp_main__")
    return mp_main is not None and mp_main is not sys.modules.get("__main__")


#: What the fork server of a LocalCluster's workers imports once, before it forks them: Dask and
#: the modules daskmicro's tasks run.
FORK_PRELOAD = ("distributed", "numpy", "pandas", "pyarrow", "pyarrow.parquet", "numba", "scipy.spatial",
                "daskmicro.graph.executor", "daskmicro.graph.pipeline", "daskmicro.runtime.warmup")


@contextlib.contextmanager
def fork_server():
    """Start a LocalCluster's worker processes by forking them from one server process that has
    imported :data:`FORK_PRELOAD` (multiprocessing's ``forkserver``), on Linux where Dask's
    ``distributed.worker.multiprocessing-method`` is left at its default (``spawn``).

    A spawned worker imports Python, Dask, numpy, pandas, pyarrow, numba and daskmicro afresh —
    1.5 to 2 s of CPU each on a quiet 2-core machine, paid by every worker of every cluster; a forked
    one starts with them imported.  The server starts once per process, with the environment a spawned worker starts
    with (Dask's ``distributed.nanny.pre-spawn-environ``, its fixed ``PYTHONHASHSEED``, and
    :data:`WORKER_ENV`: variables that the C libraries read when they start, which a worker could
    not set later).  The compiled kernels are not loaded in the server: each worker loads (or
    compiles) them, sharing a compile with the others (:mod:`daskmicro.runtime.warmup`).  Workers
    that a nanny restarts later are spawned, as Dask does by default.
    """
    import sys

    import dask

    if not sys.platform.startswith("linux") or dask.config.get("distributed.worker.multiprocessing-method") != "spawn":
        yield
        return
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        from multiprocessing import forkserver

        from distributed.utils import get_mp_context

        get_mp_context().set_forkserver_preload(list(FORK_PRELOAD))   # after Dask's own list, set once
        env = {k: str(v) for k, v in (dask.config.get("distributed.nanny.pre-spawn-environ") or {}).items()}
        if env.get("PYTHONHASHSEED") in (None, "0"):   # as Dask's nanny does: one hash seed for every worker
            env["PYTHONHASHSEED"] = "6640"
        saved = dict(os.environ)
        try:
            os.environ.update({**env, **WORKER_ENV})
            forkserver.ensure_running()   # a no-op where this process started it before
        finally:
            os.environ.clear()
            os.environ.update(saved)
        yield


def connect_timeout(timeout=None) -> float:
    """The connect timeout in seconds: ``timeout``, else ``$DASKMICRO_CONNECT_TIMEOUT``, else
    :data:`CONNECT_TIMEOUT`; refused in one line unless it lies in (0, 3600]."""
    name = "timeout"
    if timeout is None:
        text = os.environ.get("DASKMICRO_CONNECT_TIMEOUT", "").strip()
        if not text:
            return CONNECT_TIMEOUT
        name, timeout = "DASKMICRO_CONNECT_TIMEOUT", text
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(timeout, bool) or not (math.isfinite(value) and 0 < value <= MAX_CONNECT_TIMEOUT):
        raise ParameterError(f"{name}: expected seconds in (0, {MAX_CONNECT_TIMEOUT:g}], got {str(timeout)[:40]!r}")
    return value


def _handshake(address: str, security, timeout: float) -> None:
    """Open a comm to ``address`` and complete Dask's handshake within ``timeout`` seconds.

    ``distributed.Client(timeout=…)`` bounds the TCP connect but not the handshake read that
    follows it, so a server that accepts and never answers (or answers something else) would
    hang it forever.  This runs in its own thread and event loop, whatever the caller runs.
    """
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect

    args = security.get_connection_args("client") if security is not None else {}

    async def probe():
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        await comm.close()

    with ThreadPoolExecutor(1, thread_name_prefix="daskmicro-connect") as pool:
        pool.submit(asyncio.run, probe()).result()


def _connect(scheduler: str, security, timeout: float):
    from distributed import Client

    failed = ParameterError(f"cannot connect to the Dask scheduler at {scheduler} within {timeout:g} s: is it running "
                            "and is this its address? (DASKMICRO_CONNECT_TIMEOUT sets the wait)")
    deadline = time.monotonic() + timeout
    try:
        _handshake(scheduler, security, timeout)
    except Exception:  # refused, timed out, closed, not a Dask comm: all mean no scheduler there
        raise failed from None
    try:
        return Client(scheduler, security=security, timeout=max(deadline - time.monotonic(), 1.0))
    except (OSError, TimeoutError):
        raise failed from None


@contextlib.contextmanager
def cluster_client(client=None, scheduler: str | None = None, security=None, n_workers: int | None = None,
                   processes: bool = True, timeout: float | None = None, memory_limit=None, spill_directory=None):
    """Yield a ``distributed.Client``: ``client`` itself, one connected to ``scheduler``, or a new
    LocalCluster's (``memory_limit`` bytes per worker, spilling to ``spill_directory``; None:
    Dask's defaults).  Clients and clusters made here are closed on exit.

    Reaching ``scheduler`` (connect and handshake) takes at most ``timeout`` seconds (default
    ``$DASKMICRO_CONNECT_TIMEOUT`` or :data:`CONNECT_TIMEOUT`), else one-line ParameterError.
    """
    if client is not None:
        _quiet_workers(client)
        yield client
        return
    from distributed import Client

    if scheduler:
        if security is None and str(scheduler).startswith("tls://"):
            raise ParameterError(f"scheduler {scheduler} uses TLS: give the CA, certificate and key files")
        c = _connect(scheduler, security, connect_timeout(timeout))
        _quiet_workers(c)
        try:
            yield c
        finally:
            c.close()
        return
    with contextlib.ExitStack() as stack:
        extra = {"memory_limit": memory_limit} if memory_limit is not None else {}
        cluster = stack.enter_context(local_cluster(n_workers, processes=processes, spill_directory=spill_directory,
                                                    **extra))
        c = stack.enter_context(Client(cluster))
        _quiet_workers(c)
        yield c
