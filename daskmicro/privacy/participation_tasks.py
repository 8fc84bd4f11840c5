"""Task bodies for per-record participation on the partitioned pipeline (no Dask here).

Implements §V-B (uneven participation π_j) and the §VI-A failure metrics of Rebollo-Monedero et
al., *p-Probabilistic k-Anonymous Microaggregation for the Anonymization of Surveys with Uncertain
Participation* (Information Sciences 2017) per partition:

* the π_j of a top cell's records are fetched from the input chunks by row id
  (:func:`rowid_counts`, :func:`rowids_between`, :func:`take_values`, :func:`attach_weights`), so
  the top-level cutting and the macroaggregation see only the z-scored QIs, as without π;
* each partition's cells are grown by :func:`~daskmicro.privacy.probabilistic.grow_cells` until
  every cell's failure q̄ ≤ p̄ (:func:`grow_partition`) — in the z-space for a distal (MDAV)
  partition, among the principal components for a proximal (PCA-MDAV) one, as Algorithm B does
  with MDAV — and its cells' failure figures are summarised for the merge on the client.
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError
from .failures import cell_failure_partial
from .probabilistic import grow_cells
from ..kernels.macro import cell_stats
from ..kernels.partition import PartitionResult, TopCell

__all__ = ["GROW_METHODS", "rowid_counts", "rowids_between", "take_values", "attach_weights", "grow_partition"]

#: Per-partition methods whose cells can be grown under participation (the space they work in).
GROW_METHODS = ("mdav", "pca-mdav")


def rowid_counts(top: TopCell, bounds: np.ndarray) -> np.ndarray:
    """Records of the top cell in each input chunk; ``bounds`` are the chunks' first row ids + n."""
    cuts = np.searchsorted(top.rowids, np.asarray(bounds, dtype=np.int64))
    return np.diff(cuts)


def rowids_between(top: TopCell, lo: int, hi: int) -> np.ndarray:
    """Row ids of the top cell in [lo, hi) (one input chunk), ascending."""
    a, b = np.searchsorted(top.rowids, [lo, hi])
    return top.rowids[a:b]


def take_values(values: np.ndarray, row0: int, rowids: np.ndarray) -> np.ndarray:
    """The values of an input chunk (first row id ``row0``) at the given global row ids."""
    return values[rowids - row0]


def attach_weights(top: TopCell, *pieces) -> TopCell:
    """The top cell with its records' π_j, ``pieces`` being those of each input chunk in row order."""
    w = np.concatenate(pieces) if pieces else np.empty(0)
    if w.size != top.rowids.size:
        raise RuntimeError(f"participation of {w.size} records fetched for a top cell of {top.rowids.size}")
    return TopCell(rowids=top.rowids, Z=top.Z, group=top.group, macro=top.macro,
                   weights=np.ascontiguousarray(w, dtype=np.float64))


def _space(Z: np.ndarray, method: str, components=None, mean=None) -> np.ndarray:
    if Z.shape[1] == 0:  # every QI constant: distance means nothing, one column of zeros
        return np.zeros((Z.shape[0], 1))
    if method == "pca-mdav":
        if components is None:
            from ..kernels.pca import pca_reduce

            return pca_reduce(Z).scores
        return np.ascontiguousarray((Z - mean) @ components)
    if method == "mdav":
        return Z
    raise ValueError(f"method {method!r} cannot grow cells under participation (only {', '.join(GROW_METHODS)})")


def grow_partition(part, method: str, k: int, max_cell_failure: float, params: dict | None = None) -> PartitionResult:
    """Cells of one partition grown until each fails with probability q̄ ≤ p̄ (per-record π_j).

    ``part`` is (row ids, Z, π).  The cells are those of
    :func:`~daskmicro.privacy.probabilistic.grow_cells` in the space of ``method`` (z-space for
    ``"mdav"``, principal components of the fitted basis for ``"pca-mdav"``).  The result's
    ``info["failure"]`` is the partition's :func:`~daskmicro.privacy.failures.cell_failure_partial`.
    """
    rowids, Z, pis = part
    if rowids.size < k:
        raise ValueError(f"partition of {rowids.size} records is smaller than k = {k}")
    space = _space(Z, method, **(params or {}))
    try:
        labels = np.asarray(grow_cells(space, k, pis, max_cell_failure), dtype=np.int64)
    except ParameterError:
        raise ParameterError(
            f"a partition of {rowids.size} records cannot meet k = {k} with max_cell_failure = {max_cell_failure:g} "
            f"under its participation: even all its records in one cell fail more often; raise K or partition_size"
        ) from None
    size, sums, sse = cell_stats(Z, labels)
    if size.min() < k:  # grow_cells closes a cell only at ≥ k records (q̄ ≤ p̄ < 1 needs them)
        raise RuntimeError(f"a grown cell holds {int(size.min())} records, fewer than k = {k}")
    failure = cell_failure_partial(k, max_cell_failure, labels, pis, Z)
    return PartitionResult(rowids=rowids, labels=labels, size=size, centroid=sums / size[:, None], sse=sse,
                           info={"failure": failure})
