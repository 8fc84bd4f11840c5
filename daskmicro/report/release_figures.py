"""The report's release section: each QI's distribution in the release and the release's
correlation matrix.

It draws the report's ``release_figures`` field (:func:`daskmicro.kernels.figures.publish`) as
it is: counts on bins from the smallest to the largest published value, suppressed bins
(``None``) marked and never drawn as a count.  Nothing of the original values is shown — no
original histogram, mean, spread or correlation: with the release, any of them would tell how
far records lie from their published group averages.  Pure functions of plain numbers; SVG by
matplotlib (:func:`~daskmicro.report.plots.figure_to_svg`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from .plots import figure_to_svg

__all__ = ["distribution_plot", "correlation_plot", "release_body", "tick_text"]

_ORANGE, _GREY = "#e07b16", "#888a85"


def _shown(column: Mapping) -> slice:
    """The bins from the first to the last that holds anything (None counts: records are there)."""
    filled = [i for i, v in enumerate(column["released"]) if v != 0]
    return slice(filled[0], filled[-1] + 1) if filled else slice(0, len(column["released"]))


def tick_text(value: float, top: float | None = None) -> str:
    """A tick label a reader takes in at a glance: thousands separators, and k/M/G when the axis
    reaches ``top`` (its largest absolute value; ``value``'s own by default) of 10,000 or more
    (``200k``, ``1.5M``), one unit per axis, so that neighbouring labels of skewed data never run together."""
    if value == 0:
        return "0"
    a = abs(value if top is None else top)
    for threshold, scale, unit in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if a >= threshold:
            return f"{value / scale:,.3g}{unit}"
    if a >= 1:
        return f"{value:,.4g}"
    return f"{value:.2g}"


def _ticks(axis, top: float, integer: bool = False) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=4, integer=integer))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_text(v, top)))


def _one_histogram(ax, column: Mapping) -> None:
    edges = np.asarray(column["edges"], dtype=np.float64)
    keep = _shown(column)
    lo, hi = edges[:-1][keep], edges[1:][keep]
    width = hi - lo
    counts = [None if v is None else int(v) for v in column["released"][keep]]
    ax.bar(lo, [0 if v is None else v for v in counts], width=width, align="edge", color=_ORANGE,
           edgecolor="white", linewidth=0.3, label="released")
    # a bin holding a few records next to one holding hundreds has a bar too low to see: a mark at its foot
    top = max([v or 0 for v in counts], default=0)
    low = [x + 0.5 * w for x, w, v in zip(lo, width, counts) if v and v < top / 40]
    if low:
        ax.plot(low, [0] * len(low), linestyle="none", marker="^", markersize=4, color=_ORANGE, clip_on=False,
                label="a few records (bar too low to see)")
    hidden = [x + 0.5 * w for x, w, v in zip(lo, width, counts) if v is None]
    if hidden:
        ax.plot(hidden, [0] * len(hidden), linestyle="none", marker="x", color=_GREY, clip_on=False,
                label="suppressed (< k)")
    ax.set_title(str(column["name"]), fontsize=9)
    ax.tick_params(labelsize=7)
    ax.set_xlim(lo[0], hi[-1])
    # at most four labels per axis, compact: a small plot's labels never overlap
    _ticks(ax.xaxis, max(abs(lo[0]), abs(hi[-1])))
    _ticks(ax.yaxis, max([v or 0 for v in counts], default=0), integer=True)
    ax.grid(axis="y", alpha=0.3)


#: The small multiples' grid, in inches: each panel, the gaps between panels and the page margins.
#: A fixed grid rather than a layout engine: with a dozen QIs, matplotlib's constrained layout took
#: most of the page's render time, and compact tick labels need no negotiated space.
_PANEL_W, _PANEL_H, _GAP_W, _GAP_H = 2.3, 1.45, 0.6, 0.65
_LEFT, _RIGHT, _TOP, _BOTTOM = 0.75, 0.15, 0.7, 0.35


def distribution_plot(columns: Sequence[Mapping], per_row: int = 4) -> str:
    """One small histogram per QI of the released values."""
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
    return figure_to_svg(fig, "distributions")


def _matrix(values) -> np.ndarray:
    return np.array([[np.nan if v is None else float(v) for v in row] for row in values], dtype=np.float64)


def correlation_plot(corr: Mapping) -> str:
    """The correlation matrix of the release."""
    from matplotlib.figure import Figure

    names = [str(c) for c in corr["columns"]]
    m = len(names)
    side = min(max(2.4, 0.32 * m + 1.2), 5.6)
    fig = Figure(figsize=(side + 1.0, side + 0.5), layout="constrained")
    ax = fig.subplots(1, 1)
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
    fig.colorbar(image, ax=ax, shrink=0.8, label="correlation")
    return figure_to_svg(fig, "correlations")


def release_body(figures: Mapping) -> str | None:
    """The HTML of the release section, or None when the report has no release figures."""
    columns = figures.get("columns") if isinstance(figures, Mapping) else None
    if not columns:
        return None
    k = figures.get("k")
    body = ("<p>Each QI's distribution in the release: counts on equal bins from the smallest to the largest "
            "published value. Released values are group averages, so they bunch towards the middle. The original "
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
