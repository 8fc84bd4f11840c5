"""Dask sees the real size of what daskmicro's tasks return.

A worker spills by the sizes Dask measures, and the scheduler places tasks near their large inputs
by the same figures.  Dask's fallback for an object it does not know is ``sys.getsizeof``, so
every class a task returns must count its arrays there.  Checked over shapes and dtypes
(hypothesis) on the objects themselves, and on a real LocalCluster of worker processes: the
bytes the scheduler records for the top cells and partition results of a pipeline run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from dask.sizeof import sizeof
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.graph.incremental import Chunk, StageResult
from daskmicro.kernels.cells import PartitionResult
from daskmicro.kernels.incremental_parts import centroid_index
from daskmicro.kernels.partition import TopCell, concat_pieces, macroaggregate, run_partition
from daskmicro.kernels.sized import deep_nbytes

DTYPES = st.sampled_from([np.float64, np.float32, np.int64, np.int32, np.int8])


def _arr(rng, shape, dtype):
    return (rng.standard_normal(shape) * 10).astype(dtype)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 5_000), m=st.integers(1, 20), dtype=DTYPES, weights=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_top_cells_and_partition_results_report_their_arrays(n, m, dtype, weights, seed):
    rng = np.random.default_rng(seed)
    top = TopCell(rowids=np.arange(n, dtype=np.int64), Z=_arr(rng, (n, m), dtype),
                  group=np.zeros(n, np.int64), macro=np.zeros(n, np.int32),
                  weights=rng.random(n) if weights else None)
    arrays = top.rowids.nbytes + top.Z.nbytes + top.group.nbytes + top.macro.nbytes
    arrays += top.weights.nbytes if weights else 0
    assert arrays <= sizeof(top) <= arrays + 4096
    cells = max(1, n // 10)
    res = PartitionResult(rowids=top.rowids, labels=np.zeros(n, np.int64), size=np.ones(cells, np.int64),
                          centroid=_arr(rng, (cells, m), np.float64), sse=np.zeros(cells),
                          info={"pcl": {"iterations": [1.0] * 5}})
    arrays = res.rowids.nbytes + res.labels.nbytes + res.size.nbytes + res.centroid.nbytes + res.sse.nbytes
    assert arrays <= sizeof(res) <= arrays + 4096
    # a list of results (the improvement stage returns one per top cell) adds up its items
    assert sizeof([res, res]) >= 2 * arrays


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 3_000), m=st.integers(1, 8), seed=st.integers(0, 2 ** 16))
def test_incremental_objects_report_their_arrays(n, m, seed):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.standard_normal(n), "s": [f"r{i}" for i in range(n)]})
    X = rng.standard_normal((n, m))
    assert sizeof(Chunk(frame=frame, X=X)) >= X.nbytes + sizeof(frame)
    labels = np.zeros(n, np.int64)
    assert sizeof(StageResult(labels=labels, start=0.0, end=1.0)) >= labels.nbytes
    res = PartitionResult(rowids=np.arange(n), labels=np.arange(n) // 2, size=np.full((n + 1) // 2, 2),
                          centroid=X[: (n + 1) // 2], sse=np.zeros((n + 1) // 2))
    index = centroid_index(res)
    assert sizeof(index) >= index.partition.nbytes + index.local.nbytes + index.tree.data.nbytes


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 2_000), buckets=st.integers(1, 9), seed=st.integers(0, 2 ** 16))
def test_tuple_counts_report_their_arrays_and_buckets_hold_their_own(n, buckets, seed):
    from daskmicro.privacy.verify import split_tuple_counts, tuple_counts

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.integers(0, 50, n).astype(float), "s": rng.choice(["x", "y"], n)})
    counts = tuple_counts(frame, ["a", "s"])
    arrays = counts.hashes.nbytes + counts.counts.nbytes + counts.tuples.nbytes
    assert arrays <= sizeof(counts) <= arrays + 1024
    parts = split_tuple_counts(counts, buckets)
    assert sum(int(p.counts.sum()) for p in parts) == n
    if buckets > 1:   # each bucket owns its arrays: spilling one frees it
        assert all(p.hashes.base is None and p.tuples.base is None for p in parts)


def test_deep_nbytes_counts_nested_containers():
    a = np.zeros(1000)
    assert deep_nbytes([a, (a, {"x": a})]) >= 3 * a.nbytes
    assert deep_nbytes(None) > 0 and deep_nbytes("abc") > 0


def test_the_scheduler_records_the_real_bytes_of_top_cells_and_results(client):
    rng = np.random.default_rng(0)
    pieces = [(np.arange(i * 20_000, (i + 1) * 20_000, dtype=np.int64), rng.standard_normal((20_000, 6)))
              for i in range(3)]
    top = client.submit(concat_pieces, *pieces)
    cut = client.submit(macroaggregate, top, partition_size=10_000, K=None)
    part = client.submit(lambda t: (t.rowids, t.Z), cut)
    res = client.submit(run_partition, part, "mdav", 5)
    res.result()
    held = client.nbytes(summary=False)
    z_bytes = 60_000 * 6 * 8
    assert held[top.key] >= z_bytes + 60_000 * 8
    assert held[cut.key] >= z_bytes + 60_000 * 8
    assert held[res.key] >= 2 * 60_000 * 8
