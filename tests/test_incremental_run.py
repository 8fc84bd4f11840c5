"""Incremental runs on a real LocalCluster of worker processes, with arrivals simulated in compressed time."""

import json
import os
import threading
import time

import numpy as np
import pandas as pd
import pytest

from daskmicro import anonymize_incremental, schedule
from daskmicro.datasets import census_like
from daskmicro.errors import InputError, ParameterError
from daskmicro.io.arrivals import ArrivalSimulator
from daskmicro.graph.incremental import default_kernel, warm_up
from daskmicro.io.survey import SurveyTimeoutError
from daskmicro.kernels import centroids, mdav, standardize
from daskmicro.report import render_html

N, K = 2000, 5
#: The survey's record ids are published as they are, on purpose: the tests follow each record.
KEEP = ["record_id"]


@pytest.fixture(scope="module")
def data():
    return census_like(N, seed=3, with_extra_columns=True)


@pytest.fixture(scope="module")
def client(client):
    """The shared cluster, the compiled kernels loaded in its workers before any simulated survey
    opens (a run does the same, but before it starts waiting: here the survey would already be running)."""
    warm_up(client, "nn-split-end", default_kernel)
    return client


def _simulate(data, tmp_path, duration=2.5, n_files=10):
    lake = tmp_path / "lake"
    sim = ArrivalSimulator(data, lake, n_files=n_files, duration=duration, speed=1.0, timestamp_column="arrived")
    return sim.start(), lake


class _HeldBack(ArrivalSimulator):
    """A survey whose files from ``held`` on land only once :meth:`let_in` is called (or after two
    minutes): the test, not the machine's load, decides that data are still arriving when the run's
    base stage starts."""

    def __init__(self, *args, held: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.held, self.gate = held, threading.Event()

    def let_in(self) -> None:
        self.gate.set()

    def _write_file(self, j, a, b):
        if j == self.held:
            self.gate.wait(120)
        super()._write_file(j, a, b)


def _when_the_base_runs(client, sim):
    """Let the held files in once a worker executes a task (the base stage, the only work then)."""
    def wait():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(client.run(lambda dask_worker: len(dask_worker.state.executing)).values()):
                break
            time.sleep(0.02)
        time.sleep(0.2)
        sim.let_in()
    threading.Thread(target=wait, daemon=True).start()


def _check_release(release, data, qi, k):
    assert len(release) == len(data)
    assert list(release.columns[: len(data.columns)]) == list(data.columns)
    assert release.groupby(qi).size().min() >= k
    by_id = release.sort_values("record_id").reset_index(drop=True)
    # Non-QI columns pass through untouched: same records, same values.
    pd.testing.assert_series_equal(by_id["record_id"], data["record_id"].reset_index(drop=True), check_names=False)
    pd.testing.assert_series_equal(by_id["region"], data["region"].reset_index(drop=True), check_names=False)
    return by_id


def test_lake_2mdav_base_starts_before_the_last_file_and_increment_waits_for_close(data, qi, client, tmp_path):
    lake = tmp_path / "lake"
    sim = _HeldBack(data, lake, n_files=10, duration=2.5, speed=1.0, timestamp_column="arrived", held=7).start()
    events = []

    def progress(event, s):
        events.append(event)
        if event == "base stage submitted":
            _when_the_base_runs(client, sim)

    release, report = anonymize_incremental(lake, qi, K, keep=KEEP, nu=0.3, client=client, seed=4, timeout=180,
                                            progress=progress)
    assert sim.join(5)
    inc = report.incremental
    times = inc["times"]
    last_file = max(lake.glob("part-*.parquet"))
    landed_last = os.stat(last_file).st_mtime
    closed_at = json.loads((lake / "_closed.json").read_text())["closed_at"]
    # The base stage really ran while data were still arriving ...
    assert times["base_submitted"] < landed_last and times["base_start"] < landed_last
    assert inc["base_started_before_close"] and inc["head_start_seconds"] > 0
    # ... and the increment stage was submitted only once the survey had closed.
    assert times["increment_submitted"] >= closed_at >= landed_last - 1e-3
    assert times["increment_start"] >= times["increment_submitted"] and times["release"] >= times["increment_end"]
    assert events.index("base stage submitted") < events.index("increment stage submitted") < events.index("release verified")
    # ν = 0.3 of 2000 records in 10 files of 200: the base is the first 7 files.
    assert inc["n_base"] == 1400 and inc["n_increment"] == 600 and inc["nu_actual"] == pytest.approx(0.3)
    assert report.verified and report.k_anonymity.min_count >= K and report.rows.rows_out == N
    by_id = _check_release(release, data, qi, K)
    # The release is exactly 2MDAV: base MDAV on the first 1400 records, MDAV on the rest, both
    # z-scored by the base statistics, centroids in original units.
    X = data[qi].to_numpy(np.float64)
    std = standardize(X[:1400])[1]
    lb, li = mdav(std.transform(X[:1400]), K), mdav(std.transform(X[1400:]), K)
    expected = np.concatenate([centroids(X[:1400], lb)[lb], centroids(X[1400:], li)[li]])
    np.testing.assert_allclose(by_id[qi].to_numpy(np.float64), expected, rtol=1e-12)
    # the survey's arrival-time column (near-unique per record) is withheld, as a frame's time column
    assert "arrived" not in release.columns and "arrived" not in by_id.columns
    assert (lake / "_arrivals.json").is_file() and json.loads((lake / "_arrivals.json").read_text())["timestamp_column"] == "arrived"
    assert report.method == "incremental" and inc["increment_used"] == "2mdav"


def test_frame_source_nn_split_end_with_reference(data, qi, client):
    t0 = time.time() + 0.2
    frame = data.assign(ts=t0 + np.linspace(0.0, 2.0, N))
    frame = frame.sample(frac=1.0, random_state=0)  # arrival order comes from the timestamps, not the rows
    release, report = anonymize_incremental(frame, qi, K, keep=KEEP, nu=0.25, increment="nn-split-end", time_column="ts",
                                            client=client, reference=True, seed=1, timeout=60)
    inc = report.incremental
    # the increment waits for the close (whether the base stage starts before it depends on the
    # machine's load: the lake test above checks that on a survey of its own clock)
    assert inc["times"]["base_submitted"] <= inc["times"]["increment_submitted"]
    assert t0 + 2.0 <= inc["times"]["increment_submitted"]
    assert inc["times"]["close"] == pytest.approx(t0 + 2.0)
    assert inc["n_base"] == 1500 and inc["n_increment"] == 500
    assert "ts" not in release.columns  # arrival times are near-unique per record: never published
    _check_release(release, data, qi, K)
    assert report.verified
    # δ against one-pass MDAV, and relative times from the measured t_ref (§III-B).
    assert report.reference_information_loss > 0 and inc["t_ref_source"] == "measured"
    assert inc["delta"] == pytest.approx(report.information_loss / report.reference_information_loss - 1)
    assert -0.05 < inc["delta"] < 1.0
    for key in ("tau_0", "tau_plus", "tau_minus", "delta_tau"):
        assert np.isfinite(inc[key])
    json.dumps(report.to_dict())  # the report stays JSON-serialisable
    html = render_html(report.to_dict())
    assert "τ₀" in html and "δ" in html


def test_nu_star_from_zeta(data, qi, client):
    frame = data.assign(ts=time.time() - 10.0 + np.arange(N) * 1e-3)  # a finished survey
    _, report = anonymize_incremental(frame, qi, K, keep=KEEP, zeta=5, time_column="ts", client=client, seed=0)
    inc = report.incremental
    assert inc["nu_source"] == "zeta" and inc["nu"] == pytest.approx(schedule.optimal_ratio(5)) == pytest.approx(0.146, abs=1e-3)
    # The base is every record up to the one that completes the fraction 1 − ν (a finished survey).
    assert inc["n_base"] == int(np.ceil(N * (1 - inc["nu"]))) and inc["n_increment"] == N - inc["n_base"]
    assert inc["times"]["base_submitted"] < inc["times"]["increment_submitted"]


def test_nu_star_from_time_model_and_survey_duration(data, qi, client, tmp_path):
    sim, lake = _simulate(data, tmp_path, duration=1.0)
    a = 0.2 / N**2  # one pass predicted at 0.2 s, the survey lasts 1 s: ζ = 5
    _, report = anonymize_incremental(lake, qi, K, keep=KEEP, time_model=(a, 2.0), client=client, seed=0, timeout=60)
    sim.join(5)
    inc = report.incremental
    assert inc["nu_source"] == "time model" and inc["zeta"] == pytest.approx(5.0)
    assert inc["nu"] == pytest.approx(schedule.optimal_ratio(5.0))
    assert inc["t_ref_source"] == "predicted" and inc["t_ref"] == pytest.approx(0.2)


def test_missing_close_times_out_with_no_release(data, qi, client, tmp_path):
    sim, lake = _simulate(data, tmp_path, duration=30.0, n_files=100)  # closes long after the timeout
    try:
        with pytest.raises(SurveyTimeoutError, match="had not closed") as info:
            anonymize_incremental(lake, qi, K, keep=KEEP, nu=0.99, client=client, timeout=1.5)
        assert "\n" not in str(info.value) and isinstance(info.value, TimeoutError)
        # The base stage had been submitted; after the timeout nothing of the run is left on the cluster.
        time.sleep(0.2)
        left = client.run_on_scheduler(lambda dask_scheduler: [k for k in dask_scheduler.tasks if "incremental" in str(k)])
        assert left == []
    finally:
        sim.stop()


def test_base_fraction_not_reached_times_out(data, qi, client, tmp_path):
    sim, lake = _simulate(data, tmp_path, duration=30.0)
    try:
        with pytest.raises(SurveyTimeoutError, match="base stage"):
            anonymize_incremental(lake, qi, K, keep=KEEP, nu=0.1, client=client, timeout=0.5)
    finally:
        sim.stop()


def test_datetime_arrivals_and_close_at(data, qi, client):
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)  # naive datetimes are UTC
    frame = data.assign(ts=now - pd.to_timedelta(np.linspace(5.0, 1.0, N), unit="s"))
    close = now + pd.Timedelta(seconds=2.0)
    release, report = anonymize_incremental(frame, qi, K, keep=KEEP, nu=0.2, increment="nn", time_column="ts", close_at=close,
                                            client=client, seed=2, timeout=30)
    inc = report.incremental
    assert inc["times"]["close"] == pytest.approx(close.tz_localize("UTC").timestamp())
    assert inc["times"]["increment_submitted"] >= inc["times"]["close"]  # waited for close_at
    assert inc["n_base"] == 1600 and report.verified and "ts" not in release.columns


def test_non_numeric_qi_reported_from_the_workers(data, qi, client):
    frame = data.assign(ts=time.time() - 1.0, region=data["region"].astype(str))
    with pytest.raises(InputError, match="'region' is not numeric"):
        anonymize_incremental(frame, qi + ["region"], K, keep=KEEP, nu=0.2, time_column="ts", client=client)


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 1}, "k must be an integer ≥ 2"),
    ({"k": N + 1}, "exceeds the number of records"),
    ({"nu": 1.0}, "nu must be < 1"),
    ({"nu": -0.1}, "nu must lie in"),
    ({"zeta": -1}, "zeta"),
    ({"increment": "kmeans"}, "increment must be one of"),
    ({"base_method": "pcl"}, "base_method must be one of"),
    ({"timeout": 0}, "timeout must be a positive"),
    ({"qi": ["nope"]}, "unknown QI column"),
    ({"qi": []}, "at least one"),
    ({"time_column": "missing"}, "time_column 'missing'"),
    ({"time_column": None}, "needs time_column"),
    ({"expected_rows": 10}, "expected_rows applies to a lake"),
    ({"close_at": "tomorrow"}, "close_at must be a time"),
    ({"time_model": (1.0,)}, "time_model must be"),
    ({"reference": "yes"}, "reference must be True or False"),
    ({"nu": 0.001}, "fewer than k"),
    ({"nu": 0.999, "increment": "nn-split-end"}, "to the base stage, fewer than k"),
    ({"nu": 0.999, "increment": "nn-fixed", "base_method": "partitioned"}, "to the base stage, fewer than k"),
])
def test_bad_parameters(data, qi, kwargs, message):
    frame = data.assign(ts=time.time())
    args = {"k": K, "qi": qi, "time_column": "ts", "keep": KEEP, **kwargs}
    with pytest.raises(ParameterError, match=message):
        anonymize_incremental(frame, args.pop("qi"), args.pop("k"), **args)


def test_bad_sources(tmp_path, qi):
    with pytest.raises(InputError, match="does not exist"):
        anonymize_incremental(tmp_path / "nowhere", qi, K, keep=KEEP, nu=0.1)
    with pytest.raises(InputError, match="must be a Parquet lake directory or a pandas DataFrame"):
        anonymize_incremental(np.zeros((10, 2)), [0], K, nu=0.1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ParameterError, match="give nu or zeta"):
        anonymize_incremental(tmp_path / "empty", qi, K, keep=KEEP, expected_rows=100)
    with pytest.raises(ParameterError, match="give expected_rows"):
        anonymize_incremental(tmp_path / "empty", qi, K, keep=KEEP, nu=0.2)
