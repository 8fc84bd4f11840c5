"""The before/after figures of a run, from the frames the run already holds (no Dask here).

Thin adapters between the executor's frames and the kernel (:mod:`daskmicro.kernels.figures`):
:func:`group_figures` summarises a one-task group (its records before and after the centroids
went in); a pipeline group is summarised by :func:`chunk_figures` per input chunk (the original
values, in the pass that checks the release) and :func:`cells_figures` per partition (the
released values, from the cells: each centroid weighted by its size); :func:`report_figures`
merges the groups' summaries into the report's ``before_after`` section, small counts
suppressed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .io.qi import qi_frame_matrix
from .kernels import figures as kf

__all__ = ["group_figures", "chunk_figures", "cells_figures", "report_figures"]


def group_figures(original: pd.DataFrame, released: pd.DataFrame, qi, scale) -> dict | None:
    """Summary of a group's records before and after (same rows, same order)."""
    if scale is None:
        return None
    qi = list(qi)
    return kf.summarize(qi_frame_matrix(original, qi), qi_frame_matrix(released, qi), scale.subset(qi))


def chunk_figures(part: pd.DataFrame, qi, scale) -> dict | None:
    """The original side of one input chunk of a pipeline group (its released side comes from
    the cells: :func:`cells_figures`)."""
    if scale is None:
        return None
    qi = list(qi)
    return kf.summarize_original(qi_frame_matrix(part, qi), scale.subset(qi))


def cells_figures(result, qi, mean, std, varying, scale) -> dict | None:
    """The released side of one partition of a pipeline group from its cells: each centroid
    (z-scored by the group's ``mean`` and ``std``, varying columns only; a constant column
    publishes its one value, the mean) weighted by its cell's size."""
    if scale is None:
        return None
    qi = list(qi)
    varying = np.asarray(varying, dtype=bool)
    values = np.tile(np.asarray(mean, dtype=np.float64), (result.n_cells, 1))
    if varying.any():
        values[:, varying] = result.centroid * std[varying] + mean[varying]
    return kf.summarize_cells(values, result.size, scale.subset(qi))


def report_figures(infos, qi, scale, k: int) -> dict | None:
    """The report's ``before_after`` section from the groups' figures (None when none has any)."""
    parts = [i.figures for i in infos if i is not None]
    return kf.publish(kf.merge(parts, list(qi)), scale, int(k))
