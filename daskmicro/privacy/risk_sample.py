"""Disclosure risk of a run's release, measured on a sample of its records, from the release's pieces.

The measures are those of :mod:`daskmicro.privacy.risk` (record linkage, interval disclosure),
computed where no process holds the whole release: a seeded uniform sample of at most
:data:`SAMPLE_ROWS` records is drawn by row id, their original QI values are read from the input
(:func:`sample_rows`, :func:`build_sample`), and each piece of the release, as it goes by on its way
to be written, gives one small partial (:func:`piece_partial`): the sampled records' published
values, for every sampled record the distance to the nearest *distinct* published tuple of the
piece in the record's own published stratum, and the moments of the published QI columns.
:func:`combine` merges the partials into the two rates.

* Distances are Euclidean after z-scoring every varying QI with the sample's mean and standard
  deviation; the nearest tuple is looked for among the tuples of the record's published stratum
  (an intruder who knows a person's stratum looks there only).  Ties count as correct links.
* Interval disclosure: a sampled record is disclosed when every released QI value lies within
  ±p·S' of its true value, S' the standard deviation (ddof = 1) of the whole released column.
* Only records whose QIs are all observed are sampled (a missing value has no distance).

Pure numpy / pandas; the results hold rates and counts, never a data value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

__all__ = ["SAMPLE_ROWS", "INTERVAL_P", "RiskSample", "draw", "sample_rows", "build_sample", "piece_partial",
           "combine"]

#: Records of the sample (all of them below this many).
SAMPLE_ROWS = 10_000
#: Half-width of the interval of interval disclosure, as a fraction of the released standard deviation.
INTERVAL_P = 0.05
_TIE = 1e-9


@dataclass(frozen=True)
class RiskSample:
    """The sampled records: row ids (sorted), original QI values, published stratum keys."""

    rids: np.ndarray
    X: np.ndarray
    keys: list
    qi: tuple
    strata: tuple
    n: int                  # records of the release
    mean: np.ndarray
    std: np.ndarray
    used: np.ndarray        # QI columns that vary in the sample

    def z(self, Y: np.ndarray) -> np.ndarray:
        return (Y[:, self.used] - self.mean[self.used]) / self.std[self.used]


def draw(n: int, size: int = SAMPLE_ROWS, seed: int = 0) -> np.ndarray:
    """Sorted row ids of a uniform sample of ``min(n, size)`` of the records ``0 … n − 1``."""
    if size >= n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng([int(seed), 0x5249534B])   # not the shuffle's stream
    return np.sort(rng.choice(n, size=int(size), replace=False)).astype(np.int64)


def sample_rows(df: pd.DataFrame, rids: np.ndarray, rid: str, columns) -> pd.DataFrame:
    """The rows of ``df`` whose row id (column ``rid``) is in ``rids``: the row id and ``columns``."""
    mask = np.isin(df[rid].to_numpy(dtype=np.int64), rids)
    return df.loc[mask, [rid, *dict.fromkeys(columns)]].reset_index(drop=True)


def _text(v) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return "\0"
    return str(v)


def _keys(df: pd.DataFrame, strata) -> list:
    if not strata:
        return [()] * len(df)
    return list(zip(*(df[c].astype(object).map(_text).tolist() for c in strata)))


def _matrix(df: pd.DataFrame, qi) -> np.ndarray:
    return np.column_stack([pd.Series(df[c]).to_numpy(dtype=np.float64, na_value=np.nan) for c in qi]) \
        if len(df) else np.empty((0, len(qi)))


def build_sample(frames, rid: str, qi, strata, n: int) -> RiskSample:
    """The sample from the frames of :func:`sample_rows` (stratum columns as published): records with
    every QI observed, in row-id order."""
    df = pd.concat(list(frames), ignore_index=True).sort_values(rid, kind="stable").reset_index(drop=True)
    X = _matrix(df, qi)
    complete = np.isfinite(X).all(axis=1)
    df, X = df[complete].reset_index(drop=True), X[complete]
    mean = X.mean(axis=0) if len(X) else np.zeros(len(qi))
    std = X.std(axis=0) if len(X) else np.zeros(len(qi))
    used = std > 0
    return RiskSample(rids=df[rid].to_numpy(dtype=np.int64), X=X, keys=_keys(df, strata), qi=tuple(qi),
                      strata=tuple(strata), n=int(n), mean=mean, std=np.where(used, std, 1.0), used=used)


def piece_partial(piece: pd.DataFrame, sample: RiskSample, rid: str) -> dict:
    """One piece of the release against the sample: the sampled records' published values, each
    sampled record's distance to the nearest distinct published tuple of this piece in its stratum,
    and the moments of the published QI columns (about the sample's mean)."""
    qi, strata = list(sample.qi), list(sample.strata)
    Y = _matrix(piece, qi)
    ok = np.isfinite(Y)
    centred = np.where(ok, Y - sample.mean, 0.0)
    out = {"count": ok.sum(axis=0), "s1": centred.sum(axis=0), "s2": (centred ** 2).sum(axis=0)}
    rids = piece[rid].to_numpy(dtype=np.int64)
    mine = np.isin(rids, sample.rids)
    out["rids"], out["own"] = rids[mine], Y[mine]
    dmin = np.full(len(sample.rids), np.inf)
    if sample.used.any() and len(sample.rids):
        complete = piece.loc[ok.all(axis=1), strata + qi].drop_duplicates()
        where: dict = {}
        for i, key in enumerate(sample.keys):
            where.setdefault(key, []).append(i)
        Zx = sample.z(sample.X)
        Zt = sample.z(_matrix(complete, qi))
        tuple_keys = _keys(complete, strata)
        groups: dict = {}
        for j, key in enumerate(tuple_keys):
            if key in where:
                groups.setdefault(key, []).append(j)
        for key, rows in groups.items():
            idx = np.asarray(where[key])
            dmin[idx], _ = cKDTree(np.unique(Zt[rows], axis=0)).query(Zx[idx], k=1)
    out["dmin"] = dmin
    return out


def combine(sample: RiskSample, partials, p: float = INTERVAL_P) -> dict:
    """Record linkage and interval disclosure of the sample from every piece's partial (exact
    counts: the private run record's; the published report rounds the rates)."""
    partials = list(partials)
    m, s = len(sample.qi), len(sample.rids)
    dmin = np.min([q["dmin"] for q in partials], axis=0) if partials else np.full(s, np.inf)
    own = np.full((s, m), np.nan)
    for q in partials:
        own[np.searchsorted(sample.rids, q["rids"])] = q["own"]
    count = np.sum([q["count"] for q in partials], axis=0)
    s1, s2 = np.sum([q["s1"] for q in partials], axis=0), np.sum([q["s2"] for q in partials], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.sqrt(np.maximum(s2 - s1 ** 2 / count, 0.0) / (count - 1))
    if sample.used.any():
        d_own = np.sqrt(np.sum((sample.z(sample.X) - sample.z(own)) ** 2, axis=1))
        linked = d_own <= dmin + _TIE * np.maximum(1.0, dmin)
    else:   # nothing varies: every record publishes the same tuple, trivially its own
        linked = np.ones(s, dtype=bool)
    outside = np.abs(sample.X - own) > p * spread + 1e-12 * np.maximum(np.abs(own), 1.0)
    disclosed = ~outside.any(axis=1)
    n_linked, n_disclosed = int(linked.sum()), int(disclosed.sum())
    return {
        "sample": {"records": s, "of": sample.n, "complete_only": True},
        "record_linkage": {"rate": n_linked / s if s else None, "n_linked": n_linked, "n_sampled": s},
        "interval_disclosure": {"rate": n_disclosed / s if s else None, "n_disclosed": n_disclosed, "n_sampled": s,
                                "p": float(p), "max_outside": 0},
    }
