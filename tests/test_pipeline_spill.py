"""Bounded memory: a run whose data exceed its workers' memory limit completes by
spilling to disk, and the worker memory settings reach every entry (API, CLI, workflow spec).

Real parts only: a LocalCluster of worker processes with a small ``memory_limit`` and a spill
directory, a Parquet lake in and a committed Parquet lake out, read back and checked here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from daskmicro import anonymize_file
from daskmicro.datasets import census_like
from daskmicro.errors import ParameterError

QI = ["x0", "x1", "x2", "x3", "x4", "x5"]
N = 300_000
#: Worker memory limit of the spilling run (the smallest the run's own check accepts for tasks of
#: 20,000 rows): the input alone (N × 7 columns × 8 = 16.8 MB) nearly fills what the two workers
#: may hold in memory together (60 % of 16 MiB each, 20 MB), and a run holds it two or three
#: times over (z-scored chunks and top cells, cells, then the release pieces being written).
LIMIT = 16 << 20


def _lake(root: Path, n: int = N, files: int = 6) -> Path:
    df = census_like(n, seed=3).iloc[:, :len(QI)]
    df.columns = QI
    df["id"] = np.arange(n, dtype=np.int64)
    lake = root / "lake"
    lake.mkdir()
    step = -(-n // files)
    for i in range(files):
        df.iloc[i * step:(i + 1) * step].to_parquet(lake / f"part-{i:02d}.parquet", index=False)
    return lake


def _spilled(client) -> dict:
    """Per worker: bytes and keys Dask wrote to its spill directory since it started."""
    def metrics(dask_worker):
        m = dask_worker.data.cumulative_metrics
        return {"bytes": m.get(("disk-write", "bytes"), 0.0), "count": m.get(("disk-write", "count"), 0.0)}

    return client.run(metrics)


def _check_release(out: Path, k: int):
    assert (out / "_SUCCESS").is_file()
    rel = pq.read_table(out).to_pandas()
    assert len(rel) == N and sorted(rel["id"]) == list(range(N))   # every row exactly once
    assert rel.groupby(QI).size().min() >= k                       # k-anonymous as written


def test_a_run_larger_than_its_workers_memory_completes_by_spilling(tmp_path):
    import dask
    import distributed

    from daskmicro.runtime.cluster import local_cluster

    lake = _lake(tmp_path)
    spill = tmp_path / "spill"
    # spill by managed bytes only (60 % of the limit): the workers' own code (numba, pandas,
    # pyarrow) takes more than the tiny limit, so Dask's process-memory thresholds (spill,
    # pause, terminate) would act on that, not on the data
    settings = {"distributed.worker.memory.target": 0.6, "distributed.worker.memory.spill": False,
                "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}
    with dask.config.set(settings):
        cluster = local_cluster(2, dashboard_address=None, memory_limit=LIMIT, spill_directory=spill)
        client = distributed.Client(cluster, set_as_default=False)
    try:
        assert all(w["memory_limit"] == LIMIT for w in client.scheduler_info()["workers"].values())
        report = anonymize_file(lake, tmp_path / "out", QI, 5, seed=1, client=client, method="partitioned",
                                task_rows=20_000, partition_size=5_000, rows_per_file=50_000, keep=["id"])
        spilled = _spilled(client)
    finally:
        client.close()
        cluster.close()
    assert report.verified and report.k_anonymity.ok and report.rows.rows_out == N
    _check_release(tmp_path / "out", 5)
    # each worker could hold 10 MB in memory: both wrote to disk, together more than the raw QI bytes
    assert all(s["count"] > 0 for s in spilled.values()), spilled
    assert sum(s["bytes"] for s in spilled.values()) > N * len(QI) * 8, spilled
    assert spill.is_dir() and any(spill.iterdir())   # the workers' directory was the one asked for


def test_worker_memory_settings_on_every_entry(tmp_path):
    from daskmicro.cli import build_parser
    from daskmicro.config import RunConfig
    from daskmicro.workflow.workflow_spec import SpecError, parse_spec

    # CLI flags → the one run description
    args = build_parser().parse_args(["anonymize", "in/", "out/", "--qi", "a,b", "--k", "3", "--memory-limit",
                                      "3GiB", "--spill-dir", str(tmp_path)])
    cfg = RunConfig.from_args(args, ["a", "b"])
    assert cfg.memory_limit == 3 * 2 ** 30 and cfg.spill_directory == str(tmp_path)
    # workflow spec fields → the same
    doc = {"name": "s", "input": {"path": "in/"}, "qi": ["a", "b"], "k": 3, "output": {"path": "out/"},
           "cluster": {"memory_limit": "3GiB", "spill_directory": str(tmp_path)}}
    spec = parse_spec(doc, tmp_path)
    cfg = RunConfig.from_spec(spec.data)
    assert cfg.memory_limit == 3 * 2 ** 30 and cfg.spill_directory == str(tmp_path)
    # they do not change the release, so not its fingerprint (a re-run with other limits is a no-op)
    assert cfg.fingerprint_dict() == RunConfig.from_spec({**spec.data, "cluster": {}}).fingerprint_dict()
    # refused, in one line, where they cannot apply: a running cluster's workers keep their own
    with pytest.raises(ParameterError, match="LocalCluster"):
        RunConfig.build(qi=["a"], k=3, memory_limit="2GiB", scheduler="tcp://127.0.0.1:1")
    with pytest.raises(SpecError, match="memory_limit"):
        parse_spec({**doc, "cluster": {**doc["cluster"], "address": "tcp://h:8786"}}, tmp_path)
    with pytest.raises(SpecError, match="memory_limit"):
        parse_spec({**doc, "cluster": {"memory_limit": "lots"}}, tmp_path)
    with pytest.raises(ParameterError, match="memory_limit must be a size of at least 16 MiB"):
        RunConfig.build(qi=["a"], k=3, memory_limit="lots")
    pd.DataFrame({"a": np.arange(20.0), "b": np.arange(20.0) % 7}).to_parquet(tmp_path / "in.parquet")
    with pytest.raises(ParameterError, match="given client"):
        anonymize_file(tmp_path / "in.parquet", tmp_path / "o.parquet", ["a", "b"], 3, client=object(),
                       memory_limit="2GiB")
    assert not (tmp_path / "o.parquet").exists()
    # the incremental API: the same settings, the same refusals
    from daskmicro import anonymize_incremental

    survey = pd.DataFrame({"a": np.arange(40.0), "b": np.arange(40.0) % 7, "t": np.arange(40.0)})
    with pytest.raises(ParameterError, match="given client"):
        anonymize_incremental(survey, ["a", "b"], 3, nu=0.5, time_column="t", client=object(), memory_limit="2GiB")
    with pytest.raises(ParameterError, match="memory_limit must be a size of at least 16 MiB"):
        anonymize_incremental(survey, ["a", "b"], 3, nu=0.5, time_column="t", memory_limit="lots")


def test_the_default_limit_follows_the_task_size():
    from distributed.system import MEMORY_LIMIT

    from daskmicro.runtime.cluster import TASK_FACTOR, WORKER_BASE_BYTES, worker_memory_limit

    share = MEMORY_LIMIT // 2
    need = WORKER_BASE_BYTES + TASK_FACTOR * (400 << 20)
    assert worker_memory_limit(400 << 20, 2) == min(share, max(need, share // 2))
    assert worker_memory_limit(0, 2) == max(min(share, WORKER_BASE_BYTES), share // 2)
    assert worker_memory_limit(1 << 50, 2) == share     # never more than the machine's share
    assert worker_memory_limit(1, 1) >= worker_memory_limit(1, 4)
