"""Clusters for the tests: a LocalCluster of worker processes set up as daskmicro sets up its own,
and real ``dask scheduler`` / ``dask worker`` processes on loopback.

The session-wide instances live in ``conftest.py`` (fixtures ``client`` and ``dask_processes``);
the helpers here are for the tests that need a cluster of their own (another number of workers,
TLS, a cluster they take down)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
#: the scheduler and worker processes import this checkout
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


@contextmanager
def process_client(n_workers: int = 2):
    """A client of a fresh LocalCluster with ``n_workers`` single-threaded worker processes."""
    import distributed

    from daskmicro.runtime.cluster import local_cluster

    cluster = local_cluster(n_workers)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DaskProcesses:
    """A ``dask scheduler`` and a ``dask worker --nworkers N`` started as separate processes."""

    address: str
    procs: list = field(default_factory=list)
    n_workers: int = 2

    def stop(self) -> None:
        # SIGINT, as Ctrl-C, to the workers first and the scheduler once they are gone: `dask worker`
        # then closes its nannies and their workers in well under a second.  (On SIGTERM, or with the
        # scheduler closing at the same time, its workers hang until the nanny kills them after 8 s.)
        # Nothing of theirs is kept: a process still closing after 10 s is killed.
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)


def start_dask_processes(n_workers: int = 2, tls: dict | None = None, cwd=None, env: dict | None = None) -> DaskProcesses:
    """Start a scheduler on a free loopback port and ``n_workers`` single-threaded workers
    (``tls``: ``{"ca", "cert", "key"}`` file paths for a TLS-only cluster; ``cwd``: the processes'
    working directory; ``env``: variables added to their environment)."""
    port = free_port()
    address = f"{'tls' if tls else 'tcp'}://127.0.0.1:{port}"
    flags = ["--tls-ca-file", tls["ca"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]] if tls else []
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**ENV, **(env or {})}, cwd=cwd)
    cluster = DaskProcesses(address, n_workers=n_workers)
    cluster.procs.append(subprocess.Popen(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
         *(["--protocol", "tls"] if tls else []), *flags], **quiet))
    cluster.procs.append(subprocess.Popen(
        [str(BIN / "dask"), "worker", address, "--nworkers", str(n_workers), "--nthreads", "1", "--no-dashboard",
         *flags], **quiet))
    return cluster


def connect(cluster: DaskProcesses, security=None, timeout: float = 60):
    """A client of ``cluster`` once the scheduler listens and every worker has joined."""
    from distributed import Client

    deadline = time.time() + timeout
    while True:
        try:
            c = Client(cluster.address, security=security, timeout=10, set_as_default=False)
            break
        except OSError:
            if time.time() > deadline or any(p.poll() is not None for p in cluster.procs):
                raise
            time.sleep(0.5)
    c.wait_for_workers(cluster.n_workers, timeout=timeout)
    return c
