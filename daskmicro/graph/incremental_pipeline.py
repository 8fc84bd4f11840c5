"""Incremental runs at scale: a partitioned base stage and a distributed increment stage.

The two time-delayed stages of Rebollo-Monedero et al., *Incremental k-Anonymous Microaggregation
in Large-Scale Electronic Surveys With Optimized Scheduling* (IEEE Access 2018;
§III-B) built from the partitioned pipeline's own pieces
(:mod:`daskmicro.graph.pipeline`), so that the base stage scales with the cluster::

    base stage (submitted when 1 − ν of the records are in; runs while the survey goes on):
        files read as they land ─► ingest (z-scoring μ₀, σ₀ of the base) ─► top cells ─►
        macroaggregation ─► fan-out: cells per partition (row ids and Z kept per partition)

    increment stage (submitted at the close):
        late records z-scored by μ₀, σ₀ ─► nearest base centroid (one k-d tree) ─► routed to that
        centroid's partition ─► one task per partition adjoins them (NN, split-end, split-mid, §IV-D)
        2MDAV (§IV-A): the late records through the same pipeline on their own, their cells joined

    release: the pipeline's gather (global cell ids, centroid table, seeded order), every published
    row counted (k-anonymity of the published tuples, rows in = rows out) before it is handed out.

The base stage runs on a client thread (the pipeline's steps wait on small reductions); the
caller keeps watching the survey meanwhile.  The kernels are in
:mod:`daskmicro.kernels.incremental_parts`; this module only wires them.
"""

from __future__ import annotations

import operator
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..config import AUTO_EXACT_ROWS
from ..io.survey import arrival_name
from ..kernels import incremental_parts as kip
from ..release.publish import replace_qi
from .fanout import FanoutResult, fan_out, top_cells
from .gather import ReleaseOptions, gather_release
from .incremental import StageResult, concat_chunks, read_chunk
from .ingest import Ingested, ingest
from .pipeline import PipelineConfig, plan_layout

__all__ = ["PipelineIncrementalGraph", "BaseCells", "adjoin", "base_cells", "two_step", "frame_of", "calibrate_pipeline",
           "information_loss_of", "CHUNK_ROWS", "PIPELINE_OPTIONS"]

#: Late and base records are joined into chunks of at least this many rows before they are ingested.
CHUNK_ROWS = 200_000
#: Options of the partitioned pipeline an incremental run passes on (``base_options``).
PIPELINE_OPTIONS = ("K", "partition_size", "task_rows", "nu", "energy_loss", "n_components")


@dataclass
class BaseCells:
    """The base stage's cells: its ingested chunks (z-scoring), fan-out and timings."""

    chunks: list          # futures of the base records' Chunk, in row order
    ing: Ingested
    fo: FanoutResult
    cfg: PipelineConfig
    start: float
    end: float
    timings: dict = field(default_factory=dict)


def _frame(chunk):
    return chunk.frame


def _empty(chunk):
    return chunk.frame.iloc[:0]


def frame_of(client, chunks: list):
    """A Dask DataFrame whose partitions are the frames of ``chunks`` (futures of Chunk), in order."""
    import dask
    import dask.dataframe as dd

    meta = client.submit(_empty, chunks[0]).result()
    return dd.from_delayed([dask.delayed(_frame)(c) for c in chunks], meta=meta, verify_meta=False)


def base_cells(client, chunks: list, qi: list, cfg: PipelineConfig) -> BaseCells:
    """The base stage (§III-B) on ``chunks``: the partitioned pipeline up to its fan-out, parts kept."""
    start = time.time()
    timings: dict = {}
    t0 = time.perf_counter()
    ing = ingest(client, frame_of(client, chunks), qi)
    timings["ingest"] = time.perf_counter() - t0
    cfg, fcfg, task_rows = plan_layout(cfg, ing, keep_parts=True)
    kept = Ingested(blocks=None, row0s=list(ing.row0s), lengths=list(ing.lengths), n=ing.n, mean=ing.mean,
                    std=ing.std, varying=ing.varying)
    tops = top_cells(client, ing, task_rows, timings)
    fo = fan_out(client, tops, fcfg, timings)
    return BaseCells(chunks=list(chunks), ing=kept, fo=fo, cfg=cfg, start=start, end=time.time(), timings=timings)


def adjoin(client, base: BaseCells, late: list, method: str, k: int):
    """The NN increment (§IV-D) as one task per base partition: (partition results, column stats).

    ``late`` are futures of the late records' (row ids, Z), z-scored like the base.
    """
    results = base.fo.results
    index = client.submit(kip.centroid_index, *results)
    routes = [client.submit(kip.route, index, z, len(results)) for z in late]
    grown = []
    for p, (part, res) in enumerate(zip(base.fo.parts, results)):
        pieces = [client.submit(operator.getitem, r, p) for r in routes]
        grown.append(client.submit(kip.grow_partition, part, res, method, k, *pieces))
    out = [client.submit(operator.getitem, g, 0) for g in grown]
    stats = [client.submit(operator.getitem, g, 1) for g in grown]
    client.gather(client.map(_n_cells, out))  # surfaces any task error here
    return out, stats


def _n_cells(res) -> int:
    return res.n_cells


def two_step(client, base: BaseCells, late: list, lengths: list, row0s: list, k: int):
    """2MDAV (§IV-A) generalised: the late records through the pipeline on their own (exact MDAV in
    one task up to ``AUTO_EXACT_ROWS`` records, else the base's partitioned layout), z-scored like
    the base; the two micropartitions are joined.  Returns (partition results, partitions, stats)."""
    n = int(sum(lengths))
    fo = base.fo
    results, partitions = list(fo.results), list(fo.partitions)
    stats = [client.submit(kip.result_stats, p, r) for p, r in zip(fo.parts, fo.results)]
    if n == 0:
        return results, partitions, stats
    ing = Ingested(blocks=[client.submit(operator.getitem, z, 1) for z in late], row0s=list(row0s),
                   lengths=list(lengths), n=n, mean=base.ing.mean, std=base.ing.std, varying=base.ing.varying)
    opts = {key: getattr(base.cfg, key) for key in ("K", "partition_size", "task_rows", "nu", "energy_loss",
                                                     "n_components")}
    method = "mdav" if n <= AUTO_EXACT_ROWS else "partitioned"
    if method == "mdav":
        opts = {"task_rows": opts["task_rows"]}
    cfg, fcfg, task_rows = plan_layout(PipelineConfig(method=method, k=k, **opts), ing, keep_parts=True)
    inc = fan_out(client, top_cells(client, ing, task_rows, {}), fcfg, {})
    shift = fo.n_top
    results += inc.results
    partitions += [(t + shift, g, side, rows) for t, g, side, rows in inc.partitions]
    stats += [client.submit(kip.result_stats, p, r) for p, r in zip(inc.parts, inc.results)]
    return results, partitions, stats


class PipelineIncrementalGraph:
    """Both stages of an incremental run with a partitioned base (``base_method="partitioned"``).

    The same calls as :class:`~daskmicro.graph.incremental.IncrementalGraph`: :meth:`ingest` as
    files land, :meth:`submit_base` at the base trigger (returns at once: the stage runs on a
    client thread), :meth:`submit_increment` at the close, then :meth:`results`.

    Parameters
    ----------
    client : distributed.Client
    qi : list
    k : int
    increment : {"2mdav", "nn", "nn-split-mid", "nn-split-end"}
    options : dict
        Options of the partitioned pipeline (:data:`PIPELINE_OPTIONS`; ``nu`` there is the distal
        fraction of the macrocells, not the data ratio).
    seed : int
        Shuffle seed of the release.
    prepare : callable, optional
        Applied to every chunk's frame as a worker reads it (:func:`~daskmicro.graph.incremental.read_chunk`).
    """

    def __init__(self, client, qi: list, k: int, increment: str, options: dict, seed: int, prepare=None):
        self.client, self.qi, self.k, self.increment, self.seed = client, list(qi), k, increment, seed
        self.prepare = prepare
        self.cfg = PipelineConfig(method="partitioned", k=k, **(options or {}))
        self._reads: dict = {}
        self._futures: list = []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="daskmicro-base")
        self._base = None
        self.base_submitted: float | None = None
        self.increment_submitted: float | None = None
        self.timings: dict = {}

    # -- records ---------------------------------------------------------------------------

    def ingest(self, paths: list) -> None:
        """Have a worker read newly landed files now, while the survey goes on."""
        fut = self.client.submit(read_chunk, list(paths), self.qi, self.prepare, pure=False)
        self._futures.append(fut)
        for p in paths:
            self._reads[arrival_name(p)] = fut

    def _chunks(self, chunk: list) -> list:
        """Futures of Chunk of at least CHUNK_ROWS rows each, in arrival order (paths or one frame)."""
        if len(chunk) == 1 and isinstance(chunk[0], pd.DataFrame):
            df = chunk[0]
            pieces = [df.iloc[i:i + CHUNK_ROWS] for i in range(0, len(df), CHUNK_ROWS)] or [df]
            parts = [self.client.submit(read_chunk, f, self.qi, self.prepare, pure=False)
                     for f in self.client.scatter(pieces)]
        else:
            missing = [p for p in chunk if arrival_name(p) not in self._reads]
            if missing:
                self.ingest(missing)
            parts = list(dict.fromkeys(self._reads[arrival_name(p)] for p in chunk))
        if not parts:
            return []
        sizes = self.client.gather(self.client.map(len, parts))
        groups, cur, rows = [], [], 0
        for part, size in zip(parts, sizes):
            cur.append(part)
            rows += size
            if rows >= CHUNK_ROWS:
                groups.append(cur)
                cur, rows = [], 0
        if cur:
            groups.append(cur)
        out = [g[0] if len(g) == 1 else self.client.submit(concat_chunks, *g) for g in groups]
        self._futures.extend(out)
        return out

    # -- stages ----------------------------------------------------------------------------

    def submit_base(self, chunk: list) -> None:
        """Start the base stage on the records arrived so far; returns at once."""
        self.base_submitted = time.time()
        self._base = self._pool.submit(lambda: base_cells(self.client, self._chunks(chunk), self.qi, self.cfg))

    def collect(self) -> None:
        """Nothing to fetch early: the release is assembled once the increment is known."""

    def submit_increment(self, chunk: list, method: str | None = None) -> None:
        """Run the increment stage on the late records (waits for the base stage if it overruns)."""
        self.increment_submitted = time.time()
        self.method = method = method or self.increment
        self.base = base = self._base.result()
        start = time.time()
        chunks = self._chunks(chunk)
        lengths = self.client.gather(self.client.map(len, chunks)) if chunks else []
        row0s = [int(base.ing.n + r) for r in np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)] \
            if chunks else []
        late = [self.client.submit(kip.zscore_late, c, self.qi, r, base.ing.mean, base.ing.std, base.ing.varying)
                for c, r in zip(chunks, row0s)]
        if method == "2mdav":
            results, partitions, stats = two_step(self.client, base, late, lengths, row0s, self.k)
        else:
            results, stats = adjoin(self.client, base, late, method, self.k)
            partitions = list(base.fo.partitions)
        self.client.gather(self.client.map(_n_cells, results))
        self.inc_result = StageResult(np.empty(0, np.int64), start, time.time())
        self._late, self._late_rows, self._row0s = chunks, lengths, row0s
        self._grown = FanoutResult(results=results, partitions=partitions, n_top=0, macro_sse=np.empty(0),
                                   macro_size=np.empty(0), n_distal_macro=0, pca=None, timings={}, k=self.k)
        self._stats = stats

    def _all(self):
        """The whole survey as the pipeline's gather sees it: one frame, one Ingested (base z-scoring)."""
        base = self.base
        ing = Ingested(blocks=None, row0s=list(base.ing.row0s) + list(self._row0s),
                       lengths=list(base.ing.lengths) + list(self._late_rows), n=base.ing.n + int(sum(self._late_rows)),
                       mean=base.ing.mean, std=base.ing.std, varying=base.ing.varying)
        return ing

    def results(self):
        """Publish and verify the release on the workers: (release, dtype changes, k-anonymity check).

        The release is a Dask DataFrame of the published rows in one seeded order, every row of
        which was built and counted (published tuples ≥ k, rows in = rows out) before it is returned.
        """
        ing = self._all()
        chunks = self.base.chunks + self._late
        ddf = frame_of(self.client, chunks)
        t0 = time.perf_counter()
        self.published = pub = gather_release(self.client, ddf, self.qi, ing, self._grown,
                                              ReleaseOptions(self.seed), self.timings)
        self.timings["publish + verify"] = time.perf_counter() - t0
        varying = [c for c, v in zip(self.qi, ing.varying) if v]
        _, changes = replace_qi(ddf._meta, varying, np.empty((0, len(varying))))
        self._ing_all = ing
        return pub.release, changes, pub.k_anonymity

    def counted_fingerprint(self):
        """None: this release is counted as its files are read back."""
        return None

    def check_rows(self, n: int, release):
        """The row check made while the release was counted (rows in = rows out, each row once)."""
        rows = self.published.rows
        if rows.rows_in != n:
            raise RuntimeError(f"the release covers {rows.rows_in} records, the survey {n}")
        return rows

    def stage_results(self):
        """Base and increment stage times, and the figures of the whole micropartition."""
        base, pub, ing = self.base, self.published, self._ing_all
        base_res = StageResult(np.empty(0, np.int64), base.start, base.end, info=dict(base.timings))
        stats = np.sum(self.client.gather(self._stats), axis=0)
        metrics = {
            "information_loss": information_loss_of(stats, ing.n),
            "cells": pub.cells, "min_cell_size": pub.min_cell_size, "max_cell_size": pub.max_cell_size,
            "cell_size_counts": pub.cell_size_counts,
            "constant_columns": [c for c, v in zip(self.qi, ing.varying) if not v], "m_used": ing.m_used,
        }
        return base_res, self.inc_result, metrics

    def reference(self) -> dict:
        """One-pass run of the same partitioned pipeline on all the records (after the release):
        its microaggregation time (ingest to fan-out, as the base stage is timed), its whole time
        with the release verified, and its information loss, for τ and δ (§III-B.4)."""
        from .pipeline import run_pipeline

        ddf = frame_of(self.client, self.base.chunks + self._late)
        opts = {key: getattr(self.base.cfg, key) for key in PIPELINE_OPTIONS}
        _, details = run_pipeline(self.client, ddf, self.qi, PipelineConfig(method="partitioned", k=self.k, **opts),
                                  ReleaseOptions(self.seed))
        t = details["timings"]
        cells = sum(t.get(s, 0.0) for s in ("ingest", "top_level", "macroaggregation", "split", "fan_out"))
        return {"seconds": cells, "run_seconds": t["total"], "information_loss": details["information_loss"]}

    def cancel(self) -> None:
        """Cancel what this run submitted (the base stage's own steps end with its thread)."""
        if self._futures:
            self.client.cancel(self._futures)
        self._futures = []
        self._pool.shutdown(wait=False, cancel_futures=True)


def information_loss_of(stats: np.ndarray, n: int) -> float:
    """IL = 100·SSE/SST after global z-scoring, from summed :func:`~daskmicro.kernels.incremental_parts.column_stats`."""
    sse, s1, s2 = stats[0], stats[1], stats[2]
    var = s2 / n - (s1 / n) ** 2
    used = var > 0
    if not used.any():
        return 0.0
    return float(100.0 * np.sum(sse[used] / var[used]) / (n * used.sum()))


# --------------------------------------------------------------------------- time model


def _gaussian_chunks(client, n: int, m: int, seed: int):
    """Correlated Gaussian records (as microdata attributes are): on white noise in m dimensions
    both MDAV's pruning and the k-d tree of the increment are at their worst, far from real data."""
    from ..datasets import correlated_gaussian

    cols = [f"x{j}" for j in range(m)]
    df = pd.DataFrame(correlated_gaussian(n, m, seed), columns=cols)
    pieces = [df.iloc[i:i + CHUNK_ROWS] for i in range(0, n, CHUNK_ROWS)]
    futures = client.scatter(pieces)
    return [client.submit(read_chunk, f, cols, pure=False) for f in futures], cols


def calibrate_pipeline(client, m: int, k: int, options: dict, total: int | None = None, sizes=None,
                       seed: int = 0, then=None) -> dict:
    """Time the partitioned base stage (ingest to fan-out, as a run times it) on correlated
    Gaussian m-column data at three sizes, ``task_rows / 2 … 2·task_rows`` (at most a quarter of
    the survey's ``total`` records), for the time model t(n) = a·nᵝ of §IV-B.  ``then(client, base,
    columns)``, when given, is the rest of the base stage (e.g. its publication), timed with it.

    Returns ``{"n": sizes, "seconds": base stage times}``.
    """
    cfg = PipelineConfig(method="partitioned", k=k, **(options or {}))
    top = 2 * cfg.task_rows if total is None else max(min(2 * cfg.task_rows, total // 4), 12 * k)
    sizes = [int(s) for s in (sizes or (top // 4, top // 2, top)) if s >= 3 * k]
    secs = []
    for j, n in enumerate(sizes):
        chunks, cols = _gaussian_chunks(client, n, m, seed + j)
        client.gather(client.map(len, chunks))  # read before the clock starts, as the run's files are
        base = base_cells(client, chunks, cols, cfg)
        if then is not None:
            then(client, base, cols)
        secs.append(time.time() - base.start)
    return {"n": sizes, "seconds": secs}
