"""daskmicro.runtime.cluster: the LocalCluster daskmicro starts for a run."""

from __future__ import annotations

import os
import subprocess
import sys

import dask
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


def _origin():
    import os

    return os.getppid(), hash("daskmicro"), os.environ.get("MALLOC_TRIM_THRESHOLD_")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is used on Linux only")
def test_workers_are_forked_from_one_server_with_the_environment_of_a_spawned_worker():
    seen = []
    for _ in range(2):   # two clusters, one after the other: one server for both
        with local_cluster(2, dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            seen += client.run(_origin).values()
    parents = {parent for parent, _, _ in seen}
    assert len(seen) == 4 and len(parents) == 1 and os.getpid() not in parents   # not spawned by this process
    # one string hash for every worker, the one Dask gives spawned workers (PYTHONHASHSEED=6640)
    env = {**os.environ, "PYTHONHASHSEED": "6640"}
    expected = int(subprocess.check_output([sys.executable, "-c", "print(hash('daskmicro'))"], env=env))
    assert {h for _, h, _ in seen} == {expected}
    trim = str(dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_TRIM_THRESHOLD_"])
    assert {m for _, _, m in seen} == {trim}   # read by glibc when the process starts


def test_a_multiprocessing_method_the_owner_chose_is_kept():
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        with local_cluster(1, dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            assert [p for p, _, _ in client.run(_origin).values()] == [os.getpid()]


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


def _sampling(dask_worker):
    return {name: dask_worker.periodic_callbacks[name].callback_time for name in ("profile", "profile-cycle", "tick")}


@pytest.mark.parametrize("given, expected", [
    ({}, {"profile": 100.0, "profile-cycle": 10_000.0, "tick": 200.0}),   # Dask's defaults: ours instead
    ({"distributed.worker.profile.interval": "50ms"}, {"profile": 50.0, "profile-cycle": 10_000.0, "tick": 200.0}),
])
def test_own_cluster_samples_its_housekeeping_less_often_and_keeps_a_value_the_owner_set(given, expected):
    """daskmicro's LocalCluster samples each task's stack every 100 ms (Dask: 10 ms) and times its event
    loops every 200 ms (Dask: 20 ms); a value set in Dask's configuration is kept as it is."""
    defaults = {"distributed.worker.profile.interval": "10ms", "distributed.worker.profile.cycle": "1000ms",
                "distributed.admin.tick.interval": "20ms"}
    with dask.config.set({**defaults, **given}):
        cluster = local_cluster(1, processes=False)
        try:
            with distributed.Client(cluster) as client:
                got = client.run(_sampling)
        finally:
            cluster.close()
        assert dask.config.get("distributed.worker.profile.interval") == given.get(
            "distributed.worker.profile.interval", "10ms")   # the caller's configuration is left as it was
    assert list(got.values()) == [expected]


def test_a_script_without_the_main_guard_is_told_so_in_one_line(tmp_path):
    """A script that starts a run at its top level, with no ``if __name__ == "__main__":``: each worker
    process of the local cluster imports the script again and would start a run of its own.  Each
    says why in one line and stops; the script's run fails with the same reason — instead of
    multiprocessing's bootstrapping traceback from every worker — and nothing is written."""
    import numpy as np
    import pandas as pd

    (tmp_path / "lake").mkdir()
    pd.DataFrame({"a": np.arange(60.0), "b": np.arange(60.0) % 7}).to_parquet(tmp_path / "lake" / "p.parquet")
    (tmp_path / "script.py").write_text(
        "import daskmicro\n"
        "daskmicro.anonymize_file('lake', 'out', ['a', 'b'], 5, ledger='off', workers=2)\n")
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    err = done.stderr
    assert done.returncode == 1
    assert 'must start the run under `if __name__ == "__main__":`' in err.splitlines()[-1]
    assert "bootstrapping phase" not in err and err.count("Traceback") == 1
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake", "script.py"]
