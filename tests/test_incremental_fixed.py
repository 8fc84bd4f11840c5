"""Incremental runs whose release is made while the survey is open (``increment="nn-fixed"``)
on real LocalClusters and real Parquet lakes: the run equals the same plan run by hand (the
partitioned pipeline on the base records, each late record given its nearest base cell's published
centroid), late files are published as they land, whatever the workers the release is the same, and
the running tuple counts give the verdict of a full count."""

from __future__ import annotations

import time

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from daskmicro import anonymize_incremental
from daskmicro.cli import main
from daskmicro.errors import InputError, ParameterError
from daskmicro.graph import incremental_fixed, incremental_pipeline
from daskmicro.graph.incremental import default_kernel, warm_up
from daskmicro.graph.pipeline import PipelineConfig, ReleaseOptions, run_pipeline
from daskmicro.io.arrivals import ArrivalSimulator
from daskmicro.kernels import standardize
from daskmicro.kernels.incremental_parts import NEAREST_EPS
from daskmicro.privacy.verify import add_tuple_counts, merge_tuple_counts, tuple_counts
from daskmicro.schedule_model import calibrate_near_linear
from daskmicro.workflow import load_workflow

# the survey of the partitioned-base tests: same records, same layout
import test_incremental_pipeline
from test_incremental_pipeline import K, N, NU, OPTIONS, finished

data = test_incremental_pipeline.data  # its module-scoped fixture, shared here
#: The survey's record ids are published as they are, on purpose: the tests follow each record.
KEEP = ["record_id"]


@pytest.fixture(scope="module")
def client(client):
    """The shared cluster, its workers' nearest-cell kernel loaded before any simulated survey opens."""
    warm_up(client, "nn", default_kernel)
    return client


def _expected(client, data, qi, n0):
    """The plan by hand: the partitioned pipeline on the base records alone (its published values and
    cells, one tuple per cell) and the squared distances of the late records, z-scored like the base,
    to the cells' z-space centroids."""
    base = data.iloc[:n0]
    cfg = PipelineConfig(method="partitioned", k=K, **OPTIONS)
    pub, details = run_pipeline(client, dd.from_pandas(base, npartitions=3), qi, cfg, ReleaseOptions(0))
    assert details["partitions"] >= 2  # really partitioned
    rel = client.compute(pub.release).result().sort_values("record_id").reset_index(drop=True)
    assert (rel["record_id"].to_numpy() == base["record_id"].to_numpy()).all()
    labels = rel.groupby(qi, sort=True).ngroup().to_numpy()
    published = rel[qi].to_numpy(np.float64)
    X = data[qi].to_numpy(np.float64)
    Zb, std = standardize(X[:n0])
    C = np.stack([Zb[labels == g].mean(axis=0) for g in range(labels.max() + 1)])
    Zi = std.transform(X[n0:])
    d2 = ((Zi[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    first = np.array([np.flatnonzero(labels == g)[0] for g in range(labels.max() + 1)])
    return published, published[first], labels, d2


def _late_cells(late_values, tuples):
    """The base cell of each late row, from its published tuple (each base cell publishes its own)."""
    index = {tuple(t): g for g, t in enumerate(tuples)}
    assert len(index) == len(tuples)
    return np.array([index[tuple(v)] for v in late_values])


def _check_fixed(by_id, data, qi, client, n0):
    """Base rows publish what the pipeline publishes on the base records alone; each late row the
    tuple of a base cell whose z-space centroid is at most (1 + NEAREST_EPS) times as far as the
    nearest (the tolerance of the search), and nearly always the nearest itself."""
    published, tuples, labels, d2 = _expected(client, data, qi, n0)
    values = by_id[qi].to_numpy(np.float64)
    np.testing.assert_allclose(values[:n0], published, rtol=1e-12, atol=1e-12)
    got = _late_cells(values[n0:], tuples)
    rows = np.arange(len(got))
    bound = (1 + NEAREST_EPS) ** 2 * d2.min(axis=1)
    assert (d2[rows, got] <= bound * (1 + 1e-9)).all()
    assert (got == d2.argmin(axis=1)).mean() > 0.8
    return labels, got


def _by_id(release, data, qi):
    """Checks every release must pass (k-anonymous as published, each row once, non-QI columns
    untouched); the release's rows in ``data`` order (by record_id)."""
    assert len(release) == len(data)
    assert release.groupby(qi).size().min() >= K
    by_id = release.set_index("record_id").loc[data["record_id"]].reset_index()
    pd.testing.assert_series_equal(by_id["region"], data["region"].reset_index(drop=True), check_names=False)
    return by_id


def test_nn_fixed_equals_the_plan_run_by_hand(data, qi, client):
    release, report = anonymize_incremental(finished(data), qi, K, keep=KEEP, nu=NU, increment="nn-fixed", time_column="ts",
                                            base_method="partitioned", base_options=dict(OPTIONS), client=client,
                                            seed=3, timeout=120)
    release = client.compute(release).result()
    n0 = int(np.ceil(N * (1 - NU)))
    inc = report.incremental
    assert inc["n_base"] == n0 and inc["n_increment"] == N - n0 and inc["increment_used"] == "nn-fixed"
    assert report.verified and report.rows.rows_out == N
    labels, nearest = _check_fixed(_by_id(release, data, qi), data, qi, client, n0)
    # no new cell: the base cells grew by the late records they were given
    sizes = np.bincount(labels) + np.bincount(nearest, minlength=labels.max() + 1)
    assert report.cells == labels.max() + 1 and report.min_cell_size == sizes.min()
    assert report.max_cell_size == sizes.max() and report.k_anonymity.min_count == sizes.min()
    assert "publish base" in inc["base_info"]
    # the release order is the seeded order of the row ids, not the arrival order
    assert not (release["record_id"].to_numpy() == data["record_id"].to_numpy()).all()


def test_late_files_are_published_as_they_land(data, qi, client, tmp_path, monkeypatch):
    """A lake filled over 10 s, the base stage at a quarter of the records: most late files are
    published before the close, their pieces merged three files at a time (and the base chunks'
    into one) while the survey is open; the release is still the plan by hand (late rows in arrival
    order), its rows in the seeded order of their row ids whatever was merged."""
    from daskmicro.release.publish import shuffle_keys

    monkeypatch.setattr(incremental_fixed, "MERGE_LATE", 3)
    lake = tmp_path / "lake"
    with ArrivalSimulator(data, lake, n_files=24, duration=10.0, speed=1.0):
        release, report = anonymize_incremental(str(lake), qi, K, keep=KEEP, nu=0.75, increment="nn-fixed",
                                                base_method="partitioned", base_options=dict(OPTIONS),
                                                client=client, seed=2, timeout=120)
    release = client.compute(release).result()
    inc = report.incremental
    assert inc["n_base"] == 600 and report.verified and report.rows.rows_out == N
    before = inc["increment_info"]["late rows handed to the workers before the close"]
    assert inc["times"]["base_end"] < inc["times"]["close"] and before >= N // 4
    labels, _ = _check_fixed(_by_id(release, data, qi), data, qi, client, 600)
    assert report.cells == labels.max() + 1
    # a row's id is its arrival position (late files handled in arrival order): the release is in
    # the order of the rows' seeded keys
    position = pd.Series(np.arange(N), index=data["record_id"])
    keys = shuffle_keys(2, position.loc[release["record_id"]].to_numpy(np.int64))
    assert (keys[1:] >= keys[:-1]).all()


def test_same_release_whatever_the_workers(data, qi, client, clients):
    def run(c):
        rel, rep = anonymize_incremental(finished(data), qi, K, keep=KEEP, nu=NU, increment="nn-fixed", time_column="ts",
                                         base_method="partitioned", base_options=dict(OPTIONS), client=c, seed=8,
                                         timeout=120)
        return c.compute(rel).result(), rep

    first, rep1 = run(client)
    second, rep2 = run(clients(1))   # the session's cluster of one worker process
    pd.testing.assert_frame_equal(first.reset_index(drop=True), second.reset_index(drop=True))
    assert rep1.information_loss == pytest.approx(rep2.information_loss, rel=1e-12)
    assert rep1.cell_size_counts == rep2.cell_size_counts


@pytest.mark.parametrize("dtypes", [
    ("int16", "float32", "uint32", "int64", "float64"),
    ("Int64", "float16", "int8", "Float64", "uint8"),
])
def test_directory_release_of_any_qi_dtypes_holds_what_was_counted(data, qi, client, tmp_path, dtypes):
    """A directory release is checked, as read back, to hold exactly the tuples counted before the
    close: over QI dtypes of every kind the check passes (nothing in the write changes a published
    value), the committed files are k-anonymous as published (counted here on the values as read,
    in their own dtypes) and hold the rows the same run returns as a frame."""
    survey = data.copy()
    for c, t in zip(qi, dtypes * len(qi)):
        v = survey[c].to_numpy(np.float64)
        if t.lower().startswith(("int", "uint")):
            info = np.iinfo(t.lower())
            v = np.clip(np.round(v), info.min, info.max)
        elif t == "float16":
            v = np.clip(v / 64, -6e4, 6e4)
        survey[c] = pd.Series(v).astype(t)
    kw = dict(keep=KEEP, nu=NU, increment="nn-fixed", time_column="ts", base_method="partitioned",
              base_options=dict(OPTIONS), client=client, seed=6, timeout=120)
    out = tmp_path / "release"
    _, report = anonymize_incremental(finished(survey), qi, K, output=str(out), **kw)
    assert report.verified and (out / "_SUCCESS").exists()
    written = pd.read_parquet(out)
    # counted on each value's text (round-trip exact in its own dtype; pandas cannot group float16)
    assert len(written) == N and written[qi].astype(str).groupby(qi).size().min() >= K
    frame, _ = anonymize_incremental(finished(survey), qi, K, **kw)
    frame = client.compute(frame).result()
    pd.testing.assert_frame_equal(written.sort_values("record_id").reset_index(drop=True),
                                  frame.sort_values("record_id").reset_index(drop=True))


def _land(lake, parts, late_from: int, pause: float = 1.0):
    """A survey lake filled by a collector: the first ``late_from`` files at once, the others one by
    one ``pause`` seconds apart (each written under a hidden name, renamed into place), then the
    close marker."""
    import json
    import threading

    lake.mkdir()

    def write(i, part):
        part.to_parquet(lake / f".part-{i:03d}", index=False)
        (lake / f".part-{i:03d}").rename(lake / f"part-{i:03d}.parquet")

    for i, part in enumerate(parts[:late_from]):
        write(i, part)

    def late():
        for i, part in enumerate(parts[late_from:], start=late_from):
            time.sleep(pause)
            write(i, part)
        time.sleep(pause)
        (lake / "_closed.json").write_text(json.dumps({"closed_at": time.time()}))

    thread = threading.Thread(target=late, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("late_file", [
    lambda f: f.drop(columns=["region"]),                 # region published empty for its records only
    lambda f: f.astype({"AGI": "float32"}),               # its centroids published in float32
    lambda f: f.assign(region=f["region"].astype("category")),
])
def test_a_late_file_of_another_schema_is_refused_nothing_written(data, qi, client, tmp_path, late_file):
    """A late file whose columns differ from the base files' would publish its records told apart
    from the others (a column missing for them, their values of another type): the run stops in one
    line naming the file and the column, and writes nothing."""
    parts = [data.iloc[i:i + 300].reset_index(drop=True) for i in range(0, N, 300)]
    parts[-1] = late_file(parts[-1])
    lake, out = tmp_path / "lake", tmp_path / "release"
    thread = _land(lake, parts, late_from=len(parts) - 2)
    with pytest.raises(InputError, match=r"^part-007\.parquet of the survey in .* does not have the columns of "
                                         r"part-000\.parquet: column '(region|AGI)' .*; no release made$"):
        anonymize_incremental(str(lake), qi, K, keep=KEEP, nu=NU, increment="nn-fixed", expected_rows=N,
                              base_method="partitioned", base_options=dict(OPTIONS), client=client, seed=3,
                              timeout=120, output=str(out))
    thread.join()
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["lake"]


def test_nu_of_a_fixed_increment_from_the_calibrated_base_stage(data, qi, client, tmp_path, monkeypatch):
    import functools

    # a survey this small times mostly overheads: calibrate on larger samples (as the partitioned tests do)
    sizes = [2_000, 8_000, 32_000]
    monkeypatch.setattr(incremental_fixed, "calibrate_pipeline",
                        functools.partial(incremental_pipeline.calibrate_pipeline, sizes=sizes))
    lake = tmp_path / "lake"
    # a survey long enough for the late path's timing on a loaded machine (else nu is refused, rightly)
    with ArrivalSimulator(data, lake, n_files=12, duration=15.0, speed=1.0):
        release, report = anonymize_incremental(str(lake), qi, K, keep=KEEP, increment="nn-fixed", base_method="partitioned",
                                                base_options=dict(OPTIONS), client=client, seed=1, timeout=120)
    inc = report.incremental
    cal = inc["calibration"]
    assert cal["n"] == sizes and len(cal["seconds"]) == 3 and min(cal["seconds"]) > 0
    # the near-linear time model, refitted here from the timed runs: the log-log slope kept within
    # [1, 1.2] (1 when the times give no usable slope), a through the largest run
    slope = float(np.polyfit(np.log(sizes), np.log(cal["seconds"]), 1)[0])
    expect = min(max(slope, 1.0), 1.2) if 0.1 <= slope <= 10.0 else 1.0
    assert cal["beta"] == pytest.approx(expect, abs=1e-9)
    assert cal["a"] == pytest.approx(cal["seconds"][-1] / sizes[-1] ** expect, rel=1e-9)
    # the late path timed on the survey's first records (a sixteenth: the first file of 200)
    assert cal["late_probe_rows"] == 200 and cal["late_seconds_per_record"] > 0
    # the head start holds margin × (the base stage's predicted time + the late records' publication)
    t_ref = cal["a"] * N ** cal["beta"]
    late = cal["late_seconds_per_record"] * N / t_ref
    assert inc["zeta"] == pytest.approx(15.0 / t_ref, rel=1e-6)
    assert inc["nu"] == pytest.approx(incremental_fixed.head_start_ratio(inc["zeta"], cal["beta"], late), abs=1e-9)
    m = incremental_fixed.BASE_TIME_MARGIN
    assert m * (1 - inc["nu"]) ** cal["beta"] == pytest.approx((inc["zeta"] - m * late) * inc["nu"], rel=1e-6)
    assert "first 200 records" in inc["nu_from"]
    assert report.verified and len(client.compute(release).result()) == N


def test_nu_of_a_fixed_increment_from_a_given_time_model(data, qi, client):
    """A DataFrame survey and a given time model: the late path is timed on the frame's first
    sixteenth of records, ν holds it and the modelled base stage."""
    survey = data.assign(ts=time.time() - 300.0 + np.arange(N) * 0.1)  # 240 s, over
    release, report = anonymize_incremental(survey, qi, K, keep=KEEP, increment="nn-fixed", time_column="ts",
                                            time_model=(1e-3, 1.0), base_method="partitioned",
                                            base_options=dict(OPTIONS), client=client, seed=6, timeout=120)
    inc = report.incremental
    late = inc["calibration"]["late_seconds_per_record"] * N / (1e-3 * N)
    assert inc["calibration"]["late_probe_rows"] == N // 16 and "first 150 records" in inc["nu_from"]
    assert inc["zeta"] == pytest.approx(239.9 / 2.4)
    assert inc["nu"] == pytest.approx(incremental_fixed.head_start_ratio(inc["zeta"], 1.0, late), abs=1e-9)
    assert report.verified and inc["n_increment"] == N - inc["n_base"] > 0
    _by_id(client.compute(release).result(), data, qi)


def test_a_survey_too_short_for_its_late_records_is_refused():
    with pytest.raises(ParameterError, match="too short for a fixed increment"):
        incremental_fixed.head_start_ratio(2.0, 1.0, 2.0)


def test_nn_fixed_needs_a_partitioned_base(data, qi):
    with pytest.raises(ParameterError, match="needs base_method='partitioned'"):
        anonymize_incremental(finished(data), qi, K, keep=KEEP, nu=NU, increment="nn-fixed", time_column="ts")


def test_running_counts_equal_a_full_count():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(0, 5, 400).astype(float), "b": rng.integers(0, 3, 400).astype(float)})
    total = tuple_counts(frame.iloc[:300], ["a", "b"])
    inside = tuple_counts(frame.iloc[300:], ["a", "b"])  # 15 tuples, all already among the first 300 rows
    new = tuple_counts(pd.DataFrame({"a": [9.0, 9.0], "b": [1.0, 2.0]}), ["a", "b"])
    for part in (inside, new):
        added, merged = add_tuple_counts(total, part), merge_tuple_counts(total, part)
        np.testing.assert_array_equal(added.hashes, merged.hashes)
        np.testing.assert_array_equal(added.counts, merged.counts)
        np.testing.assert_array_equal(added.tuples, merged.tuples)
    assert add_tuple_counts(total, inside).hashes is total.hashes  # added in place of a merge
    assert int(add_tuple_counts(total, inside).counts.sum()) == 400


def test_late_values_in_a_base_constant_column_are_refused(data, qi, client):
    df = data.copy()
    df["AGI"] = np.where(np.arange(N) < int(np.ceil(N * (1 - NU))), 1.0, 2.0)
    with pytest.raises(InputError, match="'AGI' are constant in the base stage"):
        anonymize_incremental(finished(df), qi, K, keep=KEEP, nu=NU, increment="nn-fixed", time_column="ts",
                              base_method="partitioned", base_options=dict(OPTIONS), client=client, timeout=120)


def test_spec_run_commits_what_the_api_returns(data, qi, tmp_path, client):
    """``daskmicro run`` of a spec with increment nn-fixed: the committed directory release (written,
    read back and counted by the lake commit) holds the rows the API returns for the same survey."""
    spec, out = tmp_path / "survey.yaml", tmp_path / "release"
    lake_spec, lake_api = tmp_path / "arrivals-spec", tmp_path / "arrivals-api"
    params = "".join(f"  {key}: {value}\n" for key, value in OPTIONS.items())
    spec.write_text(
        "version: 1\nname: survey\n"
        f"input:\n  path: {lake_spec}\n  keep: [record_id]\n"
        f"qi: [{', '.join(qi)}]\nk: {K}\nmethod: incremental\n"
        f"incremental:\n  close_at: 8s\n  nu: {NU}\n  deadline: 120s\n  increment: nn-fixed\n"
        "  base_method: partitioned\n"
        f"parameters:\n  seed: 4\n{params}"
        f"output:\n  path: {out}\n"
        f"cluster:\n  address: {client.scheduler.address}\n"
    )
    with ArrivalSimulator(data, lake_spec, n_files=8, duration=4.0, speed=1.0):
        assert main(["run", str(spec)]) == 0
    with ArrivalSimulator(data, lake_api, n_files=8, duration=4.0, speed=1.0):
        api, api_report = anonymize_incremental(str(lake_api), qi, K, keep=KEEP, nu=NU, increment="nn-fixed",
                                                base_method="partitioned", base_options=dict(OPTIONS),
                                                client=client, seed=4, timeout=120)
        api = client.compute(api).result()
    assert (out / "_SUCCESS").exists()
    from_spec = pd.read_parquet(out)
    _by_id(from_spec, data, qi)
    pd.testing.assert_frame_equal(from_spec.sort_values("record_id").reset_index(drop=True),
                                  api.sort_values("record_id").reset_index(drop=True))


@pytest.mark.parametrize("section, message", [
    ("  increment: nn-fixed\n", "incremental.increment: nn-fixed needs base_method: partitioned"),
    ("  increment: nn-fixed\n  base_method: mdav\n", "incremental.increment: nn-fixed needs base_method: partitioned"),
])
def test_spec_refuses_nn_fixed_without_a_partitioned_base(tmp_path, section, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"version: 1\nname: s\ninput:\n  path: {tmp_path}\nqi: [a]\nk: 5\nmethod: incremental\n"
                    f"incremental:\n  close_at: 1h\n  nu: 0.2\n{section}output:\n  path: {tmp_path / 'o.parquet'}\n")
    with pytest.raises(Exception, match=message):
        load_workflow(spec)


def test_time_model_of_a_near_linear_base_stage():
    # overheads flatten small runs below β = 1; noise can steepen them: β is kept within [1, 1.2]
    flat = calibrate_near_linear([1e4, 2e4, 4e4], [1.0, 1.5, 2.0])
    steep = calibrate_near_linear([1e4, 2e4, 4e4], [1.0, 2.5, 6.0])
    fitted = calibrate_near_linear([1e4, 2e4, 4e4], [1.0, 2.1, 4.5])
    assert flat.beta == 1.0 and steep.beta == 1.2 and 1.0 < fitted.beta < 1.2
    for model, last in ((flat, 2.0), (steep, 6.0), (fitted, 4.5)):  # through the largest run
        assert model(4e4) == pytest.approx(last)
    assert calibrate_near_linear([1e4, 2e4], [3.0, 2.0]).beta == 1.0  # times that do not grow
