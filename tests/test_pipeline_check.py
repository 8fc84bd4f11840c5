"""The pipeline's own release check is optional (``check=False``): the run executor verifies the
release as it publishes it, so the pipeline need not make the release a second time to count it.
Without the check the release, the cells and the report's figures are the same."""

from __future__ import annotations

import numpy as np
import pandas as pd

import dask.dataframe as dd

from daskmicro.datasets import census_like
from daskmicro.graph.pipeline import PipelineConfig, ReleaseOptions, run_pipeline

K = 3


def _same(a, b, where="figures"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


def test_without_its_check_the_pipeline_publishes_the_same_release_and_figures(client):
    df = census_like(3_000, seed=4)
    qi = list(df.columns)
    out = {}
    for check in (True, False):
        cfg = PipelineConfig(method="partitioned", k=K, task_rows=1_500, partition_size=600, K=200,
                             improve_sweeps=2, improve_neighbours=4)
        ddf = dd.from_pandas(df, npartitions=3, sort=False)
        pub, details = run_pipeline(client, ddf, qi, cfg, ReleaseOptions(7, keep_row_id=True, figures=True, check=check))
        release = client.compute(pub.release).result().sort_values("row_id").reset_index(drop=True)
        out[check] = (release, pub, details)
    (r1, p1, d1), (r0, p0, d0) = out[True], out[False]
    pd.testing.assert_frame_equal(r1, r0)
    assert p1.k_anonymity.ok and p1.rows.ok and "verify" in d1["timings"]
    assert p0.k_anonymity is None and p0.rows is None and "verify" not in d0["timings"]
    assert (p1.cells, p1.sse, p1.cell_size_counts) == (p0.cells, p0.sse, p0.cell_size_counts)
    assert d1["figures"] is not None
    _same(d1["figures"], d0["figures"])
    # the figures' bins: the range of the published values, from the cells
    for j, c in enumerate(qi):
        low = min(r[1][1][j] for r in d0["figures"])
        high = max(r[1][2][j] for r in d0["figures"])
        assert (low, high) == (r0[c].min(), r0[c].max()), c
    # the release is k-anonymous either way (checked here on the published values)
    assert r0.groupby(qi).size().min() >= K and len(r0) == len(df)
