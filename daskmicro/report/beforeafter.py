"""The report's before/after section: each QI's distribution, original next to released, and the
two correlation matrices side by side.

It draws the report's ``before_after`` field (:func:`daskmicro.kernels.figures.publish`) as it
is: counts on the published bin edges, suppressed bins (``None``: 1 … k−1 original records)
marked and never drawn as a count.  Pure functions of plain numbers; SVG by matplotlib
(:func:`~daskmicro.report.plots.figure_to_svg`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from .page import esc, number
from .plots import figure_to_svg

__all__ = ["distribution_plot", "correlation_plot", "before_after_body"]

_BLUE, _ORANGE, _GREY = "#3465a4", "#e07b16", "#888a85"


def _shown(column: Mapping) -> slice:
    """The bins from the first to the last that holds anything (None counts: records are there)."""
    filled = [i for i, (a, b) in enumerate(zip(column["original"], column["released"])) if a != 0 or b != 0]
    return slice(filled[0], filled[-1] + 1) if filled else slice(0, len(column["original"]))


def _one_histogram(ax, column: Mapping) -> None:
    edges = np.asarray(column["edges"], dtype=np.float64)
    keep = _shown(column)
    lo, hi = edges[:-1][keep], edges[1:][keep]
    width = hi - lo
    orig = [None if v is None else int(v) for v in column["original"][keep]]
    rel = [None if v is None else int(v) for v in column["released"][keep]]
    ax.bar(lo, [0 if v is None else v for v in orig], width=0.5 * width, align="edge", color=_BLUE,
           label="original")
    ax.bar(lo + 0.5 * width, [0 if v is None else v for v in rel], width=0.5 * width, align="edge",
           color=_ORANGE, label="released")
    hidden = [x + 0.25 * w for x, w, v in zip(lo, width, orig) if v is None]
    hidden += [x + 0.75 * w for x, w, v in zip(lo, width, rel) if v is None]
    if hidden:
        ax.plot(hidden, [0] * len(hidden), linestyle="none", marker="x", color=_GREY, clip_on=False,
                label="suppressed (< k)")
    ax.set_title(str(column["name"]), fontsize=9)
    ax.tick_params(labelsize=7)
    ax.set_xlim(lo[0], hi[-1])
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.grid(axis="y", alpha=0.3)


def distribution_plot(columns: Sequence[Mapping], per_row: int = 4) -> str:
    """One small histogram per QI, original and released bars paired on the same bins."""
    from matplotlib.figure import Figure

    n = max(len(columns), 1)
    per_row = min(per_row, n)
    rows = math.ceil(n / per_row)
    fig = Figure(figsize=(2.9 * per_row + 0.4, 2.1 * rows + 0.5), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, per_row)).ravel()
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
    fig.legend(handles, labels, loc="outside upper center", ncols=len(labels), fontsize=8, frameon=False)
    fig.supylabel("records per bin", fontsize=8)
    return figure_to_svg(fig, "distributions")


def _matrix(values) -> np.ndarray:
    return np.array([[np.nan if v is None else float(v) for v in row] for row in values], dtype=np.float64)


def correlation_plot(corr: Mapping) -> str:
    """The correlation matrices of the original and of the release, side by side (same scale)."""
    from matplotlib.figure import Figure

    names = [str(c) for c in corr["columns"]]
    m = len(names)
    side = min(max(2.4, 0.32 * m + 1.2), 5.6)
    fig = Figure(figsize=(2 * side + 1.0, side + 0.5), layout="constrained")
    axes = fig.subplots(1, 2)
    import matplotlib

    cmap = matplotlib.colormaps["RdBu_r"].resampled(20)  # under 50 colours: the colour bar stays vector
    image = None
    for ax, key, title in zip(axes, ("original", "released"), ("original", "released")):
        # vector cells (pcolormesh), not an embedded bitmap: the page links to nothing, not even data: URIs
        image = ax.pcolormesh(np.ma.masked_invalid(_matrix(corr[key])), cmap=cmap, vmin=-1, vmax=1,
                              edgecolors="white", linewidth=0.3)
        ax.set_aspect("equal")
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.set_xticks(np.arange(m) + 0.5, names, rotation=90, fontsize=7)
        ax.set_yticks(np.arange(m) + 0.5, names if key == "original" else [""] * m, fontsize=7)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="correlation")
    return figure_to_svg(fig, "correlations")


def _largest_change(corr: Mapping) -> tuple | None:
    a, b = _matrix(corr["original"]), _matrix(corr["released"])
    diff = np.abs(a - b)
    np.fill_diagonal(diff, np.nan)
    if not np.isfinite(diff).any():
        return None
    i, j = np.unravel_index(np.nanargmax(diff), diff.shape)
    return corr["columns"][i], corr["columns"][j], a[i, j], b[i, j]


def before_after_body(ba: Mapping) -> str | None:
    """The HTML of the before/after section, or None when the report has no figures."""
    columns = ba.get("columns") if isinstance(ba, Mapping) else None
    if not columns:
        return None
    k = ba.get("k")
    body = ("<p>Each QI's distribution in the original data (blue) and in the release (orange), counted on the "
            "same bins: quarter standard deviations around the original mean, the outer bins also holding every "
            f"value beyond {number(ba.get('span_sd', 4))} standard deviations (the bins never start or end at "
            "a record's value). Released values are group averages, so they bunch towards the middle.</p>")
    body += distribution_plot(columns)
    hidden = int(ba.get("suppressed_bins") or 0)
    if hidden:
        small = f"between 1 and {int(k) - 1} records (fewer than k = {int(k)})" if k else "fewer than k records"
        body += (f'<p class="note">{hidden} bin(s) marked × hold {small} — or, where needed, a few more so that '
                 "their total cannot be worked out from the others — and are not shown: a count that small "
                 "could single people out.</p>")
    corr = ba.get("correlation") or {}
    if corr.get("original") and corr.get("released"):
        body += (f"<h3>Correlations between the QIs</h3><p>Over the {int(corr.get('records', 0)):,} records with "
                 "every QI present: original on the left, release on the right (red positive, blue negative).</p>")
        body += correlation_plot(corr)
        change = _largest_change(corr)
        if change is not None:
            a, b, before, after = change
            body += (f"<p>Largest change: the correlation of {esc(a)} and {esc(b)} goes from {number(before, 3)} "
                     f"to {number(after, 3)}.</p>")
    return body
