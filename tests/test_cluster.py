"""daskmicro.runtime.cluster: the LocalCluster daskmicro starts for a run."""

from __future__ import annotations

import pytest

import distributed

from daskmicro.runtime.cluster import WORKER_ENV, cluster_client, local_cluster


def _arrow_pool():
    import pyarrow as pa

    return pa.default_memory_pool().backend_name


def test_local_cluster_workers_allocate_arrow_memory_with_the_system_allocator():
    assert WORKER_ENV["ARROW_DEFAULT_MEMORY_POOL"] == "system"
    with local_cluster(1, dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        info = client.scheduler_info()["workers"]
        assert len(info) == 1 and all(w["nthreads"] == 1 for w in info.values())
        assert list(client.run(_arrow_pool).values()) == ["system"]


def test_cluster_client_starts_and_closes_its_own_local_cluster():
    with cluster_client(n_workers=1) as client:
        assert list(client.run(_arrow_pool).values()) == ["system"]
        address = client.scheduler.address
    assert client.status == "closed"
    with pytest.raises(Exception):
        distributed.Client(address, timeout=1)


def _heartbeat_record_passes():
    import logging

    log = logging.getLogger("distributed.worker")
    record = log.makeRecord(log.name, logging.ERROR, __file__, 1,
                            "Failed to communicate with scheduler during heartbeat.", (), None)
    other = log.makeRecord(log.name, logging.ERROR, __file__, 1, "Worker stream died", (), None)
    return bool(log.filter(record)), bool(log.filter(other))


def test_own_workers_do_not_log_the_heartbeat_lost_at_shutdown_and_others_still_do(monkeypatch):
    """The shutdown race that put a worker's traceback under a one-line refusal: dropped on the
    workers daskmicro starts (and nothing else there), kept on any other worker."""
    from daskmicro.runtime.cluster import TaskLogFilter

    assert WORKER_ENV["DASKMICRO_LOCAL_WORKER"] == "1"
    with cluster_client(n_workers=1) as client:
        assert list(client.run(_heartbeat_record_passes).values()) == [(False, True)]
    monkeypatch.delenv("DASKMICRO_LOCAL_WORKER", raising=False)
    import logging

    record = logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1,
                               "Failed to communicate with scheduler during heartbeat.", (), None)
    assert TaskLogFilter().filter(record)
