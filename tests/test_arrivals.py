"""Simulated arrivals: files land on schedule, atomically, and the readers see what has landed."""

import json
import threading
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro.errors import InputError, ParameterError
from daskmicro.io.arrivals import (
    OFFSET_KEY,
    ArrivalSimulator,
    arrival_offsets,
    arrived,
    is_closed,
    read_manifest,
    survey_clock,
    wait_for_fraction,
)


@pytest.fixture
def frame():
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.normal(size=100), "y": rng.integers(0, 9, 100), "name": [f"r{i}" for i in range(100)]})


def test_arrival_offsets_profiles():
    u = arrival_offsets(4, 100.0, "uniform")
    np.testing.assert_allclose(u, [25, 50, 75, 100])
    front = arrival_offsets(4, 100.0, "front")
    back = arrival_offsets(4, 100.0, "back")
    assert front[-1] == back[-1] == 100.0
    # Front-loaded: half the records are in well before mid-survey; back-loaded: well after.
    assert front[1] < 50 < back[1]
    np.testing.assert_allclose(back[1], 100 * np.sqrt(0.5))
    for t in (u, front, back):
        assert np.all(np.diff(t) > 0)


def test_instant_lake_holds_all_records_with_arrival_times(frame, tmp_path):
    lake = tmp_path / "lake"
    sim = ArrivalSimulator(frame, lake, n_files=8, duration=3600, mode="instant", timestamp_column="arrived_at")
    sim.start()
    assert sim.join() is True and is_closed(lake)
    files = arrived(lake)
    assert [a.index for a in files] == list(range(8))
    assert sum(a.rows for a in files) == 100
    np.testing.assert_allclose([a.offset for a in files], sim.offsets, atol=1e-3)
    assert files[-1].offset == pytest.approx(3600)
    # Reading the lake back gives the records, in order, plus the timestamp column.
    back = pd.concat([pd.read_parquet(a.path) for a in files], ignore_index=True)
    pd.testing.assert_frame_equal(back.drop(columns="arrived_at"), frame)
    np.testing.assert_allclose(back["arrived_at"], arrival_offsets(100, 3600))
    # Each file's arrival time is also in its Parquet metadata, and is that of its last record.
    meta = pq.read_schema(files[2].path).metadata
    assert float(meta[OFFSET_KEY]) == pytest.approx(files[2].offset, abs=1e-3)
    assert float(meta[OFFSET_KEY]) == pytest.approx(back["arrived_at"][files[0].rows + files[1].rows + files[2].rows - 1])
    # `until` keeps the files landed by a survey time.
    assert len(arrived(lake, until=1800)) == 4
    assert arrived(lake, until=0) == []
    manifest = read_manifest(lake)
    assert manifest["rows"] == 100 and manifest["n_files"] == 8 and manifest["mode"] == "instant"
    # A Dask/pyarrow reader of the directory skips the manifest and marker files.
    assert len(pd.read_parquet(lake)) == 100


def test_realtime_files_land_over_time(frame, tmp_path):
    lake = tmp_path / "lake"
    # A 10-hour survey compressed into 1 second (speed 36 000), 10 files, one every 0.1 s.
    sim = ArrivalSimulator(frame, lake, n_files=10, duration=36000, speed=36000)
    t0 = time.monotonic()
    sim.start()
    first = wait_for_fraction(lake, 0.3, timeout=10)
    t_first = time.monotonic() - t0
    assert sum(a.rows for a in first) >= 30
    assert not is_closed(lake)
    assert t_first >= 0.2  # the third file is due 0.3 s after the opening: never before
    assert 0 < survey_clock(lake) < 36000
    assert sim.join(timeout=10) is True
    assert time.monotonic() - t0 >= 0.95
    assert sum(a.rows for a in arrived(lake)) == 100


def test_reader_never_sees_a_partial_file(tmp_path):
    # Big files written back to back while a reader polls: every file listed must be complete.
    rng = np.random.default_rng(1)
    data = pd.DataFrame(rng.normal(size=(60_000, 8)), columns=[f"c{j}" for j in range(8)])
    lake = tmp_path / "lake"
    sim = ArrivalSimulator(data, lake, n_files=12, duration=1.0, speed=4.0)
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            for a in arrived(lake) if lake.exists() else []:
                seen.append((a.path.name, len(pq.read_table(a.path)), a.rows))

    thread = threading.Thread(target=reader)
    thread.start()
    sim.start()
    sim.join(timeout=20)
    stop.set()
    thread.join()
    assert seen, "the reader saw files while they were being written"
    assert all(n == rows == 5000 for _, n, rows in seen)
    assert not [p for p in lake.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_instant_lake_lands_by_the_survey_clock(frame, tmp_path):
    lake = tmp_path / "lake"
    t0 = time.monotonic()   # before the survey's clock starts: the files cannot land earlier than their time
    ArrivalSimulator(frame, lake, n_files=4, duration=3600, speed=3600, mode="instant").start()
    files = wait_for_fraction(lake, 0.5, timeout=10)
    assert sum(a.rows for a in files) == 50
    assert time.monotonic() - t0 >= 0.49  # half the survey = 0.5 s of real time (a timer may round down)


def test_wait_for_fraction_timeout_and_stop(frame, tmp_path):
    lake = tmp_path / "lake"
    sim = ArrivalSimulator(frame, lake, n_files=5, duration=1000, speed=1.0)  # files every 200 s
    sim.start()
    with pytest.raises(TimeoutError, match="0 of the 50 records"):
        wait_for_fraction(lake, 0.5, timeout=0.2)
    sim.stop()
    assert not is_closed(lake)
    assert sim.join() is False


def test_wait_for_fraction_on_a_closed_short_lake(tmp_path):
    lake = tmp_path / "plain"
    lake.mkdir()
    pd.DataFrame({"x": range(10)}).to_parquet(lake / "data.parquet")
    (lake / "_closed.json").write_text(json.dumps({"rows": 10}))
    # No manifest: the total must be given; files without an arrival time count as landed.
    files = wait_for_fraction(lake, 1.0, total_rows=10)
    assert files[0].offset is None and files[0].rows == 10
    with pytest.raises(InputError, match="closed with 10 of the 20"):
        wait_for_fraction(lake, 1.0, total_rows=20)
    with pytest.raises(ParameterError, match="total_rows is needed"):
        wait_for_fraction(lake, 0.5)


def test_overwrite(frame, tmp_path):
    lake = tmp_path / "lake"
    ArrivalSimulator(frame, lake, n_files=5, duration=10, mode="instant").start()
    with pytest.raises(ParameterError, match="already holds Parquet files"):
        ArrivalSimulator(frame, lake, n_files=2, duration=10, mode="instant")
    sim = ArrivalSimulator(frame, lake, n_files=2, duration=10, mode="instant", overwrite=True)
    sim.start()
    assert len(arrived(lake)) == 2


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(n_files=0), ParameterError, "n_files must be a positive integer"),
        (dict(n_files=1000), ParameterError, "exceeds the number of records"),
        (dict(duration=-1), ParameterError, "duration must be a positive number"),
        (dict(speed=0), ParameterError, "speed must be a positive number"),
        (dict(profile="random"), ParameterError, "profile must be one of"),
        (dict(mode="fast"), ParameterError, "mode must be"),
        (dict(timestamp_column="x"), ParameterError, "already a column"),
        (dict(data=[1, 2, 3]), InputError, "data must be a pandas DataFrame"),
        (dict(data=pd.DataFrame({"x": []})), InputError, "no records"),
        (dict(lake_dir="s3://bucket/survey"), ParameterError,
         "lake_dir: the simulator writes a local or mounted directory, not s3://bucket/survey"),
    ],
)
def test_bad_simulator_input(frame, tmp_path, kwargs, exc, match):
    args = dict(data=frame, lake_dir=tmp_path / "lake")
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        ArrivalSimulator(**args)


def test_bad_reader_input(tmp_path):
    with pytest.raises(InputError, match="lake directory does not exist"):
        arrived(tmp_path / "missing")
    with pytest.raises(ParameterError, match="fraction must lie in"):
        wait_for_fraction(tmp_path, 1.5, total_rows=10)
    with pytest.raises(ParameterError, match="until must be a number"):
        arrived(tmp_path, until="noon")


def test_array_input_gets_column_names(tmp_path):
    sim = ArrivalSimulator(np.zeros((20, 3)), tmp_path / "lake", n_files=2, duration=5, mode="instant")
    sim.start()
    assert list(pd.read_parquet(tmp_path / "lake").columns) == ["x01", "x02", "x03"]


def test_survey_lake_refuses_a_file_changed_after_it_landed(frame, tmp_path):
    """A survey's file rewritten once it has landed (its records may have been read already) stops
    the run in one line, in a directory as on an object store (tests/test_incremental_object_store)."""
    from daskmicro.io.survey import SurveyLake

    lake = tmp_path / "lake"
    lake.mkdir()
    frame.iloc[:50].to_parquet(lake / "part-a.parquet", index=False)
    src = SurveyLake(lake, expected_rows=100)
    base = src.wait_base(0.5, time.time() + 5)
    assert [p.name for p in base] == ["part-a.parquet"] and src.rows(base) == 50
    frame.iloc[:60].to_parquet(lake / "part-a.parquet", index=False)   # other records, other size
    with pytest.raises(InputError, match=r"part-a\.parquet of the survey in .* changed after it landed"):
        src.wait_close(base, time.time() + 5)


#: Ways a survey's file may differ from the others (frame → frame), each telling its records apart
#: once published: a column missing there (published empty for them), one the others lack, a value
#: of another type (another precision, integers as text).
_SCHEMA_CHANGES = {
    "missing": (lambda f: f.drop(columns=["y"]), "'y' is missing"),
    "extra": (lambda f: f.assign(extra=1), "extra column 'extra'"),
    "float32": (lambda f: f.astype({"x": "float32"}), "'x' is float, not double"),
    "text": (lambda f: f.astype({"y": str}), "'y' is"),
    "float": (lambda f: f.astype({"y": "float64"}), "'y' is double, not int64"),
    "nullable": (lambda f: f.astype({"y": "float64"}).assign(y=lambda d: d["y"].where(d.index % 2 == 0)),
                 "'y' is double, not int64"),
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=st.sampled_from(sorted(_SCHEMA_CHANGES)), n_files=st.integers(2, 5), data=st.data())
def test_survey_lake_refuses_a_file_of_another_schema(frame, tmp_path_factory, change, n_files, data):
    """Whichever file of the survey differs from the others in its columns or their types, the run
    stops in one line naming the file and the column (never a value) as soon as it lands, before
    its records are read — whether it lands with the base records or after them."""
    from daskmicro.io.survey import SurveyLake

    lake = tmp_path_factory.mktemp("lake")
    odd = data.draw(st.integers(1, n_files - 1), label="the file that differs (not the first to land)")
    alter, words = _SCHEMA_CHANGES[change]
    step = len(frame) // n_files
    early = data.draw(st.booleans(), label="lands with the base records")
    for i in range(n_files):
        part = frame.iloc[i * step:(i + 1) * step].reset_index(drop=True)
        if i == odd and not early:
            continue
        (alter(part) if i == odd else part).to_parquet(lake / f"part-{i}.parquet", index=False)
    src = SurveyLake(lake, expected_rows=len(frame))
    if early:
        with pytest.raises(InputError) as err:
            src.wait_base(0.01, time.time() + 5)
    else:
        base = src.wait_base(0.01, time.time() + 5)
        alter(frame.iloc[odd * step:(odd + 1) * step].reset_index(drop=True)).to_parquet(
            lake / f"part-{odd}.parquet", index=False)
        with pytest.raises(InputError) as err:
            src.wait_close(base, time.time() + 5)
    text = str(err.value)
    assert "\n" not in text and words in text and "no release made" in text
    assert text.startswith(f"part-{odd}.parquet of the survey") and "of part-0.parquet" in text and "r1" not in text


def test_survey_lake_takes_the_columns_in_any_order(frame, tmp_path):
    """Files holding the same columns of the same types in another order are one survey."""
    from daskmicro.io.survey import SurveyLake

    lake = tmp_path / "lake"
    lake.mkdir()
    frame.iloc[:50].to_parquet(lake / "part-a.parquet", index=False)
    frame.iloc[50:, ::-1].to_parquet(lake / "part-b.parquet", index=False)
    (lake / "_closed.json").write_text("{}")
    src = SurveyLake(lake, expected_rows=100)
    assert src.rows(src.wait_base(1.0, time.time() + 5)) == 100
