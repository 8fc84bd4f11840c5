"""Incremental runs whose release is made while the survey is still open (``increment="nn-fixed"``).

The two stages of Rebollo-Monedero et al., *Incremental k-Anonymous Microaggregation in Large-Scale
Electronic Surveys With Optimized Scheduling* (IEEE Access 2018;
§III-B) with the nearest-neighbour increment of §IV-D in its fixed-centroid form (§III-B.6): a late
record joins the base cell of its nearest centroid and publishes that centroid, which is *not*
updated.  A base cell therefore only grows, and every base row publishes, before the close, the value
it has in the final release.  That moves almost all the work before the close::

    base stage (submitted when 1 − ν of the records are in):
        the partitioned pipeline's cells (:func:`~daskmicro.graph.incremental_pipeline.base_cells`)
        ─► global cell ids, centroid table ─► every base row published (centroids in, split by the
        key range of its seeded shuffle key) and counted (rows, tuple counts of the published values)

    late files, as they land once the base stage is done:
        read ─► z-scored like the base ─► nearest base centroid ─► published and counted the same way;
        the counts are added to the running total (a cost in the late rows only)

    meanwhile, on the workers: the pieces of each key range merged — the base chunks' into one, every
        :data:`MERGE_LATE` late files' into one — so that the close has a few pieces per range to fetch

    at the close: the files not handled yet (the last ones), the verdict on the merged counts
    (every published tuple ≥ k, rows out = rows in), the release assembled from the pieces.

The release is one Dask DataFrame whose output partitions are key ranges of the seeded order, each
the base and late pieces of its range sorted by key: late rows sit among the base rows exactly as in
a one-pass release (no file, partition or position tells them apart), and the order depends only on
the seed and the row ids (base rows in arrival order, then late rows in the order they were
handled).  Only the centroids left as they are distinguish this release from §IV-D's NN increment.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..io.survey import arrival_name, arrival_rows
from ..kernels import incremental_parts as kip
from ..privacy.verify import (RowCheck, add_tuple_counts, check_tuple_counts, counts_fingerprint, merge_tuple_counts,
                              tuple_counts)
from ..release.publish import release_bucket, replace_qi, split_chunk
from ..schedule_model import critical_ratio_numeric
from .gather import cell_ids
from .incremental import StageResult, read_chunk
from .incremental_pipeline import PipelineIncrementalGraph, base_cells, calibrate_pipeline, information_loss_of

__all__ = ["FixedIncrementalGraph", "BaseRelease", "OutputLayout", "BASE_TIME_MARGIN", "PROBE_FRACTION", "calibrate_fixed",
           "head_start_ratio", "merge_pieces", "merged_layout", "MERGE_LATE", "publish_base", "publish_chunk",
           "publish_late", "add_counted", "FIXED_INCREMENTS"]

#: Increments whose release is published before the close (partitioned base only).
FIXED_INCREMENTS = ("nn-fixed",)
#: Without ν, the late path of a fixed increment is timed on this fraction of the survey's first records.
PROBE_FRACTION = 1 / 16
#: ν of a fixed increment from a calibrated time model: the base stage and the late path are planned as
#: if they took this many times their predicted time, so that both end before the close (an overrun
#: delays the release by the late records still to publish; a larger ν only costs distortion).  On the
#: shared 2-core machine the base stage took 0.6–1.6 × its prediction (benchmarks/README.md).
BASE_TIME_MARGIN = 1.5
#: Late files whose pieces are merged, key range by key range, while the survey is open: an output
#: partition is then built at the close from about (late files) / MERGE_LATE + MERGE_LATE pieces, not
#: one per late file (thousands of small dependencies at the close at a few million records).
MERGE_LATE = 16


@dataclass(frozen=True)
class OutputLayout:
    """How a chunk of records is published and counted: the varying QI columns published as
    centroids (``columns``), the QIs counted (``qi``), and the output partitions — ``n_out`` key
    ranges of the order seeded by ``seed``."""

    columns: list
    qi: list
    seed: int
    n_out: int


def publish_chunk(chunk, cells, table, row0: int, layout: OutputLayout):
    """One chunk of records published (``cells``: global cell id of each row) and counted:
    (pieces per output partition, (rows, tuple counts of the published QI values))."""
    pieces = split_chunk(chunk.frame, table[cells], int(row0), layout.columns, layout.seed, layout.n_out)
    counts = merge_tuple_counts(*[tuple_counts(f, layout.qi) for f, _ in pieces])
    return pieces, (sum(len(f) for f, _ in pieces), counts)


def publish_late(chunk, tree, table, row0: int, z: kip.ZScore, layout: OutputLayout):
    """A chunk of late records z-scored like the base (``z``), joined to their nearest base cell and
    published with its (fixed) centroid: (pieces, (rows, tuple counts), column stats for the
    information loss)."""
    late = kip.zscore_late(chunk, layout.qi, int(row0), z.mean, z.std, z.varying)
    cells, stats = kip.nearest_cells(tree, late)
    pieces, counted = publish_chunk(chunk, cells, table, row0, layout)
    return pieces, counted, stats


def add_counted(total, *parts):
    """(rows, tuple counts, column stats) of ``total`` with those of ``parts`` added."""
    rows, counts, stats = total
    for part in parts:
        rows += part[0]
        counts = add_tuple_counts(counts, part[1])
        stats = stats + part[2]
    return rows, counts, stats


def _sum_stats(*stats):
    return np.sum(stats, axis=0)


def _counted_base(stats, *counted):
    rows = sum(c[0] for c in counted)
    return rows, merge_tuple_counts(*[c[1] for c in counted]), stats


def _fingerprint_of(total) -> int:
    return counts_fingerprint(total[1])


def _verdict(total, k: int):
    """(rows out, k-anonymity check, cell-size histogram of the published tuples, column stats)."""
    rows, counts, stats = total
    sizes, freq = np.unique(counts.counts, return_counts=True)
    return rows, check_tuple_counts(counts, k), dict(zip(sizes.tolist(), freq.tolist())), stats


def _first_rows(chunk: list, need: int) -> list:
    """The shortest prefix of a source's chunk (Parquet paths, or frames) holding ``need`` records."""
    out, rows = [], 0
    for part in chunk:
        if rows >= need:
            break
        if isinstance(part, pd.DataFrame):
            part = part.iloc[:need - rows]
            rows += len(part)
        else:
            rows += arrival_rows(part)
        out.append(part)
    return out


def _piece(chunk, a: int, b: int, qi: list):
    """Rows a … b − 1 of a chunk, as a chunk of their own."""
    return read_chunk(chunk.frame.iloc[a:b].reset_index(drop=True), qi)


def _bucket_piece(result, b: int):
    """Output partition ``b``'s piece of a published chunk's (pieces, …)."""
    return result[0][b]


def _merged(*pieces):
    """One (frame, row ids) piece of a key range from several; the key order is made once, at the close
    (:func:`~daskmicro.release.publish.release_bucket`), so the order they come in does not matter."""
    return pd.concat([p[0] for p in pieces], ignore_index=True), np.concatenate([p[1] for p in pieces])


def merge_pieces(client, lists: list) -> list:
    """Futures of the pieces of each key range of ``lists`` (per published chunk, one future per key
    range) merged into one per key range, on the workers; returns without waiting.  Key range ``b``
    is merged on the ``b``-th worker (cyclically, by address), every time: each range's pieces
    gather on one worker while the survey is open, so that the close builds and writes each output
    partition where its records already are (another worker takes over if that one is gone)."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    where = [{"workers": workers[b % len(workers)], "allow_other_workers": True} if workers else {}
             for b in range(len(lists[0]))]
    return [client.submit(_merged, *[p[b] for p in lists], **where[b]) for b in range(len(lists[0]))]


def merged_layout(client, pieces: list, merged: int) -> tuple:
    """The release's pieces once more late files are published (``pieces``: per published chunk or
    merged group, one future per key range; ``merged``: how many leading entries are merged groups):
    the late files not merged yet merged into one once there are :data:`MERGE_LATE` of them (a copy of
    the late records only: the base's piece is never copied again).  Returns (pieces, merged); never waits."""
    if len(pieces) - merged < MERGE_LATE:
        return pieces, merged
    return pieces[:merged] + [merge_pieces(client, pieces[merged:])], merged + 1


def _late_stats(result):
    return result[1][0], result[1][1], result[2]


@dataclass
class BaseRelease:
    """The base stage's release, made before the close: the pieces of every base chunk (futures of
    (pieces, counted)), the centroid table and nearest-centroid index, the running count."""

    pieces: list           # per published chunk (base, then late), futures of its piece of each key range
    table: object
    tree: object
    total: object          # future of (rows, tuple counts, column stats)
    columns: list          # varying QI columns (published as centroids)
    n_out: int             # output partitions: key ranges of the seeded order
    meta: object           # future of an empty frame of the records' columns


def _empty(chunk):
    return chunk.frame.iloc[:0]


def publish_base(client, base, qi: list, seed: int, merge: bool = True) -> BaseRelease:
    """Every base row published (its cell's centroid in original units, split by key range) and
    counted; returns once the count is made (with ``merge``, the pieces of each key range are merged
    into one afterwards, on the workers).  Releases the partition results and parts."""
    ing, fo = base.ing, base.fo
    t0 = time.perf_counter()
    ids = cell_ids(client, ing, fo)
    columns = [q for q, v in zip(qi, ing.varying) if v]
    n_out = len(ing.row0s)  # as many output partitions (key ranges) as base chunks
    tree = client.submit(kip.fixed_index, *fo.results)
    stats = client.submit(_sum_stats, *[client.submit(kip.result_stats, p, r) for p, r in zip(fo.parts, fo.results)])
    layout = OutputLayout(columns, list(qi), seed, n_out)
    pieces = [client.submit(publish_chunk, ch, cells, ids.table, int(r0), layout)
              for ch, cells, r0 in zip(base.chunks, ids.cells, ing.row0s)]
    total = client.submit(_counted_base, stats, *[client.submit(operator.getitem, p, 1) for p in pieces])
    pieces = [[client.submit(_bucket_piece, p, b) for b in range(n_out)] for p in pieces]
    client.gather([total, tree])  # the base release is counted before the stage ends
    if merge and len(pieces) > 1:
        pieces = [merge_pieces(client, pieces)]
    try:  # every worker publishes late files: each holds the index and the table
        client.replicate([tree, ids.table])
    except (ValueError, RuntimeError):  # pragma: no cover - a worker lost meanwhile: tasks fetch them
        pass
    fo.results = fo.parts = None  # the index, the table and the pieces are all the increment needs
    base.timings["publish base"] = time.perf_counter() - t0
    return BaseRelease(pieces=pieces, table=ids.table, tree=tree, total=total, columns=columns, n_out=n_out,
                       meta=client.submit(_empty, base.chunks[0]))


class FixedIncrementalGraph(PipelineIncrementalGraph):
    """Both stages of an ``increment="nn-fixed"`` run with a partitioned base: the calls of
    :class:`~daskmicro.graph.incremental_pipeline.PipelineIncrementalGraph`, with the base release
    published and counted in the base stage and each late file published as soon as it is handled
    (:meth:`collect`, called at every look at the survey)."""

    def __init__(self, client, qi: list, k: int, increment: str, options: dict, seed: int, prepare=None):
        super().__init__(client, qi, k, increment, options, seed, prepare)
        self._late_open = False
        self._pending: list = []      # (future of Chunk, rows) of late reads not handled yet
        self._late: list = []         # futures of the late Chunks handled, in row order
        self._late_rows: list = []
        self._pub: BaseRelease | None = None
        self._next_row = 0
        self._merged = 1              # entries of the release's pieces merged: the base's, then MERGE_LATE late files'
        self.late_seconds = 0.0       # client time spent handing late files to the workers
        self.late_start: float | None = None

    # -- records ---------------------------------------------------------------------------

    def ingest(self, paths: list) -> None:
        """Have a worker read newly landed files now; after the base trigger they are late records."""
        super().ingest(paths)
        if self._late_open:
            rows = sum(arrival_rows(p) for p in paths)
            self._pending.append((self._reads[arrival_name(paths[0])], rows))

    # -- stages ----------------------------------------------------------------------------

    def submit_base(self, chunk: list) -> None:
        """Start the base stage (cells, then the base release published and counted); returns at once."""
        self.base_submitted = time.time()
        self._late_open = True
        self._base = self._pool.submit(self._base_stage, chunk)

    def _base_stage(self, chunk: list):
        chunks = self._chunks(chunk)
        base = base_cells(self.client, chunks, self.qi, self.cfg)
        self._pub = publish_base(self.client, base, self.qi, self.seed)
        self._next_row = int(base.ing.n)
        base.end = time.time()
        return base

    def plan_nu(self, chunk: list, sched: dict, total: int) -> dict:
        """ν from the schedule's base-stage model and the late path timed here, on the survey's first
        records (``chunk``): they are microaggregated as a small base and published again as if they
        were late, on every worker; returns the schedule's entries to update."""
        seconds, rows = self.time_late_path(_first_rows(chunk, max(int(PROBE_FRACTION * total), 1)))
        late = seconds / rows * total / sched["t_ref_predicted"]
        nu = head_start_ratio(sched["zeta"], sched["beta"], late)
        cal = dict(sched.get("calibration") or {}, late_seconds_per_record=seconds / rows, late_probe_rows=rows)
        return {"nu": nu, "nu_star": nu, "nu_critical": nu, "calibration": cal,
                "nu_from": sched["nu_from"] + (
                    f"; ν: {BASE_TIME_MARGIN:g} × (the base stage's predicted time + the late records' publication, "
                    f"{1e6 * seconds / rows:.1f} µs each as timed on the survey's first {rows:,} records) fit in the "
                    f"head start, so that both end before the close ({self.increment})")}

    def time_late_path(self, chunk: list) -> tuple:
        """(wall seconds, records) of publishing ``chunk``'s records as late ones against a base made of them."""
        c = self.client
        frames = [p for p in chunk if isinstance(p, pd.DataFrame)]
        data = c.scatter(pd.concat(frames, ignore_index=True)) if frames else list(chunk)
        chunks = [c.submit(read_chunk, data, self.qi, self.prepare, pure=False)]  # these records alone (reads may hold more)
        base = base_cells(c, chunks, self.qi, self.cfg)
        pub = publish_base(c, base, self.qi, self.seed, merge=False)
        ing = base.ing
        n_pieces = 4 * max(len(c.scheduler_info()["workers"]), 1)  # as late files come: many pieces, every worker
        pieces, row0s = [], []
        for ch, r0, length in zip(chunks, ing.row0s, ing.lengths):
            step = max(-(-int(length) // n_pieces), 1)
            for a in range(0, int(length), step):
                pieces.append(c.submit(_piece, ch, a, a + step, self.qi, pure=False))
                row0s.append(int(r0) + a)
        c.gather(c.map(len, pieces))  # read before the clock starts, as the run's files are
        t0 = time.perf_counter()
        z, layout = kip.ZScore(ing.mean, ing.std, ing.varying), OutputLayout(pub.columns, self.qi, self.seed, pub.n_out)
        done = [c.submit(publish_late, ch, pub.tree, pub.table, r0, z, layout, pure=False)
                for ch, r0 in zip(pieces, row0s)]
        c.gather(c.submit(add_counted, pub.total, *[c.submit(_late_stats, d) for d in done]))
        return time.perf_counter() - t0, int(ing.n)

    def collect(self) -> None:
        """Publish the late files read so far, once the base stage is done (never waits)."""
        if self._base is None or not self._base.done() or self._base.exception() is not None or not self._pending:
            return
        t0 = time.perf_counter()
        if self.late_start is None:
            self.late_start = time.time()
        ing, pub, c = self._base.result().ing, self._pub, self.client
        handled = []
        z, layout = kip.ZScore(ing.mean, ing.std, ing.varying), OutputLayout(pub.columns, self.qi, self.seed, pub.n_out)
        for fut, rows in self._pending:
            res = c.submit(publish_late, fut, pub.tree, pub.table, self._next_row, z, layout)
            self._late.append(fut)
            pub.pieces.append([c.submit(_bucket_piece, res, b) for b in range(pub.n_out)])
            self._futures.append(res)
            self._late_rows.append(rows)
            self._next_row += rows
            handled.append(c.submit(_late_stats, res))
        self._pending = []
        pub.pieces, self._merged = merged_layout(c, pub.pieces, self._merged)
        pub.total = c.submit(add_counted, pub.total, *handled)
        self._futures.extend(handled)
        self.late_seconds += time.perf_counter() - t0

    def submit_increment(self, chunk: list, method: str | None = None) -> None:
        """At the close: the late records not handled yet, then the verdict on the merged counts."""
        self.increment_submitted = time.time()
        self.method = method or self.increment
        self.base = base = self._base.result()  # waits only if the base stage overran the close
        self._before_close = int(self._next_row - base.ing.n)
        after = len(self._pending)
        if chunk and isinstance(chunk[0], pd.DataFrame):  # a DataFrame source: the late records at once
            frame = pd.concat(chunk, ignore_index=True) if len(chunk) > 1 else chunk[0]
            fut = self.client.submit(read_chunk, self.client.scatter(frame), self.qi, self.prepare, pure=False)
            self._futures.append(fut)
            self._pending.append((fut, len(frame)))
        else:
            missing = [p for p in chunk if arrival_name(p) not in self._reads]
            if missing:
                self.ingest(missing)
        self.collect()
        if self.late_start is None:
            self.late_start = time.time()
        rows, self._k_check, self._hist, stats = self.client.submit(_verdict, self._pub.total, self.k).result()
        self._rows = RowCheck(ok=int(rows) == base.ing.n + int(sum(self._late_rows)),
                              rows_in=int(base.ing.n + sum(self._late_rows)), rows_out=int(rows))
        self._stats_all = stats
        self.inc_result = StageResult(np.empty(0, np.int64), self.late_start, time.time(),
                                      info={"late rows handed to the workers before the close": self._before_close,
                                            "late batches handled after the close": after})

    def results(self):
        """The release (a Dask DataFrame of the published pieces, one partition per key range), the
        dtype changes and the k-anonymity check of every published row (base and late)."""
        import dask
        import dask.dataframe as dd

        pub = self._pub
        meta_frame = pub.meta.result()
        bucket = dask.delayed(release_bucket, pure=True)
        parts = [bucket(*[p[b] for p in pub.pieces], seed=self.seed, keep_row_id=False) for b in range(pub.n_out)]
        cols = pub.columns
        empty = split_chunk(meta_frame, np.empty((0, len(cols))), 0, cols, self.seed, 1)
        release = dd.from_delayed(parts, meta=release_bucket(*empty, seed=self.seed, keep_row_id=False),
                                  verify_meta=False)
        _, changes = replace_qi(meta_frame, cols, np.empty((0, len(cols))))
        return release, changes, self._k_check

    def counted_fingerprint(self) -> int:
        """The fingerprint of the tuples counted before the close
        (:func:`~daskmicro.privacy.verify.counts_fingerprint`): the release's files must hold exactly
        them as read back."""
        return int(self.client.submit(_fingerprint_of, self._pub.total).result())

    def check_rows(self, n: int, release):
        """The row check made on the merged counts (rows in = rows out)."""
        if self._rows.rows_in != n:
            raise RuntimeError(f"the release covers {self._rows.rows_in} records, the survey {n}")
        return self._rows

    def stage_results(self):
        """Base and increment stage times, and the figures of the whole release."""
        base = self.base
        base_res = StageResult(np.empty(0, np.int64), base.start, base.end, info=dict(base.timings))
        n = base.ing.n + int(sum(self._late_rows))
        hist = dict(sorted(self._hist.items()))
        metrics = {
            "information_loss": information_loss_of(self._stats_all, n),
            "cells": int(sum(hist.values())), "min_cell_size": min(hist), "max_cell_size": max(hist),
            "cell_size_counts": hist,
            "constant_columns": [c for c, v in zip(self.qi, base.ing.varying) if not v],
            "m_used": int(np.sum(base.ing.varying)),
        }
        return base_res, self.inc_result, metrics


# --------------------------------------------------------------------------- time model


def calibrate_fixed(client, m: int, k: int, options: dict, total: int | None = None, sizes=None,
                    seed: int = 0) -> dict:
    """The base stage of a fixed increment's run (cells and its release, published and counted) timed
    at three sizes by :func:`~daskmicro.graph.incremental_pipeline.calibrate_pipeline`:
    ``{"n", "seconds"}``.  The late files' path is timed in the run itself (:meth:`FixedIncrementalGraph.plan_nu`)."""
    def publish(c, base, columns):
        publish_base(c, base, columns, seed, merge=False)

    return calibrate_pipeline(client, m, k, options, total, seed=seed, then=publish,
                              **({} if sizes is None else {"sizes": sizes}))


def head_start_ratio(zeta: float, beta: float, late: float) -> float:
    """ν of a fixed increment: the smallest data ratio whose head start ζν holds the base stage and the
    late records' publication, both taken :data:`BASE_TIME_MARGIN` times longer than predicted.

    With τ₀ = (1 − ν)ᵝ the base stage and ``late``·ν the late path (relative to t_ref), the late
    records landed during the base stage are caught up, and those landing after it published as
    they land, before the close when ζν − m·late·ν ≥ m·(1 − ν)ᵝ: the critical ratio ν₋ (§IV-B) of
    the reduced arrivals coefficient (ζ − m·late)/m.
    """
    left = zeta - BASE_TIME_MARGIN * late
    if left <= 0:
        raise ParameterError("the survey is too short for a fixed increment: its late records would take longer "
                             "to publish than they take to arrive; give nu")
    return critical_ratio_numeric(left / BASE_TIME_MARGIN, beta)
