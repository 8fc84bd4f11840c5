"""Where the Dask work runs: a given client, a scheduler address, or a LocalCluster for the run.

A ``LocalCluster`` of worker *processes* (one thread each, as many as there are cores, at most
8) is started only when nothing else is given, and closed when the run ends.  Addresses may be
``tcp://`` or ``tls://``; TLS needs a :class:`distributed.security.Security` (the CLI builds one
from ``--tls-ca-file/--tls-cert/--tls-key``).
"""

from __future__ import annotations

import contextlib
import os

from .errors import ParameterError

__all__ = ["cluster_client", "default_workers", "local_cluster", "WORKER_ENV"]

#: Environment of the worker processes of a LocalCluster started by daskmicro.  Arrow's default
#: allocator (mimalloc) keeps what it freed after a Parquet read; the system allocator, which
#: Dask's nanny already trims, gives it back.  Measured on 4,000,000 rows (bench_pipeline.py's
#: profile): peak memory over the run 2.1× instead of 3.8× the raw QI bytes.  On a cluster of
#: your own, set the same variable in the workers' environment.
WORKER_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def local_cluster(n_workers: int | None = None, processes: bool = True, dashboard_address=":0", **kwargs):
    """A ``distributed.LocalCluster`` of single-threaded workers set up as daskmicro runs them.

    Worker processes get :data:`WORKER_ENV`; ``kwargs`` go to ``LocalCluster`` unchanged.
    """
    from distributed import LocalCluster

    if processes:
        kwargs["env"] = {**WORKER_ENV, **kwargs.get("env", {})}
    kwargs.setdefault("silence_logs", 40)
    return LocalCluster(n_workers=n_workers or default_workers(), threads_per_worker=1, processes=processes,
                        dashboard_address=dashboard_address, **kwargs)


@contextlib.contextmanager
def cluster_client(client=None, scheduler: str | None = None, security=None, n_workers: int | None = None,
                   processes: bool = True, timeout: float = 10):
    """Yield a ``distributed.Client``: ``client`` itself, one connected to ``scheduler``, or a new
    LocalCluster's.  Clients and clusters made here are closed on exit."""
    if client is not None:
        yield client
        return
    from distributed import Client

    if scheduler:
        if security is None and str(scheduler).startswith("tls://"):
            raise ParameterError(f"scheduler {scheduler} uses TLS: give the CA, certificate and key files")
        try:
            c = Client(scheduler, security=security, timeout=timeout)
        except (OSError, TimeoutError) as exc:
            raise ParameterError(f"cannot connect to the scheduler at {scheduler}: {' '.join(str(exc).split())}") from None
        try:
            yield c
        finally:
            c.close()
        return
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(local_cluster(n_workers, processes=processes))
        yield stack.enter_context(Client(cluster))
