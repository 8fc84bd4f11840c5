"""The report's release section: each QI's distribution in the release and the release's
correlation matrix.

It draws the report's ``release_figures`` field (:func:`daskmicro.kernels.figures.publish`) as
it is: counts on bins from the smallest to the largest published value, suppressed bins
(``None``) marked and never drawn as a count.  A column whose ``scale`` is ``log`` (or ``asinh``:
linear near 0, logarithmic beyond) is drawn on that axis, its bins equal there, its tick labels
in original units at round values (1, 10, 100, 1k, …) and the axis labelled as such.  Nothing of the original values is shown — no
original histogram, mean, spread or correlation: with the release, any of them would tell how
far records lie from their published group averages.  Pure functions of plain numbers; SVG by
matplotlib (:func:`~daskmicro.report.plots.figure_to_svg`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from ..kernels.figures import SKEW
from .plots import figure_to_svg, label_margin

__all__ = ["distribution_plot", "distribution_figure", "correlation_plot", "release_body", "tick_text",
           "scaled_ticks", "AXIS_NOTE"]

#: What a transformed axis says under it.
AXIS_NOTE = {"log": "log scale", "asinh": "log scale (linear near 0)"}

_ORANGE, _GREY = "#e07b16", "#888a85"


def _shown(column: Mapping) -> slice:
    """The bins from the first to the last that holds anything (None counts: records are there)."""
    filled = [i for i, v in enumerate(column["released"]) if v != 0]
    return slice(filled[0], filled[-1] + 1) if filled else slice(0, len(column["released"]))


def tick_text(value: float, top: float | None = None) -> str:
    """A tick label a reader takes in at a glance: thousands separators, and k/M/G when the axis
    reaches ``top`` (its largest absolute value; ``value``'s own by default) of 10,000 or more
    (``200k``, ``1.5M``, up to ``T``; powers of ten beyond), one unit per axis, so that neighbouring labels of skewed data never run together."""
    if value == 0:
        return "0"
    a = abs(value if top is None else top)
    if a >= 1e15:
        return f"{value:.2g}"
    for threshold, scale, unit in ((1e12, 1e12, "T"), (1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if a >= threshold:
            return f"{value / scale:,.3g}{unit}"
    if a >= 1:
        return f"{value:,.4g}"
    return f"{value:.2g}"


def _ticks(axis, top: float, integer: bool = False) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=4, integer=integer))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_text(v, top)))


def _forward(scale: str, width: float):
    """The map from original units to the axis' own (where ticks are spaced)."""
    if scale == "log":
        return np.log10
    if scale == "asinh":
        return lambda v: np.arcsinh(np.asarray(v, dtype=np.float64) / width) / np.log(10.0)
    return lambda v: np.asarray(v, dtype=np.float64)


def _round_values(lo: float, hi: float, mantissas) -> list:
    """The values m·10^e (and their negatives, and 0) between ``lo`` and ``hi``, ascending."""
    top = max(abs(lo), abs(hi))
    if top <= 0:
        return [0.0]
    out = {0.0} if lo <= 0 <= hi else set()
    for e in range(int(np.floor(np.log10(top))) - 16, int(np.floor(np.log10(top))) + 1):
        for m in mantissas:
            for v in (m * 10.0 ** e, -m * 10.0 ** e):
                if lo <= v <= hi:
                    out.add(float(f"{v:.12g}"))
    return sorted(out)


def scaled_ticks(lo: float, hi: float, scale: str, width: float = 1.0, most: int = 5) -> list:
    """Tick values, in original units, for a ``log`` or ``asinh`` axis from ``lo`` to ``hi``: round
    values (powers of ten; else 1-2-5; else 1 … 9 times a power of ten), at least a ``most``-th
    of the axis apart so that their labels never run together; [] when fewer than two fit."""
    f = _forward(scale, width)
    gap = (f(hi) - f(lo)) / most
    for mantissas in ((1,), (1, 2, 5), range(1, 10)):
        kept: list = []
        for v in _round_values(lo, hi, mantissas):
            if not kept or f(v) - f(kept[-1]) >= gap * (1 - 1e-9):
                kept.append(v)
        if len(kept) >= 2:
            return kept
    return []


def _scaled_axis(ax, scale: str, width: float, lo: float, hi: float) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    if scale == "log":
        ax.set_xscale("log")
    else:
        ax.set_xscale("asinh", linear_width=width)
    ax.set_xlim(lo, hi)
    ticks = scaled_ticks(lo, hi, scale, width)
    if ticks:
        # round values a decade or more apart: each label in its own unit (1, 100, 10k, 1M)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_text(v)))
    else:
        _ticks(ax.xaxis, max(abs(lo), abs(hi)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(AXIS_NOTE[scale], fontsize=7, labelpad=1)


def _centres(lo, hi, scale: str, width: float) -> np.ndarray:
    """The middle of each bin as drawn: on a log or asinh axis, the middle on that axis."""
    if scale == "log":
        return np.sqrt(lo * hi)
    if scale == "asinh":
        return width * np.sinh(0.5 * (np.arcsinh(lo / width) + np.arcsinh(hi / width)))
    return 0.5 * (lo + hi)


def _bars(ax, lo: np.ndarray, hi: np.ndarray, heights: np.ndarray) -> None:
    """The histogram's bars as one collection of rectangles: drawn as fast as one artist (a page with a
    dozen QIs of 32 bins each would otherwise draw several hundred), the y axis starting at 0."""
    from matplotlib.collections import PolyCollection

    zero = np.zeros_like(heights)
    corners = np.stack([np.column_stack(p) for p in ((lo, zero), (lo, heights), (hi, heights), (hi, zero))], axis=1)
    bars = PolyCollection(corners, facecolors=_ORANGE, edgecolors="white", linewidths=0.3, label="released")
    bars.sticky_edges.y.append(0.0)
    ax.add_collection(bars)
    ax.update_datalim([(lo.min(), 0.0), (hi.max(), max(float(heights.max(initial=0.0)), 1.0))])
    ax.autoscale_view()


def _one_histogram(ax, column: Mapping) -> None:
    edges = np.asarray(column["edges"], dtype=np.float64)
    scale = column.get("scale", "linear")
    lin = float(column.get("linear_width") or 1.0)
    keep = _shown(column)
    lo, hi = edges[:-1][keep], edges[1:][keep]
    mid = _centres(lo, hi, scale, lin)
    counts = [None if v is None else int(v) for v in column["released"][keep]]
    _bars(ax, lo, hi, np.array([0 if v is None else v for v in counts], dtype=np.float64))
    # a bin holding a few records next to one holding hundreds has a bar too low to see: a mark at its foot
    top = max([v or 0 for v in counts], default=0)
    low = [x for x, v in zip(mid, counts) if v and v < top / 40]
    if low:
        ax.plot(low, [0] * len(low), linestyle="none", marker="^", markersize=4, color=_ORANGE, clip_on=False,
                label="a few records (bar too low to see)")
    hidden = [x for x, v in zip(mid, counts) if v is None]
    if hidden:
        ax.plot(hidden, [0] * len(hidden), linestyle="none", marker="x", color=_GREY, clip_on=False,
                label="suppressed (< k)")
    ax.set_title(str(column["name"]), fontsize=9)
    ax.tick_params(labelsize=7)
    # at most four labels per axis, compact: a small plot's labels never overlap
    if scale in AXIS_NOTE and lo[0] < hi[-1]:
        _scaled_axis(ax, scale, lin, lo[0], hi[-1])
    else:
        ax.set_xlim(lo[0], hi[-1])
        _ticks(ax.xaxis, max(abs(lo[0]), abs(hi[-1])))
    _ticks(ax.yaxis, max([v or 0 for v in counts], default=0), integer=True)
    ax.grid(axis="y", alpha=0.3)


#: The small multiples' grid, in inches: each panel, the gaps between panels and the page margins.
#: A fixed grid rather than a layout engine: with a dozen QIs, matplotlib's constrained layout took
#: most of the page's render time, and compact tick labels need no negotiated space.
_PANEL_W, _PANEL_H, _GAP_W, _GAP_H = 2.3, 1.45, 0.6, 0.65
_LEFT, _RIGHT, _TOP, _BOTTOM = 0.75, 0.15, 0.7, 0.45


def distribution_plot(columns: Sequence[Mapping], per_row: int = 4) -> str:
    """One small histogram per QI of the released values (SVG markup of :func:`distribution_figure`)."""
    return figure_to_svg(distribution_figure(columns, per_row), "distributions")


def distribution_figure(columns: Sequence[Mapping], per_row: int = 4):
    """The :class:`matplotlib.figure.Figure` of :func:`distribution_plot`."""
    from matplotlib.figure import Figure

    n = max(len(columns), 1)
    per_row = min(per_row, n)
    rows = math.ceil(n / per_row)
    width = _LEFT + per_row * _PANEL_W + (per_row - 1) * _GAP_W + _RIGHT
    height = _TOP + rows * _PANEL_H + (rows - 1) * _GAP_H + _BOTTOM
    fig = Figure(figsize=(width, height))
    grid = dict(left=_LEFT / width, right=1 - _RIGHT / width, top=1 - _TOP / height, bottom=_BOTTOM / height,
                wspace=_GAP_W / _PANEL_W, hspace=_GAP_H / _PANEL_H)
    axes = np.atleast_1d(fig.subplots(rows, per_row, gridspec_kw=grid)).ravel()
    for ax, column in zip(axes, columns):
        _one_histogram(ax, column)
    for ax in axes[len(columns):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:len(columns)]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.08 / height), ncols=len(labels),
               fontsize=8, frameon=False)
    fig.supylabel("records per bin", fontsize=8, x=0.2 / width)
    return fig


def _matrix(values) -> np.ndarray:
    return np.array([[np.nan if v is None else float(v) for v in row] for row in values], dtype=np.float64)


def correlation_plot(corr: Mapping) -> str:
    """The correlation matrix of the release."""
    from matplotlib.figure import Figure

    names = [str(c) for c in corr["columns"]]
    m = len(names)
    side = min(max(2.4, 0.32 * m + 1.2), 5.6)
    # fixed margins from the names' length (7 points; below the matrix they stand upright), the title
    # above, the colour bar and its label on the right: a layout engine would take as long as the plot
    names_in = label_margin(names, points=7)
    width, height = names_in + side + 1.0, 0.35 + side + names_in
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((names_in / width, names_in / height, side / width, side / height))
    bar = fig.add_axes(((names_in + side + 0.15) / width, (names_in + 0.1 * side) / height, 0.14 / width,
                        0.8 * side / height))
    import matplotlib

    cmap = matplotlib.colormaps["RdBu_r"].resampled(20)  # under 50 colours: the colour bar stays vector
    # vector cells (pcolormesh), not an embedded bitmap: the page links to nothing, not even data: URIs
    image = ax.pcolormesh(np.ma.masked_invalid(_matrix(corr["released"])), cmap=cmap, vmin=-1, vmax=1,
                          edgecolors="white", linewidth=0.3)
    ax.set_aspect("equal")
    ax.invert_yaxis()
    ax.set_title("released", fontsize=10)
    ax.set_xticks(np.arange(m) + 0.5, names, rotation=90, fontsize=7)
    ax.set_yticks(np.arange(m) + 0.5, names, fontsize=7)
    fig.colorbar(image, cax=bar, label="correlation")
    return figure_to_svg(fig, "correlations")


def release_body(figures: Mapping) -> str | None:
    """The HTML of the release section, or None when the report has no release figures."""
    columns = figures.get("columns") if isinstance(figures, Mapping) else None
    if not columns:
        return None
    k = figures.get("k")
    body = ("<p>Each QI's distribution in the release: counts on equal bins from the smallest to the largest "
            "published value — equal on a logarithmic axis for a strongly right-skewed QI (skewness of the published values "
            f"{SKEW:g} or more; \"log scale\" under the axis, and linear near 0 where a value is 0 or negative), its labels in the QI's "
            "own units. Released values are group averages, so they bunch towards the middle. The original "
            "values are not shown, nor their mean, spread, extremes or correlations: next to the release, any of "
            "them would tell how far records lie from their group's average. How much was lost is summed up by "
            "the information loss, given rounded.</p>")
    body += distribution_plot(columns)
    hidden = int(figures.get("suppressed_bins") or 0)
    if hidden:
        small = f"between 1 and {int(k) - 1} records (fewer than k = {int(k)})" if k else "fewer than k records"
        body += (f'<p class="note">{hidden} bin(s) marked × hold {small} — or, where needed, a few more so that '
                 "their total cannot be worked out from the others — and are not shown.</p>")
    corr = figures.get("correlation") or {}
    if corr.get("released"):
        body += (f"<h3>Correlations between the QIs</h3><p>Over the {int(corr.get('records', 0)):,} released "
                 "records with every QI present (red positive, blue negative).</p>")
        body += correlation_plot(corr)
    return body
