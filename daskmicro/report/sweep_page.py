"""Outputs of a trade-off sweep: ``sweep.json``, ``sweep.csv``, ``sweep.png`` and ``sweep.html``.

The JSON document (:func:`sweep_document`) holds the sample, the exact-MDAV reference, every
setting with its relative time τ and distortion increments (ΔD and δ), the budget and the
recommended setting.  The HTML page (:func:`render_sweep_html`, a pure function of that
document) shows the τ-vs-δ plot of Figs. 14 and 21 of *Efficient k-Anonymous Microaggregation … via PCA* as inline SVG, the recommendation and
the table of settings; like the run report it needs no external resource.
"""

from __future__ import annotations

import contextlib

import math
from pathlib import Path
from typing import Mapping

import pandas as pd

from ..errors import ParameterError
from ..tuning.points import recommend_setting
from .plots import sweep_plot, sweep_png
from .page import CSS, HEAD_SCRIPT, TAIL_SCRIPT, esc, fmt, table

__all__ = ["SWEEP_FILES", "sweep_document", "render_sweep_html", "write_sweep"]

#: File names written by :func:`write_sweep`, by kind.
SWEEP_FILES = {"json": "sweep.json", "csv": "sweep.csv", "png": "sweep.png", "html": "sweep.html"}


def _plain(value):
    """JSON-ready scalar: numpy and pandas missing values become None."""
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def sweep_document(result: pd.DataFrame, input_path: str | None = None) -> dict:
    """The JSON document of a :func:`daskmicro.sweep` result (``sweep.json``)."""
    from .._version import __version__
    from .run import utc_now
    from ..tuning.tradeoff import sweep_points

    if not isinstance(result, pd.DataFrame) or "relative_time" not in result.columns:
        raise ParameterError("result must be the DataFrame returned by daskmicro.sweep")
    attrs = dict(result.attrs)
    points = []
    for plot_point, row in zip(sweep_points(result, "relative"), result.to_dict(orient="records")):
        points.append({**{key: _plain(value) for key, value in row.items()}, **plot_point})
    doc = {
        "daskmicro_version": __version__,
        "created": utc_now(),
        "input": None if input_path is None else str(input_path),
        **{key: attrs.get(key) for key in ("k", "qi", "m_used", "constant_columns", "n_input", "sample_size",
                                            "seed", "repeat", "reference", "budget", "increment", "recommended")},
        "points": points,
    }
    return doc


def _settings_table(points) -> str:
    header = ("setting", "ν", "K", "C", "C_D", "m̃", "ε²", "seconds", "τ", "IL (% of the QIs' variance)", "ΔD = D′ − D",
              "δ = ΔD/D")
    rows = []
    for p in points:
        rows.append((
            ("★ " if p.get("recommended") else "") + str(p.get("setting")), p.get("nu"), p.get("K"),
            p.get("macrocells"), p.get("n_distal"), p.get("m_tilde"), p.get("energy_loss"), p.get("seconds"),
            f"{100 * p['relative_time']:.1f} %",
            None if p.get("information_loss") is None else f"{float(p['information_loss']):.4g} %",
            None if p.get("delta_D") is None else f"{100 * p['delta_D']:+.3f} %",
            f"{100 * p['relative_distortion']:+.2f} %",
        ))
    return table(rows, header)


def render_sweep_html(doc: Mapping) -> str:
    """Render a sweep document (:func:`sweep_document`) as one self-contained HTML page.

    Sections: the sample and the exact-MDAV reference, the plot of relative time τ against the
    relative distortion increment δ with the budget and the recommended setting (*Efficient k-Anonymous Microaggregation … via PCA*,
    §V, Figs. 14 and 21), and the table of settings.
    """
    if not isinstance(doc, Mapping) or not doc.get("points"):
        raise ParameterError("doc must be a sweep document with a non-empty 'points' list")
    points = list(doc["points"])
    budget = doc.get("budget")
    ref = doc.get("reference") or {}
    absolute = doc.get("increment") == "absolute"
    sym = "ΔD" if absolute else "δ"
    if absolute:  # the paper's axis: ΔD = D′ − D
        plot_points = [{**p, "relative_distortion": p.get("delta_D")} for p in points]
        xlabel = "distortion increment ΔD = D′ − D over exact MDAV (% of SST)"
    else:
        plot_points, xlabel = points, None
    best = recommend_setting(plot_points, budget)
    params = [
        ("input", doc.get("input")), ("records in the input", doc.get("n_input")),
        ("records in the sample", doc.get("sample_size")), ("sample seed", doc.get("seed")),
        ("k", doc.get("k")), ("QI columns", doc.get("qi")), ("non-constant QI columns", doc.get("m_used")),
        ("timing: best of", doc.get("repeat")),
        ("reference: exact MDAV on the sample, information loss (% of the QIs' variance)",
         None if ref.get("information_loss") is None else f"{float(ref['information_loss']):.4g} %"),
        ("reference: seconds", ref.get("seconds")),
        ("settings tried", len(points)),
    ]
    params = [(name, value) for name, value in params if value is not None]
    if budget is None:
        verdict = '<p class="notrun">no distortion budget given: no recommendation</p>'
    elif best is None:
        verdict = (f'<p id="recommendation">No setting keeps {sym} within the budget of {100 * float(budget):.2g} %; '
                   "exact MDAV (ν = 1) is the safe choice.</p>")
    else:
        verdict = (f'<p id="recommendation">Recommended setting for {sym} ≤ {100 * float(budget):.2g} %: '
                   f"<b>{esc(best['setting'])}</b> — τ = {100 * best['relative_time']:.1f} % of the time of exact "
                   f"MDAV, {sym} = {100 * best['relative_distortion']:+.2f} %.</p>")
    sections = [
        ("parameters", "Sample and reference", table(params, ("", "value"))),
        ("tradeoff", "Relative time vs distortion increment",
         verdict + sweep_plot(plot_points, budget, xlabel)
         + "<p>τ = t′/t against the time t of exact MDAV on the same sample; δ = (D′ − D)/D and "
           "ΔD = D′ − D against its distortion D = SSE/SST (<i>Efficient k-Anonymous Microaggregation … via PCA</i>, §V, Figs. 14 and 21); the budget bounds "
           f"{sym}.  ν = 1 is exact MDAV itself.</p>"),
        ("settings", "Settings", _settings_table(points)),
    ]
    body = "\n".join(f'<section id="{sid}"><h2>{esc(title)}</h2>{html}</section>' for sid, title, html in sections)
    title = f"daskmicro sweep — k = {doc.get('k', '?')}, {len(points)} settings"
    subtitle = (f"{fmt(doc.get('sample_size'))} sampled of {fmt(doc.get('n_input'))} records · "
                f"created {esc(doc.get('created', '—'))} · daskmicro {esc(doc.get('daskmicro_version', '?'))}")
    files = " · ".join(f'<a href="{name}">{name}</a>' for name in (SWEEP_FILES["json"], SWEEP_FILES["csv"],
                                                                     SWEEP_FILES["png"]))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
        f"<style>{CSS}</style><script>{HEAD_SCRIPT}</script></head>\n<body>"
        f"<header><h1>{esc(title)}</h1><p>{subtitle}</p></header><main>\n{body}\n</main>"
        f"<footer>Generated by daskmicro sweep. Files: {files}. Distortion is SSE/SST on z-scored QI columns.</footer>"
        f"<script>{TAIL_SCRIPT}</script></body></html>\n"
    )


def write_sweep(result: pd.DataFrame, out_dir, input_path: str | None = None, overwrite: bool = False) -> dict:
    """Write ``sweep.json``, ``sweep.csv``, ``sweep.png`` and ``sweep.html`` into ``out_dir``.

    All four appear together or none does (staged, then moved into place).  Existing files are
    refused unless ``overwrite``; ``out_dir`` is created when missing (its parent must exist).
    Returns ``{kind: path}``.
    """
    from ..io.tables import AtomicBatch
    from ..tuning.tradeoff import sweep_points

    out_dir = Path(out_dir)
    paths = check_sweep_target(out_dir, overwrite)
    doc = sweep_document(result, input_path)
    page = render_sweep_html(doc)
    absolute = doc.get("increment") == "absolute"
    png = sweep_png(sweep_points(result), doc.get("budget"),
                          "distortion increment ΔD = D′ − D over exact MDAV (% of SST)" if absolute else None)
    frame = result.copy()
    created = not out_dir.exists()
    out_dir.mkdir(exist_ok=True)
    try:
        with AtomicBatch() as batch:
            batch.json(doc, paths["json"])
            batch.csv(frame, paths["csv"])
            batch.blob(png, paths["png"])
            batch.text(page, paths["html"])
    except BaseException:
        if created:
            with contextlib.suppress(OSError):  # never hide the error that stopped the write
                out_dir.rmdir()
        raise
    return paths


def check_sweep_target(out_dir, overwrite: bool) -> dict:
    """Paths of the sweep files in ``out_dir``; refuses existing ones without ``overwrite``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ParameterError(f"--out is not a directory: {out_dir}")
    if not out_dir.exists() and not out_dir.parent.is_dir():
        raise ParameterError(f"directory of --out does not exist: {out_dir.parent}")
    paths = {kind: out_dir / name for kind, name in SWEEP_FILES.items()}
    dirs = [p.name for p in paths.values() if p.is_dir()]
    if dirs:
        raise ParameterError(f"{out_dir} holds directories named {', '.join(dirs)}: the sweep files cannot replace them")
    existing = [p.name for p in paths.values() if p.exists()]
    if existing and not overwrite:
        raise ParameterError(f"{out_dir} already holds {', '.join(existing)} (use --overwrite to replace)")
    return paths
