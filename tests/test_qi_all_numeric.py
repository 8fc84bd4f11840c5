"""``qi="all-numeric"`` with ``qi_except``: every numeric column but those named, in the API, the CLI
and a workflow spec; excepted names that are not columns, identifier-named numeric columns and
``qi_except`` without all-numeric are refused in one line, before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

import daskmicro
from daskmicro.errors import ParameterError

from test_adversarial import listing, run_cli


def _frame(n=600, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "income": rng.lognormal(10, 1, n), "age": rng.integers(18, 90, n), "weight": rng.random(n) + 0.5,
        "region": rng.choice(["n", "s", "e"], n), "household_id": np.arange(n) + 1000,
        "flag": rng.random(n) < 0.5,
    })


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    path = tmp_path_factory.mktemp("allnum") / "survey.parquet"
    _frame().to_parquet(path, index=False)
    return path


def refused(argv, folder, capsys) -> str:
    before = listing(folder)
    rc, _, err = run_cli(argv, capsys)
    assert rc == 2, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("daskmicro: error:")]
    assert len(lines) == 1, err
    assert listing(folder) == before, "a refused run wrote something"
    return lines[0]


def test_api_takes_every_numeric_column_but_those_excepted(client):
    df = _frame()
    release, report = daskmicro.anonymize(df, qi="all-numeric", qi_except=["household_id"], k=4, seed=0,
                                          client=client, drop=["household_id"])
    # numeric: income, age, weight (bool, text and the excepted/dropped id are not QIs), in the input's order
    assert report.qi == ["income", "age", "weight"] and report.to_dict()["options"]["qi_except"] == ["household_id"]
    assert list(release.columns) == ["income", "age", "weight", "region", "flag"]
    assert release.groupby(["income", "age", "weight"]).size().min() >= 4
    # a kept or stratum column is never a QI either
    _, report = daskmicro.anonymize(df, qi="all-numeric", qi_except=["household_id", "weight"], k=4, seed=0,
                                    client=client, keep=["household_id"], strata=["region"])
    assert report.qi == ["income", "age"]


def test_api_refusals():
    df = _frame(60)
    with pytest.raises(ParameterError, match=r"named like an identifier: 'household_id'.*qi_except"):
        daskmicro.anonymize(df, qi="all-numeric", k=4)
    with pytest.raises(ParameterError, match=r"unknown qi_except \(--qi-except\) column\(s\).*'household-id' → "
                                             r"'household_id'"):
        daskmicro.anonymize(df, qi="all-numeric", qi_except=["household-id"], k=4)
    with pytest.raises(ParameterError, match="qi_except .* applies only with qi 'all-numeric'"):
        daskmicro.anonymize(df, qi=["income"], qi_except=["age"], k=4)
    with pytest.raises(ParameterError, match="no numeric column left"):
        daskmicro.anonymize(df, qi="all-numeric", qi_except=["household_id", "income", "age", "weight"], k=4,
                            drop=["household_id"])


def test_cli_all_numeric(survey, tmp_path, capsys, client):
    out = tmp_path / "release.parquet"
    rc, stdout, err = run_cli(["anonymize", survey, out, "--qi", "all-numeric", "--qi-except", "household_id",
                               "--drop", "household_id", "--k", "4", "--risk", "--scheduler",
                               client.scheduler.address], capsys)
    assert rc == 0, err
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["qi"] == ["income", "age", "weight"] and "on 3 QI columns" in stdout
    assert report["risk"]["sample_size"] == 600


def test_cli_refusals(survey, tmp_path, capsys):
    base = ["anonymize", survey, tmp_path / "o.parquet", "--k", "4"]
    line = refused(base + ["--qi", "all-numeric", "--qi-except", "Household_ID"], tmp_path, capsys)
    assert "unknown qi_except (--qi-except) column(s), not in the input: 'Household_ID'" in line
    assert "did you mean 'Household_ID' → 'household_id'?" in line
    line = refused(base + ["--qi", "all-numeric"], tmp_path, capsys)
    assert "named like an identifier: 'household_id'" in line
    line = refused(base + ["--qi", "income", "--qi-except", "age"], tmp_path, capsys)
    assert "applies only with qi 'all-numeric'" in line


def test_spec_all_numeric(survey, tmp_path, capsys, client):
    spec = {"name": "allnum", "input": {"path": str(survey), "drop": ["household_id"]}, "qi": "all-numeric",
            "qi_except": ["household_id", "weight"], "k": 4, "output": {"path": str(tmp_path / "spec.parquet")}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    rc, _, err = run_cli(["run", path, "--scheduler", client.scheduler.address, "--quiet"], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "spec.report.json").read_text())["qi"] == ["income", "age"]
    spec["qi_except"] = ["household_id", "wieght"]
    spec["output"]["path"] = str(tmp_path / "spec2.parquet")
    path.write_text(yaml.safe_dump(spec))
    line = refused(["run", path, "--scheduler", client.scheduler.address, "--quiet"], tmp_path, capsys)
    assert "unknown qi_except (--qi-except) column(s), not in the input: 'wieght'" in line
