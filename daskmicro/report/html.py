"""One self-contained HTML page per run, rendered from the run's report dict.

:func:`render_html` is a pure function of the dict produced by
:meth:`daskmicro.report.Report.to_dict` (as stored in ``report.json``): no file access, no clock,
the same dict always gives the same page.  The page has inline CSS, plots as inline SVG
(:mod:`daskmicro.report.plots`) and no external URL, so it can be mailed or archived as one file.
:func:`write_report` renders the page of any release a run wrote (a release file with its
``NAME.report.json``, a directory release with ``_report.json``, a demo directory with
``report.json``, or the JSON itself).

Sections: parameters, timings per stage, information loss (absolute, and relative to exact MDAV
when ``reference_information_loss`` is known), cell-size histogram, PCA energy spectrum with the
chosen m̃ (seed 001 Fig. 9), sorted macrocell SSE with the proximal/distal cut (Fig. 13),
verification, incremental timings, p-probabilistic failure metrics, utility and disclosure-risk
measures, a parameter sweep (Fig. 14/21), and a link to the Dask performance report.  Optional
sections whose data is absent say "not run".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from ..errors import InputError, ParameterError, redact
from .plots import (cell_size_plot, eigenvalue_plot, energy_spectrum_plot, macrocell_sse_plot, recommend_setting,
                    sweep_plot, timings_plot)
from .page import CSS, HEAD_SCRIPT, TAIL_SCRIPT, esc, fmt, table

__all__ = ["render_html", "write_report", "find_report", "SECTION_IDS"]

#: ids of the <section> elements, in page order (optional ones may say "not run").
SECTION_IDS = (
    "parameters", "timings", "information-loss", "cell-sizes", "pca-spectrum", "macrocells",
    "verification", "incremental", "probabilistic", "utility", "risk", "sweep", "performance",
)

_TITLES = {
    "parameters": "Parameters",
    "timings": "Timings per stage",
    "information-loss": "Information loss",
    "cell-sizes": "Cell sizes",
    "pca-spectrum": "PCA energy spectrum",
    "macrocells": "Macrocell SSE and proximal/distal cut",
    "verification": "Verification",
    "incremental": "Incremental mode",
    "probabilistic": "p-Probabilistic mode",
    "utility": "Utility measures",
    "risk": "Disclosure risk",
    "sweep": "Parameter sweep",
    "performance": "Dask performance report",
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
}

def _section(sid: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{esc(_TITLES[sid])}</h2>{body}</section>'


def _not_run(what: str) -> str:
    return f'<p class="notrun">not run — {esc(what)}</p>'


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
    keys = ("method", "k", "n", "m", "m_used", "qi", "cells", "seed", "keep_row_id", "constant_columns",
            "dtype_changes", "nu", "n_distal", "daskmicro_version", "created")
    rows = [(key, r[key]) for key in keys if key in r and r[key] not in (None, [], {})]
    rows = [(key, _dtype_text(value)) if key == "dtype_changes" else (key, value) for key, value in rows]
    pca = r.get("pca") or {}
    for key in ("energy_loss_bound", "energy_loss", "n_components"):
        if pca.get(key) is not None:
            rows.append((f"pca.{key}", pca[key]))
    for key, value in (r.get("paths") or {}).items():
        rows.append((f"path: {key}", value))
    return table(rows, ("parameter", "value"))


def _timings(r: Mapping) -> str:
    timings = r.get("timings")
    if timings:
        rows = list(timings.items()) + [("total", float(sum(float(v) for v in timings.values())))]
        return table(rows, ("stage", "seconds")) + timings_plot(timings)
    if r.get("seconds") is not None:
        return (table([("microaggregation", float(r["seconds"]))], ("stage", "seconds"))
                + '<p class="notrun">per-stage timings not recorded</p>')
    return _not_run("no timings recorded")


def _information_loss(r: Mapping) -> str:
    il = r.get("information_loss")
    if il is None:
        return _not_run("no information loss recorded")
    rows = [("information loss IL = 100·SSE/SST (z-scored)", float(il)), ("distortion D = SSE/SST", float(il) / 100)]
    ref = r.get("reference_information_loss")
    how = r.get("reference") if isinstance(r.get("reference"), Mapping) else {}
    if ref is not None:
        label = "IL of exact MDAV (reference)"
        if how.get("kind") == "sample":
            label = f"IL of exact MDAV — {how.get('label') or 'estimated on a sample'}"
        elif how.get("label"):
            label += f" — {how['label']}"
        rows.append((label, float(ref)))
        if how.get("kind") == "sample" and how.get("ratio") is not None:
            rows.append((f"ratio IL(method)/IL(exact MDAV) on the sample of {fmt(how.get('sample_size'))} records",
                         float(how["ratio"])))
        if float(ref) > 0:
            delta = (float(il) - float(ref)) / float(ref)
            rows.append(("relative distortion increment δ = (D − D_MDAV)/D_MDAV", f"{100 * delta:+.2f} %"))
        body = table(rows, ("measure", "value"))
    else:
        why = f": {esc(how['label'])}" if how.get("label") else ""
        body = table(rows, ("measure", "value")) + f'<p class="notrun">relative to exact MDAV: not run{why}</p>'
    pca = r.get("pca") or {}
    if pca.get("energy_loss") is not None:
        body += f"<p>PCA energy loss ε² of the kept components: {fmt(float(pca['energy_loss']))}</p>"
    return body


def _cell_sizes(r: Mapping) -> str:
    rows = [(key, r[key]) for key in ("cells", "min_cell_size", "max_cell_size") if r.get(key) is not None]
    body = table(rows, ("", "value")) if rows else ""
    counts = r.get("cell_size_counts")
    if counts:
        return body + cell_size_plot(counts)
    return body + '<p class="notrun">cell-size histogram not recorded</p>'


def _pca_spectrum(r: Mapping) -> str:
    pca = r.get("pca") or {}
    eigenvalues = r.get("eigenvalues") or pca.get("eigenvalues")
    n_components = r.get("n_components", pca.get("n_components"))
    if not eigenvalues:
        return _not_run("no PCA in this run")
    total = sum(float(v) for v in eigenvalues)
    text = f"<p>{len(eigenvalues)} eigenvalues of the z-scored QI covariance (Σλ = {fmt(total)})"
    if n_components is not None:
        kept = sum(sorted((float(v) for v in eigenvalues), reverse=True)[: int(n_components)])
        share = kept / total if total > 0 else 0.0
        text += f"; m̃ = {int(n_components)} components kept, retaining {100 * share:.1f} % of the energy"
    text += ".</p>"
    return text + energy_spectrum_plot(eigenvalues, n_components)


def _macrocells(r: Mapping) -> str:
    sse = r.get("macrocell_sse")
    if not sse:
        return _not_run("no proximal/distal prepartition in this run")
    n_distal = r.get("n_distal")
    nu = r.get("nu")
    if n_distal is None and nu is not None:
        n_distal = int(round(float(nu) * len(sse)))
    rows = [("macrocells", len(sse)), ("distal macrocells C_D", n_distal), ("distal fraction ν", nu)]
    total = sum(float(v) for v in sse)
    if n_distal:
        top = sum(sorted((float(v) for v in sse), reverse=True)[: int(n_distal)])
        rows.append(("share of macrocell SSE in the distal part", f"{100 * top / total:.1f} %" if total > 0 else "—"))
    return table(rows, ("", "value")) + macrocell_sse_plot(sse, n_distal)


def _verification(r: Mapping) -> str:
    v = r.get("verification")
    if not v:
        return _not_run("no verification recorded")
    passed = bool(v.get("passed"))
    badge = '<span class="badge pass">passed</span>' if passed else '<span class="badge fail">FAILED</span>'
    body = f"<p>{badge}</p>"
    for name in ("k_anonymity", "rows", "effective_anonymity"):
        check = v.get(name)
        if isinstance(check, Mapping):
            body += f"<h3>{esc(name.replace('_', ' '))}</h3>" + table(list(check.items()), ("field", "value"))
    return body


def _generic(r: Mapping, key: str, labels: Mapping, what: str) -> str:
    data = r.get(key)
    if not data:
        return _not_run(what)
    return table(_labelled(data, labels), ("measure", "value"))


def _utility(r: Mapping) -> str:
    u = r.get("utility")
    if not u:
        return _not_run("utility measures were not computed for this run")
    names = {
        "il1s": "IL1s — mean |x − x′| / (√2·S)",
        "eigen": "eigen — Σ |e − e′| / e over correlation eigenvalues",
        "distortion": "D = SSE/SST",
        "information_loss": "IL = 100·D",
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


def _risk(r: Mapping) -> str:
    risk = r.get("risk")
    if not risk:
        return _not_run("disclosure-risk measures were not computed for this run")
    body = ""
    link = risk.get("record_linkage")
    if link:
        body += "<h3>Distance-based record linkage</h3>" + table(
            [("share of records whose nearest released tuple is their own cell's", link.get("rate")),
             ("records evaluated", link.get("n_sampled")), ("correct links", link.get("n_linked")),
             ("distinct released tuples", link.get("n_tuples"))], ("measure", "value"))
    interval = risk.get("interval_disclosure")
    if interval:
        body += "<h3>Interval disclosure</h3>" + table(
            [("share of records with every released QI within ±p·S′ of the original", interval.get("rate")),
             ("p (fraction of the released std)", interval.get("p")),
             ("attributes allowed outside", interval.get("max_outside")),
             ("records evaluated", interval.get("n_sampled"))], ("measure", "value"))
    return body or table(list(risk.items()), ("measure", "value"))


def _sweep(r: Mapping) -> str | None:
    sweep = r.get("sweep")
    if not sweep:
        return None
    points = sweep.get("points") if isinstance(sweep, Mapping) else sweep
    budget = sweep.get("budget") if isinstance(sweep, Mapping) else None
    body = sweep_plot(points, budget)
    best = recommend_setting(points, budget)
    if best is not None:
        body += (f"<p>Recommended setting for δ ≤ {100 * float(budget):.2g} %: <b>{esc(best['setting'])}</b> "
                 f"(τ = {100 * best['relative_time']:.1f} %, δ = {100 * best['relative_distortion']:.2f} %)</p>")
    return body


def _performance(r: Mapping) -> str | None:
    path = r.get("performance_report") or (r.get("paths") or {}).get("performance_report")
    if not path:
        return None
    p = Path(str(path))
    href = p.as_uri() if p.is_absolute() else str(path)
    return f'<p><a href="{esc(href)}">{esc(path)}</a> (Dask performance report of this run)</p>'


# --------------------------------------------------------------------------- page


def render_html(report: Mapping) -> str:
    """Render a run report dict as one self-contained HTML page.

    Parameters
    ----------
    report : mapping
        The dict of :meth:`daskmicro.report.Report.to_dict` (or ``report.json`` loaded).  Every
        field is optional except that the page says little without ``method``, ``k`` and ``n``;
        optional sections whose data is absent say "not run".  A ``sweep`` field —
        ``{"points": [{setting, relative_time, relative_distortion}, …], "budget": δ_max}`` —
        adds the sweep plot (:func:`~daskmicro.report.plots.sweep_plot`).

    Returns
    -------
    str
        The page: inline CSS and SVG, no external resource.
    """
    if not isinstance(report, Mapping):
        raise ParameterError(f"report must be a dict (Report.to_dict()), got {type(report).__name__}")
    r = report
    builders = {
        "parameters": _parameters, "timings": _timings, "information-loss": _information_loss,
        "cell-sizes": _cell_sizes, "pca-spectrum": _pca_spectrum, "macrocells": _macrocells,
        "verification": _verification,
        "incremental": lambda r: _generic(r, "incremental", _INCREMENTAL_LABELS, "the incremental mode did not run"),
        "probabilistic": lambda r: _generic(r, "probabilistic", _PROBABILISTIC_LABELS,
                                            "the p-probabilistic mode did not run"),
        "utility": _utility, "risk": _risk, "sweep": _sweep, "performance": _performance,
    }
    sections, present = [], []
    for sid in SECTION_IDS:
        body = builders[sid](r)
        if body is None:
            continue
        sections.append(_section(sid, body))
        present.append(sid)
    nav = "".join(f'<a href="#{sid}">{esc(_TITLES[sid])}</a>' for sid in present)
    verification = r.get("verification") or {}
    verdict = ("verified" if verification.get("passed") else "NOT verified") if verification else "verification not run"
    method = r.get("method", "?")
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
        "<footer>Generated by daskmicro from report.json. Information loss is 100·SSE/SST on z-scored QI "
        "columns; aggregates only, no data values.</footer>"
        f"<script>{TAIL_SCRIPT}</script></body></html>\n"
    )


def find_report(path) -> tuple[Path, Path]:
    """The JSON report of a release and where its page goes by default: ``(report_json, html)``.

    ``path`` may be a report JSON itself (``X.json`` → ``X.html`` beside it), a release file
    (``NAME.report.json`` beside it → ``NAME.report.html``), a directory release (``_report.json``
    inside → ``DIR.report.html`` *beside* the directory, so a committed release is left as it
    was) or a demo / run directory (``report.json`` inside → ``report.html`` inside).  Raises
    :class:`~daskmicro.errors.InputError` when there is nothing there or no report in it.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "_report.json").is_file():
            named = path if path.name not in ("", ".", "..") else path.resolve()
            return path / "_report.json", named.with_name(named.name + ".report.html")
        if (path / "report.json").is_file():
            return path / "report.json", path / "report.html"
        raise InputError(f"no report.json or _report.json in directory: {path}")
    if path.is_file():
        if path.suffix.lower() == ".json":
            return path, path.with_suffix(".html")
        source = path.with_name(path.stem + ".report.json")
        if source.is_file():
            return source, source.with_suffix(".html")
        raise InputError(f"no report beside release file (looked for {source.name}): {path}")
    if path.suffix.lower() == ".json":
        raise InputError(f"report does not exist: {path}")
    raise InputError(f"release or run directory does not exist: {path}")


def _rebase_links(report: dict, source: Path, target: Path) -> dict:
    """Relative links in ``report`` (to the Dask performance report) made relative to ``target``."""
    import os

    if source.resolve().parent == target.resolve().parent:
        return report
    report = dict(report)
    for holder in (report, report.get("paths") if isinstance(report.get("paths"), dict) else None):
        if holder is None or not holder.get("performance_report"):
            continue
        link = Path(str(holder["performance_report"]))
        if link.is_absolute():
            continue
        if holder is not report:
            holder = report["paths"] = dict(holder)
        absolute = (source.resolve().parent / link).resolve()
        holder["performance_report"] = Path(os.path.relpath(absolute, target.resolve().parent)).as_posix()
    return report


def write_report(path, output=None, *, overwrite: bool = True) -> Path:
    """Render the HTML page of a run's JSON report; returns the HTML path.

    ``path`` is anything :func:`find_report` accepts (a release file, a directory release, a
    demo directory or a report JSON); the page goes to ``output`` when given, else where
    :func:`find_report` says.  With ``overwrite=False`` an existing page is refused.  The page
    is written to a temporary file and moved into place, so on error nothing is written and an
    earlier page is left untouched.  Raises :class:`~daskmicro.errors.InputError` naming the
    file when the report is missing or unreadable.
    """
    source, target = find_report(path)
    if output is not None:
        target = Path(output)
        if target.is_dir() or str(output).endswith(("/", "\\")):
            raise InputError(f"--output must be a file path, not a directory: {output}")
        if target.suffix.lower() != ".html":
            raise InputError(f"--output must end in .html: {output}")
        if not target.parent.is_dir():
            raise InputError(f"directory of --output does not exist: {target.parent}")
    if target.resolve() == Path(path).resolve() or target.resolve() == source.resolve():
        raise InputError(f"output would replace its own input: {target}")
    if target.exists() and not overwrite:
        raise InputError(f"output exists (use --overwrite to replace it): {target}")
    try:
        report = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read {source}: {redact(str(exc))}") from None
    if not isinstance(report, dict):
        raise InputError(f"{source} does not hold a report object")
    page = render_html(_rebase_links(report, source, target))
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {target}: {redact(str(exc))}") from None
    return target
