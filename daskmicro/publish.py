"""Building the published table: QI columns replaced by centroids, rows shuffled, ids optional.

Shared by the in-memory path (:mod:`daskmicro.anonymize`) and the Dask pipeline
(:mod:`daskmicro.graph.gather`), so both follow the same conventions (DESIGN.md): centroids in
original units; float QI columns keep their dtype, integer ones become float64 (reported);
every non-QI column untouched; rows shuffled with a recorded seed; ``row_id`` only on request.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api import types as ptypes

__all__ = ["ROW_ID", "replace_qi", "shuffle_keys", "publish_chunk"]

ROW_ID = "row_id"

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def replace_qi(df: pd.DataFrame, columns: list, values: np.ndarray):
    """Copy of ``df`` with ``columns`` set to ``values`` (rows × columns); returns it and dtype changes."""
    out = df.copy()
    changes = {}
    for j, c in enumerate(columns):
        dtype = df[c].dtype
        # assign arrays, not Series: positional, whatever the index of df
        if ptypes.is_float_dtype(dtype):
            out[c] = pd.Series(values[:, j]).astype(dtype).array
        else:
            out[c] = values[:, j]
            changes[c] = {"from": str(dtype), "to": "float64"}
    return out, changes


def shuffle_keys(seed: int, rowids: np.ndarray) -> np.ndarray:
    """Pseudo-random uint64 keys of row ids under ``seed`` (splitmix64 finaliser).

    Sorting by these keys shuffles rows in an order that depends only on the seed and the row
    ids — not on the chunking or the number of workers.
    """
    with np.errstate(over="ignore"):
        z = rowids.astype(np.uint64) + np.uint64(seed % (1 << 64)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def publish_chunk(part: pd.DataFrame, cells, table, row0: int, columns: list, seed: int, keep_row_id: bool):
    """The release rows of one input chunk: centroids in, rows shuffled within the chunk.

    ``cells`` holds the global cell id of each row of ``part`` (row order) and ``table`` the
    centroids of all cells in original units (one row per cell, one column per name in
    ``columns``).
    """
    if len(part) != len(cells):
        raise RuntimeError(f"an input chunk has {len(part)} rows but {len(cells)} cell ids")
    out, _ = replace_qi(part, columns, table[cells])
    rowids = np.arange(row0, row0 + len(part), dtype=np.int64)
    order = np.argsort(shuffle_keys(seed, rowids), kind="stable")
    out = out.take(order).reset_index(drop=True)
    if keep_row_id:
        out[ROW_ID] = rowids[order]
    return out
