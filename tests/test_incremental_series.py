"""Incremental surveys as a mode of the one run model: the command line, the release ledger and
the commit every run has, on a real LocalCluster and a real survey lake."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from daskmicro import anonymize, anonymize_incremental
from daskmicro.cli import main
from daskmicro.errors import ParameterError
from daskmicro.io.arrivals import ArrivalSimulator

QI = ["age", "income", "savings"]
K = 5


@pytest.fixture(scope="module")
def client(client):
    from daskmicro.graph.incremental import default_kernel, warm_up

    warm_up(client, "2mdav", default_kernel)
    return client


def _survey(n=400, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"age": rng.integers(18, 90, n).astype(np.float64),
                         "income": np.round(rng.lognormal(10, 0.6, n), 2),
                         "savings": np.round(rng.lognormal(8, 1.0, n), 2),
                         "region": rng.choice(["north", "south", "east"], n)})


def _closed_lake(df, path):
    """A survey lake whose records have all landed and which is closed (its marker written)."""
    sim = ArrivalSimulator(df, path, n_files=4, duration=0.4, speed=1.0).start()
    assert sim.join(30)
    return path


def _tuples(df) -> set:
    return set(map(tuple, df[QI].to_numpy()))


def _recorded_pieces(ledger) -> int:
    return len(list(ledger.rglob("records-*.parquet")))


def test_cli_incremental_run_is_committed_and_recorded(tmp_path, client):
    lake = _closed_lake(_survey(), tmp_path / "lake")
    ledger, out = tmp_path / "ledger", tmp_path / "release.parquet"
    rc = main(["anonymize", str(lake), str(out), "--qi", ",".join(QI), "--k", str(K), "--method", "incremental",
               "--data-ratio", "0.25", "--ledger", str(ledger), "--scheduler", client.scheduler.address, "--quiet"])
    assert rc == 0
    release = pd.read_parquet(out)
    assert len(release) == 400 and release.groupby(QI).size().min() >= K
    assert not any(c.startswith("__daskmicro") for c in release.columns)
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["method"] == "incremental" and report["series"]["recorded"] is True
    assert report["incremental"]["n_base"] + report["incremental"]["n_increment"] == 400
    assert _recorded_pieces(ledger) >= 1

    # the same people again through the incremental mode: refused, nothing written
    again = tmp_path / "again.parquet"
    rc = main(["anonymize", str(lake), str(again), "--qi", ",".join(QI), "--k", str(K), "--method", "incremental",
               "--data-ratio", "0.25", "--ledger", str(ledger), "--scheduler", client.scheduler.address, "--quiet"])
    assert rc != 0 and not again.exists() and not again.with_suffix(".report.json").exists()

    # an ordinary run of the same survey republishes what the survey's release published
    rel2, rep2 = anonymize(_survey(), QI, K, method="mdav", seed=1, ledger=str(ledger))
    assert _tuples(rel2) <= _tuples(release)
    assert rep2.series["republished"] == 400


def test_survey_release_then_late_records_give_nothing_back(tmp_path, client):
    """Differencing across modes: a survey's release, then the same records and more released by an
    ordinary run. One more record is refused (it would be the one row the two releases differ by);
    k more form cells of their own, and the difference of the totals is none of them."""
    df = _survey(seed=3)
    ledger = tmp_path / "ledger"
    frame = df.assign(ts=pd.Timestamp.now(tz="UTC").timestamp() - 60 + np.arange(len(df)) * 0.01)
    rel1, rep1 = anonymize_incremental(frame, QI, K, nu=0.2, time_column="ts", client=client, seed=2,
                                       ledger=str(ledger))
    assert rep1.series["recorded"] and rep1.verified
    new = _survey(n=K, seed=33)
    with pytest.raises(ParameterError, match=r"1 record\(s\) not published before in this series"):
        anonymize(pd.concat([df, new.iloc[:1]], ignore_index=True), QI, K, method="mdav", seed=2, ledger=str(ledger))
    rel2, rep2 = anonymize(pd.concat([df, new], ignore_index=True), QI, K, method="mdav", seed=2, ledger=str(ledger))
    assert rep2.series["republished"] == len(df) and rep2.series["new"] == K
    diff = rel2[QI].sum().to_numpy() - rel1[QI].sum().to_numpy()
    for record in new[QI].to_numpy():
        assert not np.allclose(diff, record, rtol=0, atol=1e-6)
    assert len(_tuples(rel2) - _tuples(rel1)) == 1   # the new records: one cell of their own


def test_a_survey_with_records_published_before_is_refused(tmp_path, client):
    df = _survey(seed=4)
    ledger = tmp_path / "ledger"
    anonymize(df, QI, K, method="mdav", seed=0, ledger=str(ledger))
    before = _recorded_pieces(ledger)
    frame = df.assign(ts=pd.Timestamp.now(tz="UTC").timestamp() - 60 + np.arange(len(df)) * 0.01)
    with pytest.raises(ParameterError, match="published before in this series"):
        anonymize_incremental(frame, QI, K, nu=0.2, time_column="ts", client=client, ledger=str(ledger))
    assert _recorded_pieces(ledger) == before   # the refused run left nothing in the ledger


def test_a_survey_of_records_published_before_with_revised_qis_is_refused(tmp_path, client):
    """Records whose QIs were all revised are new records to the series, and a survey holds only
    new ones: linked by the columns published as they are to their earlier rows, the two releases
    would intersect. Refused, nothing recorded; a survey of other people goes on."""
    rng = np.random.default_rng(7)
    df = _survey(seed=5).assign(amount=np.round(rng.uniform(0, 1e6, 400), 2))
    ledger = tmp_path / "ledger"
    anonymize(df, QI, K, method="mdav", seed=0, ledger=str(ledger))
    before = _recorded_pieces(ledger)
    revised = df.assign(age=df["age"] + rng.integers(1, 30, len(df)),
                        ts=pd.Timestamp.now(tz="UTC").timestamp() - 60 + np.arange(len(df)) * 0.01)
    with pytest.raises(ParameterError, match="share their row of the columns published as they are"):
        anonymize_incremental(revised, QI, K, nu=0.2, time_column="ts", client=client, ledger=str(ledger))
    assert _recorded_pieces(ledger) == before
    others = _survey(seed=6).assign(amount=np.round(rng.uniform(2e6, 3e6, 400), 2),
                                    ts=pd.Timestamp.now(tz="UTC").timestamp() - 60 + np.arange(400) * 0.01)
    anonymize_incremental(others, QI, K, nu=0.2, time_column="ts", client=client, ledger=str(ledger))
    assert _recorded_pieces(ledger) > before


@pytest.mark.parametrize("extra, message", [
    (["--data-ratio", "1.5"], "nu must"),
    (["--data-ratio", "0.2", "--strata", "region"], "options an incremental run does not take|strata"),
    (["--data-ratio", "0.2", "--K", "50"], "only to base_method 'partitioned'|'K'"),
    (["--close-at", "tomorrow"], "--close-at"),
])
def test_cli_bad_incremental_options(tmp_path, capsys, extra, message):
    lake = tmp_path / "lake"
    lake.mkdir()
    out = tmp_path / "out.parquet"
    rc = main(["anonymize", str(lake), str(out), "--qi", ",".join(QI), "--k", "5", "--method", "incremental",
               "--ledger", "off", *extra])
    assert rc != 0 and not out.exists()
    assert re.search(message, capsys.readouterr().err)


def test_incremental_options_need_method_incremental(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    _survey().to_parquet(src)
    rc = main(["anonymize", str(src), str(tmp_path / "out.parquet"), "--qi", ",".join(QI), "--k", "5",
               "--zeta", "4", "--ledger", "off", "--drop", "region"])
    assert rc != 0 and "apply only to method 'incremental'" in capsys.readouterr().err


def test_survey_columns_are_judged_as_published(tmp_path, client):
    """A survey's id column is refused when it would be published as it is, and accepted dropped."""
    df = _survey(seed=5).assign(record_id=np.arange(400))
    frame = df.assign(ts=pd.Timestamp.now(tz="UTC").timestamp() - 60 + np.arange(len(df)) * 0.01)
    with pytest.raises(Exception, match="record_id"):
        anonymize_incremental(frame, QI, K, nu=0.2, time_column="ts", client=client, ledger="off")
    release, report = anonymize_incremental(frame, QI, K, nu=0.2, time_column="ts", client=client, ledger="off",
                                            drop=["record_id"])
    assert "record_id" not in release.columns and report.verified


def test_a_frame_survey_closed_by_its_last_arrival_publishes_no_duration_from_the_close(tmp_path, client):
    """Without close_at a DataFrame survey closes at its last record's arrival time: a duration
    from the close, with the report's creation time, would give that time back."""
    from datetime import datetime

    frame = _survey(200).assign(ts=np.sort(np.random.default_rng(1).uniform(1e5, 1e5 + 50, 200)))
    out = tmp_path / "release.parquet"
    anonymize_incremental(frame, QI, K, nu=0.25, time_column="ts", client=client, ledger=tmp_path / "led",
                          keep=["region"], output=out)
    text = (tmp_path / "release.report.json").read_text()
    doc = json.loads(text)
    created = datetime.fromisoformat(doc["created"].replace("Z", "+00:00")).timestamp()
    last = frame["ts"].max()
    assert "close to release" not in doc["timings"]
    for value in map(float, re.findall(r"-?\d+\.\d+(?:e[+-]?\d+)?", text)):
        assert abs(created - value - last) > 5 and abs(value - last) > 1e-3
