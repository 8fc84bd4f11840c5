"""A real LocalCluster of worker processes for the tests (one thread each, no dashboard port clash)."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def process_client(n_workers: int = 2):
    """A client of a fresh LocalCluster with ``n_workers`` single-threaded worker processes."""
    import distributed

    cluster = distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
