"""From partition results to per-chunk publications: global cell ids and centroids per row.

After the fan-out every partition holds its own local cell numbers.  The driver numbers cells
globally (partition offsets), each top cell turns its partitions' results into, for each of its
records, the global cell id and the cell centroid in original units, and those rows travel back
to the input chunk they came from, where they are checked to cover every row exactly once.
No Dask here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["top_publication", "split_by_bounds", "assemble_chunk", "Publication"]


class Publication(tuple):
    """(cells, values) for the rows of one input chunk, in row order."""

    __slots__ = ()

    @property
    def cells(self) -> np.ndarray:
        return self[0]

    @property
    def values(self) -> np.ndarray:
        return self[1]


def top_publication(offsets, mean, std, *results):
    """Row ids (ascending), global cell ids and original-unit centroids of a top cell's records.

    ``results`` are the :class:`~daskmicro.kernels.partition.PartitionResult` of the top cell's
    partitions and ``offsets`` their first global cell ids.  Centroids are computed in z-space
    per cell and mapped back as ``c·std + mean``: one value per cell, so all records of a cell
    publish exactly the same tuple.
    """
    rowids = np.concatenate([r.rowids for r in results])
    cells = np.concatenate([r.labels + off for r, off in zip(results, offsets)])
    values = np.concatenate([(r.centroid * std + mean)[r.labels] for r in results])
    order = np.argsort(rowids, kind="stable")
    return rowids[order], cells[order], values[order]


def split_by_bounds(pub, bounds):
    """Split a top publication by input chunk: ``bounds`` are the chunks' first row ids + total."""
    rowids, cells, values = pub
    cuts = np.searchsorted(rowids, bounds)
    return [(rowids[a:b], cells[a:b], values[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def assemble_chunk(row0: int, length: int, m: int, *pieces) -> Publication:
    """The publication of one input chunk from its pieces; every row exactly once, or an error."""
    cells = np.full(length, -1, dtype=np.int64)
    values = np.empty((length, m))
    seen = 0
    for rowids, c, v in pieces:
        pos = rowids - row0
        if pos.size and (pos.min() < 0 or pos.max() >= length):
            raise RuntimeError("a published row falls outside its chunk")
        if np.any(cells[pos] >= 0):
            raise RuntimeError("a row was published twice")
        cells[pos] = c
        values[pos] = v
        seen += pos.size
    if seen != length or np.any(cells < 0):
        raise RuntimeError(f"{length - seen} row(s) of a chunk were not published")
    return Publication((cells, values))
