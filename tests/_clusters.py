"""A real LocalCluster of worker processes for the tests, set up as daskmicro sets up its own."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def process_client(n_workers: int = 2):
    """A client of a fresh LocalCluster with ``n_workers`` single-threaded worker processes."""
    import distributed

    from daskmicro.cluster import local_cluster

    cluster = local_cluster(n_workers)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
