"""PCL inside the Dask pipeline: per-partition method, refinement stage, macro="pcl",
API and CLI options — on real LocalClusters of worker processes, small data."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import dask.dataframe as dd

from daskmicro import PCL, anonymize, information_loss, mdav, pcl, standardize
from daskmicro.cli import main
from daskmicro.datasets import census_like
from daskmicro.config import RunConfig
from daskmicro.errors import ParameterError
from daskmicro.graph.pipeline import PipelineConfig
from daskmicro.kernels import partition as kp
from daskmicro.kernels.macro import cell_stats, nested_mdav
from daskmicro.kernels.partition_pcl import nested_pcl, refine_partition
from daskmicro.runplan import RunPlan

N = 9_000
# 3 top cells (chunked MDAV), 2 partitions per top cell, macrocells of 250 for the ν < 1 split
SMALL = dict(method="partitioned", task_rows=3_000, partition_size=1_200, K=250)


@pytest.fixture(scope="module")
def data():
    return census_like(N, seed=7, with_extra_columns=True)


@pytest.fixture(scope="module")
def Z(data, qi):
    return standardize(data[qi].to_numpy(np.float64))[0]


def _run(data, qi, client, npartitions, **kw):
    ddf = dd.from_pandas(data, npartitions=npartitions, sort=False)
    release, report = anonymize(ddf, qi, 5, seed=3, keep_row_id=True, client=client, keep=["record_id"],
                                **{**SMALL, **kw})
    return client.compute(release).result().sort_values("row_id").reset_index(drop=True), report


# --------------------------------------------------------------------------- kernels (no cluster)


def test_refine_partition_never_worse_and_keeps_k(Z):
    X = Z[:2_000]
    part = (np.arange(100, 2_100, dtype=np.int64), X)
    start = kp.run_partition(part, "mdav", 4)
    out = refine_partition(part, start, 4, max_iter=3)
    assert np.array_equal(out.rowids, part[0])
    assert out.size.min() >= 4 and out.size.sum() == 2_000 and out.n_cells == start.n_cells
    info = out.info["refine"]
    assert info["sse_before"] == pytest.approx(start.sse.sum())
    assert info["sse_after"] == pytest.approx(out.sse.sum())
    assert 1 <= info["n_iter"] <= 3
    assert out.sse.sum() < 0.97 * start.sse.sum()            # PCL improves MDAV on this data
    # the published summaries are those of the labels
    size, sums, sse = cell_stats(X, out.labels)
    assert np.array_equal(size, out.size) and np.allclose(sse, out.sse)


def test_refine_partition_refuses_mismatched_inputs(Z):
    part = (np.arange(500, dtype=np.int64), Z[:500])
    res = kp.run_partition(part, "mdav", 5)
    with pytest.raises(ValueError, match="different partitions"):
        refine_partition((part[0] + 1, part[1]), res, 5)
    with pytest.raises(ValueError, match="unknown refinement method"):
        refine_partition(part, res, 5, method="lloyd")


def test_pcl_is_a_registered_partition_method(Z):
    assert "pcl" in kp.PARTITION_METHODS
    part = (np.arange(1_500, dtype=np.int64), Z[:1_500])
    base = kp.run_partition(part, "mdav", 5)
    # PCA parameters meant for PCA-MDAV are ignored by PCL
    res = kp.run_partition(part, "pcl", 5, {"max_iter": 5, "noisy": False, "components": np.eye(13), "mean": 0})
    assert res.size.min() >= 5 and res.size.sum() == 1_500
    assert res.sse.sum() <= base.sse.sum()


def test_nested_pcl_levels_are_nested_and_large_enough(Z):
    X = Z[:6_000]
    sizes = [1_500, 300]
    levels = nested_pcl(X, sizes, max_iter=2)
    ref = nested_mdav(X, sizes)
    for lab, size in zip(levels, sizes):
        cnt = np.bincount(lab)
        assert cnt.min() >= size
    # every macrocell lies in one group, and groups' macrocells are numbered consecutively
    pairs = pd.DataFrame({"g": levels[0], "m": levels[1]}).drop_duplicates()
    assert pairs["m"].is_unique
    assert (np.diff(pairs.sort_values("m")["g"].to_numpy()) >= 0).all()
    # the top level is MDAV's groups refined: never worse
    sse = lambda lab: cell_stats(X, lab)[2].sum()  # noqa: E731
    assert sse(levels[0]) <= sse(ref[0]) * (1 + 1e-12)
    assert levels[0].max() == ref[0].max()


# --------------------------------------------------------------------------- pipeline on a cluster


def test_refinement_lowers_sse_keeps_k_and_every_row(data, qi, client):
    plain, rep0 = _run(data, qi, client, 3)
    refined, rep = _run(data, qi, client, 3, refine="pcl", refine_iter=3)
    r = rep.pipeline["refine"]
    assert r["method"] == "pcl" and r["max_iter"] == 3 and r["partitions"] == rep.pipeline["partitions"]
    assert 1 <= r["iterations_max"] <= 3
    # the stage starts from exactly the fan-out's cells, where the run without refinement starts its
    # improvement stage, and the improvement stage then starts from the refined cells
    sst = N * rep.m_used
    imp0, imp = rep0.pipeline["improve"], rep.pipeline["improve"]
    assert r["sse_before"] == pytest.approx(imp0["sse_before"], rel=1e-9)
    assert imp["sse_before"] == pytest.approx(r["sse_after"], rel=1e-9)
    assert 100 * imp["sse_after"] / sst == pytest.approx(rep.information_loss, rel=1e-9)
    assert r["sse_after"] <= r["sse_before"] and imp["sse_after"] <= imp["sse_before"]
    assert rep.information_loss < 0.98 * 100 * r["sse_before"] / sst
    assert "refine" in rep.timings and rep.timings["refine"] > 0 and rep0.pipeline["refine"] is None
    # k-anonymous, every row once, other columns untouched
    assert rep.verified and rep.min_cell_size >= 5
    assert refined.groupby(qi).size().min() >= 5
    assert refined["row_id"].tolist() == list(range(N))
    assert (refined["record_id"].to_numpy() == data["record_id"].to_numpy()).all()
    X = data[qi].to_numpy(np.float64)
    assert rep.information_loss == pytest.approx(information_loss(X, refined.groupby(qi).ngroup()), rel=1e-6)
    assert "refinement" in rep.summary(verbose=True) and "refinement" not in rep.summary()


def test_refine_and_macro_pcl_same_release_for_1_2_4_workers_and_any_chunking(data, qi, client, clients):
    kw = dict(refine="pcl", macro="pcl", nu=0.5)
    reference, rep = _run(data, qi, client, 3, **kw)
    assert rep.pipeline["macro"] == {"method": "pcl", "max_iter": 2}
    assert rep.pipeline["top_cells"] == 3 and rep.verified
    for workers in (1, 4):
        own = clients(workers)
        other, _ = _run(data, qi, own, 1 if workers == 1 else 5, **kw)
        pd.testing.assert_frame_equal(other, reference)


def test_macro_pcl_two_partition_layout(data, qi, client):
    sub = data.iloc[:3_000]
    _, mdav_rep = anonymize(sub, qi, 5, method="proximal-distal", K=300, nu=0.4, seed=0, client=client,
                              keep=["record_id"])
    _, rep = anonymize(sub, qi, 5, method="proximal-distal", K=300, nu=0.4, seed=0, client=client, macro="pcl",
                         keep=["record_id"])
    assert rep.verified and rep.min_cell_size >= 5
    assert rep.pipeline["macrocells"] == mdav_rep.pipeline["macrocells"]
    # the paper's two partitions (proximal, distal) over every record
    assert sorted(rep.pipeline["partition_sides"]) == ["distal", "proximal"]
    assert sum(rep.pipeline["partition_rows"]) == 3_000


def test_method_pcl_in_process_and_on_the_cluster(data, qi, client):
    sub = data.iloc[:400]
    X = sub[qi].to_numpy(np.float64)
    release, rep = anonymize(sub, qi, 4, method="pcl", seed=0, keep=["record_id"])
    assert rep.method == "pcl" and rep.verified and rep.min_cell_size >= 4 and len(release) == 400
    labels = pcl(standardize(X)[0], 4, init="mdav", seed=0)
    assert rep.information_loss == pytest.approx(information_loss(X, labels), rel=1e-9)
    assert rep.information_loss < information_loss(X, mdav(standardize(X)[0], 4))
    _, crep = anonymize(sub, qi, 4, method="pcl", seed=0, client=client, keep=["record_id"])
    # on the cluster the same one-task kernel runs on a worker: the same cells
    assert crep.verified and crep.min_cell_size >= 4
    assert crep.information_loss == pytest.approx(rep.information_loss, rel=1e-12)


def test_exports():
    import daskmicro

    assert daskmicro.pcl is pcl and daskmicro.PCL is PCL
    assert "pcl" in daskmicro.__all__ and "PCL" in daskmicro.__all__


# --------------------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(refine="foo"), "refine must be None or one of 'pcl', got 'foo'"),
        (dict(refine=3), "refine must be None or one of 'pcl'"),
        (dict(macro="foo"), "macro must be one of 'mdav', 'pcl', got 'foo'"),
        (dict(refine="pcl", refine_iter=0), "refine_iter must be an integer ≥ 1, got 0"),
        (dict(refine="pcl", refine_iter=1.5), "refine_iter must be an integer ≥ 1"),
        (dict(macro="pcl", macro_iter=-1), "macro_iter must be an integer ≥ 1"),
        (dict(refine_iter=2), "refine_iter applies only with refine='pcl'"),
        (dict(macro_iter=2), "macro_iter applies only with macro='pcl'"),
        (dict(method="pcl", k=1), "k must be"),
        (dict(method="pcl", k=2.5), "k must be"),
        (dict(method="pcl", k=500), "k"),
        (dict(method="pcl", max_task_rows=100), "method 'pcl' runs in one task"),
        (dict(method="pcl", energy_loss=0.1), "apply only to method 'pca-mdav'"),
    ],
)
def test_bad_pcl_options_in_process(data, qi, kw, message):
    kw = {"k": 5, **kw}
    with pytest.raises(ParameterError, match=message) as exc:
        anonymize(data.iloc[:300], qi, seed=0, keep=["record_id"], **kw)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(refine="foo"), "refine must be None or one of 'pcl'"),
        (dict(macro="kmeans"), "macro must be one of 'mdav', 'pcl'"),
        (dict(method="pcl", k=1), "k must be"),
        (dict(method="pcl", max_task_rows=100), "method 'pcl' runs in one task"),
    ],
)
def test_bad_pcl_options_on_the_cluster(data, qi, client, kw, message):
    kw = {"k": 5, **kw}
    with pytest.raises(ParameterError, match=message):
        anonymize(data.iloc[:300], qi, seed=0, client=client, keep=["record_id"], **kw)


def test_pcl_options_are_checked_once_by_the_run_description():
    with pytest.raises(ParameterError, match="refine must be None or one of 'pcl'"):
        RunConfig.build(qi=["a"], k=5, refine="nope")
    with pytest.raises(ParameterError, match="macro must be one of 'mdav', 'pcl'"):
        RunConfig.build(qi=["a"], k=5, macro="nope")
    run = RunConfig.build(qi=["a"], k=5, method="partitioned", refine="PCL", seed=0)
    plan = RunPlan.from_config(run, exact_rows=0)
    cfg = PipelineConfig.from_settings(plan.pipeline, "partitioned", 5).resolved(10_000)
    assert cfg.refine == "pcl" and cfg.fanout(10_000)[0].keep_parts
    assert PipelineConfig(method="pcl", k=5).resolved(10_000).distal_method == "pcl"


# --------------------------------------------------------------------------- CLI


def test_cli_method_pcl_in_process(data, qi, tmp_path, capsys):
    src = tmp_path / "in.csv"
    data.iloc[:300].to_csv(src, index=False)
    out = tmp_path / "out.parquet"
    args = ["anonymize", str(src), str(out), "--qi", ",".join(qi), "--k", "5", "--method", "pcl", "--seed", "0",
            "--keep", "record_id"]
    assert main(args) == 0
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["method"] == "pcl" and report["min_cell_size"] >= 5
    assert len(pd.read_parquet(out)) == 300


def test_cli_refine_and_macro_on_a_scheduler(data, qi, client, tmp_path):
    src = tmp_path / "in.parquet"
    data.iloc[:3_000].to_parquet(src, index=False)
    out = tmp_path / "out.parquet"
    args = ["anonymize", str(src), str(out), "--qi", ",".join(qi), "--k", "5", "--method", "partitioned",
            "--partition-size", "1000", "--K", "200", "--task-rows", "1500", "--refine", "pcl", "--refine-iter", "2",
            "--macro", "pcl", "--macro-iter", "1", "--seed", "0", "--scheduler", client.scheduler.address,
            "--keep", "record_id"]
    assert main(args) == 0
    report = json.loads(out.with_suffix(".report.json").read_text())
    p = report["pipeline"]
    assert p["refine"]["max_iter"] == 2 and p["macro"] == {"method": "pcl", "max_iter": 1}
    assert report["timings"]["refine"] > 0 and report["min_cell_size"] >= 5


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--refine", "foo"], "argument --refine: invalid choice: 'foo'"),
        (["--macro", "foo"], "argument --macro: invalid choice: 'foo'"),
        (["--method", "pcl", "--k", "1"], "k must be"),
        (["--refine-iter", "2"], "refine_iter applies only with refine='pcl'"),
        (["--refine", "pcl", "--refine-iter", "0"], "argument --refine-iter: expected an integer ≥ 1"),
    ],
)
def test_cli_bad_pcl_options(data, qi, tmp_path, capsys, extra, message):
    src = tmp_path / "in.csv"
    data.iloc[:100].to_csv(src, index=False)
    out = tmp_path / "out.parquet"
    args = ["anonymize", str(src), str(out), "--qi", ",".join(qi)]
    if "--k" not in extra:
        args += ["--k", "5"]
    assert main(args + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()
