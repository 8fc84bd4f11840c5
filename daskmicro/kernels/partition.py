"""Task bodies of the partitioned pipeline: macroaggregation inside a top cell, proximal/distal
split, per-partition microaggregation (a registry of methods) and the cell summaries it returns.

Implements the per-task steps of Algorithm C (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B): macrocells
by MDAV at size K, the proximal/distal prepartition by macrocell SSE, PCA-MDAV on proximal and
MDAV on distal records — generalised from the paper's two partitions to many bounded partitions
(groups of neighbouring macrocells) so that the work fans out.  No Dask here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cells import PartitionResult
from .macro import cell_stats, mdav_large, nested_mdav
from .mdav import mdav
from .moments import Moments, chunk_moments
from .sized import Sized

__all__ = [
    "TopCell",
    "PartitionResult",
    "concat_pieces",
    "join_split_pieces",
    "macroaggregate",
    "macro_summary",
    "proximal_moments",
    "extract",
    "PARTITION_METHODS",
    "register_method",
    "run_partition",
]


@dataclass
class TopCell(Sized):
    """The records of one top-level cell, ascending row ids, and their nested cells.

    ``group``: level-1 cell (a partition candidate); ``macro``: macrocell (level 2), numbered
    globally within the top cell so that each group's macrocells are consecutive.  ``weights``:
    the participation π_j of every record, when a participation column rides along.
    """

    rowids: np.ndarray
    Z: np.ndarray
    group: np.ndarray | None = None
    macro: np.ndarray | None = None
    weights: np.ndarray | None = None


def concat_pieces(*pieces) -> TopCell:
    """Join (row ids, Z) pieces from consecutive chunks; row ids stay ascending, Z float64."""
    pieces = [p for p in pieces if p[0].size]
    rowids = np.concatenate([p[0] for p in pieces])
    Z = np.concatenate([p[1] for p in pieces])
    if rowids.size > 1 and np.any(np.diff(rowids) <= 0):
        order = np.argsort(rowids, kind="stable")
        rowids, Z = rowids[order], Z[order]
    return TopCell(rowids=rowids, Z=np.ascontiguousarray(Z, dtype=np.float64))


def join_split_pieces(hi: list, lo: list) -> TopCell:
    """A top cell from the top level's pieces: (row ids, float32 working copy) pieces ``hi`` and
    the (row ids, float32 residual) pieces ``lo`` of the same rows, added back in float64 (each
    value to within 2⁻⁴⁸ of the z-score it was split from); row ids ascending."""
    top = concat_pieces(*hi)
    rest = concat_pieces(*lo)
    if not np.array_equal(top.rowids, rest.rowids):
        raise ValueError("the working copy and the residual pieces of a top cell hold other rows")
    Z = top.Z
    Z += rest.Z
    return TopCell(rowids=top.rowids, Z=Z)


def macroaggregate(top: TopCell, partition_size: int | None, K: int | None, macro: str = "mdav",
                   macro_iter: int = 2) -> TopCell:
    """Nested MDAV inside a top cell: groups at ``partition_size``, then macrocells at ``K``.

    With ``K=None`` each group is a single macrocell (no proximal/distal split needed).  With
    ``partition_size=None`` (the paper's two-partition layout) there is one group and the
    macrocells come from MDAV at size ``K`` over all the records, as in Algorithm C.
    ``macro="pcl"`` refines every level by at most ``macro_iter`` PCL iterations
    (:func:`~daskmicro.kernels.partition_pcl.nested_pcl`).
    """
    if top.Z.shape[1] == 0:  # every QI constant: one group, one macrocell
        one = np.zeros(top.rowids.size, dtype=np.int64)
        return TopCell(rowids=top.rowids, Z=top.Z, group=one, macro=one.copy(), weights=top.weights)
    if partition_size is None:
        if macro == "pcl":
            from .partition_pcl import nested_pcl

            macro_labels = nested_pcl(top.Z, [K], macro_iter)[0]
        else:
            macro_labels = mdav_large(top.Z, K)
        return TopCell(rowids=top.rowids, Z=top.Z, group=np.zeros_like(macro_labels), macro=macro_labels,
                       weights=top.weights)
    sizes = [partition_size] + ([K] if K is not None and K < partition_size else [])
    if macro == "pcl":
        from .partition_pcl import nested_pcl

        levels = nested_pcl(top.Z, sizes, macro_iter)
    else:
        levels = nested_mdav(top.Z, sizes)
    group = levels[0]
    macro = levels[1] if len(levels) > 1 else group.copy()
    return TopCell(rowids=top.rowids, Z=top.Z, group=group, macro=macro, weights=top.weights)


def macro_summary(top: TopCell):
    """Per macrocell: its group, size, SSE (z-space) and centroid."""
    n_macro = int(top.macro.max()) + 1
    size, sums, sse = cell_stats(top.Z, top.macro, n_macro)
    grp = np.zeros(n_macro, dtype=np.int64)
    grp[top.macro] = top.group
    return grp, size, sse, sums / size[:, None]


def proximal_moments(top: TopCell, distal_macro: np.ndarray) -> Moments:
    """Count, mean and co-moment matrix of the top cell's proximal records, for the global PCA
    (merged across top cells by :func:`~daskmicro.kernels.moments.combine_moments`)."""
    prox = ~np.asarray(distal_macro, dtype=bool)[top.macro]
    return chunk_moments(top.Z[prox], cross=True)


def extract(top: TopCell, group: int, macro_mask: np.ndarray | None):
    """(row ids, Z) of one partition: the records of ``group`` in the macrocells ``macro_mask``.

    With participation weights on the top cell: (row ids, Z, π) instead.
    """
    sel = top.group == group
    if macro_mask is not None:
        sel &= np.asarray(macro_mask, dtype=bool)[top.macro]
    if top.weights is not None:
        return top.rowids[sel], top.Z[sel], top.weights[sel]
    return top.rowids[sel], top.Z[sel]


# --------------------------------------------------------------------------- method registry


def _mdav_method(Z, k, **_):
    return mdav(Z, k)


def _pca_mdav_method(Z, k, components=None, mean=None, **_):
    """PCA-MDAV (Algorithm B) with a basis fitted elsewhere (on all proximal records)."""
    if components is None:
        from .pca import pca_mdav

        return pca_mdav(Z, k)
    scores = np.ascontiguousarray((Z - mean) @ components)
    return mdav(scores, k)


def _pcl_method(Z, k, **params):
    """PCL from MDAV (:func:`~daskmicro.kernels.partition_pcl.pcl_method`)."""
    from .partition_pcl import pcl_method

    return pcl_method(Z, k, **params)


#: Per-partition microaggregation methods: name → f(Z, k, **params) -> labels.
PARTITION_METHODS = {"mdav": _mdav_method, "pca-mdav": _pca_mdav_method, "pcl": _pcl_method}


def register_method(name: str, fn) -> None:
    """Add a per-partition method (``fn(Z, k, **params) -> int labels``) to the registry."""
    PARTITION_METHODS[name] = fn


def run_partition(part, method: str, k: int, params: dict | None = None) -> PartitionResult:
    """Microaggregate one partition with a registered method; summarise its cells."""
    rowids, Z = part[0], part[1]
    if rowids.size < k:
        raise ValueError(f"partition of {rowids.size} records is smaller than k = {k}")
    if Z.shape[1] == 0:  # every QI constant: nothing to microaggregate, one cell
        labels = np.zeros(rowids.size, dtype=np.int64)
    else:
        labels = np.asarray(PARTITION_METHODS[method](Z, k, **(params or {})), dtype=np.int64)
    size, sums, sse = cell_stats(Z, labels)
    return PartitionResult(rowids=rowids, labels=labels, size=size, centroid=sums / size[:, None], sse=sse)
