"""Where the partitioned pipeline's distortion goes, against exact MDAV on the same records.

    python benchmarks/where_distortion.py --data census_like --n 1000000
    python benchmarks/where_distortion.py --data gaussian --n 1000000

Runs the pipeline's own stages (ingest, top cells, fan-out; default layout, no improvement) on an
in-process Dask cluster, keeps every record's top cell, partition and cell, and splits the SSE:

* **exact MDAV** on all records (cached by ``exact_reference.py``), exact MDAV inside each top cell
  (what the top-cell cuts cost) and the pipeline (MDAV inside each partition: what the partition
  cuts cost on top);
* the pipeline's **excess over exact MDAV, record by record** (‖x − its pipeline centroid‖² −
  ‖x − its exact centroid‖²), summed over the records of cells at a top-cell border, at a
  partition border inside a top cell, and inside partitions (a cell is at a border when one of its
  8 nearest cells by centroid belongs to another top cell / partition);
* **what MDAV's greedy order leaves**: exact MDAV improved by moves and swaps
  (:func:`daskmicro.kernels.improve.improve`), and the pipeline after the improvement stage at
  the balanced and high settings (each top cell's partitions jointly), with the same split of the
  remaining excess.

SSE is in the z-space of the whole data set (IL = 100·SSE/SST); times are single runs on the
shared machine.
"""

from __future__ import annotations

__import__("_common")  # first: one thread per process, before numpy is imported

import argparse
import time

import numpy as np

from daskmicro import mdav, standardize
from daskmicro.config import QUALITY
from daskmicro.kernels.improve import improve, improve_partitions
from daskmicro.kernels.macro import cell_stats
from exact_reference import DATA, exact_labels


def pipeline_layout(X, k):
    """(per-record top cell, partition, global cell id, fan-out parts and results) of the default pipeline."""
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster

    from daskmicro.config import DEFAULT_TASK_ROWS
    from daskmicro.graph.fanout import fan_out, top_cells
    from daskmicro.graph.ingest import ingest
    from daskmicro.graph.pipeline import PipelineConfig, plan_layout

    cols = [f"x{j:02d}" for j in range(X.shape[1])]
    ddf = dd.from_pandas(pd.DataFrame(X, columns=cols), npartitions=8)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cl, \
            Client(cl) as client:
        ing = ingest(client, ddf, cols)
        _, fcfg, task_rows = plan_layout(PipelineConfig(method="partitioned", k=k), ing, keep_parts=True)
        fo = fan_out(client, top_cells(client, ing, DEFAULT_TASK_ROWS, {}), fcfg, {})
        results, parts = client.gather(fo.results), client.gather(fo.parts)
    n = X.shape[0]
    top, part, cell = (np.empty(n, np.int64) for _ in range(3))
    offset = 0
    for i, (res, (t, *_)) in enumerate(zip(results, fo.partitions)):
        top[res.rowids], part[res.rowids] = t, i
        cell[res.rowids] = res.labels + offset
        offset += res.n_cells
    return top, part, cell, parts, results, fo.partitions


def per_record(Z, labels):
    size, sums, _ = cell_stats(Z, labels)
    return ((Z - (sums / size[:, None])[labels]) ** 2).sum(axis=1)


def border_cells(Z, cell, owner, L=8):
    """Per cell: True when one of its L nearest cells (by centroid) has another owner."""
    from scipy.spatial import cKDTree

    size, sums, _ = cell_stats(Z, cell)
    cen = sums / size[:, None]
    own = np.zeros(size.size, np.int64)
    own[cell] = owner
    _, idx = cKDTree(cen).query(cen, L + 1)
    return (own[idx] != own[:, None]).any(axis=1)


def split_excess(Z, cell, e_exact, top, part, sst):
    e = per_record(Z, cell) - e_exact
    at_top = border_cells(Z, cell, top)[cell]
    at_part = border_cells(Z, cell, part)[cell] & ~at_top
    inner = ~(at_top | at_part)
    return [(name, mask.mean(), 100 * e[mask].sum() / sst) for name, mask in
            (("top-cell border", at_top), ("partition border", at_part), ("inside partitions", inner))]


def improved_pipeline(parts, results, partitions, n, sweeps, neighbours, k):
    cell = np.empty(n, np.int64)
    offset = 0
    for t in sorted({p[0] for p in partitions}):
        idx = [i for i, p in enumerate(partitions) if p[0] == t]
        for res in improve_partitions([parts[i] for i in idx], [results[i] for i in idx], k, sweeps, neighbours):
            cell[res.rowids] = res.labels + offset
            offset += res.n_cells
    return cell


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", choices=sorted(DATA), default="census_like")
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args()
    n, k = int(a.n), a.k
    X = DATA[a.data](n, 0)
    Z = standardize(X)[0]
    sst = float((Z ** 2).sum())
    exact, _ = exact_labels(n, k, 0, a.data)
    e_exact = per_record(Z, exact)
    il = lambda labels: 100 * per_record(Z, labels).sum() / sst  # noqa: E731
    il_exact = 100 * e_exact.sum() / sst
    t0 = time.perf_counter()
    top, part, cell, parts, results, partitions = pipeline_layout(X, k)
    t_pipe = time.perf_counter() - t0
    t0 = time.perf_counter()
    top_mdav = np.empty(n, np.int64)
    offset = 0
    for t in np.unique(top):
        sel = np.flatnonzero(top == t)
        lab = mdav(Z[sel], k)
        top_mdav[sel] = lab + offset
        offset += int(lab.max()) + 1
    t_top = time.perf_counter() - t0
    print(f"{a.data}, n = {n:,}, k = {k}: {len(np.unique(top))} top cells, {len(partitions)} partitions; "
          f"pipeline layout {t_pipe:.1f} s, MDAV per top cell {t_top:.1f} s")
    print(f"{'partition':<52} {'IL':>8} {'× exact':>8}")
    rows = [("exact MDAV, all records", il_exact), ("exact MDAV inside each top cell", il(top_mdav)),
            ("pipeline: MDAV inside each partition (no improvement)", il(cell))]
    t0 = time.perf_counter()
    improved_exact = improve(Z, exact, k, sweeps=QUALITY["high"]["improve_sweeps"],
                             neighbours=QUALITY["high"]["improve_neighbours"])
    rows.append((f"exact MDAV + improvement (high, {time.perf_counter() - t0:.1f} s)", il(improved_exact)))
    improved = {}
    for q in ("balanced", "high"):
        t0 = time.perf_counter()
        improved[q] = improved_pipeline(parts, results, partitions, n, QUALITY[q]["improve_sweeps"],
                                        QUALITY[q]["improve_neighbours"], k)
        rows.append((f"pipeline + improvement ({q}, {time.perf_counter() - t0:.1f} s in one process)",
                     il(improved[q])))
    for label, v in rows:
        print(f"{label:<52} {v:8.4f} {v / il_exact:8.4f}")
    print(f"\nexcess IL over exact MDAV by where the record's cell lies ({'share of records'}, Δ IL):")
    for label, labels in [("pipeline", cell)] + [(f"pipeline + {q}", improved[q]) for q in improved]:
        parts_ = split_excess(Z, labels, e_exact, top, part, sst)
        print(f"  {label:<22} " + "; ".join(f"{name} {share:.1%}: {v:+.4f}" for name, share, v in parts_))


if __name__ == "__main__":
    main()
