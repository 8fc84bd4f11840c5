"""Before/after figures of a run: each QI's distribution, original and released, on common bin
edges, and the correlation matrix of each — summed from per-piece summaries, published with the
small counts of the original suppressed.

The figures are computed where the data already is: the pre-scan gives each column's count,
mean and spread (:func:`moments`, merged exactly by Chan's formula), which fix the bin edges
before any cell is formed; the tasks that put the centroids in (one per small group, one per
input chunk of a pipeline group) then summarise their records before and after
(:func:`summarize`): a histogram per column and the sums of the complete rows' standardized
values and cross products.  Summaries add up (:func:`merge`), so the figures cost one pass over
data that is in memory anyway, never a read of the input.

**What is published** (:func:`publish`) must not let anyone recover an input record:

* bin edges are fixed in standardized units of the original — ``mean + j·std/4`` for
  ``j = −16 … 16`` (:data:`SPAN` = 4 standard deviations each side, :data:`BINS` = 32 bins) —
  never the minimum or maximum of the data, which are records' values; values beyond ± 4σ are
  counted in the end bins, which are open-ended;
* a bin of the original holding 1 … k−1 records is published as suppressed (``None``), and when
  the suppressed bins of a column hold fewer than k records together (their sum follows from the
  column's count) the smallest other non-empty bins are suppressed too, until they hold ≥ k;
  the released histogram gets the same rule (its bins hold whole cells, so it never applies
  there in a k-anonymous release);
* correlations are aggregates over all complete records; a column with no spread has none.

Pure numpy, no Dask: the functions take arrays and return arrays or plain dicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BINS", "SPAN", "Scale", "moments", "merge_moments", "scale_from_moments", "summarize",
           "summarize_original", "summarize_cells", "merge", "publish", "suppress"]

#: Bins per column and their span in standard deviations each side of the mean.
BINS = 32
SPAN = 4.0


@dataclass(frozen=True)
class Scale:
    """Per-column mean and spread of the original data (the bin edges' origin and unit)."""

    columns: tuple
    mean: np.ndarray
    std: np.ndarray      # > 0; a column with no spread gets 1 (its values all fall in one bin)

    def subset(self, columns) -> "Scale":
        idx = [self.columns.index(c) for c in columns]
        return Scale(tuple(columns), self.mean[idx], self.std[idx])

    def edges(self) -> np.ndarray:
        """Bin edges in original units, one row per column (``BINS + 1`` each)."""
        z = np.linspace(-SPAN, SPAN, BINS + 1)
        return self.mean[:, None] + self.std[:, None] * z[None, :]


# --------------------------------------------------------------------------- moments (pre-scan)


def moments(X: np.ndarray):
    """(count, mean, M2) of each column over its finite values (M2: sum of squared deviations)."""
    X = np.asarray(X, dtype=np.float64)
    ok = np.isfinite(X)
    if ok.all():  # the usual case, in a few passes over X
        mean = X.mean(axis=0) if len(X) else np.zeros(X.shape[1])
        dev = X - mean
        return np.full(X.shape[1], len(X), dtype=np.int64), mean, np.einsum("ij,ij->j", dev, dev)
    count = ok.sum(axis=0).astype(np.int64)
    safe = np.where(ok, X, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, safe.sum(axis=0) / np.maximum(count, 1), 0.0)
    dev = np.where(ok, X - mean, 0.0)
    return count, mean, (dev * dev).sum(axis=0)


def merge_moments(parts):
    """Chan's parallel combination of :func:`moments` results (stable for large offsets)."""
    parts = list(parts)
    count, mean, m2 = (np.array(v, dtype=np.float64) for v in parts[0])
    for c2, mu2, s2 in parts[1:]:
        c2, mu2, s2 = (np.asarray(v, dtype=np.float64) for v in (c2, mu2, s2))
        total = count + c2
        delta = mu2 - mean
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(total > 0, c2 / np.maximum(total, 1), 0.0)
        mean = mean + delta * share
        m2 = m2 + s2 + delta * delta * count * share
        count = total
    return count.astype(np.int64), mean, m2


def scale_from_moments(columns, parts) -> Scale | None:
    """The :class:`Scale` of merged moments (population std), or None when there is nothing."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    count, mean, m2 = merge_moments(parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(np.where(count > 0, m2 / np.maximum(count, 1), 0.0))
    std = np.where(np.isfinite(std) & (std > 0), std, 1.0)
    return Scale(tuple(columns), np.where(np.isfinite(mean), mean, 0.0), std)


# --------------------------------------------------------------------------- summaries


def _standardized(X: np.ndarray, scale: Scale) -> np.ndarray:
    return (np.asarray(X, dtype=np.float64) - scale.mean) / scale.std


def _bins(Z: np.ndarray, finite: np.ndarray, weights=None) -> np.ndarray:
    """Histogram (columns × BINS) of the finite standardized values ``Z`` (each row counted
    ``weights[i]`` times when given), end bins open: one bincount over every column at once
    (column j's bins at j·BINS …, non-finite values in a last bin that is dropped)."""
    n, m = Z.shape
    idx = Z * (BINS / (2 * SPAN))
    idx += BINS / 2
    np.clip(idx, 0, BINS - 1, out=idx)   # ≥ 0 now, so truncation is floor
    missing = not finite.all()
    if missing:
        idx[~finite] = 0                     # NaN cannot be cast; its entry is moved to the dropped bin below
    flat = idx.astype(np.int64)
    flat += np.arange(m, dtype=np.int64) * BINS
    if missing:
        flat[~finite] = m * BINS
    w = None if weights is None else np.repeat(np.asarray(weights, dtype=np.float64), m)
    counts = np.bincount(flat.ravel(), weights=w, minlength=m * BINS + 1)[: m * BINS]
    return np.rint(counts).astype(np.int64).reshape(m, BINS)


def _side(Z: np.ndarray, finite: np.ndarray, rows, weights=None) -> dict:
    """Histogram, complete-row count, sum and cross products of one side (original or released)."""
    hist = _bins(Z, finite, weights)
    Zc = Z if rows is None else Z[rows]
    if weights is None:
        return {"hist": hist, "complete": int(Zc.shape[0]), "sum": Zc.sum(axis=0), "cross": Zc.T @ Zc}
    w = np.asarray(weights, dtype=np.float64)
    w = w if rows is None else w[rows]
    return {"hist": hist, "complete": int(round(w.sum())), "sum": w @ Zc, "cross": (Zc * w[:, None]).T @ Zc}


def _summary(columns, original: dict | None, released: dict | None) -> dict:
    out = {"columns": tuple(columns)}
    for name, side in (("original", original), ("released", released)):
        if side is not None:
            out.update({f"hist_{name}": side["hist"], f"complete_{name}": side["complete"],
                        f"sum_{name}": side["sum"], f"cross_{name}": side["cross"]})
    return out


def summarize(X: np.ndarray, Y: np.ndarray, scale: Scale) -> dict:
    """Summary of one piece: ``X`` its original QI values, ``Y`` the released ones (same rows and
    columns, ``scale.columns``; NaN where missing)."""
    zx, zy = _standardized(X, scale), _standardized(Y, scale)
    fx, fy = np.isfinite(zx), np.isfinite(zy)
    complete = fx.all(axis=1) & fy.all(axis=1)
    rows = None if complete.all() else complete   # no copy in the usual case
    return _summary(scale.columns, _side(zx, fx, rows), _side(zy, fy, rows))


def summarize_original(X: np.ndarray, scale: Scale) -> dict:
    """The original side of a piece alone (its released side comes from :func:`summarize_cells`)."""
    z = _standardized(X, scale)
    finite = np.isfinite(z)
    complete = finite.all(axis=1)
    return _summary(scale.columns, _side(z, finite, None if complete.all() else complete), None)


def summarize_cells(centroids: np.ndarray, sizes: np.ndarray, scale: Scale) -> dict:
    """The released side from cells: each centroid (original units, ``scale.columns``) counted as
    often as its cell has records — the same figures as the released records, k times cheaper."""
    z = _standardized(centroids, scale)
    finite = np.isfinite(z)
    complete = finite.all(axis=1)
    return _summary(scale.columns, None, _side(z, finite, None if complete.all() else complete, sizes))


def merge(summaries, columns) -> dict | None:
    """The sum of piece summaries over ``columns``: histograms by column name; the sums of
    complete rows from the summaries that cover every column (a piece missing a column has no
    complete row).  A summary may hold one side only (:func:`summarize_original`,
    :func:`summarize_cells`)."""
    summaries = [s for s in summaries if s]
    if not summaries:
        return None
    columns = tuple(columns)
    m = len(columns)
    out = {"columns": columns}
    for name in ("original", "released"):
        out.update({f"hist_{name}": np.zeros((m, BINS), np.int64), f"complete_{name}": 0,
                    f"sum_{name}": np.zeros(m), f"cross_{name}": np.zeros((m, m))})
    for s in summaries:
        pos = [columns.index(c) for c in s["columns"]]
        whole = set(s["columns"]) == set(columns)
        order = np.argsort(pos)
        for name in ("original", "released"):
            if f"hist_{name}" not in s:
                continue
            out[f"hist_{name}"][pos] += s[f"hist_{name}"]
            if whole and s[f"complete_{name}"]:
                out[f"complete_{name}"] += s[f"complete_{name}"]
                out[f"sum_{name}"] += np.asarray(s[f"sum_{name}"])[order]
                out[f"cross_{name}"] += np.asarray(s[f"cross_{name}"])[np.ix_(order, order)]
    return out


# --------------------------------------------------------------------------- publication


def suppress(counts, k: int) -> list:
    """``counts`` with every bin of 1 … k−1 records replaced by None, and, when the suppressed
    bins hold 1 … k−1 records together, the smallest other non-empty bins too (see module
    docstring).  Bins of 0 and of ≥ k records stay as they are otherwise."""
    counts = [int(c) for c in counts]
    hidden = [0 < c < k for c in counts]
    total = sum(c for c, h in zip(counts, hidden) if h)
    order = sorted((c, i) for i, c in enumerate(counts) if c >= k)
    while 0 < total < k and order:
        c, i = order.pop(0)
        hidden[i] = True
        total += c
    return [None if h else c for c, h in zip(counts, hidden)]


def _correlation(n: int, k: int, s: np.ndarray, cross: np.ndarray):
    if n < max(2, k):  # an aggregate of fewer than k records is not published
        return None
    cov = cross / n - np.outer(s, s) / (n * n)
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    ok = sd > 1e-12 * np.maximum(1.0, np.abs(np.diag(cross) / n))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip(cov / np.outer(sd, sd), -1.0, 1.0)
    r[~ok, :] = np.nan
    r[:, ~ok] = np.nan
    np.fill_diagonal(r, np.where(ok, 1.0, np.nan))
    return [[None if not np.isfinite(v) else round(float(v), 4) for v in row] for row in r]


def publish(summary: dict | None, scale: Scale | None, k: int) -> dict | None:
    """The report's ``before_after`` section: per column the bin edges (original units) and the
    counts before and after with the suppression rule applied, and both correlation matrices."""
    if summary is None or scale is None:
        return None
    scale = scale.subset(summary["columns"])
    edges = scale.edges()
    columns = []
    suppressed = 0
    for j, name in enumerate(summary["columns"]):
        before = suppress(summary["hist_original"][j], k)
        after = suppress(summary["hist_released"][j], k)
        suppressed += sum(v is None for v in before) + sum(v is None for v in after)
        columns.append({"name": str(name), "edges": [float(v) for v in edges[j]], "original": before,
                        "released": after})
    n, n_released = int(summary["complete_original"]), int(summary["complete_released"])
    return {
        "bins": BINS, "span_sd": SPAN, "k": int(k), "suppressed_bins": int(suppressed), "columns": columns,
        "correlation": {"records": n, "columns": [str(c) for c in summary["columns"]],
                        "original": _correlation(n, k, summary["sum_original"], summary["cross_original"]),
                        "released": _correlation(n_released, k, summary["sum_released"],
                                                 summary["cross_released"])},
    }
