"""The disclosure-risk stage of a run with ``risk`` (:mod:`daskmicro.privacy.risk_sample`).

Before the release is written, the sampled records' original QI and stratum values are read from the
input (one small task per piece of the input, stratum columns mapped to their published labels);
then every piece of the release, in the same computation that writes or collects it (so that no
cell is formed twice), also gives its partial against the sample.  :meth:`RiskTap.result` merges
them in this process: a few numbers per sampled record, at most
:data:`~daskmicro.privacy.risk_sample.SAMPLE_ROWS` records.
"""

from __future__ import annotations

import dask

from ..io.source import RID
from ..privacy import risk_sample as rs
from ..strata import publish_strata

__all__ = ["RiskTap", "risk_tap"]


def _originals(df, rids, columns, strata, labels):
    rows = rs.sample_rows(df, rids, RID, columns)
    return publish_strata(rows, list(strata), labels) if labels else rows


class RiskTap:
    """The sample and the partials of the release's pieces (futures, or values in process)."""

    def __init__(self, client, sample):
        self.client, self.sample, self.parts = client, sample, []

    def lazy(self, piece):
        """The partial of a lazy piece, to be computed with it."""
        return dask.delayed(rs.piece_partial, pure=True)(piece, self.sample, RID)

    def submit(self, piece):
        """The partial of a piece that is a future (or, in process, a value)."""
        self.parts.append(self.client.submit(rs.piece_partial, piece, self.sample, RID))

    def result(self) -> dict:
        return rs.combine(self.sample, self.client.gather(self.parts))


def risk_tap(client, source, lay_, seed: int) -> RiskTap:
    """Draw the sample (seeded by the run) and read its records' original values from the input."""
    qi, strata = list(lay_.qi), list(lay_.strata)
    rids = rs.draw(lay_.n, rs.SAMPLE_ROWS, seed)
    read = dask.delayed(_originals, pure=True)
    frames = [read(source.read_task(i, qi + strata, int(lay_.row0s[i])), rids, qi + strata, strata, lay_.labels)
              for i in range(len(source.files)) if lay_.rows[i]]
    got = client.gather(client.compute(frames))
    return RiskTap(client, rs.build_sample(got, RID, qi, strata, lay_.n))
