"""One self-contained HTML page per run, rendered from the run's report dict.

:func:`render_html` is a pure function of the dict produced by
:meth:`daskmicro.report.Report.to_dict` (as stored in ``report.json``): no file access, no clock,
the same dict always gives the same page.  The page has inline CSS, plots as inline SVG
(:mod:`daskmicro.report.plots`, :mod:`daskmicro.report.beforeafter`) and no external URL, so it
can be mailed or archived as one file.  :func:`daskmicro.report.files.write_report` writes the
page of any release a run wrote.

From the top: the verdict in plain words (privacy, utility, risk when measured), the release
pictures (each QI's distribution in the release and the release's correlation matrix), then the
details — parameters, one timings table (kernel compile time apart), information loss, cell
sizes, PCA spectrum (Fig. 9 of *Efficient k-Anonymous Microaggregation … via PCA*), macrocells
with the proximal/distal cut (Fig. 13), verification, incremental timings, p-probabilistic
failure figures, utility and disclosure-risk measures, a parameter sweep (Fig. 14/21), the link
to the Dask performance report — each only when the report has it, and a glossary of the terms.

The page shows what its dict holds.  A published report (:meth:`~daskmicro.report.Report.to_dict`)
holds the information loss rounded and no figure of the original spread (no original moments,
no exact-MDAV reference, no SSE curve, no spectrum of the original correlation, no utility
measure: :mod:`daskmicro.report.coarse`), so neither does its page; the page of the exact
report (:meth:`~daskmicro.report.Report.exact_dict`, in the private run record) shows them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..errors import ParameterError
from ..tuning.points import recommend_setting
from .release_figures import release_body
from .risk_text import risk_sentences, sample_sentence
from .page import CSS, HEAD_SCRIPT, TAIL_SCRIPT, esc, fmt, number, percent, seconds, table
from .plots import (cell_size_plot, eigenvalue_plot, energy_spectrum_plot, macrocell_sse_plot, sweep_plot,
                    timings_plot)
from .describe import improvement_text, method_text
from .coarse import IL_UNIT, loss_qualifier
from .describe import relative_to_mdav
from .summary import glossary_body, summary_body

__all__ = ["render_html", "SECTION_IDS"]

#: ids of the <section> elements, in page order (a section is left out when the run has no data for it).
SECTION_IDS = (
    "summary", "release", "parameters", "timings", "information-loss", "cell-sizes", "pca-spectrum",
    "macrocells", "verification", "incremental", "probabilistic", "utility", "risk", "sweep", "performance",
    "glossary",
)

_TITLES = {
    "summary": "In plain words",
    "release": "The release, column by column",
    "parameters": "Parameters",
    "timings": "Time per stage",
    "information-loss": "Information loss",
    "cell-sizes": "Group (cell) sizes",
    "pca-spectrum": "PCA energy spectrum",
    "macrocells": "Macrocells and proximal/distal cut",
    "verification": "Verification",
    "incremental": "Incremental mode",
    "probabilistic": "p-Probabilistic mode",
    "utility": "Utility measures",
    "risk": "Disclosure risk",
    "sweep": "Parameter sweep",
    "performance": "Dask performance report",
    "glossary": "Glossary",
}

_INCREMENTAL_LABELS = {
    "tau0": "τ₀ — base-stage time", "tau_0": "τ₀ — base-stage time",
    "tau_plus": "τ₊ — increment-stage time", "tau_minus": "τ₋ — critical time",
    "delta_tau": "Δτ — relative time gain", "delta": "δ — distortion increment",
    "nu": "ν — data ratio of the increment", "zeta": "ζ — arrivals coefficient",
    "nu_star": "ν* — optimal data ratio", "nu_end": "ν_end — deadline ratio",
}

_PROBABILISTIC_LABELS = {
    "p": "p — participation probability", "n_min": "n_min — effective anonymity",
    "table_failure": "t̄ — table failure probability", "mode": "mode of operation",
    "bounds": "failure figures published as",
}

_PARAMETER_LABELS = {
    "method": "method", "k": "k — smallest group size promised", "n": "records", "m": "QI columns",
    "m_used": "QI columns that vary (microaggregated)", "qi": "QI columns", "cells": "groups (cells)",
"keep_row_id": "row_id column kept",
    "constant_columns": "constant QI columns (published unchanged)", "dtype_changes": "column type changes",
    "nu": "ν — distal fraction of macrocells", "n_distal": "C_D — distal macrocells",
    "daskmicro_version": "daskmicro version", "created": "created (UTC)",
}


def _section(sid: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{esc(_TITLES[sid])}</h2>{body}</section>'


def _labelled(data: Mapping, labels: Mapping) -> list:
    return [(labels.get(str(key), str(key)), value) for key, value in data.items()]


# --------------------------------------------------------------------------- sections


def _dtype_text(changes) -> str:
    if not isinstance(changes, Mapping):
        return str(changes)
    return ", ".join(
        f"{col}: {v.get('from')} → {v.get('to')}" if isinstance(v, Mapping) else f"{col}: {v}"
        for col, v in changes.items()
    )


def _parameters(r: Mapping) -> str:
    keys = ("method", "quality", "k", "n", "m", "m_used", "qi", "cells", "keep_row_id", "constant_columns",
            "dtype_changes", "nu", "n_distal", "daskmicro_version", "created")
    rows = [(key, r[key]) for key in keys if key in r and r[key] not in (None, [], {})]
    rows = [(_PARAMETER_LABELS.get(key, key), _dtype_text(value) if key == "dtype_changes" else value)
            for key, value in rows]
    if r.get("method") is not None:
        rows.insert(1, ("what ran", r.get("method_text") or method_text(r)))
    if "improvement" in r:
        rows.insert(2, ("improvement pass", _improvement_text(r.get("improvement"), r.get("quality"))))
    pca = r.get("pca") or {}
    for key, label in (("energy_loss_bound", "PCA energy-loss bound ε²"), ("energy_loss", "PCA energy lost"),
                       ("n_components", "PCA components kept m̃")):
        if pca.get(key) is not None:
            rows.append((label, pca[key]))
    for key, value in (r.get("paths") or {}).items():
        if value not in (None, "None", ""):
            rows.append((f"path: {key}", value))
    body = table(rows, ("parameter", "value"))
    options = r.get("options") if isinstance(r.get("options"), Mapping) else None
    if options:
        given = [(str(key), value) for key, value in options.items() if value not in (None, [], {}, ())]
        body += "<h3>Run options</h3>" + table(given, ("option", "value"))
    return body


def _improvement_text(imp, r_quality=None) -> str:
    if not isinstance(imp, Mapping) or not imp:
        return "none ran" + (" (quality 'balanced' improves the partitioned pipeline only)"
                             if r_quality == "balanced" else "")
    text = improvement_text(imp).lstrip(",; ")
    settings = (f"{int(imp.get('sweeps') or 0)} sweep(s) × {int(imp.get('neighbours') or 0)} neighbouring cells, "
                f"{int(imp.get('pcl_iter') or 0)} PCL iteration(s), {int(imp.get('post_sweeps') or 0)} sweep(s) after")
    return f"{text} ({settings})"


def _stage_rows(timings: Mapping) -> tuple[list, float]:
    """(stage, seconds) rows without any total, and the run's total: the recorded ``total`` when
    there is one (it includes what no stage timed), else the sum of the stages."""
    stages = [(str(name), float(v)) for name, v in timings.items() if str(name).lower() != "total"]
    total = timings.get("total")
    return stages, float(total) if total is not None else sum(v for _, v in stages)


def _compile_text(info) -> str:
    if not isinstance(info, Mapping) or info.get("seconds") is None:
        return ""
    how = "compiled" if info.get("compiled") else "loaded from the cache"
    where = f" ({esc(info['cache_dir'])})" if info.get("cache_dir") else ""
    workers = info.get("workers") or {}
    per = ""
    if isinstance(workers, Mapping) and workers:
        slowest = max(float(v) for v in workers.values())
        per = f"; {len(workers)} worker(s), the slowest {seconds(slowest)}"
    return (f'<p class="compile">Kernel compile / cache load: <b>{seconds(info["seconds"])}</b>, not counted in '
            f"the stages above (kernels {how}{where}{per}).</p>")


def _timings(r: Mapping) -> str | None:
    timings = r.get("timings")
    compile_line = _compile_text(r.get("compile"))
    if not timings and r.get("seconds") is None:
        return compile_line or None
    if not timings:
        timings = {"microaggregation": float(r["seconds"])}
    stages, total = _stage_rows(timings)
    rows = [(name, seconds(v)) for name, v in stages]
    other = total - sum(v for _, v in stages)
    if other > max(0.05, 0.02 * total):
        rows.append(("other (cluster start-up, reading the report, …)", seconds(other)))
    rows.append(("total (wall clock)", seconds(total)))
    body = table(rows, ("stage", "time"), cls="timings") + compile_line
    if len(stages) > 1:
        body += timings_plot(dict(stages))
    return body


def _information_loss(r: Mapping) -> str | None:
    il = r.get("information_loss")
    if il is None:
        return None
    rounding = r.get("information_loss_rounding") if isinstance(r.get("information_loss_rounding"), Mapping) else None
    if rounding:
        low, high = rounding.get("interval") or (None, None)
        rows = [(f"information loss IL, rounded ({IL_UNIT}: 100·SSE/SST, z-scored)",
                 f"{number(float(il), 3)} % — {loss_qualifier(float(il))}"),
                ("the exact value lies in", f"{number(float(low), 3)} – {number(float(high), 3)} %")]
    else:
        rows = [(f"information loss IL ({IL_UNIT}: 100·SSE/SST, z-scored)",
                 f"{number(float(il), 4)} % — {loss_qualifier(float(il))}"),
                ("distortion D = SSE/SST", float(il) / 100)]
    ref = r.get("reference_information_loss")
    how = r.get("reference") if isinstance(r.get("reference"), Mapping) else {}
    if ref is not None:
        label = "IL of exact MDAV (reference)"
        if how.get("kind") == "sample":
            label = f"IL of exact MDAV — {how.get('label') or 'estimated on a sample'}"
        elif how.get("label"):
            label += f" — {how['label']}"
        rows.append((label, f"{number(float(ref), 4)} %"))
        if how.get("kind") == "sample" and how.get("ratio") is not None:
            rows.append((f"ratio IL(method)/IL(exact MDAV) on the sample of {fmt(how.get('sample_size'))} records",
                         float(how["ratio"])))
        delta = relative_to_mdav(r)
        if delta is not None:
            rows.append(("relative distortion increment δ = (D − D_MDAV)/D_MDAV", f"{100 * delta:+.2f} %"))
    elif how.get("kind") == "self":
        rows.append(("relative distortion increment δ over exact MDAV", f"0 ({how.get('label') or 'the run is exact MDAV'})"))
    elif how.get("kind") not in (None, "none"):
        rows.append(("IL of exact MDAV (reference)", f"computed ({how.get('label') or how.get('kind')}); "
                     "in the private run record"))
    body = table(rows, ("measure", "value"))
    if rounding:
        body += ("<p class=\"note\">The information loss is published rounded to a fixed grid (0.1 percentage "
                 "points near 0 % and 100 %, up to 5 points near 50 %). With the release, an exact value would give "
                 "the sum of squared distances of the records to their group averages, and with it how far records "
                 "lie from them; the exact value is in the data owner's private run record.</p>")
    pca = r.get("pca") or {}
    if pca.get("energy_loss") is not None:
        body += f"<p>PCA energy loss ε² of the kept components: {fmt(float(pca['energy_loss']))}</p>"
    return body


def _cell_sizes(r: Mapping) -> str | None:
    rows = [(label, r[key]) for key, label in (("cells", "groups"), ("min_cell_size", "smallest group"),
                                               ("max_cell_size", "largest group")) if r.get(key) is not None]
    counts = r.get("cell_size_counts") or {}
    if not rows and not counts:
        return None
    body = table(rows, ("", "records")) if rows else ""
    if len(counts) == 1:
        (size, number_of), = counts.items()
        return body + f"<p>Every one of the {int(number_of):,} groups holds exactly {int(size):,} records.</p>"
    if counts:
        body += cell_size_plot(counts)
    return body


def _pca_spectrum(r: Mapping) -> str | None:
    pca = r.get("pca") or {}
    eigenvalues = r.get("eigenvalues") or pca.get("eigenvalues")
    n_components = r.get("n_components", pca.get("n_components"))
    if not eigenvalues:
        if n_components is None:
            return None
        text = f"<p>m̃ = {int(n_components)} principal components kept"
        if pca.get("energy_loss_bound") is not None:
            text += f" (energy-loss bound ε² = {fmt(float(pca['energy_loss_bound']))})"
        return text + (". The spectrum of the original data's correlation is not published (it is in the private "
                       "run record).</p>")
    total = sum(float(v) for v in eigenvalues)
    text = f"<p>{len(eigenvalues)} eigenvalues of the z-scored QI covariance (Σλ = {fmt(total)})"
    if n_components is not None:
        kept = sum(sorted((float(v) for v in eigenvalues), reverse=True)[: int(n_components)])
        share = kept / total if total > 0 else 0.0
        text += f"; m̃ = {int(n_components)} components kept, retaining {percent(share)} of the energy"
    text += ".</p>"
    return text + energy_spectrum_plot(eigenvalues, n_components)


def _macrocells(r: Mapping) -> str | None:
    sse = r.get("macrocell_sse")
    n_distal = r.get("n_distal")
    nu = r.get("nu")
    macrocells = len(sse) if sse else r.get("macrocells") or (r.get("pipeline") or {}).get("macrocells")
    if not sse and not (macrocells and macrocells > 1 and (n_distal is not None or nu is not None)):
        return None
    if n_distal is None and nu is not None and macrocells:
        n_distal = int(round(float(nu) * macrocells))
    rows = [("macrocells", macrocells), ("distal macrocells C_D", n_distal), ("distal fraction ν", nu)]
    if sse:
        total = sum(float(v) for v in sse)
        if n_distal:
            top = sum(sorted((float(v) for v in sse), reverse=True)[: int(n_distal)])
            rows.append(("share of macrocell SSE in the distal part", percent(top / total) if total > 0 else "—"))
    body = table(rows, ("", "value"))
    if n_distal is not None and macrocells and int(n_distal) >= macrocells:
        body += "<p>Every macrocell is distal: MDAV ran inside every macrocell (ν = 1).</p>"
    if not sse:
        return body + ("<p>The macrocells' SSE curve is not published (it is in the private run record): with the "
                       "release it would tell the spread within the cells.</p>")
    return body + macrocell_sse_plot(sse, n_distal)


_CHECK_LABELS = {
    "ok": "passed", "k": "k checked", "min_count": "smallest published group", "n_tuples": "distinct published tuples",
    "n_violating_tuples": "tuples below k", "n_violating_records": "records in tuples below k",
    "rows_in": "rows in", "rows_out": "rows out",
}


def _verification(r: Mapping) -> str | None:
    v = r.get("verification")
    if not v:
        return None
    passed = bool(v.get("passed"))
    badge = '<span class="badge pass">passed</span>' if passed else '<span class="badge fail">FAILED</span>'
    body = f"<p>{badge}</p>"
    for name in ("k_anonymity", "rows", "effective_anonymity"):
        check = v.get(name)
        if isinstance(check, Mapping):
            body += f"<h3>{esc(name.replace('_', ' '))}</h3>" + table(_labelled(check, _CHECK_LABELS),
                                                                     ("check", "value"))
    return body


def _generic(r: Mapping, key: str, labels: Mapping) -> str | None:
    data = r.get(key)
    if not data:
        return None
    return table(_labelled(data, labels), ("measure", "value"))


def _utility(r: Mapping) -> str | None:
    u = r.get("utility")
    if not u:
        return None
    names = {
        "il1s": "IL1s — mean |x − x′| / (√2·S)",
        "eigen": "eigen — Σ |e − e′| / e over correlation eigenvalues",
        "distortion": "D = SSE/SST",
        "information_loss": "IL = 100·D, % of the QIs' variance",
        "correlation_max_abs_diff": "largest |Δ correlation|",
        "correlation_mean_abs_diff": "mean |Δ correlation|",
    }
    rows = [(label, u[key]) for key, label in names.items() if u.get(key) is not None]
    body = table(rows, ("measure", "value"))
    columns = u.get("columns") or []
    means, variances = u.get("mean_change") or [], u.get("variance_ratio") or []
    if columns and len(means) == len(columns) == len(variances):
        body += "<h3>Per attribute</h3>" + table(
            [(c, float(a), float(b)) for c, a, b in zip(columns, means, variances)],
            ("attribute", "Δ mean / S", "var′/var − 1"),
        )
    e1, e2 = u.get("eigenvalues_original"), u.get("eigenvalues_released")
    if e1 and e2:
        body += eigenvalue_plot(e1, e2)
    return body


def _risk(r: Mapping) -> str | None:
    risk = r.get("risk")
    if not risk:
        return None
    sentences = risk_sentences(risk, r.get("k") or 1)
    if not sentences:
        return None
    body = "".join(f"<p>{esc(text)}</p>" for text in sentences)
    sample = sample_sentence(risk)
    if sample:
        body += f"<p>{esc(sample)}</p>"
    rows = []
    link, interval = risk.get("record_linkage") or {}, risk.get("interval_disclosure") or {}
    if link.get("rate") is not None:
        rows.append(("record linkage: share of the records tried linked to their own cell", percent(link["rate"])))
    if interval.get("rate") is not None:
        rows.append((f"interval disclosure: share of the records tried with every published QI within "
                     f"±{interval.get('p')} standard deviations of the true value", percent(interval["rate"])))
    rows.append(("records tried", link.get("n_sampled", interval.get("n_sampled", risk.get("sample_size")))))
    if risk.get("rounding"):
        rows.append(("rounding", risk["rounding"]))
    return body + table(rows, ("measure", "value"))


def _sweep(r: Mapping) -> str | None:
    sweep = r.get("sweep")
    if not sweep:
        return None
    points = sweep.get("points") if isinstance(sweep, Mapping) else sweep
    budget = sweep.get("budget") if isinstance(sweep, Mapping) else None
    body = sweep_plot(points, budget)
    best = recommend_setting(points, budget)
    if best is not None:
        body += (f"<p>Recommended setting for δ ≤ {percent(budget, 2)}: <b>{esc(best['setting'])}</b> "
                 f"(τ = {percent(best['relative_time'])}, δ = {percent(best['relative_distortion'])})</p>")
    return body


def _performance(r: Mapping) -> str | None:
    path = r.get("performance_report") or (r.get("paths") or {}).get("performance_report")
    if not path:
        return None
    p = Path(str(path))
    href = p.as_uri() if p.is_absolute() else str(path)
    return f'<p><a href="{esc(href)}">{esc(path)}</a> (Dask performance report of this run)</p>'


_BUILDERS = {
    "summary": summary_body, "release": lambda r: release_body(r.get("release_figures") or {}),
    "parameters": _parameters, "timings": _timings, "information-loss": _information_loss,
    "cell-sizes": _cell_sizes, "pca-spectrum": _pca_spectrum, "macrocells": _macrocells,
    "verification": _verification,
    "incremental": lambda r: _generic(r, "incremental", _INCREMENTAL_LABELS),
    "probabilistic": lambda r: _generic(r, "probabilistic", _PROBABILISTIC_LABELS),
    "utility": _utility, "risk": _risk, "sweep": _sweep, "performance": _performance, "glossary": glossary_body,
}


# --------------------------------------------------------------------------- page


def _footer(r: Mapping) -> str:
    if r.get("information_loss_rounding"):
        return ("Information loss is in % of the QIs' variance (100·SSE/SST on z-scored QI columns), rounded; "
                "figures of the release only, no "
                "data values, no figure of the original values.")
    return ("Information loss is in % of the QIs' variance (100·SSE/SST on z-scored QI columns); aggregates only, "
            "no data values. This page "
            "shows exact figures of the original data: private, not for publication.")


def render_html(report: Mapping) -> str:
    """Render a run report dict as one self-contained HTML page.

    Parameters
    ----------
    report : mapping
        The dict of :meth:`daskmicro.report.Report.to_dict` (or ``report.json`` loaded).  Every
        field is optional except that the page says little without ``method``, ``k`` and ``n``;
        a section appears only when the run produced its data.  A ``sweep`` field —
        ``{"points": [{setting, relative_time, relative_distortion}, …], "budget": δ_max}`` —
        adds the sweep plot (:func:`~daskmicro.report.plots.sweep_plot`); a ``compile`` field —
        ``{"seconds", "workers", "cache_dir", "compiled"}`` — a line apart from the stage timings.

    Returns
    -------
    str
        The page: inline CSS and SVG, no external resource.
    """
    if not isinstance(report, Mapping):
        raise ParameterError(f"report must be a dict (Report.to_dict()), got {type(report).__name__}")
    r = report
    sections, present = [], []
    for sid in SECTION_IDS:
        body = _BUILDERS[sid](r)
        if body is None:
            continue
        sections.append(_section(sid, body))
        present.append(sid)
    nav = "".join(f'<a href="#{sid}">{esc(_TITLES[sid])}</a>' for sid in present)
    verification = r.get("verification") or {}
    verdict = ("verified" if verification.get("passed") else "NOT verified") if verification else "not verified"
    method = str(r.get("method", "?"))
    imp = r.get("improvement") if isinstance(r.get("improvement"), Mapping) else None
    if imp and imp.get("changed"):
        method += f", improved (quality {imp.get('quality') or r.get('quality') or '?'})"
    subtitle = (f"{fmt(r.get('n'))} records · {fmt(r.get('m'))} QI columns · method {esc(method)} · "
                f"k = {fmt(r.get('k'))} · {verdict}")
    title = f"daskmicro run report — {method}, k = {r.get('k', '?')}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
        f"<style>{CSS}</style><script>{HEAD_SCRIPT}</script></head>\n<body>"
        f"<header><h1>{esc(title)}</h1><p>{subtitle}</p>"
        f"<p>created {esc(r.get('created', '—'))} · daskmicro {esc(r.get('daskmicro_version', '?'))}</p></header>"
        f"<nav>{nav}</nav><main>\n" + "\n".join(sections) + "\n</main>"
        f"<footer>Generated by daskmicro from the run's JSON report. {_footer(r)}</footer>"
        f"<script>{TAIL_SCRIPT}</script></body></html>\n"
    )
