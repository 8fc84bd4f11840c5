"""Incremental runs with a partitioned base stage on real LocalClusters of worker
processes: the run equals the same plan run by hand, whatever the number of workers; every release is
k-anonymous and keeps every row; the spec path and the API path agree; ν comes from a time model
calibrated on the partitioned base stage itself."""

from __future__ import annotations

import json
import time

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from daskmicro import anonymize_incremental
from daskmicro.cli import main
from daskmicro.datasets import census_like
from daskmicro.errors import InputError, ParameterError
from daskmicro.report.coarse import rounded_information_loss
from daskmicro.graph import incremental_pipeline
from daskmicro.graph.incremental import default_kernel, warm_up
from daskmicro.graph.pipeline import PipelineConfig, ReleaseOptions, run_pipeline
from daskmicro.io.arrivals import ArrivalSimulator
from daskmicro.kernels import centroids, mdav, standardize
from daskmicro.kernels.increment import increment as increment_kernel
from daskmicro.workflow import load_workflow

N, K = 2400, 5
NU = 0.25
OPTIONS = {"K": 40, "partition_size": 240, "task_rows": 800}  # 1800 base records: 2 top cells, ~8 partitions
#: The survey's record ids are published as they are, on purpose: the tests follow each record.
KEEP = ["record_id"]


@pytest.fixture(scope="module")
def data():
    return census_like(N, seed=11, with_extra_columns=True)


@pytest.fixture(scope="module")
def client(client):
    """The shared cluster, its workers' increment kernels loaded before any simulated survey opens."""
    warm_up(client, "nn-split-end", default_kernel)
    return client


def finished(data):
    """A survey that is over: arrival times in the past, in row order."""
    return data.assign(ts=time.time() - 10.0 + np.arange(len(data)) * 1e-3)


def _run(data, qi, client, increment, seed=3, **kw):
    release, report = anonymize_incremental(finished(data), qi, K, keep=KEEP, nu=NU, increment=increment, time_column="ts",
                                            base_method="partitioned", base_options=dict(OPTIONS), client=client,
                                            seed=seed, timeout=120, **kw)
    return client.compute(release).result(), report


def _check_release(release, data, qi):
    """k-anonymous as published, every row once, non-QI columns untouched; rows by record_id."""
    assert len(release) == len(data)
    assert release.groupby(qi).size().min() >= K
    by_id = release.sort_values("record_id").reset_index(drop=True)
    np.testing.assert_array_equal(by_id["record_id"], np.sort(data["record_id"]))
    expect = data.sort_values("record_id").reset_index(drop=True)
    pd.testing.assert_series_equal(by_id["region"], expect["region"], check_names=False)
    return by_id


def _base_cells_by_hand(client, base, qi):
    """The base stage by hand: the partitioned pipeline on the base records alone (its own chunking),
    cells read back from its published release (one centroid tuple per cell)."""
    cfg = PipelineConfig(method="partitioned", k=K, **OPTIONS)
    pub, details = run_pipeline(client, dd.from_pandas(base, npartitions=3), qi, cfg, ReleaseOptions(0))
    assert details["partitions"] > 2 and details["top_cells"] == 2  # really partitioned
    rel = client.compute(pub.release).result().sort_values("record_id").reset_index(drop=True)
    assert (rel["record_id"].to_numpy() == base["record_id"].to_numpy()).all()
    return rel.groupby(qi, sort=True).ngroup().to_numpy()


def test_nn_split_end_equals_the_plan_run_by_hand(data, qi, client):
    release, report = _run(data, qi, client, "nn-split-end")
    inc = report.incremental
    n0 = int(np.ceil(N * (1 - NU)))
    assert inc["n_base"] == n0 and inc["n_increment"] == N - n0 and inc["base_method"] == "partitioned"
    assert report.verified and report.rows.rows_out == N and report.k_anonymity.min_count >= K
    by_id = _check_release(release, data, qi)
    # by hand: pipeline on the base records, then the §IV-D kernel on all the late records at once
    X = data[qi].to_numpy(np.float64)
    lb = _base_cells_by_hand(client, data.iloc[:n0], qi)
    Zb, std = standardize(X[:n0])
    labels = increment_kernel("nn-split-end", Zb, lb, std.transform(X[n0:]), K)
    assert np.bincount(labels).max() >= K and len(np.unique(labels)) > len(np.unique(lb))  # some cells were split
    expected = centroids(X, labels)[labels]
    order = np.argsort(data["record_id"].to_numpy(), kind="stable")
    np.testing.assert_allclose(by_id[qi].to_numpy(np.float64), expected[order], rtol=1e-9, atol=1e-9)
    assert report.cells == len(np.unique(labels))


def test_2mdav_with_a_partitioned_base_equals_the_plan_run_by_hand(data, qi, client):
    release, report = _run(data, qi, client, "2mdav", seed=5)
    n0 = int(np.ceil(N * (1 - NU)))
    by_id = _check_release(release, data, qi)
    X = data[qi].to_numpy(np.float64)
    lb = _base_cells_by_hand(client, data.iloc[:n0], qi)
    std = standardize(X[:n0])[1]
    li = mdav(std.transform(X[n0:]), K)  # MDAV on the late records alone, z-scored like the base (§IV-A)
    labels = np.concatenate([lb, li + lb.max() + 1])
    order = np.argsort(data["record_id"].to_numpy(), kind="stable")
    np.testing.assert_allclose(by_id[qi].to_numpy(np.float64), centroids(X, labels)[labels][order], rtol=1e-9,
                               atol=1e-9)
    assert report.incremental["increment_used"] == "2mdav"


def test_same_release_whatever_the_workers_and_the_chunking(data, qi, client, clients, monkeypatch):
    first, rep1 = _run(data, qi, client, "nn-split-mid", seed=8)
    _check_release(first, data, qi)
    monkeypatch.setattr(incremental_pipeline, "CHUNK_ROWS", 250)  # base and late records in other chunks
    second, rep2 = _run(data, qi, clients(1), "nn-split-mid", seed=8)   # the session's cluster of one worker
    pd.testing.assert_frame_equal(first.reset_index(drop=True), second.reset_index(drop=True))
    assert rep1.information_loss == pytest.approx(rep2.information_loss, rel=1e-12)


def test_reference_gives_delta_and_the_share_of_the_one_pass_run(data, qi, client):
    release, report = _run(data, qi, client, "nn", reference=True)
    inc = report.incremental
    _check_release(release, data, qi)
    assert inc["t_ref_source"] == "measured" and inc["reference_run_seconds"] >= inc["t_ref"] > 0
    assert inc["delta"] == pytest.approx(report.information_loss / report.reference_information_loss - 1)
    assert inc["close_to_release_share_of_run"] == pytest.approx(inc["close_to_release_seconds"]
                                                                  / inc["reference_run_seconds"])
    # nn adjoins only: cells of the base grow, none is created
    assert report.max_cell_size >= 2 * K - 1 and report.min_cell_size >= K


def test_nu_from_the_time_model_calibrated_on_the_partitioned_base(data, qi, client, tmp_path, monkeypatch):
    import functools

    from daskmicro.graph import incremental_schedule as incremental_nu

    # a survey this small times mostly overheads: calibrate on larger samples (the run's own sizes
    # are task_rows / 2 … 2·task_rows, at most a quarter of the survey)
    sizes = [2_000, 8_000, 32_000]
    monkeypatch.setattr(incremental_nu, "calibrate_pipeline",
                        functools.partial(incremental_pipeline.calibrate_pipeline, sizes=sizes))
    lake = tmp_path / "lake"
    with ArrivalSimulator(data, lake, n_files=12, duration=6.0, speed=1.0):
        release, report = anonymize_incremental(str(lake), qi, K, keep=KEEP, increment="nn-split-end", base_method="partitioned",
                                                base_options=dict(OPTIONS), client=client, seed=1, timeout=120)
    inc = report.incremental
    cal = inc["calibration"]
    assert inc["nu_source"] == "time model" and cal["method"] == "partitioned"
    # the time model, refitted here from the timed runs: a least-squares line in log-log
    assert cal["n"] == sizes and len(cal["seconds"]) == 3 and min(cal["seconds"]) > 0
    slope, intercept = np.polyfit(np.log(sizes), np.log(cal["seconds"]), 1)
    assert cal["beta"] == pytest.approx(slope, rel=1e-9) and cal["a"] == pytest.approx(np.exp(intercept), rel=1e-9)
    # ν is the critical ratio: the base stage's predicted time equals the head start, (1 − ν)^β = ζν
    assert 0 < inc["nu"] < 1 and "calibrated time model" in inc["nu_from"]
    assert (1 - inc["nu"]) ** cal["beta"] == pytest.approx(inc["zeta"] * inc["nu"], rel=1e-6)
    # the ζ of the run is the survey's duration over the predicted one-pass time
    assert inc["zeta"] == pytest.approx(6.0 / (cal["a"] * N ** cal["beta"]), rel=1e-6)
    assert report.verified and len(client.compute(release).result()) == N


def test_spec_path_and_api_path_agree(data, qi, client, tmp_path):
    spec = tmp_path / "survey.yaml"
    out = tmp_path / "release.parquet"
    lake_spec, lake_api = tmp_path / "arrivals-spec", tmp_path / "arrivals-api"
    params = "".join(f"  {key}: {value}\n" for key, value in OPTIONS.items())
    spec.write_text(
        "version: 1\nname: survey\n"
        f"input:\n  path: {lake_spec}\n  keep: [record_id]\n"
        f"qi: [{', '.join(qi)}]\nk: {K}\nmethod: incremental\n"
        f"incremental:\n  close_at: 8s\n  nu: {NU}\n  deadline: 120s\n  increment: nn-split-end\n"
        "  base_method: partitioned\n"
        f"parameters:\n  seed: 4\n{params}"
        f"output:\n  path: {out}\n"
    )
    spec.write_text(spec.read_text() + f"cluster:\n  address: {client.scheduler.address}\n")
    with ArrivalSimulator(data, lake_spec, n_files=8, duration=4.0, speed=1.0):
        assert main(["run", str(spec)]) == 0
    with ArrivalSimulator(data, lake_api, n_files=8, duration=4.0, speed=1.0):
        api, api_report = anonymize_incremental(str(lake_api), qi, K, keep=KEEP, nu=NU, increment="nn-split-end",
                                                base_method="partitioned", base_options=dict(OPTIONS), client=client,
                                                seed=4, timeout=120)
        api = client.compute(api).result()
    from_spec = pd.read_parquet(out)
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["incremental"]["n_base"] == api_report.incremental["n_base"] == 1800
    _check_release(from_spec, data, qi)
    pd.testing.assert_frame_equal(from_spec.reset_index(drop=True), api.reset_index(drop=True))
    # the same release, so the same information loss (published rounded)
    assert report["information_loss"] == rounded_information_loss(api_report.information_loss)[0]


@pytest.mark.parametrize("kwargs, message", [
    ({"base_options": {"K": 10}}, "base_options apply to base_method='partitioned'"),
    ({"base_method": "partitioned", "base_options": {"k": 10}}, "unknown option"),
    ({"base_method": "partitioned", "base_options": {"K": 1}}, "K must be an integer ≥ 2"),
    ({"base_method": "partitioned", "base_options": [1]}, "base_options must be a dict"),
])
def test_bad_base_options(data, qi, kwargs, message):
    with pytest.raises(ParameterError, match=message):
        anonymize_incremental(finished(data), qi, K, keep=KEEP, nu=NU, time_column="ts", **kwargs)


def test_late_values_in_a_base_constant_column_are_refused(data, qi, client):
    df = data.copy()
    df["AGI"] = np.where(np.arange(N) < int(np.ceil(N * (1 - NU))), 1.0, 2.0)
    with pytest.raises(InputError, match="'AGI' are constant in the base stage"):
        _run(df, qi, client, "nn")


@pytest.mark.parametrize("section, message", [
    ("incremental:\n  close_at: 1h\n  nu: 0.2\n  base_method: pcl\n", "incremental.base_method: expected one of mdav"),
    ("incremental:\n  close_at: 1h\n  nu: 0.2\n  increment: knn\n", "incremental.increment: expected one of 2mdav"),
    ("incremental:\n  close_at: 1h\n  nu: 0.2\nparameters:\n  K: 100\n", "parameters.K: not used by method: incremental"),
])
def test_spec_refuses_what_the_run_cannot_do(tmp_path, section, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"version: 1\nname: s\ninput:\n  path: {tmp_path}\nqi: [a]\nk: 5\nmethod: incremental\n{section}"
                    f"output:\n  path: {tmp_path / 'o.parquet'}\n")
    with pytest.raises(Exception, match=message):
        load_workflow(spec)
