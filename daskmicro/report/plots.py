"""Plots of a run report, rendered by matplotlib as inline SVG markup.

Every function here is pure: it takes plain numbers, builds a :class:`matplotlib.figure.Figure`
without touching pyplot's global state (so it never changes the user's backend), and returns
the SVG markup as a string, ready to be embedded in an HTML page.  The output is deterministic:
matplotlib's SVG ids are salted with a per-plot name, which also keeps ids unique when several
plots share one page.
"""

from __future__ import annotations

import io
import re
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..tuning.points import check_points, recommend_setting

__all__ = [
    "figure_to_svg",
    "timings_plot",
    "cell_size_plot",
    "energy_spectrum_plot",
    "macrocell_sse_plot",
    "eigenvalue_plot",
    "sweep_plot",
    "sweep_figure",
    "sweep_png",
]

_BLUE, _ORANGE, _GREY, _GREEN = "#3465a4", "#e07b16", "#888a85", "#2e8b57"


#: Width of every report plot (inches): about the page's width at 72 points per inch, so that text
#: keeps its size when the SVG is stretched to the width of the page.
WIDTH = 12.0


def _figure(width: float = WIDTH, height: float = 3.4):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def figure_to_svg(fig, name: str) -> str:
    """Serialize ``fig`` as inline SVG markup (no XML prolog), with ids salted by ``name``."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": f"daskmicro-{name}", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    start = text.find("<svg")
    svg = text[start:] if start >= 0 else text
    # matplotlib names elements figure_1, axes_1, …in every figure: prefix ids and references
    # with the plot name so that ids stay unique on a page holding several plots.
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{name}-\1"', svg)
    svg = re.sub(r'(href="|url\()#([^")]+)', rf"\1#{name}-\2", svg)
    return svg.replace("<svg ", f'<svg class="plot" data-plot="{name}" role="img" ', 1)


def label_margin(labels: Iterable[str], points: float = 10) -> float:
    """Inches that the widest of ``labels`` takes at ``points`` points (the font's own metrics), plus
    the gap to the axis and its ticks: margins are set from it, not by a layout engine."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    measure, font = TextToPath(), FontProperties(size=points)
    widest = max((measure.get_text_width_height_descent(str(s), font, ismath=False)[0] for s in labels), default=0.0)
    return 0.2 + widest / 72


def timings_plot(timings: Mapping[str, float]) -> str:
    """Horizontal bars: wall time per pipeline stage, in the order given."""
    from matplotlib.figure import Figure

    stages = [str(s) for s in timings]
    seconds = [float(v) for v in timings.values()]
    height = 0.8 + 0.3 * max(len(stages), 1)
    # fixed margins (the stage names on the left, the seconds below): a layout engine would take
    # as long as drawing the plot
    fig = Figure(figsize=(WIDTH, height))
    fig.subplots_adjust(left=label_margin(stages) / WIDTH, right=1 - 0.25 / WIDTH, top=1 - 0.12 / height,
                        bottom=0.62 / height)
    ax = fig.add_subplot()
    y = np.arange(len(stages))[::-1]
    ax.barh(y, seconds, color=_BLUE)
    ax.set_yticks(y, stages)
    ax.set_xlabel("seconds")
    ax.grid(axis="x", alpha=0.3)
    return figure_to_svg(fig, "timings")


def cell_size_plot(counts: Mapping) -> str:
    """Bar chart of the cell-size histogram ``{cell size: number of cells}``."""
    sizes = np.array([int(s) for s in counts], dtype=np.int64)
    number = np.array([int(c) for c in counts.values()], dtype=np.int64)
    order = np.argsort(sizes)
    sizes, number = sizes[order], number[order]
    fig = _figure()
    ax = fig.add_subplot()
    ax.bar(sizes, number, width=0.8, color=_BLUE)
    ax.set_xlabel("cell size (records)")
    ax.set_ylabel("number of cells")
    if sizes.size and sizes.max() - sizes.min() <= 30:
        ax.set_xticks(np.arange(sizes.min(), sizes.max() + 1))
    ax.grid(axis="y", alpha=0.3)
    return figure_to_svg(fig, "cell-sizes")


def energy_spectrum_plot(eigenvalues: Sequence[float], n_components: int | None = None) -> str:
    """The PCA energy spectrum with the chosen m̃ (*Efficient k-Anonymous Microaggregation … via PCA*, §III-C, Fig. 9).

    Bars: normalized eigenvalues λ_i / Σλ in decreasing order; line: cumulative normalized energy
    (1/Σλ)·Σ_{i≤m̃} λ_i; a dashed line marks the m̃ that was kept and the energy it retains.
    Σλ = m for z-scored data.
    """
    lam = np.sort(np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None))[::-1]
    total = lam.sum()
    share = lam / total if total > 0 else np.zeros_like(lam)
    cumulative = np.cumsum(share)
    idx = np.arange(1, lam.size + 1)
    fig = _figure()
    ax = fig.add_subplot()
    ax.bar(idx, 100 * share, color=_BLUE, label="energy per component")
    ax.plot(idx, 100 * cumulative, marker="o", color=_ORANGE, label="cumulative energy")
    if n_components is not None and 1 <= int(n_components) <= lam.size:
        mt = int(n_components)
        ax.axvline(mt, color=_GREY, linestyle="--")
        ax.annotate(
            f"m̃ = {mt}: {100 * cumulative[mt - 1]:.1f} % kept",
            (mt, 100 * cumulative[mt - 1]),
            xytext=(8, -28),
            textcoords="offset points",
        )
    ax.set_xticks(idx)
    ax.set_xlabel("number m̃ of principal components")
    ax.set_ylabel("normalized energy (%)")
    ax.set_ylim(0, 105)
    ax.legend(loc="center right")
    ax.grid(axis="y", alpha=0.3)
    return figure_to_svg(fig, "energy-spectrum")


def macrocell_sse_plot(macrocell_sse: Sequence[float], n_distal: int | None = None) -> str:
    """Sorted macrocell SSE with the proximal/distal cut (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B, Fig. 13).

    Macrocells are sorted by decreasing SSE; the first ``n_distal`` (C_D) are distal (shaded),
    the rest proximal.  Left panel linear, right panel logarithmic, as in the paper.
    """
    values = np.sort(np.asarray(macrocell_sse, dtype=np.float64))[::-1]
    rank = np.arange(1, values.size + 1)
    fig = _figure(WIDTH, 3.4)
    axes = fig.subplots(1, 2)
    for ax, log in zip(axes, (False, True)):
        ax.plot(rank, values, marker=".", color=_BLUE)
        if n_distal is not None and 0 < int(n_distal) <= values.size:
            cut = int(n_distal)
            ax.axvspan(0.5, cut + 0.5, color=_ORANGE, alpha=0.15, label=f"distal (C_D = {cut})")
            ax.axvline(cut + 0.5, color=_ORANGE, linestyle="--")
            ax.legend(loc="upper right")
        if log and (values > 0).any():
            ax.set_yscale("log")
        ax.set_xlabel("macrocell, by decreasing SSE")
        ax.set_ylabel("SSE" + (" (log)" if log else ""))
        ax.grid(alpha=0.3)
    return figure_to_svg(fig, "macrocell-sse")


def eigenvalue_plot(original: Sequence[float], released: Sequence[float]) -> str:
    """Leading eigenvalues of the correlation matrix, original next to release (the "eigen" measure)."""
    e1 = np.asarray(original, dtype=np.float64)
    e2 = np.asarray(released, dtype=np.float64)
    idx = np.arange(1, max(e1.size, e2.size) + 1)
    fig = _figure(WIDTH, 3.2)
    ax = fig.add_subplot()
    ax.bar(idx[: e1.size] - 0.2, e1, width=0.4, color=_BLUE, label="original")
    ax.bar(idx[: e2.size] + 0.2, e2, width=0.4, color=_ORANGE, label="release")
    ax.set_xticks(idx)
    ax.set_xlabel("eigenvalue rank")
    ax.set_ylabel("eigenvalue of the correlation matrix")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return figure_to_svg(fig, "eigenvalues")


def sweep_plot(points: Iterable[Mapping], budget: float | None = None, xlabel: str | None = None) -> str:
    """Relative time τ against distortion increment δ over a parameter sweep (*Efficient k-Anonymous Microaggregation … via PCA*, Figs. 14 and 21).

    The figure is :func:`sweep_figure`'s; see there for the parameters.  Returns inline SVG markup.
    """
    return figure_to_svg(sweep_figure(points, budget, xlabel), "sweep")


def sweep_png(points: Iterable[Mapping], budget: float | None = None, xlabel: str | None = None,
              dpi: int = 150) -> bytes:
    """:func:`sweep_figure` as PNG bytes (for slides and documents; the HTML pages use SVG)."""
    buf = io.BytesIO()
    sweep_figure(points, budget, xlabel).savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def sweep_figure(points: Iterable[Mapping], budget: float | None = None, xlabel: str | None = None):
    """Relative time τ against distortion increment δ over a parameter sweep (*Efficient k-Anonymous Microaggregation … via PCA*, Figs. 14 and 21).

    Parameters
    ----------
    points : iterable of mapping
        ``{"setting": label, "relative_time": τ, "relative_distortion": δ}`` per setting tried
        (τ and δ as fractions; plotted in %).
    budget : float, optional
        Distortion budget on δ: drawn as a vertical line, and the fastest setting within it
        (:func:`recommend_setting`) is highlighted and labelled.
    xlabel : str, optional
        Label of the distortion axis, when the points carry another increment than δ (the
        sweep's absolute ΔD = D′ − D, the paper's own axis).

    Returns
    -------
    matplotlib.figure.Figure
    """
    pts = check_points(points)
    t = np.array([p["relative_time"] for p in pts]) * 100
    d = np.array([p["relative_distortion"] for p in pts]) * 100
    fig = _figure(WIDTH, 4.5)
    ax = fig.add_subplot()
    ax.plot(d, t, linestyle="none", marker="o", markersize=8, color=_BLUE, label="setting")
    if len(pts) <= 15:
        for p, x, y in zip(pts, d, t):
            ax.annotate(str(p["setting"]), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    if budget is not None:
        ax.axvline(100 * float(budget), color=_ORANGE, linestyle="--", label=f"budget ≤ {100 * float(budget):.2g} %")
        best = recommend_setting(pts, budget)
        if best is not None:
            bx, by = 100 * best["relative_distortion"], 100 * best["relative_time"]
            ax.plot([bx], [by], marker="*", markersize=16, color=_GREEN, linestyle="none",
                    label=f"recommended: {best['setting']}")
    # a wide δ range (m̃ = 1 can cost +1000 %) would squash the settings near the budget
    linthresh = 100 * float(budget) if budget is not None and float(budget) > 0 else 1.0
    symlog = np.ptp(d) > 50 * linthresh
    if symlog:
        ax.set_xscale("symlog", linthresh=linthresh)
    xlabel = xlabel or "distortion increment δ over exact MDAV (%)"
    ax.set_xlabel(xlabel + (", symmetric log scale" if symlog else ""))
    ax.set_ylabel("relative time τ (%)")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    return fig
