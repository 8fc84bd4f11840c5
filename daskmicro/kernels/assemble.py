"""From partition results to per-chunk publications: each row's published values, or its cell id.

After the fan-out every partition holds its own local cell numbers.  The driver numbers cells
globally (partition offsets); one task builds the table of all centroids in original units
(cells × QI columns, a k-th of the data), and each top cell turns its partitions' results into
(row id, global cell id) pairs that travel back to the input chunk they came from, where they
are checked to cover every row exactly once.  The release sends each row its published values
instead (:func:`values_by_bounds`): no task then needs the centroids of all cells, whose table grows
with the data; the incremental survey's base keeps cell ids and the table, which its increment
stage searches anyway.  No Dask here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["top_publication", "values_by_bounds", "cells_by_bounds", "split_by_bounds", "assemble_chunk",
           "centroid_piece", "join_table", "partition_summary"]


def partition_summary(res):
    """(cells, SSE, histogram of cell sizes as (sizes, counts)) of one partition result."""
    sizes, counts = np.unique(res.size, return_counts=True)
    return res.n_cells, float(res.sse.sum()), (sizes, counts)


def top_publication(offsets, *results):
    """Row ids (ascending) and global cell ids of a top cell's records.

    ``results`` are the :class:`~daskmicro.kernels.cells.PartitionResult` of the top cell's
    partitions and ``offsets`` their first global cell ids.
    """
    rowids = np.concatenate([r.rowids for r in results])
    cells = np.concatenate([r.labels + off for r, off in zip(results, offsets)])
    order = np.argsort(rowids, kind="stable")
    return rowids[order], cells[order]


def values_by_bounds(bounds, mean, std, *results) -> list:
    """The published values of a group of top cells' records cut by input chunk: for each chunk
    (``bounds``: the chunks' first row ids + total) a piece (row ids ascending, values), the
    values being each row's cell centroid in original units (rows × QI columns).

    The centroids are mapped back once per cell (:func:`centroid_piece`) and then repeated for
    the cell's rows, so all records of a cell carry exactly the same values.  Each piece's values
    are made on their own (one copy of the group's values in all, never a whole-group array
    besides), and each piece is freed once its chunk has taken it.  Sent back to the input chunks
    instead of cell ids, they spare every chunk the table of all centroids.
    """
    rowids = np.concatenate([r.rowids for r in results])
    first = np.cumsum([0] + [r.n_cells for r in results[:-1]])
    labels = np.concatenate([r.labels + off for r, off in zip(results, first)])
    table = np.concatenate([centroid_piece(r, mean, std) for r in results])
    order = np.argsort(rowids, kind="stable")
    rowids, labels = rowids[order], labels[order]
    del order
    cuts = np.searchsorted(rowids, bounds)
    return [(rowids[a:b].copy(), table[labels[a:b]]) for a, b in zip(cuts[:-1], cuts[1:])]


def cells_by_bounds(bounds, offsets, *results) -> list:
    """:func:`top_publication` cut by input chunk (:func:`split_by_bounds`)."""
    return split_by_bounds(top_publication(offsets, *results), bounds)


def centroid_piece(res, mean, std) -> np.ndarray:
    """A partition's centroids in original units: computed in z-space per cell and mapped back as
    ``c·std + mean``, one value per cell, so all records of a cell publish exactly the same tuple."""
    return res.centroid * std + mean


def join_table(*pieces) -> np.ndarray:
    """The centroid table from the :func:`centroid_piece` of every partition, in partition order."""
    return np.concatenate(pieces)


def split_by_bounds(pub, bounds):
    """Split a top publication by input chunk: ``bounds`` are the chunks' first row ids + total.

    The pieces are copies, not views: each is freed once its chunk has taken it, instead of
    keeping the whole publication alive until the last chunk has."""
    rowids, values = pub
    cuts = np.searchsorted(rowids, bounds)
    return [(rowids[a:b].copy(), values[a:b].copy()) for a, b in zip(cuts[:-1], cuts[1:])]


def assemble_chunk(row0: int, length: int, *pieces) -> np.ndarray:
    """The rows of one input chunk, in row order, from the (row ids, values) ``pieces`` of every
    top cell: every row exactly once, or a RuntimeError.  ``values`` are cell ids (one per row,
    :func:`top_publication`) or published values (rows × columns, :func:`values_by_bounds`)."""
    first = pieces[0][1]
    out = np.empty((length,) + first.shape[1:], dtype=first.dtype)
    seen = np.zeros(length, dtype=bool)
    count = 0
    for rowids, v in pieces:
        pos = rowids - row0
        if pos.size and (pos.min() < 0 or pos.max() >= length):
            raise RuntimeError("a published row falls outside its chunk")
        if seen[pos].any():  # twice within one piece: then a row is missing, caught below
            raise RuntimeError("a row was published twice")
        seen[pos] = True
        out[pos] = v
        count += pos.size
    if count != length or not seen.all():
        raise RuntimeError(f"{length - count} row(s) of a chunk were not published")
    return out
