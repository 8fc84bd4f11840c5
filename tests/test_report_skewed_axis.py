"""The release figures of skewed QIs: a log (or asinh) axis exactly when the published values are
strongly right-skewed, bins equal on that axis and exactly as safe as the linear ones, tick labels
in original units that never run together."""

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro.kernels import figures as kf
from daskmicro.release.run_figures import group_range, piece_figures, report_figures
from daskmicro.report.release_figures import AXIS_NOTE, distribution_figure, scaled_ticks, tick_text


def _draw(family: str, n: int, rng, spread: float = 2.0) -> np.ndarray:
    if family == "normal":
        return rng.normal(50.0, 10.0, n)
    if family == "lognormal":
        return rng.lognormal(3.0, spread, n)
    if family == "pareto":
        return (rng.pareto(1.2, n) + 1.0) * 1_000.0
    if family == "zeros":
        return np.where(rng.random(n) < 0.3, 0.0, rng.lognormal(3.0, spread, n))
    if family == "negatives":
        return rng.lognormal(3.0, spread, n) - 25.0
    if family == "normal_negatives":
        return rng.normal(0.0, 10.0, n)
    if family == "integers":
        return np.rint(rng.lognormal(8.0, spread, n))
    if family == "small_integers":
        return rng.integers(0, 90, n).astype(np.float64)
    if family == "tiny":
        return rng.lognormal(-20.0, spread, n)
    if family == "huge":
        return rng.lognormal(35.0, spread, n)
    raise ValueError(family)


FAMILIES = ["normal", "lognormal", "pareto", "zeros", "negatives", "normal_negatives", "integers",
            "small_integers", "tiny", "huge"]


def _skewness(y: np.ndarray) -> float:
    d = y - y.mean()
    return float((d ** 3).mean() / (d ** 2).mean() ** 1.5)


def _expected(y: np.ndarray) -> str:
    """The documented rule, computed directly from the published values."""
    if _skewness(y) < kf.SKEW:
        return "linear"
    return "log" if y.min() > 0 else "asinh"


def _publish(columns: dict, k: int, integer: bool = False) -> dict:
    """The report's figures of a stand-in release ``columns`` (name → values), through the run's
    adapters: range from the values, counts from two pieces, as a run verifies its files."""
    df = pd.DataFrame({c: (np.asarray(v).astype(np.int64) if integer else v) for c, v in columns.items()})
    qi = list(df.columns)
    bins = kf.merge_ranges(qi, [group_range(df, qi)])
    half = len(df) // 2
    pieces = [piece_figures(df.iloc[:half], qi, bins), piece_figures(df.iloc[half:], qi, bins)]
    return report_figures(pieces, qi, bins, k)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_axis_is_logarithmic_exactly_when_the_rule_says(family):
    rng = np.random.default_rng(FAMILIES.index(family))
    k = 3
    y = np.repeat(_draw(family, 1500, rng), k)          # a k-anonymous stand-in: groups of k equal values
    integer = family in ("integers", "small_integers")
    column = _publish({family: y}, k, integer)["columns"][0]
    assert column["scale"] == _expected(y)
    # the cases the rule is there for, named
    wanted = {"normal": "linear", "normal_negatives": "linear", "small_integers": "linear", "lognormal": "log",
              "pareto": "log", "integers": "log", "tiny": "log", "huge": "log", "zeros": "asinh", "negatives": "asinh"}
    assert column["scale"] == wanted[family]
    assert ("linear_width" in column) == (column["scale"] == "asinh")


def test_lognormal_leaves_fewer_bins_empty_on_the_log_axis():
    rng = np.random.default_rng(7)
    y = np.repeat(rng.lognormal(0.0, 2.0, 4000), 5)[:, None]
    bins = kf.merge_ranges(["income"], [(("income",), kf.value_range(y))])
    summary = kf.summarize(y, bins)
    linear_empty = float(np.mean(summary["hist"][0] == 0))
    log_empty = float(np.mean(summary["skewed"][0] == 0))
    assert kf.publish(summary, bins, 5)["columns"][0]["scale"] == "log"
    assert log_empty < linear_empty and linear_empty >= 0.3 and log_empty <= 0.1, (linear_empty, log_empty)
    # on the linear bins most records sit in the first two or three
    assert summary["hist"][0][:3].sum() >= 0.9 * len(y)


def _edges_on_axis(column) -> np.ndarray:
    edges = np.asarray(column["edges"])
    if column["scale"] == "log":
        return np.log(edges)
    if column["scale"] == "asinh":
        return np.arcsinh(edges / column["linear_width"])
    return edges


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), seed=st.integers(0, 2 ** 16), k=st.integers(2, 8),
       n=st.integers(8, 400), spread=st.floats(0.3, 3.0), grouped=st.booleans())
def test_the_bins_stay_exactly_as_safe_on_a_transformed_axis(family, seed, k, n, spread, grouped):
    """Whatever the axis (each column holding at least k records): the edges come from the smallest and largest published values only, equal
    on the column's axis; no bin shows 1 … k−1 records, nor lets such a count be worked out; in a
    k-anonymous release (groups of k equal values) nothing needs suppressing."""
    rng = np.random.default_rng(seed)
    y = _draw(family, n, rng, spread)
    y = np.repeat(y, k) if grouped else y
    column = _publish({"q": y}, k)["columns"][0]
    edges = np.asarray(column["edges"])
    lo, hi = y.min(), y.max()
    if hi > lo:
        assert edges[0] == lo and edges[-1] == hi
    # the edges are a function of the two published extremes: the same from those two values alone
    ends = kf.Bins(("q",), np.array([lo]), np.array([hi]))
    again = ends.edges() if column["scale"] == "linear" else ends.skewed_edges()
    assert np.array_equal(edges, again[0])
    t = _edges_on_axis(column)
    assert np.all(np.diff(edges) >= 0) and np.allclose(np.diff(t), (t[-1] - t[0]) / kf.BINS, rtol=1e-6, atol=1e-9)
    counts = column["released"]
    shown = [c for c in counts if c is not None]
    hidden = len(y) - sum(shown)
    assert all(c == 0 or c >= k for c in shown)
    assert hidden == 0 or hidden >= k
    truth = np.histogram(y, bins=edges)[0]
    assert all(c is None or c == t_ for c, t_ in zip(counts, truth))
    if grouped:
        assert None not in counts


_UNITS = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _value(label: str) -> float:
    label = label.replace("−", "-").replace(",", "")
    scale = _UNITS.get(label[-1:], 1.0)
    return float(label[:-1] if label[-1:] in _UNITS else label) * scale


@pytest.mark.parametrize("families", [FAMILIES[:5], FAMILIES[5:]])
def test_tick_labels_in_original_units_never_overlap(families):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rng = np.random.default_rng(11)
    figures = _publish({f: np.repeat(_draw(f, 800, rng), 4) for f in families}, 4)
    fig = distribution_figure(figures["columns"])
    FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    for ax, column in zip(fig.axes, figures["columns"]):
        scale = column["scale"]
        assert ax.get_xscale() == scale
        assert ax.get_xlabel() == AXIS_NOTE.get(scale, "")        # "log scale" under a transformed axis
        low, high = ax.get_xlim()
        ticks = [(t.get_position()[0], t.get_text(), t.get_window_extent(renderer))
                 for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
        assert len(ticks) >= 2, (column["name"], ticks)
        for where, text, _box in ticks:          # the label is the tick's value, in the QI's own units
            if scale != "linear":
                assert _value(text) == pytest.approx(where, rel=1e-2, abs=1e-300), (text, where)
        boxes = sorted((b for *_, b in ticks), key=lambda b: b.x0)
        for a, b in zip(boxes, boxes[1:]):
            assert a.x1 < b.x0, (column["name"], [t for _, t, _ in ticks])


def test_log_ticks_are_round_values_spaced_along_the_axis():
    assert scaled_ticks(1.0, 1e6, "log") == [1.0, 100.0, 1e4, 1e6]             # a fifth of the axis apart at least
    assert scaled_ticks(1.0, 1e12, "log") == [1.0, 1e3, 1e6, 1e9, 1e12]
    assert scaled_ticks(2_000.0, 9_000.0, "log") == [2_000.0, 5_000.0]         # within a decade: 1-2-5
    assert 0.0 in scaled_ticks(0.0, 1e5, "asinh", width=10.0)
    assert [tick_text(v) for v in (1e3, 1e4, 2.5e6, 1e12, 1e16)] == ["1,000", "10k", "2.5M", "1T", "1e+16"]


def test_the_page_says_when_an_axis_is_logarithmic():
    from daskmicro.report.release_figures import release_body

    rng = np.random.default_rng(2)
    figures = _publish({"income": np.repeat(_draw("lognormal", 500, rng), 3),
                        "age": np.repeat(_draw("normal", 500, rng), 3)}, 3)
    body = release_body(figures)
    assert body.count(">log scale<") == 1 and "logarithmic axis" in body
    assert re.search(r"skewness of the published values 2 or more", body)
    assert figures["scale_rule"].startswith("log axis")
