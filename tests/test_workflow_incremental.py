"""`daskmicro run` of an incremental-survey spec end to end: a simulated survey lake fills while
the workflow's base stage runs; the increment runs at the close; the release is committed."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.io.arrivals import ArrivalSimulator
from daskmicro.privacy import verify_k_anonymity

QI = ["AGI", "FEDTAX", "FICA", "INTVAL", "PEARNVAL", "STATETAX", "WSALVAL"]
#: The other census columns single the records out: published as they are, they would be refused.
OTHERS = [c for c in CENSUS_COLUMNS if c not in QI]


@pytest.fixture(scope="module")
def client(client):
    """The shared cluster with the stages' kernels loaded before a simulated survey opens (a run
    loads them too, but only once it starts: here the survey would already be running)."""
    from daskmicro.graph.incremental import default_kernel, warm_up

    warm_up(client, "2mdav", default_kernel)
    return client


def test_incremental_workflow_runs_as_written(tmp_path, client):
    df = census_like(1200, seed=5)
    lake_dir = tmp_path / "arrivals"
    spec = tmp_path / "survey.yaml"
    out = tmp_path / "release.parquet"
    spec.write_text(
        "version: 1\nname: survey\n"
        f"input:\n  path: {lake_dir}\n  drop: [{', '.join(OTHERS)}]\n"
        f"qi: [{', '.join(QI)}]\nk: 5\nmethod: incremental\n"
        "incremental:\n  close_at: 6s\n  nu: 0.2\n  deadline: 60s\n  increment: 2mdav\n"
        "parameters:\n  seed: 3\n"
        f"output:\n  path: {out}\n"
        f"series:\n  ledger: {tmp_path / 'ledger'}\n"
    )
    # the cluster is up before the survey opens: its start-up must not race the arrivals
    spec.write_text(spec.read_text() + f"cluster:\n  address: {client.scheduler.address}\n")
    with ArrivalSimulator(df, lake_dir, n_files=6, duration=4.0, speed=1.0):
        rc = main(["run", str(spec)])
    assert rc == 0
    release = pd.read_parquet(out)
    assert len(release) == len(df) and verify_k_anonymity(release, QI, 5)
    report = json.loads(out.with_suffix(".report.json").read_text())
    inc = report["incremental"]
    assert inc["nu"] == 0.2 and inc["n_base"] + inc["n_increment"] == len(df) and inc["n_increment"] > 0
    assert sorted(release.columns) == sorted(QI)
    # recorded in the spec's release ledger, as every release is
    assert report["series"]["recorded"] is True and list((tmp_path / "ledger").rglob("records-*.parquet"))


def test_incremental_workflow_refuses_identifying_columns(tmp_path, client):
    """A survey column published as it is that singles the records out is refused, as in every run."""
    df = census_like(600, seed=6)
    lake_dir = tmp_path / "arrivals"
    spec = tmp_path / "survey.yaml"
    out = tmp_path / "release.parquet"
    spec.write_text(
        "version: 1\nname: survey\n"
        f"input:\n  path: {lake_dir}\n"
        f"qi: [{', '.join(QI)}]\nk: 5\nmethod: incremental\n"
        "incremental:\n  close_at: 3s\n  nu: 0.2\n  deadline: 60s\n"
        f"output:\n  path: {out}\ncluster:\n  address: {client.scheduler.address}\n"
    )
    with ArrivalSimulator(df, lake_dir, n_files=3, duration=1.0, speed=1.0):
        rc = main(["run", str(spec)])
    assert rc != 0
    assert not out.exists() and not out.with_suffix(".report.json").exists()
