"""The cells formed in one partition of the partitioned pipeline (a leaf module: it imports only
:mod:`daskmicro.kernels.sized`).

:class:`PartitionResult` is what a per-partition method returns
(:func:`daskmicro.kernels.partition.run_partition`) and what the refinement stage improves
(:func:`daskmicro.kernels.partition_pcl.refine_partition`); it lives here so that neither of
those modules has to import the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .sized import Sized

__all__ = ["PartitionResult"]


@dataclass
class PartitionResult(Sized):
    """Cells formed in one partition: row ids, local labels, and per-cell summaries."""

    rowids: np.ndarray
    labels: np.ndarray
    size: np.ndarray
    centroid: np.ndarray
    sse: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def n_cells(self) -> int:
        return int(self.size.size)
