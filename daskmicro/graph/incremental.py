"""The base and increment stages of incremental microaggregation as time-delayed Dask work.

Implements the two-stage run of Rebollo-Monedero et al., *Incremental k-Anonymous
Microaggregation in Large-Scale Electronic Surveys With Optimized Scheduling* (IEEE Access 2018;
§III-B, §IV-A, §IV-D) on a Dask cluster.  :class:`IncrementalGraph`
is driven by the caller's clock: :meth:`~IncrementalGraph.submit_base` when the base fraction
1 − ν has arrived, :meth:`~IncrementalGraph.submit_increment` when the survey closes; both put
futures on the same cluster.

Base stage (submitted at the base trigger)::

    read base chunk ──► z-scoring of the base (μ₀, σ₀) ──► base MDAV ──► [2MDAV only] base part
                                                                          of the release
Increment stage (submitted at the close)::

    2MDAV:  read increment ──► MDAV on the increment alone (z-scored by μ₀, σ₀; needs no base
            labels, so it runs even while an overrunning base stage still does) ──► increment part
    NN-*:   read increment ──► adjoin to the base cells (needs the base labels) ──► whole release

The release parts are combined and shuffled on a worker; metrics (information loss on the whole
data, cell sizes) run beside it, and the one-pass reference (for δ) only when asked, after the
release.  Every task records its own wall-clock start and end, so the caller can report τ₀, τ₊
and the head start τ₋ as they happened.  The kernels are imported from :mod:`daskmicro.kernels`;
this module adds the Dask wiring only.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
from ..io.qi import check_qi, qi_matrix  # the same checks and messages as anonymize()
from ..io.survey import arrival_name, read_arrival
from ..kernels import centroids, information_loss, mdav, standardize
from ..kernels.increment import increment as increment_kernel
from ..privacy.verify import check_tuple_counts, merge_tuple_counts, tuple_counts, verify_k_anonymity, verify_rows
from ..release.publish import replace_qi

__all__ = ["Chunk", "StageResult", "IncrementalGraph", "read_chunk", "concat_chunks", "default_kernel", "pca_mdav_kernel",
           "calibrate_on", "warm_up"]


@dataclass
class Chunk:
    """Records of one stage on a worker: the full rows and their QI matrix (float64, original units)."""

    frame: pd.DataFrame
    X: np.ndarray

    def __len__(self) -> int:
        return len(self.frame)

    def __sizeof__(self) -> int:
        # what a worker holds, so that Dask spills and places chunks by their real size
        # (its fallback for other objects, sys.getsizeof, would see a few dozen bytes)
        from dask.sizeof import sizeof

        return object.__sizeof__(self) + sizeof(self.frame) + self.X.nbytes


@dataclass
class StageResult:
    """Cell labels of a stage and when (POSIX seconds) the kernel started and ended on its worker."""

    labels: np.ndarray
    start: float
    end: float
    info: dict = field(default_factory=dict)

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + self.labels.nbytes

    @property
    def seconds(self) -> float:
        return self.end - self.start


# --------------------------------------------------------------------------- tasks (run on workers)


def read_chunk(chunk, qi: list, prepare: Callable | None = None) -> Chunk:
    """Rows of a chunk (a survey's landed files — Parquet paths or objects of a store — or a
    DataFrame) and their validated QI matrix; ``prepare(frame)`` (the run's columns left out, the
    records' fingerprints added) applied as they are read."""
    if isinstance(chunk, pd.DataFrame):
        frame = chunk.reset_index(drop=True)
    else:
        frames = [read_arrival(item).to_pandas() for item in chunk]
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if prepare is not None:
        frame = prepare(frame)
    if len(frame):
        check_qi(frame, qi)
        X = qi_matrix(frame, qi)
    else:
        X = np.empty((0, len(qi)))
    return Chunk(frame, X)


def _standardization(chunk: Chunk):
    return standardize(chunk.X)[1]


def _base_stage(chunk: Chunk, std, k: int, kernel: Callable) -> StageResult:
    start = time.time()
    labels = np.asarray(kernel(std.transform(chunk.X), k), dtype=np.int64)
    return StageResult(labels, start, time.time())


def _two_mdav_stage(chunk: Chunk, std, k: int, kernel: Callable) -> StageResult:
    """2MDAV (§IV-A): MDAV on the increment records alone, z-scored like the base."""
    start = time.time()
    if len(chunk) == 0:
        labels = np.empty(0, dtype=np.int64)
    else:
        labels = np.asarray(kernel(std.transform(chunk.X), k), dtype=np.int64)
    return StageResult(labels, start, time.time())


def _nn_stage(base: Chunk, std, base_result: StageResult, chunk: Chunk, k: int, method: str) -> StageResult:
    """Nearest-neighbour increment (§IV-D) on top of the base cells: labels of base + increment."""
    start = time.time()
    labels = increment_kernel(method, std.transform(base.X), base_result.labels, std.transform(chunk.X), k)
    return StageResult(np.asarray(labels, dtype=np.int64), start, time.time())


def _publish_part(chunk: Chunk, labels, qi: list) -> tuple[pd.DataFrame, dict]:
    """Rows of a chunk with their QI values replaced by their cell's centroid (original units)."""
    labels = labels.labels if isinstance(labels, StageResult) else labels
    if len(chunk) == 0:
        return chunk.frame, {}
    return replace_qi(chunk.frame, qi, centroids(chunk.X, labels)[labels])


def _publish_counted(chunk: Chunk, labels, qi: list):
    """A release part with the counts of its QI tuples (for the k-anonymity check of the whole)."""
    frame, changes = _publish_part(chunk, labels, qi)
    return frame, changes, tuple_counts(frame, qi)


def concat_chunks(*chunks: Chunk) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    return Chunk(pd.concat([c.frame for c in chunks], ignore_index=True), np.concatenate([c.X for c in chunks]))


def _publish_all(base: Chunk, chunk: Chunk, result: StageResult, qi: list) -> tuple[pd.DataFrame, dict]:
    both = Chunk(pd.concat([base.frame, chunk.frame], ignore_index=True), np.concatenate([base.X, chunk.X]))
    return _publish_part(both, result, qi)


def _combine(parts: list, seed: int) -> tuple[pd.DataFrame, dict]:
    """Concatenate the release parts (base rows first) and shuffle them with the recorded seed."""
    frames = [p[0] for p in parts if len(p[0])]
    changes = {}
    for p in parts:
        changes.update(p[1])
    release = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)
    perm = np.random.default_rng(seed).permutation(len(release))
    return release.take(perm).reset_index(drop=True), changes


def _all_labels(base_result: StageResult, inc_result: StageResult, joined: bool) -> np.ndarray:
    if joined:
        return inc_result.labels
    offset = int(base_result.labels.max()) + 1
    return np.concatenate([base_result.labels, inc_result.labels + offset])


def _metrics(base: Chunk, chunk: Chunk, base_result: StageResult, inc_result: StageResult, joined: bool, qi: list) -> dict:
    """Information loss of the whole micropartition (global z-scoring, as one-pass MDAV) and cell sizes."""
    labels = _all_labels(base_result, inc_result, joined)
    X = np.concatenate([base.X, chunk.X])
    constant = X.max(axis=0) == X.min(axis=0)
    sizes = np.bincount(labels)
    sizes = sizes[sizes > 0]
    values, counts = np.unique(sizes, return_counts=True)
    return {
        "information_loss": information_loss(X[:, ~constant], labels) if (~constant).any() else 0.0,
        "cells": int(sizes.size),
        "min_cell_size": int(sizes.min()),
        "max_cell_size": int(sizes.max()),
        "cell_size_counts": {int(v): int(c) for v, c in zip(values, counts)},
        "constant_columns": [c for c, const in zip(qi, constant) if const],
        "m_used": int((~constant).sum()),
    }


def _reference(base: Chunk, chunk: Chunk, k: int, kernel: Callable) -> dict:
    """One-pass microaggregation of all the records (the paper's traditional run): time and IL."""
    X = np.concatenate([base.X, chunk.X])
    constant = X.max(axis=0) == X.min(axis=0)
    Z = standardize(X)[0]
    start = time.time()
    labels = np.asarray(kernel(Z, k), dtype=np.int64)
    seconds = time.time() - start
    il = information_loss(X[:, ~constant], labels) if (~constant).any() else 0.0
    return {"seconds": seconds, "information_loss": il}


def _calibration_run(n: int, m: int, k: int, kernel: Callable, seed: int) -> float:
    Z = np.random.default_rng(seed).normal(size=(n, m))
    start = time.perf_counter()
    kernel(Z, k)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- submission


def default_kernel(Z, k):
    """The base kernel of ``base_method="mdav"``: exact MDAV (:func:`daskmicro.kernels.mdav`)."""
    return mdav(Z, k)


def pca_mdav_kernel(Z, k):
    """The base kernel of ``base_method="pca-mdav"``: MDAV with PCA (Algorithm B of *Efficient k-Anonymous Microaggregation … via PCA*, default energy bound)."""
    from ..kernels.pca import pca_mdav

    return pca_mdav(Z, k)


class IncrementalGraph:
    """Submits the two stages of one incremental run to a Dask client, each when it is called.

    Parameters
    ----------
    client : distributed.Client
        The cluster both stages run on.
    qi : list
        Quasi-identifier columns.
    k : int
        Anonymity parameter.
    increment : {"2mdav", "nn", "nn-split-mid", "nn-split-end"}
        Increment algorithm (§IV-A, §IV-D).
    kernel : callable
        ``kernel(Z, k) -> labels``: base microaggregation (and 2MDAV's increment MDAV).
    seed : int
        Shuffle seed of the release.
    prepare : callable, optional
        Applied to every chunk's frame as a worker reads it (:func:`read_chunk`).
    """

    def __init__(self, client, qi: list, k: int, increment: str, kernel: Callable, seed: int, prepare=None):
        self.client, self.qi, self.k, self.increment, self.kernel, self.seed = client, list(qi), k, increment, kernel, seed
        self.prepare = prepare
        self._tag = uuid.uuid4().hex[:8]
        self._futures: list = []
        self._reads: dict = {}
        self._base_part = None
        self.base_submitted: float | None = None
        self.increment_submitted: float | None = None

    def _submit(self, name: str, fn, *args):
        fut = self.client.submit(fn, *args, key=f"incremental-{name}-{self._tag}", pure=False)
        self._futures.append(fut)
        return fut

    def ingest(self, paths: list) -> None:
        """Have a worker read newly landed files now, while the survey goes on."""
        fut = self._submit(f"read-{len(self._reads)}", read_chunk, list(paths), self.qi, self.prepare)
        for p in paths:
            self._reads[arrival_name(p)] = fut

    def _data(self, name: str, chunk: list):
        """The records of a chunk on the cluster: a DataFrame is scattered; files read by ingest are reused."""
        if len(chunk) == 1 and isinstance(chunk[0], pd.DataFrame):
            [frame] = self.client.scatter([chunk[0]], hash=False)
            self._futures.append(frame)
            return self._submit(f"read-{name}", read_chunk, frame, self.qi, self.prepare)
        missing = [p for p in chunk if arrival_name(p) not in self._reads]
        if missing:
            self.ingest(missing)
        parts = list(dict.fromkeys(self._reads[arrival_name(p)] for p in chunk))  # batches, in arrival order
        return self._submit(f"concat-{name}", concat_chunks, *parts)

    def submit_base(self, chunk: list) -> None:
        """Submit the base stage on the records arrived so far (paths or one DataFrame)."""
        self.base_submitted = time.time()
        self.base = self._data("base", chunk)
        self.std = self._submit("standardization", _standardization, self.base)
        self.base_result = self._submit("base", _base_stage, self.base, self.std, self.k, self.kernel)
        if self.increment == "2mdav":
            # Base cells are final under 2MDAV: publish and count their rows during the head start.
            self.base_part = self._submit("publish-base", _publish_counted, self.base, self.base_result, self.qi)

    def collect(self) -> None:
        """Fetch the published base part once it is ready (called while waiting for the close)."""
        if self.increment == "2mdav" and self._base_part is None and self.base_part.done():
            self._base_part = self.base_part.result()

    def submit_increment(self, chunk: list, method: str | None = None) -> None:
        """Submit the increment stage on the records that arrived after the base trigger."""
        self.increment_submitted = time.time()
        self.method = method = method or self.increment
        if chunk:
            self.inc = self._data("increment", chunk)
        else:  # nothing arrived after the base trigger
            self.inc = self._submit("read-increment", _empty_like, self.base)
        self.joined = method != "2mdav"
        if self.joined:
            self.inc_result = self._submit("increment", _nn_stage, self.base, self.std, self.base_result, self.inc, self.k, method)
            parts = [self._submit("publish", _publish_all, self.base, self.inc, self.inc_result, self.qi)]
            self.release = self._submit("combine", _combine, parts, self.seed)
        else:
            self.inc_result = self._submit("increment", _two_mdav_stage, self.inc, self.std, self.k, self.kernel)
            self.inc_part = self._submit("publish-increment", _publish_counted, self.inc, self.inc_result, self.qi)
        self.metrics = self._submit("metrics", _metrics, self.base, self.inc, self.base_result, self.inc_result, self.joined, self.qi)

    def results(self):
        """Block for the release and its k-anonymity check: (release, dtype changes, check).

        2MDAV: the base part was fetched during the head start; only the increment part travels
        after the close, and the check merges the QI-tuple counts of both parts.  Otherwise the
        release is assembled on a worker and checked here.
        """
        if self.joined:
            release, changes = self.release.result()
            return release, changes, verify_k_anonymity(release, self.qi, self.k)
        if self._base_part is None:
            self._base_part = self.base_part.result()
        inc = self.inc_part.result()
        release, changes = _combine([self._base_part[:2], inc[:2]], self.seed)
        check = check_tuple_counts(merge_tuple_counts(self._base_part[2], inc[2]), self.k)
        return release, changes, check

    def counted_fingerprint(self):
        """None: this release is counted as its files are read back."""
        return None

    def check_rows(self, n: int, release):
        """Rows in = rows out, each input row once (§III-B: the release holds every record)."""
        return verify_rows(n, release)

    def stage_results(self):
        """Base result, increment result and metrics (stage times, cell sizes, information loss)."""
        return self.client.gather([self.base_result, self.inc_result, self.metrics])

    def reference(self) -> dict:
        """Run the one-pass reference on all the records (after the release) and return its time and IL."""
        return self._submit("reference", _reference, self.base, self.inc, self.k, self.kernel).result()

    def cancel(self) -> None:
        """Cancel everything this run submitted (after a timeout or an error)."""
        if self._futures:
            self.client.cancel(self._futures)
        self._futures = []


def _empty_like(base: Chunk) -> Chunk:
    return Chunk(base.frame.iloc[:0], base.X[:0])


def _calibration(ns: list, m: int, k: int, kernel: Callable) -> list:
    _calibration_run(3 * k, m, k, kernel, 0)  # load the compiled kernel first
    return [_calibration_run(n, m, k, kernel, j) for j, n in enumerate(ns)]


def calibrate_on(client, m: int, k: int, kernel: Callable, sizes=(5000, 10000, 20000)):
    """Time ``kernel`` on one worker at a few sizes of m-column Gaussian data: (sizes, seconds)."""
    ns = [int(n) for n in sizes if n >= 3 * k]
    return ns, client.submit(_calibration, ns, m, k, kernel, pure=False).result()


def _warm(increment: str, kernel: Callable) -> None:
    Z = np.random.default_rng(0).normal(size=(40, 2))
    lb = np.asarray(kernel(Z[:20], 2), dtype=np.int64)
    if increment != "2mdav":
        increment_kernel(increment, Z[:20], lb, Z[20:], 2)


def warm_up(client, increment: str, kernel: Callable) -> None:
    """Load the compiled kernels in every worker, so no stage pays for it (numba cache load)."""
    client.run(_warm, increment, kernel)
