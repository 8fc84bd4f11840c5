"""What a data owner reads first: the run's verdict in plain words, and a glossary of the
papers' terms.  Pure functions of the report dict (:meth:`daskmicro.report.Report.to_dict`)."""

from __future__ import annotations

from typing import Mapping

from .coarse import IL_UNIT, loss_qualifier
from .describe import mdav_comparison, method_text, relative_to_mdav
from .page import esc, number, percent
from .risk_text import risk_sentences, sample_sentence

__all__ = ["summary_body", "glossary_body", "relative_to_mdav"]


def _smallest_group(r: Mapping):
    check = (r.get("verification") or {}).get("k_anonymity") or {}
    return check.get("min_count", r.get("min_cell_size"))


def _privacy(r: Mapping) -> tuple[str, bool]:
    k = r.get("k")
    verification = r.get("verification") or {}
    passed = bool(verification.get("passed"))
    strata = (r.get("strata") or {}).get("columns") or []
    what = "combination of published quasi-identifier (QI) values" + (
        f" and stratum columns ({esc(', '.join(map(str, strata)))})" if strata else "")
    smallest = _smallest_group(r)
    text = (f"<p>Every {what} is shared by at least <b>{esc(k)}</b> records (k = {esc(k)}); the smallest "
            f"published group holds <b>{esc(smallest)}</b> records.</p>")
    if not verification:
        text += "<p>The release was not verified.</p>"
    elif passed:
        text += ("<p><span class=\"badge pass\">verified</span> on the release as published: every group counted, "
                 "rows in = rows out.</p>")
    else:
        text += "<p><span class=\"badge fail\">verification FAILED</span> — do not publish this release.</p>"
    text += (f"<p>In words: someone who knows a person's QI values can at best narrow them down to a group of "
             f"{esc(k)} or more look-alike records in this release, never to fewer.</p>")
    prob = r.get("probabilistic") or {}
    if prob.get("max_cell_failure") is not None:
        text += (f"<p>Not everyone takes part (participation {esc(prob.get('participation'))}): groups were made "
                 f"larger so that a group ends up with fewer than k participants with probability at most "
                 f"{number(float(prob['max_cell_failure']), 2)}.</p>")
    return text, passed


def _utility(r: Mapping) -> str:
    il = r.get("information_loss")
    if il is None:
        return "<p>No information loss was recorded.</p>"
    il = float(il)
    rounding = r.get("information_loss_rounding") if isinstance(r.get("information_loss_rounding"), Mapping) else None
    word = loss_qualifier(il)
    if rounding and rounding.get("interval"):
        low, high = (float(v) for v in rounding["interval"])
        text = (f"<p>Information loss about <b>{number(il, 3)} {IL_UNIT}</b> — {word} (rounded; between "
                f"{number(low, 3)} % and {number(high, 3)} %): after putting every QI on the same scale, that share "
                "of the variation between records is replaced by group averages; the remaining columns are "
                "published unchanged.</p>")
    else:
        text = (f"<p>Information loss <b>{number(il, 3)} {IL_UNIT}</b> — {word}: after putting every QI on the "
                "same scale, that share of the variation between records is replaced by group averages; "
                "the remaining columns are published unchanged.</p>")
    text += f"<p>The cells were formed by <b>{esc(r.get('method_text') or method_text(r))}</b>.</p>"
    text += _comparison(r)
    utility = r.get("utility") or {}
    change = utility.get("correlation_max_abs_diff")
    if change is not None:
        text += f"<p>Correlations between QIs move by at most {number(float(change), 2)}.</p>"
    return text


def _comparison(r: Mapping) -> str:
    """The run against exact MDAV, the slow reference method: only what the report's figures say.
    "The same cells" only when the run's cells are exact MDAV's (reference kind "self")."""
    how = r.get("reference") if isinstance(r.get("reference"), Mapping) else {}
    found = mdav_comparison(r)
    if found is None:
        return ""
    word, amount = found
    if word == "constant":
        return "<p>No QI column varies: there is nothing to compare with exact MDAV.</p>"
    if word == "same":
        return "<p>These are <b>the same cells as exact MDAV</b>, the slow reference method, forms.</p>"
    cmp = ("within 0.05 % of exact MDAV's distortion" if word == "within" else
           f"{percent(amount, 2)} {word} distortion than exact MDAV")
    where = " estimated on a sample" if how.get("kind") == "sample" else " on the same records"
    return (f"<p>That is <b>{cmp}</b>, the slow reference method (its information loss "
            f"{number(float(r['reference_information_loss']), 3)} %{where}).</p>")


def _risk(r: Mapping) -> str | None:
    risk = r.get("risk") or {}
    parts = []
    if risk:
        sentences = risk_sentences(risk, r.get("k") or 1)
        parts += [f"<p>{esc(text)}</p>" for text in sentences]
        sample = sample_sentence(risk) if sentences else None
        if sample:
            parts.append(f"<p>{esc(sample)}</p>")
    prob = r.get("probabilistic") or {}
    if prob.get("table_failure") is not None:
        bound = "at most " if prob.get("bounds") else ""   # per-record π: a bound rounded up
        parts.append(f"<p>Probability that some group ends with fewer than k participants: "
                     f"{bound}{number(float(prob['table_failure']), 2)}.</p>")
    return "".join(parts) or None


def summary_body(r: Mapping) -> str:
    """Privacy, utility and (when measured) risk, each in a few sentences."""
    privacy, passed = _privacy(r)
    cards = [("Privacy", privacy, "good" if passed else "bad"), ("Utility", _utility(r), "")]
    risk = _risk(r)
    if risk is not None:
        cards.append(("Risk", risk, ""))
    return '<div class="verdicts">' + "".join(
        f'<div class="verdict {cls}"><h3>{title}</h3>{text}</div>' for title, text, cls in cards) + "</div>"


GLOSSARY = (
    ("quasi-identifier (QI)", "A column an intruder may know about a person from elsewhere (age, income, …). "
     "Only QI columns are changed."),
    ("k, k-anonymity", "Every published combination of QI values is shared by at least k records."),
    ("cell, group", "A set of k or more similar records; each publishes the same values, their centroid "
     "(average)."),
    ("microaggregation", "Replacing the QI values of each cell's records by the cell's centroid."),
    ("MDAV", "Maximum Distance to Average Vector: the exact reference method, which forms cells of k … 2k−1 "
     "records around the records furthest from the centre."),
    ("SSE, SST", "Sum of squared distances of the records to their cell's centroid (SSE) and to the overall "
     "mean (SST), after putting every QI on the same scale (z-scores)."),
    ("information loss IL, distortion D", "D = SSE/SST, IL = 100·D: the share of the variation between "
     "records lost to averaging. Published rounded to a fixed grid: with the release, the exact value would give "
     "the spread of the records around their group averages."),
    ("δ (relative distortion increment)", "(D − D_MDAV)/D_MDAV: how much more distortion than exact MDAV."),
    ("macrocell, K", "A large cell of about K records formed first, inside which the small cells are formed."),
    ("proximal / distal", "Macrocells with a low SSE (compact, proximal) or a high one (spread out, distal); "
     "distal ones are handled with exact MDAV."),
    ("ν (nu), n_distal, C_D", "The fraction ν of macrocells treated as distal, and their number C_D."),
    ("partition", "The records one task microaggregates on its own in the partitioned pipeline."),
    ("PCA, eigenvalues, m̃, ε²", "Principal component analysis: the eigenvalues measure the variation along "
     "each component; m̃ components are kept, losing at most the share ε² of the energy (variation)."),
    ("IL1s", "Mean absolute difference between original and released values, scaled by the standard deviation."),
    ("eigen measure", "Relative change of the eigenvalues of the correlation matrix between original and release."),
    ("record linkage", "An intruder who knows a person's true QI values picks the published combination closest "
     "to them; the rate is how often that is the person's own cell (lower is safer)."),
    ("interval disclosure", "Every published QI value of a record lies within a small interval (± p standard "
     "deviations) of its true value, so the release gives the true values almost exactly (lower is safer)."),
    ("p-probabilistic k-anonymity, π, p̄", "When each person takes part with probability π, cells are grown so "
     "that one ends with fewer than k participants with probability at most p̄."),
    ("n_min, q̄, t̄", "Effective cell size needed under participation; a cell's and the table's probability of "
     "ending below k participants."),
    ("τ₀, τ₊, Δτ, ζ", "Incremental surveys: time of the base and increment stages, the time saved, and the "
     "arrivals coefficient."),
)


def glossary_body(r: Mapping) -> str:
    """The glossary as a definition list."""
    return '<dl class="glossary">' + "".join(f"<dt>{esc(t)}</dt><dd>{esc(d)}</dd>" for t, d in GLOSSARY) + "</dl>"
