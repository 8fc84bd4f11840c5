"""The before/after figures of a run (daskmicro.kernels.figures): what they publish and what not."""

import math

import numpy as np
import pytest

from daskmicro.kernels import figures as kf


def _scale(X, columns=None):
    columns = columns or [f"c{j}" for j in range(X.shape[1])]
    return kf.scale_from_moments(columns, [kf.moments(X)])


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


def test_moments_merge_exactly_and_stably():
    rng = np.random.default_rng(0)
    X = rng.normal(1.7e12, 3.0, size=(1000, 2))  # epoch-like offset, small spread
    X[5, 1] = np.nan
    parts = [kf.moments(X[i:i + 137]) for i in range(0, 1000, 137)]
    count, mean, m2 = kf.merge_moments(parts)
    assert count.tolist() == [1000, 999]
    exact = [math.fsum(c[np.isfinite(c)]) / np.isfinite(c).sum() for c in X.T]
    assert np.allclose(mean, exact, rtol=0, atol=1e-2)  # a few ulps of 1.7e12, far below σ/4
    # (the one-pass Σx²/n − mean² would be pure rounding noise here: x² ≈ 3e24, σ² ≈ 9)
    assert np.allclose(np.sqrt(m2 / count), np.nanstd(X, axis=0), rtol=1e-4)


def test_edges_are_standardized_units_never_the_extremes():
    rng = np.random.default_rng(1)
    X = rng.lognormal(10, 1, size=(500, 3))
    scale = _scale(X)
    edges = scale.edges()
    assert edges.shape == (3, kf.BINS + 1)
    for j in range(3):
        assert np.isclose(edges[j, kf.BINS // 2], X[:, j].mean())
        assert np.allclose(np.diff(edges[j]), X[:, j].std() / 4)
        assert X[:, j].min() not in edges[j] and X[:, j].max() not in edges[j]


def test_an_outlier_is_never_published_as_a_count():
    rng = np.random.default_rng(2)
    k = 5
    X = rng.normal(0, 1, size=(400, 1))
    X[0, 0] = 50.0                                   # one record far out: it lands alone in the last bin
    Y = np.repeat(X.reshape(-1, 5).mean(axis=1), 5)[:, None]   # a stand-in release: groups of 5, averaged
    scale = _scale(X)
    pub = kf.publish(kf.merge([kf.summarize(X, Y, scale)], ["c0"]), scale, k)
    column = pub["columns"][0]
    assert column["original"][-1] is None            # the bin of the outlier: suppressed, not "1"
    assert all(v is None or v == 0 or v >= k for v in column["original"])
    assert 50.0 not in column["edges"] and X.min() not in column["edges"]
    assert pub["suppressed_bins"] >= 1
    # the released bins hold whole groups: each is 0 or ≥ k, and they count every record
    assert all(v == 0 or v >= k for v in column["released"]) and sum(column["released"]) == 400


def test_pieces_add_up_to_the_whole():
    rng = np.random.default_rng(3)
    X = rng.multivariate_normal([0, 10, -5], [[1, .8, .2], [.8, 2, .1], [.2, .1, 3]], size=900)
    Y = X + rng.normal(0, .1, size=X.shape)
    Y[7, 2] = np.nan                                 # an incomplete row counts in histograms only
    scale = _scale(X, ["a", "b", "c"])
    whole = kf.summarize(X, Y, scale)
    pieces = [kf.summarize(X[i:i + 200], Y[i:i + 200], scale) for i in range(0, 900, 200)]
    merged = kf.merge(pieces, ["a", "b", "c"])
    for key in ("hist_original", "hist_released"):
        assert (merged[key] == whole[key]).all()
    assert merged["complete_original"] == whole["complete_original"] == 899
    assert merged["complete_released"] == whole["complete_released"] == 899
    # a piece over the columns in another order merges by name
    shuffled = kf.summarize(X[:, [2, 0, 1]], Y[:, [2, 0, 1]], scale.subset(["c", "a", "b"]))
    again = kf.merge([shuffled], ["a", "b", "c"])
    assert (again["hist_original"] == whole["hist_original"]).all()
    assert np.allclose(again["cross_original"], whole["cross_original"])
    pub = kf.publish(merged, scale, 5)
    ok = np.isfinite(Y).all(axis=1)
    assert np.allclose(pub["correlation"]["original"], np.corrcoef(X[ok], rowvar=False), atol=1e-4)
    assert np.allclose(pub["correlation"]["released"], np.corrcoef(Y[ok], rowvar=False), atol=1e-4)


def test_no_correlation_of_fewer_than_k_records_or_of_a_constant_column():
    X = np.column_stack([np.arange(4.0), np.ones(4)])
    scale = _scale(X)
    pub = kf.publish(kf.summarize(X, X, scale), scale, 5)
    assert pub["correlation"]["original"] is None      # 4 complete records < k
    X = np.column_stack([np.arange(10.0), np.ones(10)])
    scale = _scale(X)
    corr = kf.publish(kf.summarize(X, X, scale), scale, 5)["correlation"]["original"]
    assert corr[0][0] == 1.0 and corr[0][1] is None and corr[1][1] is None


@pytest.mark.parametrize("n", [0, 1])
def test_empty_or_tiny_pieces(n):
    X = np.zeros((n, 2))
    assert kf.merge([], ["a"]) is None and kf.scale_from_moments(["a"], [None]) is None
    scale = _scale(np.array([[1.0, 2.0], [3.0, 5.0]]))
    s = kf.summarize(X, X, scale)
    assert s["hist_original"].sum() == 2 * n and s["complete_original"] == s["complete_released"] == n


def test_released_side_from_cells_equals_the_released_records():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(600, 3)) * [1, 5, 0.2] + [0, 100, -3]
    labels = rng.integers(0, 80, size=600)
    used, labels = np.unique(labels, return_inverse=True)
    sizes = np.bincount(labels)
    centroids = np.array([X[labels == c].mean(axis=0) for c in range(sizes.size)])
    Y = centroids[labels]
    scale = _scale(X, ["a", "b", "c"])
    records = kf.summarize(X, Y, scale)
    split = kf.merge([kf.summarize_original(X[:250], scale), kf.summarize_original(X[250:], scale),
                      kf.summarize_cells(centroids[:40], sizes[:40], scale),
                      kf.summarize_cells(centroids[40:], sizes[40:], scale)], ["a", "b", "c"])
    for key in ("hist_original", "hist_released"):
        assert (split[key] == records[key]).all()
    for key in ("sum_released", "cross_released", "sum_original", "cross_original"):
        assert np.allclose(split[key], records[key])
    assert split["complete_original"] == split["complete_released"] == 600


def test_a_run_with_strata_and_missing_values_counts_every_observed_value():
    """Several groups (strata × missingness patterns), each summarised in its own task, merged."""
    import daskmicro
    from daskmicro.datasets import CENSUS_COLUMNS, census_like

    df = census_like(2000, seed=5, with_extra_columns=True)
    qi = list(CENSUS_COLUMNS[:4])
    df.loc[df.index[:200], qi[1]] = np.nan
    keep = ["record_id", *CENSUS_COLUMNS[4:]]                 # published as they are
    _, report = daskmicro.anonymize(df, qi=qi, k=5, seed=0, strata=["region"], missing="separate", keep=keep)
    figures = report.to_dict()["before_after"]
    observed = df[qi].notna().sum()
    for column in figures["columns"]:
        assert sum(column["released"]) == observed[column["name"]]
        shown = [v for v in column["original"] if v is not None]
        assert all(v == 0 or v >= 5 for v in shown) and sum(shown) <= observed[column["name"]]
    assert figures["correlation"]["records"] == 1800          # the rows with every QI present
    X = df[qi].dropna().to_numpy(float)
    assert np.allclose(figures["correlation"]["original"], np.corrcoef(X, rowvar=False), atol=1e-4)
