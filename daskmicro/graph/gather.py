"""Gather: global cell ids, centroids back to the input chunks, the release, its verification.

The partition results stay on the workers.  Each top cell turns its partitions into per-row
(global cell id, centroid in original units) and splits them by input chunk; each input chunk
assembles its rows (all of them, exactly once, or the run stops), and its release partition is
built from the original partition — every non-QI column untouched — with the rows shuffled by
seeded keys.  Before the release is handed out the tuple counts of the *published values* are
merged on the workers and must all be ≥ k, and the rows out must equal the rows in.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass

import numpy as np

from ..kernels import publish as kpub
from ..privacy.verify import RowCheck, check_tuple_counts, merge_tuple_counts, tuple_counts
from ..publish import publish_chunk

__all__ = ["Published", "publish"]


@dataclass
class Published:
    release: object               # dask DataFrame backed by futures
    futures: list                 # its partitions
    cells: int
    min_cell_size: int
    max_cell_size: int
    sse: float                    # z-space, comparable to SST = n·m_used
    cell_size_counts: dict
    k_anonymity: object
    rows: RowCheck


def _cell_sizes(res):
    return res.size


def _cell_sse(res):
    return float(res.sse.sum())


def _tree_reduce(client, futures, combine, arity: int = 8):
    while len(futures) > 1:
        futures = [client.submit(combine, *futures[i:i + arity]) for i in range(0, len(futures), arity)]
    return futures[0]


def publish(client, ddf, qi, ing, fo, k: int, seed: int, keep_row_id: bool, timings: dict) -> Published:
    t0 = time.perf_counter()
    sizes = client.gather(client.map(_cell_sizes, fo.results))
    sse = float(sum(client.gather(client.map(_cell_sse, fo.results))))
    counts = [s.size for s in sizes]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    all_sizes = np.concatenate(sizes)

    varying = [c for c, v in zip(qi, ing.varying) if v]
    mean_v, std_v = ing.mean[ing.varying], ing.std[ing.varying]
    bounds = np.array(list(ing.row0s) + [ing.n], dtype=np.int64)
    by_top: dict[int, list] = {}
    for i, (t, *_rest) in enumerate(fo.partitions):
        by_top.setdefault(t, []).append(i)
    splits = []
    for t in sorted(by_top):
        idx = by_top[t]
        pub = client.submit(kpub.top_publication, offsets[idx], mean_v, std_v, *[fo.results[i] for i in idx])
        splits.append(client.submit(kpub.split_by_bounds, pub, bounds))
    chunks = []
    for b, (row0, length) in enumerate(zip(ing.row0s, ing.lengths)):
        pieces = [client.submit(operator.getitem, s, b) for s in splits]
        chunks.append(client.submit(kpub.assemble_chunk, int(row0), int(length), len(varying), *pieces))

    originals = client.compute(ddf.to_delayed())
    release = client.map(
        publish_chunk, originals, chunks, ing.row0s,
        columns=varying, seed=seed, keep_row_id=keep_row_id,
    )
    client.gather(client.map(len, release))  # surfaces assembly errors here
    del chunks, originals
    timings["gather"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    rows_out = int(sum(client.gather(client.map(len, release))))
    merged = _tree_reduce(client, client.map(tuple_counts, release, qi=list(qi)), merge_tuple_counts)
    k_check = client.submit(check_tuple_counts, merged, k).result()
    timings["verify"] = time.perf_counter() - t0

    import dask.dataframe as dd

    meta = client.submit(_empty_like, release[0]).result()
    release_ddf = dd.from_delayed(release, meta=meta, verify_meta=False)
    uniq, cnt = np.unique(all_sizes, return_counts=True)
    return Published(
        release=release_ddf,
        futures=release,
        cells=int(all_sizes.size),
        min_cell_size=int(all_sizes.min()),
        max_cell_size=int(all_sizes.max()),
        sse=sse,
        cell_size_counts={int(u): int(c) for u, c in zip(uniq, cnt)},
        k_anonymity=k_check,
        rows=RowCheck(ok=rows_out == ing.n, rows_in=int(ing.n), rows_out=rows_out),
    )


def _empty_like(df):
    return df.iloc[:0]
