"""The disclosure-risk measures in plain sentences, one per measure that was measured: the same words
in the terminal summary, the HTML summary card and the page's risk section.  Pure functions of a
report's ``risk`` section (published: rates rounded, :func:`daskmicro.report.coarse.public_risk`; or
exact, the private run record's)."""

from __future__ import annotations

from typing import Mapping

from .coarse import risk_steps

__all__ = ["risk_sentences", "sample_sentence", "risk_lines"]


def _pct(rate: float, rounded: bool, half: float = 0.5) -> str:
    """A rate in words; ``half``: half a step of the grid it was rounded to, in percent."""
    value = 100.0 * float(rate)
    if rounded:
        return f"under {half:.3g} %" if value < half else f"about {value:.0f} %"
    return f"{value:.3g} %"


def _half_step(risk: Mapping) -> float:
    """Half a step, in percent, of the grid the published rates are on (:func:`risk_steps`)."""
    steps = risk_steps(int(risk.get("sample_size") or 0))
    return 50.0 / steps if steps else 0.5


def _count(part: Mapping, risk: Mapping) -> int | None:
    n = part.get("n_sampled", risk.get("sample_size"))
    return None if n is None else int(n)


def sample_sentence(risk: Mapping) -> str | None:
    """"Measured on N of the M records (a uniform random sample)", or on all of them."""
    part = risk.get("record_linkage") or risk.get("interval_disclosure") or {}
    n = _count(part, risk)
    total = risk.get("records", (risk.get("sample") or {}).get("of") if isinstance(risk.get("sample"), Mapping)
                     else None)
    if n is None:
        return None
    if total is not None and int(total) > n:
        return (f"Measured on a uniform random sample of {n:,} of the {int(total):,} records "
                "(records with every QI observed), comparing each one's true values with what was published.")
    return f"Measured on all {n:,} records with every QI observed, comparing their true values with what was published."


def risk_sentences(risk: Mapping, k) -> list:
    """One plain sentence per measure present (``k``: the cell size of the run)."""
    rounded = "rounding" in risk
    half = _half_step(risk)
    out = []
    link = risk.get("record_linkage") or {}
    if link.get("rate") is not None:
        rate = float(link["rate"])
        x = _pct(rate, rounded, half)
        out.append(
            f"Record linkage: for {x} of the records tried, the published combination of QI values closest to the "
            f"record's true values is its own cell's — an intruder who knows a person's true QI values and picks "
            f"the closest published combination lands on that person's cell {x} of the time; the cell holds at "
            f"least k = {k} records, so the best he can then do is guess 1 in {k} (at most {_pct(rate / int(k), False)} "
            f"of the records tried re-identified). Lower is safer.")
    interval = risk.get("interval_disclosure") or {}
    if interval.get("rate") is not None:
        p, x = float(interval.get("p", 0.05)), _pct(float(interval["rate"]), rounded, half)
        out.append(
            f"Interval disclosure: for {x} of the records tried, every published "
            f"QI value lies within ±{p:g} standard deviations (of the published column) of the person's true value, "
            "so the release would give that person's true values almost exactly. Lower is safer; cell averages "
            "usually keep it near 0 %.")
    if not out and rounded and (link or interval):
        out.append("Disclosure risk: not published — too few records were tried for a rounded rate that hides each "
                   "record's part (the exact counts are in the private run record).")
    return out


def risk_lines(risk: Mapping, k) -> list:
    """The terminal summary's lines of a published ``risk`` section (rates rounded)."""
    import textwrap

    sentences = risk_sentences(risk, k)
    if not sentences:
        return []
    lines = [f"  disclosure risk ({int(risk.get('sample_size', 0)):,} records tried; rates rounded, counts in the "
             "private run record):"]
    for text in [*sentences, sample_sentence(risk)]:
        if text:
            lines.extend(textwrap.wrap(text, 110, initial_indent="    ", subsequent_indent="      "))
    return lines
