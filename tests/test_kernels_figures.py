"""The release figures of a run (daskmicro.kernels.figures): figures of the published values only."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.kernels import figures as kf


def _bins(Y, columns=None):
    columns = columns or [f"c{j}" for j in range(Y.shape[1])]
    return kf.merge_ranges(columns, [(tuple(columns), kf.value_range(Y))])


def test_suppression_of_small_bins():
    k = 5
    # primary: 1 … k−1 hidden, 0 and ≥ k shown
    assert kf.suppress([0, 7, 4, 5, 12], k)[:2] == [0, 7]
    out = kf.suppress([0, 7, 4, 9, 12, 3], k)
    assert out == [0, 7, None, 9, 12, None]        # 4 + 3 = 7 ≥ k: no more needed
    # secondary: the one hidden bin's count would follow from the total: the smallest other bin goes too
    out = kf.suppress([0, 7, 2, 9, 12], k)
    assert out == [0, None, None, 9, 12]
    assert sum(v for v in out if v is not None) == 21  # hidden together: 9 ≥ k records
    # nothing small: nothing hidden
    assert kf.suppress([0, 5, 6, 0], k) == [0, 5, 6, 0]


def test_ranges_merge_by_name_and_skip_missing_values():
    a = np.array([[1.0, np.nan], [3.0, np.nan]])
    b = np.array([[7.0, -2.0], [np.nan, 5.0]])
    bins = kf.merge_ranges(["x", "y", "z"], [(("x", "y"), kf.value_range(a)), (("y", "x"), kf.value_range(b[:, ::-1]))])
    assert bins.low[:2].tolist() == [1.0, -2.0] and bins.high[:2].tolist() == [7.0, 5.0]
    assert np.isnan(bins.low[2]) and np.isnan(bins.high[2])   # a column with no published value
    assert kf.merge_ranges(["x"], []) is None


def test_edges_run_from_the_smallest_to_the_largest_published_value():
    rng = np.random.default_rng(1)
    Y = np.repeat(rng.lognormal(10, 1, size=(100, 3)), 5, axis=0)   # a stand-in release: groups of 5
    edges = _bins(Y).edges()
    assert edges.shape == (3, kf.BINS + 1)
    for j in range(3):
        assert edges[j, 0] == Y[:, j].min() and edges[j, -1] == Y[:, j].max()
        assert np.allclose(np.diff(edges[j]), np.ptp(Y[:, j]) / kf.BINS)
    # one published value: one bin around it; no value at all: a unit range at 0
    one = kf.Bins(("a", "b"), np.array([4.0, np.nan]), np.array([4.0, np.nan])).edges()
    assert one[0, 0] == 3.5 and one[0, -1] == 4.5 and one[1, 0] == -0.5 and one[1, -1] == 0.5


def test_every_published_value_is_counted_once_and_the_ends_are_closed():
    Y = np.array([[0.0], [0.0], [1.0], [1.0], [10.0], [10.0], [np.nan]])
    bins = _bins(Y)
    pub = kf.publish(kf.summarize(Y, bins), bins, 2)
    counts = pub["columns"][0]["released"]
    assert counts[0] == 2 and counts[-1] == 2 and sum(counts) == 6
    assert counts[int(1.0 / 10 * kf.BINS)] == 2
    assert pub["correlation"]["records"] == 6


def test_pieces_add_up_to_the_whole():
    rng = np.random.default_rng(3)
    Y = np.repeat(rng.multivariate_normal([0, 10, -5], [[1, .8, .2], [.8, 2, .1], [.2, .1, 3]], size=300), 3, axis=0)
    Y[7, 2] = np.nan                                 # an incomplete row counts in histograms only
    bins = _bins(Y, ["a", "b", "c"])
    whole = kf.summarize(Y, bins)
    merged = kf.merge([kf.summarize(Y[i:i + 200], bins) for i in range(0, 900, 200)], ["a", "b", "c"])
    assert (merged["hist"] == whole["hist"]).all() and merged["complete"] == whole["complete"] == 899
    # a piece over the columns in another order merges by name
    again = kf.merge([kf.summarize(Y[:, [2, 0, 1]], bins.subset(["c", "a", "b"]))], ["a", "b", "c"])
    assert (again["hist"] == whole["hist"]).all() and np.allclose(again["cross"], whole["cross"])
    pub = kf.publish(merged, bins, 3)
    ok = np.isfinite(Y).all(axis=1)
    assert np.allclose(pub["correlation"]["released"], np.corrcoef(Y[ok], rowvar=False), atol=1e-4)
    assert all(v == 0 or v >= 3 for c in pub["columns"] for v in c["released"])


def test_correlations_exact_whatever_the_offset():
    rng = np.random.default_rng(0)
    Y = np.repeat(rng.normal(1.7e12, 3.0, size=(300, 2)), 2, axis=0)   # epoch-like offset, small spread
    Y[:, 1] = Y[:, 0] * 0.5 + rng.normal(0, 1.0, size=600)
    bins = _bins(Y)
    r = kf.publish(kf.summarize(Y, bins), bins, 2)["correlation"]["released"]
    assert r[0][1] == pytest.approx(np.corrcoef(Y, rowvar=False)[0, 1], abs=1e-4)


def test_no_correlation_of_fewer_than_k_records_or_of_a_constant_column():
    Y = np.column_stack([np.arange(4.0), np.ones(4)])
    bins = _bins(Y)
    assert kf.publish(kf.summarize(Y, bins), bins, 5)["correlation"]["released"] is None   # 4 records < k
    Y = np.column_stack([np.arange(10.0), np.ones(10)])
    bins = _bins(Y)
    corr = kf.publish(kf.summarize(Y, bins), bins, 5)["correlation"]["released"]
    assert corr[0][0] == 1.0 and corr[0][1] is None and corr[1][1] is None


def test_a_run_with_strata_and_missing_values_counts_every_published_value():
    """Several groups (strata × missingness patterns), each with its own cells; the figures are of
    the release as verified, on bins from its published values."""
    import daskmicro
    from daskmicro.datasets import CENSUS_COLUMNS, census_like

    df = census_like(2000, seed=5, with_extra_columns=True)
    qi = list(CENSUS_COLUMNS[:4])
    df.loc[df.index[:200], qi[1]] = np.nan
    keep = ["record_id", *CENSUS_COLUMNS[4:]]                 # published as they are
    release, report = daskmicro.anonymize(df, qi=qi, k=5, seed=0, strata=["region"], missing="separate", keep=keep)
    figures = report.to_dict()["release_figures"]
    observed = df[qi].notna().sum()
    for column in figures["columns"]:
        name = column["name"]
        assert sum(column["released"]) == observed[name]
        assert column["edges"][0] == release[name].min() and column["edges"][-1] == release[name].max()
        assert all(v == 0 or v >= 5 for v in column["released"])
    assert figures["correlation"]["records"] == 1800          # the rows with every QI present
    Y = release[qi].dropna().to_numpy(float)
    assert np.allclose(figures["correlation"]["released"], np.corrcoef(Y, rowvar=False), atol=1e-4)
    assert "original" not in figures["correlation"] and all("original" not in c for c in figures["columns"])


def _numpy_histogram(Y, edges):
    """The reference: each column's finite values on its edges by numpy.searchsorted."""
    out = np.zeros((Y.shape[1], edges.shape[1] - 1), np.int64)
    for j in range(Y.shape[1]):
        y = Y[:, j][np.isfinite(Y[:, j])]
        idx = np.clip(np.searchsorted(edges[j], y, side="right") - 1, 0, edges.shape[1] - 2)
        out[j] = np.bincount(idx, minlength=edges.shape[1] - 1)
    return out


_magnitudes = st.sampled_from([5e-324, 1e-310, 1e-300, 1e-6, 1.0, 1e6, 1e15, 1e300])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), m=st.integers(1, 4), scale=_magnitudes, offset=st.just(0.0) | st.floats(-1e6, 1e6),
       groups=st.integers(1, 40), holes=st.floats(0.0, 0.3), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float64, np.float32, np.int64]), beyond=st.booleans())
def test_histograms_count_as_numpy_searchsorted(n, m, scale, offset, groups, holes, seed, dtype, beyond):
    """The compiled histograms equal numpy's count on both axes, value by value, whatever the
    magnitudes, dtypes (published integers and float32 read as float64), missing or infinite
    values, repeated values on the edges, and values beyond the bins' ends."""
    rng = np.random.default_rng(seed)
    centroids = offset + scale * rng.standard_normal((groups, m))
    Y = centroids[rng.integers(0, groups, n)]
    with np.errstate(all="ignore"):
        Y = Y.astype(dtype).astype(np.float64)
    if dtype != np.int64 and n:
        Y[rng.random((n, m)) < holes] = np.nan
        Y[rng.random((n, m)) < holes / 4] = rng.choice([np.inf, -np.inf])
    bins = _bins(Y)
    if beyond:   # a piece whose values leave the run's range (bins from another piece)
        bins = kf.Bins(bins.columns, bins.low / 2, bins.high / 2)
    edges, skewed = bins.edges(), bins.skewed_edges()
    if n:    # some values exactly on interior edges
        Y[: min(n, 5), 0] = edges[0, 1:6][: min(n, 5)]
    got = kf.histograms(Y, bins)
    assert np.array_equal(got[0], _numpy_histogram(Y, edges))
    assert np.array_equal(got[1], _numpy_histogram(Y, skewed))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(0, 200), m=st.integers(1, 5),
       holes=st.floats(0.0, 0.5), offset=st.sampled_from([0.0, -3.0, 1e6]))
def test_summary_sums_are_those_of_the_values_on_the_bins_scale(seed, n, m, holes, offset):
    """The compiled one-pass summary gives the plain sums: per column the count and powers of its
    finite values on the bins' scale, and the count, sum and cross products of the complete rows,
    with missing and infinite values anywhere."""
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(n, m)) * 50 + offset
    Y[rng.random((n, m)) < holes] = np.nan
    Y[rng.random((n, m)) < holes / 4] = np.inf
    bins = _bins(Y)
    got = kf.summarize(Y, bins)
    Z = bins.standardize(Y)
    ok = np.isfinite(Z)
    Z0 = np.where(ok, Z, 0.0)
    expected = np.stack([ok.sum(axis=0), Z0.sum(axis=0), (Z0 ** 2).sum(axis=0), (Z0 ** 3).sum(axis=0)], axis=1)
    assert np.allclose(got["powers"], expected, rtol=1e-9, atol=1e-6)
    rows = ok.all(axis=1)
    assert got["complete"] == int(rows.sum())
    assert np.allclose(got["sum"], Z[rows].sum(axis=0), rtol=1e-9, atol=1e-6)
    assert np.allclose(got["cross"], Z[rows].T @ Z[rows], rtol=1e-9, atol=1e-6)
