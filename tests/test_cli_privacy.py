"""``daskmicro spec | assign | audit``: the locally trusted workflow end to end, and bad input."""

import json

import numpy as np
import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like

QI = ",".join(CENSUS_COLUMNS[:5])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    df = census_like(600, seed=3, with_extra_columns=True)
    df["p_respond"] = np.random.default_rng(4).uniform(0.5, 1.0, len(df))
    path = d / "model.parquet"
    df.to_parquet(path, index=False)
    spec = d / "spec.json"
    assert main(["spec", str(path), str(spec), "--qi", QI, "--k", "5", "--participation", "0.75",
                 "--max-cell-failure", "1e-6"]) == 0
    return path, df, spec


def _err(capsys):
    err = capsys.readouterr().err
    assert err.startswith("daskmicro: error:") and err.count("\n") == 1
    return err


def test_spec_assign_audit(model, tmp_path, capsys):
    path, df, spec_path = model
    spec = json.loads(spec_path.read_text())
    assert spec["anonymity"]["n_min"] == 20 and spec["model"]["design_cells"] == 30
    assert len(spec["cells"]) == 30 - spec["model"]["removed_cells"] >= 15
    again = tmp_path / "again.json"
    assert main(["spec", str(path), str(again), "--qi", QI, "--k", "5", "--participation", "0.75",
                 "--max-cell-failure", "1e-6"]) == 0
    printed = capsys.readouterr().out
    assert spec["checksum"]["value"] in printed and "n_min = 20" in printed  # deterministic: same spec
    assert json.loads(again.read_text()) == spec

    out = tmp_path / "assigned.csv"
    assert main(["assign", "--spec", str(spec_path), str(path), str(out), "--checksum", spec["checksum"]["value"]]) == 0
    assigned = pd.read_csv(out)
    assert len(assigned) == len(df) and list(assigned.columns) == list(df.columns) + ["cell"]
    assert assigned["cell"].value_counts().min() >= 20
    values = np.array([c["value"] for c in spec["cells"]])
    first = CENSUS_COLUMNS[0]
    assert assigned[first].to_numpy() == pytest.approx(values[assigned["cell"], 0])
    assert (assigned["record_id"] == df["record_id"]).all()

    # real participation: 75 % of the rows answer
    assigned["responded"] = np.random.default_rng(5).random(len(assigned)) < 0.75
    assigned.to_csv(out, index=False)
    report = tmp_path / "audit.json"
    assert main(["audit", str(out), "--spec", str(spec_path), "--participation-column", "responded",
                 "--report", str(report)]) == 0
    audit = json.loads(report.read_text())
    assert audit["ok"] and audit["n_failed_cells"] == 0 and audit["n_cells"] == len(spec["cells"])
    assert audit["n_active"] == int(assigned["responded"].sum())
    assert audit["expected_failed_cells"] == pytest.approx(sum(spec["model"]["cell_failure"]))


def test_audit_reports_failing_cells(tmp_path, capsys):
    rows = pd.DataFrame({"cell": [0] * 6 + [1] * 3 + [2] * 2 + [3] * 5, "took_part": [1] * 6 + [1, 1, 0] + [0, 0] + [1, 0, 1, 0, 0]})
    path = tmp_path / "a.csv"
    rows.to_csv(path, index=False)
    report = tmp_path / "r.json"
    assert main(["audit", str(path), "--k", "3", "--participation-column", "took_part", "--report", str(report)]) == 1
    audit = json.loads(report.read_text())
    assert audit["failed_cells"] == [{"cell": 1, "active": 2}, {"cell": 3, "active": 2}]
    assert (audit["unprotected_records"], audit["empty_cells"], audit["ok"]) == (4, 1, False)
    assert "FAILED in 2 cell(s), 4 unprotected" in capsys.readouterr().out
    # only the responses received: every row took part
    assert main(["audit", str(path), "--k", "2"]) == 0


def test_per_record_spec(model, tmp_path, capsys):
    path, df, _ = model
    spec = tmp_path / "per.json"
    assert main(["spec", str(path), str(spec), "--qi", QI, "--k", "4", "--participation-column", "p_respond",
                 "--max-cell-failure", "1e-4"]) == 0
    s = json.loads(spec.read_text())
    assert s["anonymity"]["participation"] == "per-record" and max(s["model"]["cell_failure"]) <= 1e-4
    # without a participation model: plain MDAV with k
    plain = tmp_path / "plain.json"
    assert main(["spec", str(path), str(plain), "--qi", QI, "--k", "4"]) == 0
    plain_spec = json.loads(plain.read_text())
    assert plain_spec["version"] == 2 and min(plain_spec["model"]["cell_sizes"]) >= 4
    # the retired rule, which published model records, is refused before anything is written
    old = tmp_path / "old.json"
    capsys.readouterr()
    assert main(["spec", str(path), str(old), "--qi", QI, "--k", "4", "--rule", "sequential-balls"]) == 2
    assert "published model records" in _err(capsys) and not old.exists()


def test_tampered_spec_refused(model, tmp_path, capsys):
    path, _, spec_path = model
    spec = json.loads(spec_path.read_text())
    spec["cells"][0]["value"][0] += 1000.0
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(spec))
    out = tmp_path / "out.parquet"
    capsys.readouterr()
    assert main(["assign", "--spec", str(forged), str(path), str(out)]) == 2
    assert "checksum" in _err(capsys)
    assert not out.exists() and list(tmp_path.iterdir()) == [forged]
    assert main(["assign", "--spec", str(spec_path), str(path), str(out), "--checksum", "ab" * 32]) == 2
    assert "expected" in _err(capsys) and not out.exists()
    assert main(["audit", str(path), "--spec", str(forged)]) == 2
    assert "checksum" in _err(capsys)


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--participation", "1.5", "--max-cell-failure", "1e-6"], "participation"),
        (["--participation", "0", "--max-cell-failure", "1e-6"], "participation"),
        (["--participation", "0.5", "--max-cell-failure", "1"], "max_cell_failure"),
        (["--participation", "0.5"], "max-cell-failure"),
        (["--participation", "0.5", "--max-cell-failure", "1e-6", "--k", "300"], "cannot be met"),
        (["--participation-column", "gap", "--max-cell-failure", "1e-6"], "missing"),
        (["--participation-column", "nope", "--max-cell-failure", "1e-6"], "nope"),
        (["--k", "1"], "k must be"),
        (["--k", "700"], "exceeds"),
        (["--participation", "0.5", "--participation-column", "p", "--max-cell-failure", "1e-6"], "not allowed"),
    ],
)
def test_spec_bad_input(model, tmp_path, capsys, extra, match):
    path, df, _ = model
    holey = df.copy()
    holey["gap"] = 0.8
    holey.loc[5, "gap"] = np.nan
    src = tmp_path / "in.parquet"
    holey.to_parquet(src, index=False)
    out = tmp_path / "s.json"
    args = ["spec", str(src), str(out), "--qi", QI, "--k", "5"] + extra
    capsys.readouterr()
    assert main(args) == 2
    assert match in _err(capsys)
    assert not out.exists()


def test_assign_and_audit_bad_input(model, tmp_path, capsys):
    path, df, spec_path = model
    out = tmp_path / "o.csv"
    capsys.readouterr()
    df.drop(columns=[CENSUS_COLUMNS[1]]).to_parquet(tmp_path / "short.parquet")
    assert main(["assign", "--spec", str(spec_path), str(tmp_path / "short.parquet"), str(out)]) == 2
    assert CENSUS_COLUMNS[1] in _err(capsys) and not out.exists()
    assert main(["assign", "--spec", str(spec_path), str(path), str(tmp_path / "o.txt")]) == 2
    assert ".csv or .parquet" in _err(capsys)
    assert main(["assign", "--spec", str(tmp_path / "none.json"), str(path), str(out)]) == 2
    assert "cannot read spec" in _err(capsys) and not out.exists()

    rows = tmp_path / "rows.csv"
    pd.DataFrame({"cell": [0, 1, 99], "who": [1, None, 1]}).to_csv(rows, index=False)
    assert main(["audit", str(rows), "--k", "2", "--spec", str(spec_path)]) == 2
    assert "exactly one" in _err(capsys)
    assert main(["audit", str(rows), "--spec", str(spec_path)]) == 2
    assert "integer cell ids in 0" in _err(capsys)
    assert main(["audit", str(rows), "--k", "2", "--participation-column", "who"]) == 2
    assert "missing" in _err(capsys)
    assert main(["audit", str(rows), "--k", "2", "--cell-column", "group"]) == 2
    assert "group" in _err(capsys)
    report = tmp_path / "r.json"
    report.write_text("{}")
    assert main(["audit", str(rows), "--k", "2", "--report", str(report)]) == 2
    assert "already exists" in _err(capsys) and report.read_text() == "{}"
