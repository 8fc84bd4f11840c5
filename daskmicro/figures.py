"""The before/after figures of a run, from the frames the run already holds (no Dask here).

Thin adapters between the executor's frames and the kernel (:mod:`daskmicro.kernels.figures`):
:func:`group_figures` summarises a one-task group (its records before and after the centroids
went in), :func:`chunk_figures` one input chunk of a pipeline group (its rows and their cells'
centroids), and :func:`report_figures` merges the groups' summaries into the report's
``before_after`` section, small counts suppressed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .io.qi import qi_frame_matrix
from .kernels import figures as kf

__all__ = ["group_figures", "chunk_figures", "report_figures"]


def group_figures(original: pd.DataFrame, released: pd.DataFrame, qi, scale) -> dict | None:
    """Summary of a group's records before and after (same rows, same order)."""
    if scale is None:
        return None
    qi = list(qi)
    return kf.summarize(qi_frame_matrix(original, qi), qi_frame_matrix(released, qi), scale.subset(qi))


def chunk_figures(part: pd.DataFrame, cells, table, qi, varying, scale) -> dict | None:
    """Summary of one input chunk of a pipeline group: ``cells`` are its rows' global cell ids,
    ``table`` the centroids (one column per varying QI, in order), ``varying`` a mask over
    ``qi`` (a constant column is published unchanged)."""
    if scale is None:
        return None
    qi = list(qi)
    X = qi_frame_matrix(part, qi)
    Y = X.copy()
    if len(part):
        Y[:, np.asarray(varying, dtype=bool)] = np.asarray(table)[np.asarray(cells, dtype=np.int64)]
    return kf.summarize(X, Y, scale.subset(qi))


def report_figures(infos, qi, scale, k: int) -> dict | None:
    """The report's ``before_after`` section from the groups' figures (None when none has any)."""
    parts = [i.get("figures") for i in infos if i is not None]
    return kf.publish(kf.merge(parts, list(qi)), scale, int(k))
