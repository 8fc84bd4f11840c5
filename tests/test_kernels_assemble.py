"""kernels.assemble: each row's published values sent back to its input chunk, checked to cover
every row exactly once; the same values as the centroid table looked up by cell id."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.kernels import assemble as kasm
from daskmicro.kernels.cells import PartitionResult


def _partitions(rng, n: int, m: int, n_parts: int, n_tops: int):
    """Random partition results over the row ids 0 … n − 1 (shuffled), grouped into top cells."""
    ids = rng.permutation(n).astype(np.int64)
    cuts = np.sort(rng.choice(np.arange(1, n), size=n_parts - 1, replace=False)) if n_parts > 1 else []
    results = []
    for rows in np.split(ids, cuts):
        cells = int(rng.integers(1, len(rows) + 1))
        labels = np.concatenate([np.arange(cells), rng.integers(0, cells, len(rows) - cells)]).astype(np.int64)
        rng.shuffle(labels)
        size = np.bincount(labels, minlength=cells)
        results.append(PartitionResult(rowids=rows, labels=labels, size=size,
                                       centroid=rng.standard_normal((cells, m)) * 10.0 ** rng.integers(-3, 6),
                                       sse=np.zeros(cells)))
    tops = np.sort(rng.integers(0, n_tops, len(results)))
    return results, tops


def _per_chunk(by_bounds, args, results, tops, bounds):
    """Each chunk's rows assembled from every group of top cells, as the gather stage does it."""
    splits = []
    for t in np.unique(tops):
        idx = np.flatnonzero(tops == t)
        splits.append(by_bounds(bounds, *args(idx), *[results[i] for i in idx]))
    return [kasm.assemble_chunk(int(bounds[b]), int(bounds[b + 1] - bounds[b]), *[s[b] for s in splits])
            for b in range(len(bounds) - 1)]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 400), m=st.integers(1, 5),
       n_parts=st.integers(1, 8), n_tops=st.integers(1, 4), n_chunks=st.integers(1, 6))
def test_each_rows_values_are_its_cells_centroid_from_the_table_bit_for_bit(seed, n, m, n_parts, n_tops, n_chunks):
    rng = np.random.default_rng(seed)
    n_parts = min(n_parts, n)
    results, tops = _partitions(rng, n, m, n_parts, n_tops)
    mean, std = rng.standard_normal(m) * 100, rng.uniform(0.01, 50, m)
    inner = np.sort(rng.choice(np.arange(1, n), size=min(n_chunks, n) - 1, replace=False))
    bounds = np.concatenate([[0], inner, [n]]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum([r.n_cells for r in results])[:-1]]).astype(np.int64)

    table = kasm.join_table(*[kasm.centroid_piece(r, mean, std) for r in results])  # the incremental base's table
    cells = _per_chunk(kasm.cells_by_bounds, lambda idx: (offsets[idx],), results, tops, bounds)
    values = _per_chunk(kasm.values_by_bounds, lambda idx: (mean, std), results, tops, bounds)
    for c, v in zip(cells, values):
        assert v.shape == (len(c), m) and v.dtype == np.float64
        np.testing.assert_array_equal(v.view(np.uint64), table[c].view(np.uint64))
    # all rows of a cell carry the very same tuple
    allv, allc = np.concatenate(values), np.concatenate(cells)
    for cell in np.unique(allc):
        rows = allv[allc == cell]
        assert (rows.view(np.uint64) == rows[:1].view(np.uint64)).all()


def _pieces(n: int, m: int):
    rng = np.random.default_rng(0)
    ids = rng.permutation(n).astype(np.int64)
    a, b = np.sort(ids[: n // 2]), np.sort(ids[n // 2:])
    v = rng.standard_normal((n, m))
    return [(a, v[a]), (b, v[b])], v


def test_assembly_puts_every_row_in_place():
    pieces, v = _pieces(50, 3)
    np.testing.assert_array_equal(kasm.assemble_chunk(0, 50, *pieces), v)
    offset = [(r + 100, x) for r, x in pieces]
    np.testing.assert_array_equal(kasm.assemble_chunk(100, 50, *offset), v)


@pytest.mark.parametrize("defect, message", [
    ("missing", "not published"),
    ("twice across pieces", "published twice"),
    ("twice within a piece", "not published"),
    ("outside", "outside its chunk"),
])
def test_assembly_refuses_a_chunk_whose_rows_are_not_each_there_once(defect, message):
    (a, va), (b, vb) = _pieces(50, 2)[0]
    if defect == "missing":
        a, va = a[1:], va[1:]
    elif defect == "twice across pieces":
        a, va = np.concatenate([a, b[:1]]), np.concatenate([va, vb[:1]])
        a, va = a[np.argsort(a)], va[np.argsort(a)]
    elif defect == "twice within a piece":
        a = a.copy()
        a[1] = a[0]
    else:
        a = a.copy()
        a[-1] = 50
    with pytest.raises(RuntimeError, match=message):
        kasm.assemble_chunk(0, 50, (a, va), (b, vb))
