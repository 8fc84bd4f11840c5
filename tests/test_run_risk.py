"""Disclosure risk of a run (``risk``): API, CLI and workflow spec on the shared LocalCluster, real
Parquet files; the published report holds rounded rates only, a run without it has no risk section,
and what cannot be measured is refused before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

import daskmicro
from daskmicro.datasets import census_like
from daskmicro.privacy.risk import disclosure_risk
from daskmicro.privacy.risk_sample import draw

from test_adversarial import listing, run_cli


def assert_refused(rc, err, folder, before: set):
    assert rc == 2, err
    assert len([ln for ln in err.strip().splitlines() if ln.startswith("daskmicro: error:")]) == 1, err
    assert listing(folder) == before, "a refused run wrote something"


QI = ["AGI", "FEDTAX", "FICA", "INTVAL", "PEARNVAL", "STATETAX", "WSALVAL"]
DROP = "AFNLWGT,EMCONTRB,PTOTVAL,TAXINC,POTHVAL,ERNVAL"
N = 2000


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    path = tmp_path_factory.mktemp("risk") / "survey.parquet"
    census_like(N, seed=4, with_extra_columns=True).to_parquet(path, index=False)
    return path


def _published_risk_only_rates(risk: dict) -> None:
    """The published risk section: rates rounded to whole percentage points, the sample size and p;
    no count of records linked or disclosed, no value, no row id."""
    assert set(risk) == {"record_linkage", "interval_disclosure", "sample_size", "records", "rounding"}
    assert set(risk["record_linkage"]) == {"rate"}
    assert set(risk["interval_disclosure"]) == {"rate", "p", "max_outside"}
    for part in ("record_linkage", "interval_disclosure"):
        rate = risk[part]["rate"]
        assert 0.0 <= rate <= 1.0 and round(rate, 2) == rate


def test_api_risk_matches_the_measure_on_every_record(client):
    """In memory, on the cluster, split into strata by the pipeline: the run's rates are exactly those of
    :func:`disclosure_risk` on the row-aligned release (every record tried below the sample size)."""
    df = census_like(N, seed=5, with_extra_columns=True)
    release, report = daskmicro.anonymize(df, qi=QI, k=5, seed=1, keep_row_id=True, risk=True, client=client,
                                          method="partitioned", K=100, partition_size=500,
                                          drop=DROP.split(","), keep=["record_id"])
    Y = release.sort_values("row_id")[QI].to_numpy(float)
    exact = disclosure_risk(df[QI].to_numpy(float), Y, sample_size=None)
    assert report.risk["record_linkage"]["n_linked"] == exact["record_linkage"]["n_linked"]
    assert report.risk["interval_disclosure"]["n_disclosed"] == exact["interval_disclosure"]["n_disclosed"]
    assert report.risk["sample"]["records"] == N
    published = report.to_dict()["risk"]
    _published_risk_only_rates(published)
    assert published["sample_size"] == N
    summary = report.summary()
    assert "disclosure risk (2,000 records tried" in summary and "Record linkage: for about" in summary
    assert "Interval disclosure: for" in summary and "Lower is safer" in summary


def test_no_risk_section_unless_asked(client):
    df = census_like(600, seed=6)
    _, report = daskmicro.anonymize(df, qi=list(df.columns), k=4, seed=0, client=client)
    assert report.risk is None and "risk" not in report.to_dict() and "disclosure risk" not in report.summary()


def test_sample_is_bounded_and_seeded():
    a, b = draw(50_000, 1_000, 7), draw(50_000, 1_000, 7)
    assert len(a) == 1_000 and (a == b).all() and (np.diff(a) > 0).all() and a.max() < 50_000
    assert len(draw(300, 1_000, 7)) == 300


def test_cli_risk_on_a_directory_release(survey, tmp_path, capsys, client):
    out = tmp_path / "release"
    rc, stdout, err = run_cli(["anonymize", survey, out, "--qi", ",".join(QI), "--k", "5", "--seed", "3",
                               "--drop", DROP, "--keep", "record_id", "--strata", "region", "--risk",
                               "--scheduler", client.scheduler.address], capsys)
    assert rc == 0, err
    report = json.loads((out / "_report.json").read_text())
    _published_risk_only_rates(report["risk"])
    assert report["risk"]["sample_size"] == N and report["options"]["risk"] is True
    text = json.dumps(report["risk"])
    assert "record_id" not in text and "row" not in text.replace("rounding", "")
    assert "disclosure risk (2,000 records tried" in stdout and "Record linkage: for" in stdout
    assert "Measured on all 2,000 records" in stdout


def test_cli_without_risk_has_no_section(survey, tmp_path, capsys, client):
    out = tmp_path / "plain.parquet"
    rc, stdout, err = run_cli(["anonymize", survey, out, "--qi", ",".join(QI), "--k", "5", "--drop", DROP,
                               "--keep", "record_id", "--scheduler", client.scheduler.address], capsys)
    assert rc == 0, err
    assert "risk" not in json.loads(out.with_suffix(".report.json").read_text())
    assert "disclosure risk" not in stdout


def test_spec_risk(survey, tmp_path, capsys, client):
    spec = {"name": "risk", "input": {"path": str(survey), "drop": DROP.split(","), "keep": ["record_id"]},
            "qi": QI, "k": 5, "output": {"path": str(tmp_path / "spec.parquet")}, "report": {"risk": True}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    rc, stdout, err = run_cli(["run", path, "--scheduler", client.scheduler.address, "--quiet"], capsys)
    assert rc == 0, err
    _published_risk_only_rates(json.loads((tmp_path / "spec.report.json").read_text())["risk"])
    assert "Record linkage: for" in stdout and "Interval disclosure: for" in stdout


def test_cli_risk_refused_for_the_incremental_method(survey, tmp_path, capsys):
    before = listing(tmp_path)
    rc, _, err = run_cli(["anonymize", survey, tmp_path / "o.parquet", "--qi", ",".join(QI), "--k", "5", "--risk",
                          "--method", "incremental"], capsys)
    assert_refused(rc, err, tmp_path, before)
    assert "disclosure risk (no row id pairs a released row" in err and "'risk'" in err


def test_bad_risk_values_are_refused(survey, tmp_path, capsys):
    with pytest.raises(daskmicro.errors.ParameterError, match="risk"):
        daskmicro.anonymize(pd.DataFrame({"a": np.arange(10.0)}), qi=["a"], k=2, risk="yes please")
    spec = {"name": "risk", "input": {"path": str(survey)}, "qi": QI, "k": 5,
            "output": {"path": str(tmp_path / "s.parquet")}, "report": {"risk": "maybe"}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    before = listing(tmp_path)
    rc, _, err = run_cli(["run", path], capsys)
    assert_refused(rc, err, tmp_path, before)
    assert "report.risk" in err
    spec.update(method="incremental", incremental={"close_at": "1s", "nu": 0.1}, report={"risk": True})
    path.write_text(yaml.safe_dump(spec))
    before = listing(tmp_path)
    rc, _, err = run_cli(["run", path], capsys)
    assert_refused(rc, err, tmp_path, before)
    assert "report.risk: method incremental" in err
