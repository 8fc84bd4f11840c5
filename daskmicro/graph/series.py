"""The release ledger in a run's graph: fingerprints in, frozen cells looked up, pieces recorded.

Thin Dask wiring around :mod:`daskmicro.series` (fingerprints, frozen cells) and
:mod:`daskmicro.io.ledger` (the ledger's files): every input piece gets its records' keyed
fingerprints on the worker that reads it; a re-release (the series has records) forms each
group's cells in one task from the frozen cells (:func:`daskmicro.series.frozen.series_values`);
every published piece writes its ledger rows from the task that builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..io.ledger import record_piece
from ..io.source import RID
from ..runplan import GroupResult
from ..series.fingerprint import FP, with_fingerprints
from ..series.frozen import Frozen, series_values

__all__ = ["SeriesRun", "fingerprinted", "recorded", "submit_series_group"]


@dataclass
class SeriesRun:
    """A run's side of its ledger series: hashing keys, fingerprint columns, frozen cells, and the
    staging directory its pieces are recorded into."""

    keys: tuple
    columns: list
    frozen: Frozen
    stage: Path
    new_series: bool

    @property
    def rerelease(self) -> bool:
        return len(self.frozen) > 0 and not self.new_series


def fingerprinted(pieces, sr: SeriesRun) -> list:
    import dask

    add = dask.delayed(with_fingerprints, pure=True)
    return [add(p, sr.columns, sr.keys) for p in pieces]


def recorded(releases, sr: SeriesRun, client, qi) -> list:
    """Every published piece writes its ledger rows (and drops its fingerprints)."""
    import dask
    from dask.delayed import Delayed

    rec = dask.delayed(record_piece, pure=True)
    return [rec(r, str(sr.stage), i, list(qi), FP) if isinstance(r, Delayed)
            else client.submit(record_piece, r, str(sr.stage), i, list(qi), FP) for i, r in enumerate(releases)]


def _series_group(gp, qi, figures, frozen, *parts):
    from ..figures import group_figures
    from ..group import one_task
    from ..kernels import standardize
    from ..publish import replace_qi

    df = pd.concat(parts, ignore_index=True).sort_values(RID, kind="stable").reset_index(drop=True)
    observed = list(gp.group.observed)
    part = gp.participation
    method = gp.method if gp.one_task else "mdav"

    def form_cells(frame):
        out, _ = one_task(frame.reset_index(drop=True), observed, gp.k, method, gp.energy_loss, gp.n_components,
                          part.column if part else None, part.max_cell_failure if part else None,
                          improve=gp.improve.as_tuple() if gp.improve else None)
        return out[observed].to_numpy(np.float64, na_value=np.nan)

    values, counts = series_values(df, observed, tuple(qi), gp.k, frozen, form_cells)
    out, changes = replace_qi(df, observed, values)
    published = out[observed].to_numpy(np.float64, na_value=np.nan)
    _, labels, sizes = np.unique(published, axis=0, return_inverse=True, return_counts=True)
    X = df[observed].to_numpy(np.float64, na_value=np.nan)
    Z, params = standardize(X)
    varying = ~np.asarray(params.constant)
    Pz = params.transform(published)
    total = float(np.sum(Z[:, varying] ** 2))
    il = 100.0 * float(np.sum((Z[:, varying] - Pz[:, varying]) ** 2)) / total if total > 0 else 0.0
    info = GroupResult(
        n=len(df), m_used=int(varying.sum()), method=method, cells=int(sizes.size), min_cell_size=int(sizes.min()),
        max_cell_size=int(sizes.max()),
        cell_size_counts={int(s): int(c) for s, c in zip(*np.unique(sizes, return_counts=True))},
        information_loss=il, seconds=0.0, constant_columns=[c for c, v in zip(observed, varying) if not v],
        dtype_changes=changes, series=counts)
    del labels
    if figures is not None:
        info = replace(info, figures=group_figures(df, out, *figures))
    return out, info


def submit_series_group(client, gp, qi, figures, frozen, sel):
    """One group of a re-release as one task: (release future, GroupResult future)."""
    import operator

    if gp.group.n > gp_limit(gp):
        raise ParameterError(
            f"a re-release forms each group's cells in one task, limited to max_task_rows = {gp_limit(gp):,} records "
            f"({gp.group.label}: n = {gp.group.n:,}); raise max_task_rows")
    pair = client.submit(_series_group, gp, list(qi), figures, frozen, *client.compute(sel))
    return client.submit(operator.itemgetter(0), pair), client.submit(operator.itemgetter(1), pair)


def gp_limit(gp) -> int:
    from ..config import DEFAULT_MAX_TASK_ROWS

    return gp.pipeline.max_task_rows if gp.pipeline is not None else DEFAULT_MAX_TASK_ROWS
