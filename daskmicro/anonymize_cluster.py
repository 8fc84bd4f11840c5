""":func:`daskmicro.anonymize` on a Dask cluster: validation, cluster choice, report.

The work itself is :func:`daskmicro.graph.pipeline.run_pipeline`; this module turns the user's
arguments into its configuration and its result into a release and a :class:`Report`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

from .anonymize import ROW_ID, _check_frame, _check_pca_options, _check_qi, _is_dask_frame
from .cluster import cluster_client
from .errors import InputError, ParameterError
from .graph.pipeline import DEFAULT_MAX_TASK_ROWS, DEFAULT_TASK_ROWS, PipelineConfig, run_pipeline
from .report.run import Report

__all__ = ["anonymize_on_cluster", "PANDAS_CHUNK_ROWS"]

#: Rows per partition when a pandas DataFrame is handed to the cluster.
PANDAS_CHUNK_ROWS = 250_000


def _default_client():
    try:
        from distributed import default_client

        return default_client()
    except ValueError:
        return None


def anonymize_on_cluster(df, qi, k, method, energy_loss, n_components, seed, keep_row_id, options, client, progress=None,
                         pcl_options=None):
    K, nu, partition_size, task_rows, max_task_rows, sse_threshold = options
    refine, refine_iter, macro, macro_iter = pcl_options or (None, None, "mdav", None)
    pandas_in = isinstance(df, pd.DataFrame)
    if pandas_in:
        n = _check_frame(df)
        ddf = df  # scattered to the cluster below, once it is known
    elif _is_dask_frame(df):
        ddf = df
    else:
        raise InputError(f"input must be a pandas or Dask DataFrame, got {type(df).__name__}")
    qi = _check_qi(ddf, qi)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
        raise ParameterError(f"k must be an integer ≥ 2, got {k!r}")
    if method == "auto":
        method = "partitioned"
    energy_loss, n_components = _check_pca_options(method, energy_loss, n_components)
    if keep_row_id and ROW_ID in ddf.columns:
        raise ParameterError(f"keep_row_id: the input already has a column named {ROW_ID!r}")
    cfg = PipelineConfig(
        method=method, k=int(k), K=K, nu=nu, partition_size=partition_size,
        task_rows=task_rows or DEFAULT_TASK_ROWS, max_task_rows=max_task_rows or DEFAULT_MAX_TASK_ROWS,
        energy_loss=energy_loss, n_components=n_components, sse_threshold=sse_threshold,
    )
    cfg.refine, cfg.macro = refine, macro
    if refine_iter is not None:
        cfg.refine_iter = refine_iter
    if macro_iter is not None:
        cfg.macro_iter = macro_iter
    client = client or _default_client()
    if client is None and not pandas_in:
        # the release's graph holds futures (cell ids, centroids): the cluster must outlive this call (it becomes the
        # default client, as a bare distributed.Client() would)
        from distributed import Client

        from .cluster import local_cluster

        client = Client(local_cluster())
    with cluster_client(client) as c:
        if pandas_in:
            ddf = _scattered_frame(c, df, n)
        pub, details = run_pipeline(c, ddf, qi, cfg, seed, keep_row_id, progress)
        pub.k_anonymity.raise_if_failed()
        pub.rows.raise_if_failed()
        release = pub.release
        if pandas_in:
            # the partitions are consecutive key ranges: concatenated, the rows are in the global seeded order
            release = pd.concat(c.gather(c.compute(pub.parts)), ignore_index=True)
    varying = [c for c in qi if c not in details["constant_columns"]]
    dtypes = ddf.dtypes
    changes = {c: {"from": str(dtypes[c]), "to": "float64"} for c in varying if not ptypes.is_float_dtype(dtypes[c])}
    t = details["timings"]
    pca = details.get("pca") or {}
    report = Report(
        n=details["n"],
        m=len(qi),
        m_used=details["m_used"],
        k=int(k),
        method=method,
        qi=list(qi),
        cells=pub.cells,
        min_cell_size=pub.min_cell_size,
        max_cell_size=pub.max_cell_size,
        information_loss=details["information_loss"],
        seconds=sum(t.get(s, 0.0) for s in ("top_level", "macroaggregation", "split", "fan_out", "refine")),
        seed=seed,
        constant_columns=details["constant_columns"],
        dtype_changes=changes,
        energy_loss=energy_loss,
        n_components=pca.get("n_components"),
        eigenvalues=pca.get("eigenvalues"),
        pca_energy_loss=pca.get("energy_loss"),
        k_anonymity=pub.k_anonymity,
        rows=pub.rows,
        keep_row_id=bool(keep_row_id),
        pipeline=details,
        timings=dict(t),
        cell_size_counts=pub.cell_size_counts,
        macrocell_sse=details["macrocell_sse"] if details["macrocells"] > 1 else None,
        nu=details["nu"],
        n_distal=details["distal_macrocells"],
    )
    return release, report


def _scattered_frame(client, df: pd.DataFrame, n: int):
    """``df`` as a Dask DataFrame whose partitions live on the workers (sent once, not in graphs)."""
    import dask.dataframe as dd

    frame = df.reset_index(drop=True)
    step = math.ceil(n / max(1, math.ceil(n / PANDAS_CHUNK_ROWS)))
    futures = client.scatter([frame.iloc[i:i + step] for i in range(0, n, step)], hash=False)
    return dd.from_delayed(futures, meta=frame.iloc[:0], verify_meta=False)
