"""Gather: each row's published values back to its input chunk, the release, its check.

The partition results stay on the workers.  Each group of consecutive top cells turns its
partitions into (row id, published values) pieces, one per input chunk — the values are the
row's cell centroid in original units, mapped back once per cell — and the task that publishes
an input chunk assembles its pieces (every row exactly once, or the run stops).  No task holds
the centroids of all cells
(a k-th of the data): a chunk's values are as large as its QIs, held by Dask and spilled like
any other result.  The release is a lazy Dask DataFrame in one global seeded order
(:mod:`daskmicro.release.publish`): each input partition — every non-QI column untouched —
gets its values in place of its QIs and is split by the key ranges of its rows' shuffle
keys, one range per output partition; each output partition gathers its range from every input
partition and sorts it by key.  The order depends only on the seed and the row ids, never on
the chunking or the workers, and the first rows of the release come from anywhere in the input.
Before it is handed out every input chunk's published rows are built once on the workers to
merge the tuple counts of the *published values* (all must be ≥ k) and the rows out (must equal
the rows in); nothing is kept — a writer builds the partitions again (deterministically) as it
writes them, and a file writer verifies them once more as written.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass

import numpy as np

from ..config import DEFAULT_TASK_ROWS
from ..kernels import assemble as kasm
from ..privacy.verify import (RowCheck, bucket_verdict, combine_verdicts, count_buckets, merge_tuple_counts,
                              split_tuple_counts, tuple_counts)
from ..release.publish import publish_chunk, release_bucket, split_chunk

__all__ = ["Published", "ReleaseOptions", "CellIds", "cell_ids", "chunk_centroids", "gather_release"]


@dataclass(frozen=True)
class ReleaseOptions:
    """How a pipeline's release is made: its seeded order (``seed``), whether the row id is
    published, whether the range of each partition's published values is taken for the report's
    figures, and whether the release is checked here (``check=False``: by a caller that verifies
    it as published, see :func:`gather_release`)."""

    seed: int
    keep_row_id: bool = False
    figures: bool = False
    check: bool = True


@dataclass
class Published:
    release: object               # lazy dask DataFrame (its graph holds the futures below)
    parts: list                   # its partitions, dask Delayed
    chunks: list                  # the release rows of each input chunk, in input order (Delayed): for a
                                  # caller that cuts the release itself (the run executor's release stage)
    values_per_chunk: list        # per input chunk, futures of its rows' published values (pieces, see chunk_centroids)
    cells: int
    min_cell_size: int
    max_cell_size: int
    sse: float                    # z-space, comparable to SST = n·m_used
    cell_size_counts: dict
    k_anonymity: object           # None: not checked here (gather_release's check=False)
    rows: RowCheck | None
    figures: list | None = None   # per partition, the range of its cells' published values (daskmicro.release.run_figures)


def _pieces_check(pieces, qi):
    """(rows, tuple counts) of one input chunk's published rows (its ``split_chunk`` pieces)."""
    return sum(len(f) for f, _ in pieces), merge_tuple_counts(*[tuple_counts(f, qi) for f, _ in pieces])


def _merge_checks(*checks):
    return sum(c[0] for c in checks), merge_tuple_counts(*[c[1] for c in checks])


def _split_check(check, n_buckets):
    """(rows, counts of hash bucket 0, 1, …) of a merged (rows, counts)."""
    return (check[0], *split_tuple_counts(check[1], n_buckets))


def _verdict(k, rows, *verdicts):
    return sum(rows), combine_verdicts(k, *verdicts)[0]


def bucketed_check(level, k: int, n_rows: int):
    """Delayed (rows, KAnonymityCheck) of the per-chunk (rows, counts) in ``level``: folded by 8
    once, cut into hash buckets (:func:`~daskmicro.privacy.verify.count_buckets`), each bucket
    merged and checked on its own, so no task holds the counts of the whole release."""
    import dask

    fold = dask.delayed(_merge_checks, pure=True)
    merge = dask.delayed(merge_tuple_counts, pure=True)
    n_buckets = count_buckets(n_rows)
    first = [fold(*level[i:i + 8]) for i in range(0, len(level), 8)]
    parts = [dask.delayed(_split_check, pure=True, nout=n_buckets + 1)(c, n_buckets) for c in first]
    verdicts = []
    for b in range(n_buckets):
        bucket = [p[b + 1] for p in parts]
        while len(bucket) > 1:
            bucket = [merge(*bucket[i:i + 8]) for i in range(0, len(bucket), 8)]
        verdicts.append(dask.delayed(bucket_verdict, pure=True)(bucket[0], k))
    return dask.delayed(_verdict, pure=True)(k, [p[0] for p in parts], *verdicts)


@dataclass
class CellIds:
    """Global cell numbering of a fan-out: per input chunk its rows' global cell ids (a future,
    :func:`cell_ids`) or the futures of its published-value pieces (:func:`chunk_centroids`), the
    centroid table in original units (future, or None), cells per partition, SSE and the
    cell-size histogram."""

    cells: list
    table: object
    counts: list
    sse: float
    hist: dict


#: Top cells one gather task maps back to the input chunks, in top-level tasks (consecutive top
#: cells of up to this many times ``task_rows`` records taken together): a task's size, whatever
#: n, and few enough pieces per chunk (groups × chunks in all) that each piece is worth holding or
#: spilling on its own.
GATHER_TASKS = 4


def _top_groups(fo, group_rows: int) -> list:
    """Partition indices of consecutive top cells, grouped up to ``group_rows`` rows (0: each
    top cell alone)."""
    by_top: dict[int, list] = {}
    for i, (t, _g, _side, rows) in enumerate(fo.partitions):
        by_top.setdefault(t, []).append((i, rows))
    groups, current, rows = [], [], 0
    for t in sorted(by_top):
        current += [i for i, _ in by_top[t]]
        rows += sum(r for _, r in by_top[t])
        if rows >= group_rows:
            groups.append(current)
            current, rows = [], 0
    return groups + ([current] if current else [])


def _pieces(client, ing, fo, by_bounds, head, group_rows: int) -> list:
    """Per input chunk of ``ing``, the futures of its (row ids, values) pieces, one per group of
    top cells: ``by_bounds(bounds, *head(indices), *results)`` of each group's partitions (its
    pieces, one per chunk)."""
    bounds = np.array(list(ing.row0s) + [ing.n], dtype=np.int64)
    splits = [client.submit(by_bounds, bounds, *head(idx), *[fo.results[i] for i in idx])
              for idx in _top_groups(fo, group_rows)]
    # Every piece taken out at once, group by group (submitted in that order, run in that order), so
    # that each group's split is read once, right after it is made, and then freed: one copy of the
    # values held.  Taken chunk by chunk instead, every piece would need another group's split
    # back from the spill directory (at 100M: 100 groups of 112 MB, 200 chunks).
    n_chunks = len(ing.row0s)
    # one batch per group (client.map): one message to the scheduler instead of one per piece
    taken = [client.map(operator.getitem, [s] * n_chunks, range(n_chunks)) for s in splits]
    client.gather(client.map(len, splits))  # made before the stage ends; a failed task raises here
    return [[group[b] for group in taken] for b in range(n_chunks)]


def _numbering(client, fo):
    """(cells per partition, their first global ids, SSE, cell-size histogram) of a fan-out."""
    summaries = client.gather(client.map(kasm.partition_summary, fo.results))
    counts = [s[0] for s in summaries]
    sse = float(sum(s[1] for s in summaries))
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    hist: dict[int, int] = {}
    for _, _, (sizes, cnt) in summaries:
        for s_, c_ in zip(sizes.tolist(), cnt.tolist()):
            hist[s_] = hist.get(s_, 0) + c_
    return counts, offsets, sse, hist


def cell_ids(client, ing, fo) -> CellIds:
    """Number the cells of ``fo`` globally (partition order) and give every row of every input chunk
    of ``ing`` its global cell id, with the table of all centroids (the incremental survey's base,
    whose late records are matched against every centroid); the partition results stay in
    ``fo.results``."""
    counts, offsets, sse, hist = _numbering(client, fo)
    mean_v, std_v = ing.mean[ing.varying], ing.std[ing.varying]
    # the centroids computed where each partition's results are: only they travel to the table
    table = client.submit(kasm.join_table, *client.map(kasm.centroid_piece, fo.results, mean=mean_v, std=std_v))
    pieces = _pieces(client, ing, fo, kasm.cells_by_bounds, lambda idx: (offsets[idx],), 0)
    cells = [client.submit(kasm.assemble_chunk, int(row0), int(length), *p)
             for row0, length, p in zip(ing.row0s, ing.lengths, pieces)]
    del pieces
    client.gather(client.map(len, cells))  # surfaces assembly errors here
    client.gather(client.submit(len, table))
    return CellIds(cells=cells, table=table, counts=counts, sse=sse, hist=hist)


def chunk_centroids(client, ing, fo, task_rows: int) -> CellIds:
    """Give every row of every input chunk of ``ing`` its published values (its cell's centroid in
    original units, rows × varying QIs): per input chunk the futures of its pieces, one per group
    of top cells, assembled (every row exactly once) by the task that publishes the chunk;
    ``table`` None.  No task holds the centroids of all cells, which grow with the data (a k-th
    of it); a piece is held once, spilled by Dask like any result, and read once by the task that
    publishes its chunk.  The partition results stay in ``fo.results``."""
    counts, _offsets, sse, hist = _numbering(client, fo)
    mean_v, std_v = ing.mean[ing.varying], ing.std[ing.varying]
    pieces = _pieces(client, ing, fo, kasm.values_by_bounds, lambda idx: (mean_v, std_v), GATHER_TASKS * task_rows)
    return CellIds(cells=pieces, table=None, counts=counts, sse=sse, hist=hist)


def _chunk_values(part, row0: int, pieces):
    """The published values of an input chunk's rows, in row order, from its pieces."""
    return kasm.assemble_chunk(int(row0), len(part), *pieces)


def _split_pieces(part, row0: int, *pieces, columns, seed: int, n_buckets: int):
    """:func:`~daskmicro.release.publish.split_chunk` of an input chunk given its pieces."""
    return split_chunk(part, _chunk_values(part, row0, pieces), int(row0), columns, seed, n_buckets)


def _publish_pieces(part, row0: int, *pieces, columns):
    """:func:`~daskmicro.release.publish.publish_chunk` of an input chunk given its pieces."""
    return publish_chunk(part, _chunk_values(part, row0, pieces), columns)


def gather_release(client, ddf, qi, ing, fo, release: ReleaseOptions, timings: dict,
                   task_rows: int = DEFAULT_TASK_ROWS) -> Published:
    """Number cells globally, build the (lazy) release of ``ddf`` and verify it at the cell size
    ``fo.k``, in the order and with the options of ``release``; with ``release.figures``
    the range of each partition's published values is taken from its cells (the bins of the
    report's release figures, :func:`daskmicro.release.run_figures.cells_range`).

    ``release.check=False``: no release check here, for a caller that verifies the release as it publishes
    it (the run executor checks the written files, or the collected frame, before any commit): the
    release is then made once, not twice.  ``k_anonymity`` and ``rows`` are None.  ``task_rows``: the
    run's top-level task size, which sets the gather's (:data:`GATHER_TASKS`).

    Consumes ``fo.results``: once every input chunk has its rows' published values the partition
    results are released (``fo.results`` is set to None).
    """
    import dask
    import dask.dataframe as dd

    seed, keep_row_id = release.seed, release.keep_row_id
    t0 = time.perf_counter()
    ids = chunk_centroids(client, ing, fo, task_rows)
    values, counts, sse, hist = ids.cells, ids.counts, ids.sse, ids.hist
    varying = [c for c, v in zip(qi, ing.varying) if v]
    ranges = None
    if release.figures:  # the range of the published values, from the cells (where they are)
        from ..release.run_figures import cells_range

        ranges = client.gather(client.map(cells_range, fo.results, qi=list(qi), mean=ing.mean, std=ing.std,
                                          varying=ing.varying, pure=False))
    fo.results = None  # the rows' published values are all the release needs now
    timings["gather"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    n_out = len(ing.row0s)  # as many output partitions (key ranges) as input partitions
    split = dask.delayed(_split_pieces, pure=True)
    pieces = [
        split(o, int(row0), *v, columns=varying, seed=seed, n_buckets=n_out)
        for o, v, row0 in zip(ddf.to_delayed(), values, ing.row0s)
    ]
    bucket = dask.delayed(release_bucket, pure=True)
    parts = [bucket(*[p[b] for p in pieces], seed=seed, keep_row_id=keep_row_id) for b in range(n_out)]
    rows = k_check = None
    if not release.check:
        del pieces
    else:
        rows, k_check = _check_release(client, pieces, qi, fo.k, ing.n)
        del pieces
        timings["verify"] = time.perf_counter() - t0

    publish = dask.delayed(_publish_pieces, pure=True)
    chunks = [publish(o, int(row0), *v, columns=varying) for o, v, row0 in zip(ddf.to_delayed(), values, ing.row0s)]
    empty = split_chunk(ddf._meta, np.empty((0, len(varying))), 0, varying, seed, 1)
    meta = release_bucket(*empty, seed=seed, keep_row_id=keep_row_id)
    release_ddf = dd.from_delayed(parts, meta=meta, verify_meta=False)
    return Published(
        release=release_ddf,
        parts=parts,
        chunks=chunks,
        values_per_chunk=values,
        cells=int(sum(counts)),
        min_cell_size=min(hist),
        max_cell_size=max(hist),
        sse=sse,
        cell_size_counts=dict(sorted(hist.items())),
        k_anonymity=k_check,
        rows=None if rows is None else RowCheck(ok=int(rows) == ing.n, rows_in=int(ing.n), rows_out=int(rows)),
        figures=ranges,
    )


def _check_release(client, pieces, qi, k: int, n_rows: int):
    """(rows, k-anonymity check) of the published rows ``pieces`` (see :func:`gather_release`)."""
    import dask

    # The check counts the published rows where they are made, piece by piece: the same rows and
    # values as the output partitions (which only concatenate and reorder them), without holding
    # every input chunk's pieces at once, as assembling the key ranges would.  One graph, so that
    # dask folds each count in as it comes.
    check = dask.delayed(_pieces_check, pure=True)
    verdict = bucketed_check([check(p, list(qi)) for p in pieces], k, n_rows)
    return client.compute(verdict).result()
