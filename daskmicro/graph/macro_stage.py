"""Top level of the hierarchical macroaggregation: MDAV at a very large size over chunked data.

Drives the per-chunk steps of :mod:`daskmicro.kernels.chunked` with ``client.map``: each MDAV
query is one or two small reductions whose results (a few numbers per chunk) come back to the
client, while the data and the labels stay on the workers.  A parent small enough for one task is
cut inside that task instead (:func:`cut_in_task`): the same queries over the same chunks, run
one after the other in the worker, with no round trip to the client between them.  The outcome
depends only on the records and their row ids, never on how the rows are chunked, how many workers
run or where the queries run.
"""

from __future__ import annotations

import numpy as np

from ..kernels import chunked as ck
from ..kernels.macro import dd_combine

__all__ = ["chunked_mdav", "cut_in_task"]


class _Chunks:
    """Futures of the chunks of a data set (Z, first row id) and of their current labels; each
    query a ``client.map`` over them, its results gathered by the client."""

    def __init__(self, client, blocks, row0s):
        self.client = client
        self.blocks = blocks
        self.row0s = list(row0s)
        self.labels = client.map(_free_labels, blocks, pure=False)

    def map(self, fn, *iterables, **kwargs):
        return self.client.map(fn, *iterables, **kwargs)

    def gather(self, futures):
        return self.client.gather(futures)


class _TaskChunks:
    """The chunks themselves (Z, row ids) and their labels, inside one task: each query runs over
    them in this process, in chunk order, as the cluster would run it."""

    def __init__(self, blocks, row0s):
        self.blocks = list(blocks)
        self.row0s = list(row0s)
        self.labels = [_free_labels(Z) for Z in self.blocks]

    def map(self, fn, *iterables, **kwargs):
        return [fn(*args, **kwargs) for args in zip(*iterables)]

    def gather(self, values):
        return values


def _free_labels(Z):
    # int8: the top level cuts a parent into a handful of cells (see chunked_mdav's K)
    return np.full(Z.shape[0], -1, dtype=np.int8)


def _centroid(ch: _Chunks) -> np.ndarray:
    parts = ch.gather(ch.map(ck.free_sums, ch.blocks, ch.labels))
    n = sum(p[0] for p in parts)
    return dd_combine([p[1] for p in parts if p[0]]) / n


def _best(results) -> tuple[int, np.ndarray]:
    """(row id, coordinates) of the farthest of the chunks' candidates; lowest row on ties."""
    best = None
    for res in results:
        if res is not None and (best is None or res[0] > best[0] or (res[0] == best[0] and res[1] < best[1])):
            best = res
    return best[1], best[2]


def _farthest(ch: _Chunks, dists) -> tuple[int, np.ndarray]:
    return _best(ch.gather(ch.map(ck.farthest_free, ch.blocks, ch.labels, ch.row0s, dists)))


def _farthest_from(ch: _Chunks, point) -> tuple[int, np.ndarray]:
    return _best(ch.gather(ch.map(ck.farthest_from, ch.blocks, ch.labels, ch.row0s, point=point)))


def _dists(ch: _Chunks, point, centre_row=-1):
    return ch.map(ck.distances, ch.blocks, ch.labels, ch.row0s, point=point, centre_row=centre_row)


def _take_cell(ch: _Chunks, centre_row: int, point: np.ndarray, count: int, cell: int):
    """Assign the ``count`` free records nearest ``point`` (its own record first) to ``cell``."""
    d = _dists(ch, point, centre_row)
    samples = ch.gather(ch.map(ck.rank_sample, d))
    lo, hi = ck.bracket(samples, count)
    cands = ch.gather(ch.map(ck.pairs_between, d, ch.row0s, lo=lo, hi=hi))
    cut = ck.finish_selection(cands, count)
    ch.labels = ch.map(ck.assign_upto, ch.labels, d, ch.row0s, cut=cut, cell=cell)
    return d


def chunked_mdav(client, blocks, row0s, n: int, K: int):
    """MDAV-generic (Algorithm A of *Efficient k-Anonymous Microaggregation … via PCA*, §III-B) at cell size ``K`` over chunks held by the cluster.

    Parameters
    ----------
    client : distributed.Client
    blocks : list of futures of z-scored chunk matrices, in row order
    row0s : first global row id of each chunk
    n : total number of rows
    K : cell size (every cell gets K … 2K−1 records)

    Returns
    -------
    labels : list of futures of int8 label arrays, one per chunk
    n_cells : int
    """
    _check_cells(n, K)
    ch = _Chunks(client, blocks, row0s)
    n_cells = _mdav_cells(ch, n, K)
    return ch.labels, n_cells


def cut_in_task(blocks: list, row0s: list, n: int, K: int):
    """:func:`chunked_mdav` over chunks held by this task: (labels per chunk, number of cells, each
    chunk's count per cell).  The same labels as ``chunked_mdav`` gives over the same chunks."""
    _check_cells(n, K)
    ch = _TaskChunks(blocks, row0s)
    n_cells = _mdav_cells(ch, n, K)
    return ch.labels, n_cells, [ck.label_counts(lab, n_groups=n_cells) for lab in ch.labels]


def _check_cells(n: int, K: int) -> None:
    if n // max(K, 1) > 100:
        raise ValueError(f"chunked_mdav forms a few large cells (n / K ≤ 100), got n = {n}, K = {K}")


def _mdav_cells(ch, n: int, K: int) -> int:
    """MDAV-generic at cell size ``K`` over the chunks of ``ch`` (a :class:`_Chunks` or a
    :class:`_TaskChunks`): leaves the labels in ``ch.labels``, returns the number of cells."""
    cell = 0
    r = n
    while r >= 3 * K:
        c = _centroid(ch)
        p_row, P = _farthest_from(ch, c)
        d = _take_cell(ch, p_row, P, K, cell)
        cell, r = cell + 1, r - K
        q_row, Q = _farthest(ch, d)
        _take_cell(ch, q_row, Q, K, cell)
        cell, r = cell + 1, r - K
    if r >= 2 * K:
        c = _centroid(ch)
        p_row, P = _farthest_from(ch, c)
        _take_cell(ch, p_row, P, K, cell)
        cell, r = cell + 1, r - K
    if r > 0:
        ch.labels = ch.map(ck.assign_rest, ch.labels, cell=cell)
        cell += 1
    return cell
