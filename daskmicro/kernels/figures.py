"""The release figures of a run report: each QI's distribution in the release, and the release's
correlation matrix — computed from the published values only.

The figures show what the release holds, on bins that come from the release: any figure of the
original values (their mean, standard deviation, extremes or quantiles, a histogram of them,
their correlations) together with the release would tell how far the records lie from their
published centroids — the within-cell spread (:mod:`daskmicro.report.coarse`).  So nothing here
reads an original value:

* the bin range of a column is the smallest and largest *published* value (a centroid of ≥ k
  records, or a value published unchanged), gathered from the groups' cells as they are made
  (:func:`value_range`, :func:`merge_ranges`): :data:`BINS` equal bins between them;
* each piece of the release as verified (a written file or a range of it, a partition of an
  in-memory release) is then summarised (:func:`summarize`): a histogram per column and the sums
  of the complete rows' standardized values and cross products.  Summaries add up
  (:func:`merge`), in the verification pass that reads the release anyway;
* the same pass also counts each column on a second set of bins, equal on a logarithmic axis
  between the same two published values (an ``asinh`` axis — linear near 0, logarithmic beyond —
  where the smallest is 0 or negative), and sums the powers of the values; :func:`publish` draws
  a column on that axis when its published values are strongly right-skewed (:func:`choose_scale`:
  skewness ≥ :data:`SKEW`), where equal bins would put most records in two or three bins;
* :func:`publish` applies the small-count rule to the counts (a bin of 1 … k−1 records is
  suppressed; a release's bins hold whole groups of equal published values, so in a k-anonymous
  release it never applies) and gives the correlations of the complete rows.

numpy and one compiled kernel (the histograms, :func:`histograms`), no Dask: the functions take
arrays and return arrays or plain dicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

__all__ = ["BINS", "SKEW", "ASINH_DECADES", "Bins", "value_range", "merge_ranges", "histograms", "summarize", "merge",
           "publish", "suppress", "skewness", "choose_scale", "compile_units"]

#: Bins per column, equal widths between the smallest and largest published value (on the column's axis).
BINS = 32

#: A column is drawn on a logarithmic axis when the skewness of its published values is at least this.
SKEW = 2.0

#: On an ``asinh`` axis (a column whose smallest published value is 0 or negative), the axis is
#: linear within ± (largest absolute published value) / 10**ASINH_DECADES and logarithmic beyond.
ASINH_DECADES = 4


@dataclass(frozen=True)
class Bins:
    """Per-column range of the published values (the bins' ends); NaN where a column has none."""

    columns: tuple
    low: np.ndarray
    high: np.ndarray

    def subset(self, columns) -> "Bins":
        idx = [self.columns.index(c) for c in columns]
        return Bins(tuple(columns), self.low[idx], self.high[idx])

    def ends(self):
        """(low, high) per column: the two outer edges of its bins."""
        low = np.where(np.isfinite(self.low), self.low, 0.0)
        high = np.where(np.isfinite(self.high), self.high, low)
        # one published value: one bin around it (the edges are that value ± a half, or ± a
        # millionth of it where a half is lost in rounding)
        one = high <= low
        half = np.maximum(0.5, np.abs(low) * 1e-6)
        return np.where(one, low - half, low), np.where(one, low + half, high)

    def edges(self) -> np.ndarray:
        """Bin edges, one row per column (``BINS + 1`` each)."""
        low, high = self.ends()
        t = np.linspace(0.0, 1.0, BINS + 1)
        edges = low[:, None] + (high - low)[:, None] * t[None, :]
        edges[:, -1] = high
        return edges

    def skewed_scales(self) -> list:
        """Per column, the axis of its skewed bins: ``log`` where the smallest published value is
        positive and below the largest, ``asinh`` otherwise."""
        return ["log" if 0 < lo < hi else "asinh" for lo, hi in zip(*self.ends())]

    def linear_width(self) -> np.ndarray:
        """Per column, the half-width of the linear part of an ``asinh`` axis (its unit)."""
        low, high = self.ends()
        return np.maximum(np.abs(low), np.abs(high)) * 10.0 ** -ASINH_DECADES

    def skewed_edges(self) -> np.ndarray:
        """Bin edges of the skewed axis (:meth:`skewed_scales`), in original units, one row per
        column (``BINS + 1`` each): equal widths in log or asinh between the same two ends as
        :meth:`edges`."""
        low, high = self.ends()
        t = np.linspace(0.0, 1.0, BINS + 1)
        edges = np.empty((len(low), BINS + 1))
        for j, (lo, hi, scale, w) in enumerate(zip(low, high, self.skewed_scales(), self.linear_width())):
            if scale == "log":
                edges[j] = np.exp(np.log(lo) + (np.log(hi) - np.log(lo)) * t)
            elif not w > 0:   # a range of subnormal numbers: its linear part underflows, equal bins instead
                edges[j] = lo + (hi - lo) * t
            else:
                a, b = np.arcsinh(lo / w), np.arcsinh(hi / w)
                edges[j] = w * np.sinh(a + (b - a) * t)
            edges[j, 0], edges[j, -1] = lo, hi
        return np.maximum.accumulate(edges, axis=1)

    def standardize(self, Y: np.ndarray) -> np.ndarray:
        """``Y`` on the bins' scale: 0 … BINS across each column's range (the sums of
        :func:`summarize` are taken on it: exact enough whatever the offset of the values)."""
        low, high = self.ends()
        return (np.asarray(Y, dtype=np.float64) - low) * (BINS / (high - low))


# --------------------------------------------------------------------------- bin ranges


def value_range(Y: np.ndarray):
    """(finite count, min, max) of each column of published values ``Y`` (NaN where none)."""
    Y = np.asarray(Y, dtype=np.float64)
    ok = np.isfinite(Y)
    count = ok.sum(axis=0).astype(np.int64)
    with np.errstate(invalid="ignore"):
        low = np.where(count > 0, np.min(np.where(ok, Y, np.inf), axis=0, initial=np.inf), np.nan)
        high = np.where(count > 0, np.max(np.where(ok, Y, -np.inf), axis=0, initial=-np.inf), np.nan)
    return count, low, high


def merge_ranges(columns, parts) -> Bins | None:
    """The :class:`Bins` of ``parts`` — ``(columns of the part, value_range)`` each — over
    ``columns`` (None when there is no part)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    columns = tuple(columns)
    low, high = np.full(len(columns), np.nan), np.full(len(columns), np.nan)
    for cols, (count, lo, hi) in parts:
        for c, n, a, b in zip(cols, count, lo, hi):
            if n:
                j = columns.index(c)
                low[j] = a if not np.isfinite(low[j]) else min(low[j], a)
                high[j] = b if not np.isfinite(high[j]) else max(high[j], b)
    return Bins(columns, low, high)


# --------------------------------------------------------------------------- summaries


@nb.njit(nogil=True)
def _bin(e, j, y, guess, last):
    """The bin of ``y`` on the edges ``e[j]``: the number of edges ≤ ``y``, less one
    (``numpy.searchsorted(..., side="right") - 1``), clipped to 0 … ``last``.  Found by stepping
    from ``guess`` (any number: a good one saves the steps, a bad one only costs them)."""
    if not guess >= 0.0:    # also NaN
        b = 0
    elif guess >= last:
        b = last
    else:
        b = int(guess)
    while b > 0 and e[j, b] > y:
        b -= 1
    while b < last and e[j, b + 1] <= y:
        b += 1
    return b


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _histograms(Y, edges, skewed, axes, out):
    """Both histograms of every column of ``Y`` in one pass over its rows (``out[0]`` on
    ``edges``, ``out[1]`` on ``skewed``, columns × bins each), non-finite values not counted.
    Each bin is stepped to from a guess made on the column's axis (:func:`_bin`), from ``axes``
    (rows: linear scale, log axis or not, width, origin, skewed scale; a column each): linear,
    ``(y − first edge) × linear scale``; skewed, ``(T(y) − origin) × skewed scale`` with T the log
    (on a log axis) or asinh(y / width).  A guess that is not a number (a width that underflowed
    to 0, the log of a value below a log axis) starts at the first bin."""
    n, m = Y.shape
    last = edges.shape[1] - 2
    for i in range(n):
        for j in range(m):
            y = Y[i, j]
            if not np.isfinite(y):
                continue
            out[0, j, _bin(edges, j, y, (y - edges[j, 0]) * axes[0, j], last)] += 1
            t = np.log(y) if axes[1, j] != 0.0 else np.arcsinh(y / axes[2, j])
            out[1, j, _bin(skewed, j, y, (t - axes[3, j]) * axes[4, j], last)] += 1


def _scale(low, high, bins):
    """Bins per unit between ``low`` and ``high`` (0 where they meet or are not finite)."""
    with np.errstate(all="ignore"):
        scale = bins / (high - low)
    return np.where(np.isfinite(scale), scale, 0.0)


def histograms(Y: np.ndarray, bins: Bins) -> np.ndarray:
    """The histograms (2 × columns × BINS) of the finite values ``Y`` (rows × the columns of
    ``bins``) on the bins' equal edges and on their skewed axis: bins closed on the left, the last
    one on both sides (as :func:`numpy.histogram` counts), values beyond the ends in the end bins."""
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    edges, skewed = bins.edges(), bins.skewed_edges()
    low, high = bins.ends()
    log_axis = np.array([s == "log" for s in bins.skewed_scales()], dtype=np.bool_)
    width = bins.linear_width()
    with np.errstate(all="ignore"):
        ends = [np.where(log_axis, np.log(v), np.arcsinh(v / width)) for v in (low, high)]
    origin = np.where(np.isfinite(ends[0]), ends[0], 0.0)
    out = np.zeros((2, Y.shape[1], BINS), np.int64)
    axes = np.ascontiguousarray(np.stack([_scale(low, high, BINS), log_axis.astype(np.float64), width, origin,
                                          _scale(ends[0], ends[1], BINS)]))
    _histograms(Y, edges, skewed, axes, out)
    return out


def compile_units():
    """The compiled piece of this module, as :func:`daskmicro.kernels.mdav.compile_units` lists its
    own: ``(name, dispatcher, argument types, names of the pieces it calls)``."""
    from numba import typeof

    f1, f2, i3 = typeof(np.zeros(1)), typeof(np.zeros((1, 1))), typeof(np.zeros((1, 1, 1), np.int64))
    return [("figures", _histograms, (f2, f2, f2, f2, i3), ()),
            ("figures-moments", _moments, (f2, f1, f1, f2, f2), ())]


@nb.njit(cache=True, nogil=True)
def _moments(Y, low, scale, Z, powers):
    """One pass over the rows of ``Y``: each value on the bins' scale, ``(y − low) × scale``; per
    column the count, sum, sum of squares and of cubes of its finite ones (``powers``, added to);
    the complete rows (every value finite) written, in order, to the first rows of ``Z``, whose
    number is returned."""
    n, m = Y.shape
    c = 0
    for i in range(n):
        complete = True
        for j in range(m):
            z = (Y[i, j] - low[j]) * scale[j]
            Z[c, j] = z
            if np.isfinite(z):
                powers[j, 0] += 1.0
                powers[j, 1] += z
                powers[j, 2] += z * z
                powers[j, 3] += z * z * z
            else:
                complete = False
        if complete:
            c += 1
    return c


def summarize(Y: np.ndarray, bins: Bins) -> dict:
    """Summary of a piece of the release: ``Y`` its published values of ``bins.columns`` (NaN where
    missing) — the histogram of each column, and the count, sum and cross products of the complete
    rows on the bins' scale (:meth:`Bins.standardize`)."""
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    low, high = bins.ends()
    scale = np.ascontiguousarray(BINS / (high - low), dtype=np.float64)
    Z = np.empty_like(Y)
    powers = np.zeros((Y.shape[1], 4))
    complete = _moments(Y, np.ascontiguousarray(low, dtype=np.float64), scale, Z, powers)
    Zc = Z[:complete]
    hist, skewed = histograms(Y, bins)
    return {"columns": tuple(bins.columns), "hist": hist, "skewed": skewed,
            "powers": powers, "complete": int(complete), "sum": Zc.sum(axis=0), "cross": Zc.T @ Zc}


def merge(summaries, columns) -> dict | None:
    """The sum of piece summaries over ``columns``: histograms by column name; the sums of
    complete rows from the summaries that cover every column (a piece missing a column has no
    complete row)."""
    summaries = [s for s in summaries if s]
    if not summaries:
        return None
    columns = tuple(columns)
    m = len(columns)
    out = {"columns": columns, "hist": np.zeros((m, BINS), np.int64), "skewed": np.zeros((m, BINS), np.int64),
           "powers": np.zeros((m, 4)), "complete": 0, "sum": np.zeros(m), "cross": np.zeros((m, m))}
    for s in summaries:
        pos = [columns.index(c) for c in s["columns"]]
        for key in ("hist", "skewed", "powers"):
            out[key][pos] += s[key]
        if set(s["columns"]) == set(columns) and s["complete"]:
            order = np.argsort(pos)
            out["complete"] += s["complete"]
            out["sum"] += np.asarray(s["sum"])[order]
            out["cross"] += np.asarray(s["cross"])[np.ix_(order, order)]
    return out


# --------------------------------------------------------------------------- publication


def suppress(counts, k: int) -> list:
    """``counts`` with every bin of 1 … k−1 records replaced by None, and, when the suppressed
    bins hold 1 … k−1 records together, the smallest other non-empty bins too (their sum follows
    from the column's count).  Bins of 0 and of ≥ k records stay as they are otherwise."""
    counts = [int(c) for c in counts]
    hidden = [0 < c < k for c in counts]
    total = sum(c for c, h in zip(counts, hidden) if h)
    order = sorted((c, i) for i, c in enumerate(counts) if c >= k)
    while 0 < total < k and order:
        c, i = order.pop(0)
        hidden[i] = True
        total += c
    return [None if h else c for c, h in zip(counts, hidden)]


def skewness(powers) -> float:
    """The skewness of a column's published values from ``(count, Σz, Σz², Σz³)`` of ``z``, the
    values on the bins' scale (an affine map: the skewness is the same); NaN when the values are
    fewer than 3 or all equal."""
    n, s1, s2, s3 = (float(v) for v in powers)
    if n < 3:
        return float("nan")
    mean = s1 / n
    m2 = max(s2 / n - mean * mean, 0.0)
    m3 = s3 / n - 3.0 * mean * s2 / n + 2.0 * mean ** 3
    # bins' scale: 0 … BINS; a spread below rounding noise is no spread
    return float(m3 / m2 ** 1.5) if m2 > 1e-12 * max(s2 / n, 1.0) else float("nan")


def choose_scale(powers, skewed_scale: str, k: int) -> str:
    """``linear``, or ``skewed_scale`` (``log`` or ``asinh``) when the column's published values —
    at least k of them — have a skewness of :data:`SKEW` or more (strongly right-skewed)."""
    if float(powers[0]) < max(int(k), 3):
        return "linear"
    g = skewness(powers)
    return skewed_scale if np.isfinite(g) and g >= SKEW else "linear"


def _correlation(n: int, k: int, s: np.ndarray, cross: np.ndarray):
    if n < max(2, k):  # an aggregate of fewer than k records is not published
        return None
    cov = cross / n - np.outer(s, s) / (n * n)
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    ok = sd > 1e-9 * np.maximum(1.0, np.sqrt(np.abs(np.diag(cross) / n)))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip(cov / np.outer(sd, sd), -1.0, 1.0)
    r[~ok, :] = np.nan
    r[:, ~ok] = np.nan
    np.fill_diagonal(r, np.where(ok, 1.0, np.nan))
    return [[None if not np.isfinite(v) else round(float(v), 4) for v in row] for row in r]


def publish(summary: dict | None, bins: Bins | None, k: int) -> dict | None:
    """The report's ``release_figures`` section: per column the axis (``scale``: :func:`choose_scale`),
    the bin edges in original units (equal on that axis, from the smallest to the largest published
    value) and the released counts, small counts suppressed, and the release's correlation matrix
    over its complete rows."""
    if summary is None or bins is None:
        return None
    bins = bins.subset(summary["columns"])
    linear, skewed = bins.edges(), bins.skewed_edges()
    columns = []
    suppressed = 0
    for j, (name, other, width) in enumerate(zip(summary["columns"], bins.skewed_scales(), bins.linear_width())):
        scale = choose_scale(summary["powers"][j], other, k)
        edges, hist = (linear, summary["hist"]) if scale == "linear" else (skewed, summary["skewed"])
        counts = suppress(hist[j], k)
        suppressed += sum(v is None for v in counts)
        column = {"name": str(name), "scale": scale, "edges": [float(v) for v in edges[j]], "released": counts}
        if scale == "asinh":
            column["linear_width"] = float(width)
        columns.append(column)
    n = int(summary["complete"])
    return {
        "bins": BINS, "range": "smallest to largest published value", "k": int(k),
        "scale_rule": (f"log axis (asinh where a published value is 0 or negative) when the published values' "
                       f"skewness is {SKEW:g} or more, linear otherwise"),
        "suppressed_bins": int(suppressed), "columns": columns,
        "correlation": {"records": n, "columns": [str(c) for c in summary["columns"]],
                        "released": _correlation(n, k, summary["sum"], summary["cross"])},
    }
