"""Per-record participation (π_j column) on the partitioned Dask pipeline.

Every release is checked independently of the pipeline: records are grouped by their published QI
tuple and each group's failure q̄ = P{0 < K < k} is recomputed here from the π_j of its records
(a Poisson-binomial PMF by repeated convolution, ``_oracles.poisson_binomial_failure``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import dask.dataframe as dd

from daskmicro.datasets import census_like
from daskmicro.errors import InputError, ParameterError
from daskmicro.graph.pipeline import PipelineConfig, ReleaseOptions, run_pipeline
from daskmicro.privacy.failures import WORST_CELLS, cell_failure_partial, cell_failure_summary, merge_cell_failure
from _oracles import failure_figures, poisson_binomial_failure

N = 3_000
K = 3
PBAR = 0.05
# 2 top cells (chunked MDAV at the top level), several partitions each, a proximal/distal split
SMALL = dict(method="partitioned", task_rows=1_500, partition_size=600, K=200, nu=0.5)
KEYS = {
    "mode", "k", "max_cell_failure", "participation", "participation_column", "participation_min",
    "participation_mean", "participation_max", "n_cells", "min_cell_size", "max_cell_size", "cell_failure_max",
    "cell_failure_mean", "cells_above_max_cell_failure", "table_failure", "expected_unprotected",
    "record_failure", "record_failure_given_active", "worst_cells", "expected_distortion",
}


@pytest.fixture(scope="module")
def data():
    df = census_like(N, seed=5, with_extra_columns=True)
    rng = np.random.default_rng(2)
    df["pi"] = rng.uniform(0.3, 1.0, N)
    df.loc[df.index[::97], "pi"] = 1.0
    return df


def _part(column="pi", pbar=PBAR):
    return SimpleNamespace(column=column, max_cell_failure=pbar)


def _run(client, df, qi, npartitions=3, participation=None, **kw):
    cfg = PipelineConfig(k=K, **{**SMALL, **kw})
    ddf = dd.from_pandas(df, npartitions=npartitions, sort=False)
    pub, details = run_pipeline(client, ddf, qi, cfg, ReleaseOptions(11, keep_row_id=True), participation=participation or _part())
    release = client.compute(pub.release).result().sort_values("row_id").reset_index(drop=True)
    return release, pub, details


def _groups(release, qi):
    """π_j of the records of every published QI tuple (the cells as an outsider sees them)."""
    return [g["pi"].to_numpy() for _, g in release.groupby(qi, sort=True)]


def _check_release(data, qi, release, pub, details):
    assert len(release) == N and release["row_id"].tolist() == list(range(N))
    # π and every other non-QI column published untouched, record by record
    pd.testing.assert_series_equal(release["pi"], data["pi"].reset_index(drop=True), check_names=False)
    assert sorted(release["pi"]) == sorted(data["pi"])
    for c in ("record_id", "region"):
        assert release[c].tolist() == data[c].tolist()
    groups = _groups(release, qi)
    assert min(g.size for g in groups) >= K
    q = np.array([poisson_binomial_failure(K, g) for g in groups])
    assert q.max() <= PBAR
    assert pub.k_anonymity.ok and pub.rows.ok
    prob = details["probabilistic"]
    assert KEYS <= set(prob)
    assert prob["cells_above_max_cell_failure"] == 0 and prob["cell_failure_max"] <= PBAR
    assert prob["min_cell_size"] >= K and prob["participation_column"] == "pi"
    assert prob["n_cells"] >= len(groups)  # cells publishing the same tuple merge into one group
    return groups


def test_partitioned_cells_meet_pbar_and_figures_match_the_release(data, qi, client):
    release, pub, details = _run(client, data, qi)
    assert details["top_cells"] == 2 and details["partitions"] > 2
    assert {s for s in details["partition_sides"]} == {"proximal", "distal"}
    groups = _check_release(data, qi, release, pub, details)
    prob = details["probabilistic"]
    assert len(groups) == prob["n_cells"]  # no two cells share a tuple on these data
    # every figure recomputed here from the published cells' π_j (Poisson-binomial PMFs)
    expect = failure_figures(K, PBAR, groups, n=N)
    for key in ("n_cells", "cells_above_max_cell_failure"):
        assert prob[key] == expect[key]
    for key in ("cell_failure_max", "cell_failure_mean", "table_failure", "expected_unprotected",
                "record_failure", "record_failure_given_active"):
        assert prob[key] == pytest.approx(expect[key], rel=1e-9), key
    worst = [w["cell_failure"] for w in prob["worst_cells"]]
    assert len(worst) == min(WORST_CELLS, len(groups))
    assert worst == pytest.approx(sorted(expect["cell_failure"], reverse=True)[:len(worst)], rel=1e-9)
    assert prob["participation_min"] == data["pi"].min() and prob["participation_max"] == data["pi"].max()
    assert prob["participation_mean"] == pytest.approx(data["pi"].mean(), rel=1e-12)
    assert 0.0 < prob["expected_distortion"] < 1.0


def test_same_release_for_1_and_2_workers_and_any_chunking(data, qi, client, clients):
    reference, _, details = _run(client, data, qi, npartitions=3)
    for npartitions in (1, 7):
        other, _, d = _run(client, data, qi, npartitions=npartitions)
        pd.testing.assert_frame_equal(other, reference)
        assert d["probabilistic"] == details["probabilistic"]
    one = clients(1)
    other, _, d = _run(one, data, qi, npartitions=5)
    pd.testing.assert_frame_equal(other, reference)
    assert d["probabilistic"] == details["probabilistic"]


@pytest.mark.parametrize("method", ["mdav", "pca-mdav"])
def test_one_task_methods(data, qi, client, method):
    release, pub, details = _run(client, data, qi, method=method, task_rows=250_000, partition_size=None, K=None,
                                 nu=None)
    assert details["partitions"] == 1
    _check_release(data, qi, release, pub, details)


def test_macro_pcl_keeps_pbar(data, qi, client):
    # macro="pcl" shapes only the partitions: the cells inside are still grown until q̄ ≤ p̄
    release, pub, details = _run(client, data, qi, macro="pcl")
    _check_release(data, qi, release, pub, details)


@pytest.mark.parametrize("bad, match", [
    (np.nan, "1 missing value"),
    (0.0, "1 value\\(s\\) outside \\(0, 1\\]"),
    (1.5, "1 value\\(s\\) outside \\(0, 1\\]"),
])
def test_bad_participation_values_are_refused_with_counts_only(data, qi, client, bad, match):
    df = data.head(400).copy()
    df.loc[df.index[123], "pi"] = bad
    with pytest.raises(InputError, match=match) as err:
        _run(client, df, qi, npartitions=2, method="mdav", task_rows=250_000, partition_size=None, K=None, nu=None)
    msg = str(err.value)
    assert "'pi'" in msg and "\n" not in msg and repr(bad) not in msg.replace("(0, 1]", "")


def test_non_numeric_participation_column_is_refused(data, qi, client):
    df = data.head(400).copy()
    df["pi"] = df["pi"].map(lambda v: f"p{v:.3f}")
    with pytest.raises(InputError, match="participation column 'pi' is not numeric") as err:
        _run(client, df, qi, npartitions=2)
    assert "\n" not in str(err.value) and "p0." not in str(err.value)
    df["pi"] = True
    with pytest.raises(InputError, match="'pi' is not numeric"):
        _run(client, df, qi, npartitions=2)


def test_participation_column_must_exist_and_not_be_a_qi(data, qi, client):
    with pytest.raises(ParameterError, match="participation column 'nope' is not in the input"):
        _run(client, data.head(400), qi, participation=_part("nope"))
    with pytest.raises(ParameterError, match="is also a QI column"):
        _run(client, data.head(400), qi, participation=_part(qi[0]))
    with pytest.raises(ParameterError, match="max_cell_failure"):
        _run(client, data.head(400), qi, participation=_part(pbar=1.0))


@pytest.mark.parametrize("kw", [dict(refine="pcl"), dict(method="pcl", task_rows=250_000, partition_size=None,
                                                         K=None, nu=None)])
def test_pcl_cells_are_refused(data, qi, client, kw):
    with pytest.raises(ParameterError, match="PCL moves records between cells") as err:
        _run(client, data.head(400), qi, **kw)
    assert "\n" not in str(err.value)


def test_merge_matches_one_summary_over_all_cells():
    # the merge of per-partition partials equals cell_failure_summary over all cells at once, and
    # both equal the figures recomputed here from the cells' Poisson-binomial PMFs
    rng = np.random.default_rng(4)
    labels = np.repeat(np.arange(40), rng.integers(3, 9, 40))
    rng.shuffle(labels)
    pis = rng.uniform(0.2, 1.0, labels.size)
    Z = rng.normal(size=(labels.size, 3))
    cells = [np.flatnonzero(labels == c) for c in range(40)]
    summary = cell_failure_summary(3, 0.1, [c.size for c in cells], pis_by_cell=[pis[c] for c in cells])
    oracle = failure_figures(3, 0.1, [pis[c] for c in cells])
    partials = []
    for lo, hi in ((0, 13), (13, 14), (14, 40)):
        idx = np.concatenate(cells[lo:hi])
        partials.append(cell_failure_partial(3, 0.1, labels[idx] - lo, pis[idx], Z[idx]))
    got = merge_cell_failure(partials, 3, 0.1, m_used=3)
    assert got["n_cells"] == summary["n_cells"] == 40
    assert got["cells_above_max_cell_failure"] == summary["cells_above_max_cell_failure"] \
        == oracle["cells_above_max_cell_failure"] > 0
    for key in ("cell_failure_max", "cell_failure_mean", "table_failure", "expected_unprotected",
                "record_failure", "record_failure_given_active"):
        assert got[key] == pytest.approx(summary[key], rel=1e-12), key
        assert got[key] == pytest.approx(oracle[key], rel=1e-9), key
    assert [(w["size"], w["cell_failure"]) for w in got["worst_cells"]] == [
        (w["size"], pytest.approx(w["cell_failure"], rel=1e-12)) for w in summary["worst_cells"]]
    assert [w["cell_failure"] for w in got["worst_cells"]] == pytest.approx(
        sorted(oracle["cell_failure"], reverse=True)[:len(got["worst_cells"])], rel=1e-9)
    # §VI-B: D = Σ_c Σ_{j∈c} π_j ‖z_j − ẑ_c‖² / (m′ Σ_j π_j), ẑ_c the π-weighted centroid of cell c
    sse = 0.0
    for c in cells:
        centre = (pis[c, None] * Z[c]).sum(axis=0) / pis[c].sum()
        sse += float((pis[c] * ((Z[c] - centre) ** 2).sum(axis=1)).sum())
    assert got["expected_distortion"] == pytest.approx(sse / (3 * pis.sum()), rel=1e-12)
    assert got["participation_mean"] == pytest.approx(pis.mean(), rel=1e-13)


def test_constant_qis_publish_one_tuple_within_pbar(data, qi, client):
    df = data.head(600).copy()
    for c in qi:
        df[c] = 7
    df["pi"] = df["pi"].astype("Float64")  # a nullable float column without missing values is accepted
    release, pub, details = _run(client, df, qi, npartitions=2)
    assert len(release) == 600 and release[qi].nunique().max() == 1
    assert poisson_binomial_failure(K, release["pi"].to_numpy(np.float64)) <= PBAR
    assert details["probabilistic"]["cells_above_max_cell_failure"] == 0 and pub.k_anonymity.ok
    assert details["probabilistic"]["expected_distortion"] == 0.0


def test_constant_qis_without_participation(data, qi, client):
    # every QI constant: one cell of all the records (this used to stop in the macroaggregation)
    df = data.head(600).copy()
    for c in qi:
        df[c] = 7
    cfg = PipelineConfig(k=K, **SMALL)
    pub, details = run_pipeline(client, dd.from_pandas(df, npartitions=2, sort=False), qi, cfg, ReleaseOptions(11))
    release = client.compute(pub.release).result()
    assert len(release) == 600 and pub.cells == 1 and pub.k_anonymity.ok and "probabilistic" not in details


def test_partition_too_small_for_pbar_is_refused(data, qi, client):
    with pytest.raises(ParameterError, match="raise K or partition_size") as err:
        _run(client, data, qi, participation=_part(pbar=1e-300))
    assert "\n" not in str(err.value)
