"""What the public companions of a release say about its within-cell spread: one coarse figure.

A release publishes every cell's centroid and size, so anyone can compute the between-cell sum of
squares SSB of each QI (the grand mean is the release's mean, the cells are its groups of equal
published tuples).  The total SST is SSE + SSB exactly (centroids are cell means), so an exact
information loss IL = 100·SSE/SST gives SSE = SSB·IL/(100 − IL), the within-cell sum of squares;
so do the original means and standard deviations (SST = n·σ²), per-cell or per-QI SSE, and any
other exact function of the original spread.  Someone who knows every record but a cell's few
then solves for them — a pair exactly.

The published report (:meth:`daskmicro.report.Report.to_dict`: ``_report.json`` /
``NAME.report.json``, the HTML page), the ``_SUCCESS`` manifest and the printed summary therefore
give the information loss only rounded to a fixed grid (:data:`IL_GRID`), and no other figure of
the original spread: :func:`public_report` takes the exact report dict and leaves out what would
pin the spread down (it all goes to the private run record, :mod:`daskmicro.io.runrecord`).

The grid: 0.1 percentage points near 0 % and 100 %, coarser towards 50 % (0.2, 0.5, 1, 2 and
5 points), so that the two ends of every interval differ by a factor of at least
:data:`MIN_ODDS_RATIO` in IL/(100 − IL) = SSE/SSB.  With one varying QI, the rounded value fixes
SSE only to within that factor — a pair's difference to within about ±4.5 % — wherever the true
value lies; with several QIs it fixes one weighted sum of their SSEs, not each.
"""

from __future__ import annotations

import bisect
import copy
import math
from typing import Mapping

from ..privacy.failure_bounds import public_failures

__all__ = ["IL_GRID", "MIN_ODDS_RATIO", "rounded_information_loss", "public_information_loss",
           "information_loss_text", "loss_qualifier", "LOSS_QUALIFIERS", "IL_UNIT", "public_report", "public_risk",
           "RISK_STEP_RECORDS", "risk_steps",
           "PRIVATE_NOTE"]

#: The SSE/SSB bounds of each interval of the grid differ by at least this factor.
MIN_ODDS_RATIO = 1.2

_LOWER = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0,
          15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0)
#: The published values of the information loss (percent); a value stands for every IL between the
#: midpoints to its neighbours.
IL_GRID = _LOWER + (50.0,) + tuple(round(100.0 - v, 1) for v in reversed(_LOWER))
_CUTS = tuple((a + b) / 2 for a, b in zip(IL_GRID[:-1], IL_GRID[1:]))

PRIVATE_NOTE = "exact value in the private run record"


def rounded_information_loss(il: float) -> tuple[float, float, float]:
    """``(value, low, high)``: the grid value (:data:`IL_GRID`) published for the information loss
    ``il`` (percent) and the interval it stands for, ``low ≤ il < high`` (``high`` = 100 at the top)."""
    il = float(il)
    if not math.isfinite(il):
        raise ValueError(f"information loss must be finite, got {il!r}")
    il = min(max(il, 0.0), 100.0)
    i = bisect.bisect_right(_CUTS, il)
    low = _CUTS[i - 1] if i > 0 else 0.0
    high = _CUTS[i] if i < len(_CUTS) else 100.0
    return IL_GRID[i], round(low, 2), round(high, 2)


def public_information_loss(il: float) -> dict:
    """The report fields of an information loss as published: the grid value and its interval."""
    value, low, high = rounded_information_loss(il)
    return {"information_loss": value, "distortion": round(value / 100.0, 4),
            "information_loss_rounding": {"rounded": True, "interval": [low, high], "unit": "percent",
                                          "note": f"IL rounded to a fixed grid; {PRIVATE_NOTE}"}}


def _number(v: float) -> str:
    return f"{v:g}"


#: The one unit of the information loss wherever it is printed or drawn: 100·SSE/SST on the
#: z-scored QIs is the percentage of the QIs' total variance that averaging within the groups removes.
IL_UNIT = "% of the QIs' variance"

#: Plain words for the published (rounded) information loss: (largest value, word), the last word
#: beyond.  Exact MDAV on the Census benchmark (13 QIs) loses 5.69–14.16 % at k = 3–10 (published
#: 6–15 %): "moderate", the usual price of k-anonymous microaggregation of many QIs; up to 5 % is
#: "little", up to 1 % (large, correlated or few QIs) "very little"; beyond 15 % "substantial".
LOSS_QUALIFIERS = ((1.0, "very little"), (5.0, "little"), (15.0, "moderate"))
_BEYOND = "substantial"


def loss_qualifier(il: float) -> str:
    """The plain word for an information loss ``il`` (percent), decided on its published value (the
    grid value, :func:`rounded_information_loss`), so that the word says nothing the rounded figure
    does not: at most 1 % "very little", at most 5 % "little", at most 15 % "moderate", above
    "substantial" (:data:`LOSS_QUALIFIERS`)."""
    value = rounded_information_loss(il)[0]
    for top, word in LOSS_QUALIFIERS:
        if value <= top:
            return word
    return _BEYOND


def information_loss_text(il: float) -> str:
    """``"about 6 % of the QIs' variance — moderate (rounded: 5.5 – 7 %)"``: the information loss
    as every printed summary gives it — rounded, in the one unit (:data:`IL_UNIT`), with its word."""
    value, low, high = rounded_information_loss(il)
    return f"about {_number(value)} {IL_UNIT} — {loss_qualifier(il)} (rounded: {_number(low)} – {_number(high)} %)"


# --------------------------------------------------------------------------- the published report

#: Keys whose values follow from the original spread, left out of the published report wherever
#: they occur (the exact figures stay in the private run record).
_SPREAD_KEYS = frozenset({
    "information_loss", "distortion", "reference_information_loss", "method_information_loss",
    "mdav_information_loss", "information_loss_at_k", "distortion_ratio", "expected_distortion",
    "macrocell_sse", "eigenvalues", "energy_loss", "ratio", "delta", "utility",
})


def _scrub(value):
    """``value`` without the keys of :data:`_SPREAD_KEYS` or starting with ``sse`` (recursively)."""
    if isinstance(value, Mapping):
        return {key: _scrub(v) for key, v in value.items()
                if not (str(key) in _SPREAD_KEYS or str(key).lower().startswith("sse"))}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


#: Top-level fields left out of the published report: figures computed from the original values
#: (the exact-MDAV reference IL, utility and disclosure-risk measures comparing each record with its
#: released values, the spectrum of the original correlation); the rounded IL replaces ``distortion``.
_LEFT_OUT = frozenset({"reference_information_loss", "utility", "risk", "eigenvalues", "distortion"})

#: Sections of the report that may carry spread figures: scrubbed, the rest kept.
_SCRUBBED = ("pca", "pipeline", "strata", "reference", "incremental", "probabilistic", "verification", "improvement")

#: The timeline of an incremental survey on its clock (opened, close, stages, release): for a
#: DataFrame survey the clock is its arrival-time column, so ``opened`` is the first record's time
#: and, without ``close_at``, ``close`` the last one's.  Published as durations only.
_CLOCK = "times"

#: Durations from the close of a survey that closed on its last record's arrival (a DataFrame
#: survey without ``close_at``): with the report's creation time, each gives that arrival time.
_FROM_CLOSE = ("head_start_seconds", "close_to_release_seconds", "tau_minus", "delta_tau", "close_to_release_ratio",
               "close_to_release_share_of_run")
_FROM_CLOSE_TIMING = "close to release"


def _participation_figures(out: dict) -> None:
    """A per-record participation column is never published, nor any exact figure of it: its
    smallest and largest value are two records' π, and the exact failure figures and mean π solve
    for the π of a small cell (:mod:`daskmicro.privacy.failure_bounds`).  The ``probabilistic``
    section gives them as rounded-up bounds; the pipeline's copy of it is left out."""
    if isinstance(out.get("probabilistic"), Mapping):
        out["probabilistic"] = public_failures(out["probabilistic"])
    if isinstance(out.get("pipeline"), Mapping):
        out["pipeline"].pop("probabilistic", None)


#: The fewest sampled records one step of a published risk rate spans: whole percentage points
#: from 1,000 records on, 1/⌊s/10⌋ on a sample of s < 1,000, no rate below 20 records.
RISK_STEP_RECORDS = 10

_COUNTS = {"record_linkage": "n_linked", "interval_disclosure": "n_disclosed"}


def risk_steps(n_sampled: int) -> int:
    """The steps of the grid a risk rate of ``n_sampled`` records is published on (0: not published)."""
    steps = min(100, int(n_sampled) // RISK_STEP_RECORDS)
    return steps if steps >= 2 else 0


def _rate(part: Mapping, name: str) -> float | None:
    """A rate on the grid of :func:`risk_steps`: the count c of s records as the nearest of
    0, 1/G, …, 1 (G = min(100, ⌊s/10⌋)), each step at least 10 records wide; None below 20 records."""
    n = int(part.get("n_sampled") or 0)
    steps = risk_steps(n)
    if not steps:
        return None
    count = part.get(_COUNTS[name])
    count = int(count) if count is not None else int(round(float(part["rate"]) * n))
    return round((2 * count * steps + n) // (2 * n) / steps, 4)


def public_risk(risk: Mapping) -> dict | None:
    """The published form of the disclosure-risk measures: the sample's size and each rate rounded
    to whole percentage points — coarser on a sample under 1,000 records, none under 20
    (:func:`risk_steps`); the exact counts stay in the private run record.  Each rate is one bit
    per sampled record (linked or not, disclosed or not), so an exact count would tell someone who
    knows every other sampled record that bit of the last one — and in a release of one cell (each
    released column's spread 0) the interval-disclosure count is the number of records whose values
    *are* the published centroid.  Rounded to steps of at least 10 records, a record's bit moves the
    published rate only where it crosses a rounding boundary, at most once in 10 counts."""
    out = {}
    steps = 100
    for name in ("record_linkage", "interval_disclosure"):
        part = risk.get(name)
        if isinstance(part, Mapping) and part.get("rate") is not None:
            out[name] = {"rate": _rate(part, name)}
            out["sample_size"] = int(part.get("n_sampled", 0))
            steps = risk_steps(out["sample_size"])
            if name == "interval_disclosure":
                out[name].update(p=float(part.get("p", 0.0)), max_outside=int(part.get("max_outside", 0)))
    if not out:
        return None
    sample = risk.get("sample") if isinstance(risk.get("sample"), Mapping) else {}
    if sample.get("of") is not None:
        out["records"] = int(sample["of"])
    if steps == 100:
        out["rounding"] = "rates rounded to whole percentage points; the exact counts are in the private run record"
    elif steps:
        out["rounding"] = (f"rates rounded to steps of 1/{steps} (at least {RISK_STEP_RECORDS} records each: a small "
                           "sample); the exact counts are in the private run record")
    else:
        out["rounding"] = (f"rates not published: fewer than {2 * RISK_STEP_RECORDS} records tried, too few for a "
                           "rounded rate; the exact counts are in the private run record")
    return out


def public_report(doc: Mapping) -> dict:
    """The published form of an exact report dict: the information loss on the grid
    (:func:`public_information_loss`), no other figure of the original spread (reference IL,
    δ, per-group IL, SSE curves, eigenvalues of the original correlation, utility measures); the
    disclosure-risk rates, when measured, rounded (:func:`public_risk`); the failure figures of a
    per-record participation as rounded-up bounds (:func:`_participation_figures`)."""
    il = public_information_loss(doc["information_loss"]) if doc.get("information_loss") is not None else None
    out = {}
    for key, value in doc.items():
        if key in _LEFT_OUT:
            continue
        if key == "macrocell_sse":   # their number only: a layout figure
            if value:
                out["macrocells"] = len(value)
            continue
        if key == "information_loss":
            if il is not None:  # the rounded value, its interval and the distortion D = IL/100 rounded
                out.update(il)
            continue
        out[key] = copy.deepcopy(value)
    for key in _SCRUBBED:
        if isinstance(out.get(key), Mapping):
            out[key] = _scrub(out[key])
    if isinstance(out.get("incremental"), Mapping):
        out["incremental"].pop(_CLOCK, None)
        if out["incremental"].get("close_on_arrival"):
            for key in _FROM_CLOSE:
                out["incremental"].pop(key, None)
            if isinstance(out.get("timings"), Mapping):
                out["timings"].pop(_FROM_CLOSE_TIMING, None)
    _participation_figures(out)
    risk = public_risk(doc["risk"]) if isinstance(doc.get("risk"), Mapping) else None
    if risk is not None:   # measured: the rates rounded, nothing of a record
        out["risk"] = risk
    if isinstance(out.get("reference"), Mapping):
        out["reference"]["values"] = PRIVATE_NOTE
    return out
