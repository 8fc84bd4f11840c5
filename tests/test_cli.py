"""The daskmicro command line: results, help, and bad input (exit 2, one line, nothing written)."""

import json
import re
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from daskmicro import __version__
from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, load_census
from daskmicro.privacy import verify_k_anonymity
from daskmicro.report.coarse import information_loss_text, rounded_information_loss

CENSUS_IL = {3: 5.69, 4: 7.49, 5: 9.09, 10: 14.16}
QI = ",".join(CENSUS_COLUMNS)


@pytest.fixture(scope="module")
def census_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("in") / "census.csv"
    load_census().to_csv(path, index=False)
    return path


@pytest.fixture
def small(tmp_path):
    """A small Parquet table with two QI columns and a pass-through column, and its frame."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(size=30), "y": rng.integers(0, 100, 30), "name": [f"n{i}" for i in range(30)]})
    path = tmp_path / "small.parquet"
    df.to_parquet(path, index=False)
    return path, df


@pytest.mark.parametrize("k", sorted(CENSUS_IL))
def test_census_in_process(census_csv, tmp_path, capsys, k):
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(census_csv), str(out), "--qi", QI, "--k", str(k), "--seed", "1"]) == 0
    report = json.loads((tmp_path / "release.report.json").read_text())
    # published rounded (the grid value whose interval holds it); exact in the private run record
    value, low, high = rounded_information_loss(CENSUS_IL[k])
    assert report["information_loss"] == value and report["information_loss_rounding"]["interval"] == [low, high]
    for key in ("n", "m", "k", "method", "cells", "min_cell_size", "information_loss", "seconds"):
        assert key in report
    assert (report["n"], report["m"], report["k"], report["method"]) == (1080, 13, k, "mdav")
    assert "seed" not in report and "input" not in report.get("paths", {})   # private: the run record has them
    assert report["min_cell_size"] >= k and report["verification"]["passed"]
    release = pd.read_parquet(out)
    assert len(release) == 1080
    assert verify_k_anonymity(release, list(CENSUS_COLUMNS), k)
    captured = capsys.readouterr()
    assert information_loss_text(CENSUS_IL[k]) in captured.out and str(out) in captured.out
    assert f"{CENSUS_IL[k]:.2f}" not in captured.out
    record = _run_record(captured.err)
    assert record["seed"] == 1 and record["paths"]["input"] == str(census_csv)
    assert record["report"]["information_loss"] == pytest.approx(CENSUS_IL[k], abs=0.01)
    assert oct(record_path(captured.err).stat().st_mode & 0o777) == oct(0o600)


def record_path(stderr: str):
    from pathlib import Path

    found = re.search(r"private run record .*: (\S+)\s*$", stderr, re.M)
    assert found, stderr
    return Path(found.group(1))


def _run_record(stderr: str) -> dict:
    return json.loads(record_path(stderr).read_text())


def test_census_subprocess(census_csv, tmp_path):
    out, report = tmp_path / "r.parquet", tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "daskmicro", "anonymize", str(census_csv), str(out),
         "--qi", QI, "--k", "10", "--report", str(report)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["information_loss"] == rounded_information_loss(CENSUS_IL[10])[0]
    assert "seed" not in data  # drawn, and kept in the private run record only
    record = _run_record(proc.stderr)
    assert isinstance(record["seed"], int)
    assert record["report"]["information_loss"] == pytest.approx(CENSUS_IL[10], abs=0.01)
    assert verify_k_anonymity(pd.read_parquet(out), list(CENSUS_COLUMNS), 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet", "run.json"]


def test_keep_row_id_and_passthrough(small, tmp_path):
    path, df = small
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(path), str(out), "--qi", "x,y", "--k", "3", "--seed", "5", "--keep-row-id",
                 "--keep", "name"]) == 0
    release = pd.read_parquet(out)
    assert list(release.columns) == ["x", "y", "name", "row_id"]
    assert (release["name"].to_numpy() == df["name"].to_numpy()[release["row_id"]]).all()
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["dtype_changes"] == {"y": {"from": "int64", "to": "float64"}}


def test_overwrite(small, tmp_path, capsys):
    path, _ = small
    out = tmp_path / "out.parquet"
    out.write_bytes(b"precious")
    argv = ["anonymize", str(path), str(out), "--qi", "x,y", "--k", "3", "--keep", "name"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("daskmicro: error:") and "\n" not in err and "already exists" in err and str(out) in err
    assert out.read_bytes() == b"precious" and not out.with_suffix(".report.json").exists()
    assert main(argv + ["--overwrite"]) == 0
    assert len(pd.read_parquet(out)) == 30


def _write_nan(tmp_path, df):
    df = df.astype({"x": float})
    df.loc[3, "x"] = np.nan
    df.to_parquet(tmp_path / "in.parquet", index=False)
    return tmp_path / "in.parquet"


def _write_inf(tmp_path, df):
    (tmp_path / "in.csv").write_text("x,y\n1,2\ninf,3\n4,5\n6,7\n")
    return tmp_path / "in.csv"


def _write_text_column(tmp_path, df):
    df.assign(y=[f"v{i}" for i in range(len(df))]).to_csv(tmp_path / "in.csv", index=False)
    return tmp_path / "in.csv"


def _write_empty(tmp_path, df):
    (tmp_path / "in.csv").write_text("x,y,name\n")
    return tmp_path / "in.csv"


def _write_garbage(tmp_path, df):
    (tmp_path / "in.parquet").write_bytes(os.urandom(200))
    return tmp_path / "in.parquet"


def _missing(tmp_path, df):
    return tmp_path / "does-not-exist.parquet"


def _same(tmp_path, df):
    df.to_parquet(tmp_path / "in.parquet", index=False)
    return tmp_path / "in.parquet"


BAD = {
    "nan": (_write_nan, ["--qi", "x,y", "--k", "3"], ["'x'", "NaN"]),
    "inf": (_write_inf, ["--qi", "x,y", "--k", "2"], ["'x'", "infinite"]),
    "non-numeric": (_write_text_column, ["--qi", "x,y", "--k", "3"], ["'y'", "not numeric"]),
    "unknown-column": (_same, ["--qi", "x,zz", "--k", "3"], ["'zz'", "unknown"]),
    "k<2": (_same, ["--qi", "x,y", "--k", "1"], ["k"]),
    "k>n": (_same, ["--qi", "x,y", "--k", "31"], ["k = 31", "n = 30"]),
    "k-not-int": (_same, ["--qi", "x,y", "--k", "ten"], ["--k"]),
    "empty": (_write_empty, ["--qi", "x,y", "--k", "3"], ["no rows", "in.csv"]),
    "unreadable": (_write_garbage, ["--qi", "x,y", "--k", "3"], ["cannot read", "in.parquet"]),
    "missing-file": (_missing, ["--qi", "x,y", "--k", "3"], ["not found", "does-not-exist.parquet"]),
    "energy-loss-without-pca": (_same, ["--qi", "x,y", "--k", "3", "--energy-loss", "0.1"], ["energy_loss"]),
    "missing-qi": (_same, ["--k", "3"], ["--qi"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(case, small, tmp_path, capsys):
    make, options, needles = BAD[case]
    _, df = small
    (tmp_path / "small.parquet").unlink()
    src = make(tmp_path, df)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "out.parquet"
    code = main(["anonymize", str(src), str(out), *options, "--keep", "name", "--report",
                 str(tmp_path / "report.json")])
    captured = capsys.readouterr()
    assert code == 2
    err = captured.err.rstrip("\n")
    assert "\n" not in err and err.startswith("daskmicro: error: ")
    for needle in needles:
        assert needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no report, no temporaries


def test_bad_input_subprocess(tmp_path):
    src = _write_empty(tmp_path, None)
    proc = subprocess.run(
        [sys.executable, "-m", "daskmicro", "anonymize", str(src), str(tmp_path / "o.parquet"), "--qi", "x", "--k", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("daskmicro: error:")
    assert [p.name for p in tmp_path.iterdir()] == ["in.csv"]


def test_output_must_be_parquet(small, tmp_path, capsys):
    path, _ = small
    assert main(["anonymize", str(path), str(tmp_path / "out.csv"), "--qi", "x", "--k", "2"]) == 2
    assert ".parquet" in capsys.readouterr().err


def test_help_and_version(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for word in ("anonymize", "demo", "demo-data", "examples"):
        assert word in text
    for command in ("anonymize", "demo", "demo-data"):
        assert main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "usage: daskmicro " + command in text and "example" in text
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out
    assert main([]) == 2


def test_demo(tmp_path, capsys, monkeypatch):
    out = tmp_path / "demo"
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("DASKMICRO_LEDGER", str(ledger))   # the user's ledger: the demo never records in it
    assert main(["demo", "--output", str(out), "--n", "3000", "--k", "4", "--seed", "2", "--partition-size", "1000"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["input.parquet", "release.parquet", "report.html", "report.json"]
    data, release = pd.read_parquet(out / "input.parquet"), pd.read_parquet(out / "release.parquet")
    report = json.loads((out / "report.json").read_text())
    assert len(data) == len(release) == 3000 and list(release.columns) == list(data.columns)
    assert report["k"] == 4 and "seed" not in report and report["verification"]["passed"]
    # it ran on a LocalCluster of two worker processes, with several partitions
    assert report["pipeline"]["workers"] == 2 and report["pipeline"]["partitions"] >= 2
    assert "row_id" not in release.columns and "utility" not in report
    # the risk rates are published rounded, without counts; the exact figures are the run record's
    assert set(report["risk"]["record_linkage"]) == {"rate"} and report["risk"]["sample_size"] == 3000
    captured = capsys.readouterr()
    assert "information loss" in captured.out
    assert not list(ledger.rglob("records-*.parquet"))
    record = _run_record(captured.err)
    assert record["report"]["utility"]["il1s"] > 0 and record["report"]["risk"]["record_linkage"]["rate"] >= 0
    assert record["report"]["information_loss"] != report["information_loss"]
    assert verify_k_anonymity(release, list(CENSUS_COLUMNS), 4)
    assert sorted(release["record_id"]) == sorted(data["record_id"])
    assert main(["demo", "--output", str(out), "--n", "3000", "--k", "4", "--seed", "2", "--partition-size", "1000"]) == 0  # re-runnable


@pytest.mark.parametrize("mine", ["report.html", "report.json", "input.parquet", "release.parquet"])
def test_demo_never_replaces_files_it_did_not_write(tmp_path, capsys, mine):
    """The demo writes input.parquet, release.parquet, report.json and report.html into --output and
    replaces those of an earlier demo there; a file of one of those names that no demo wrote (a page
    or a table of the user's in the folder given) is refused before any work, left as it was."""
    out = tmp_path / "proj"
    out.mkdir()
    (out / mine).write_text("the user's own file")
    (out / "notes.txt").write_text("kept")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["demo", "--output", str(out), "--n", "3000", "--k", "4", "--partition-size", "1000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did not write" in err and mine in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("args, names", [(["--n", "2", "--k", "3"], ("--k", "--n")), (["--k", "1"], ("--k",)),
                                         (["--partition-size", "1"], ("--partition-size",))])
def test_demo_refuses_bad_settings_before_generating_anything(tmp_path, capsys, args, names):
    out = tmp_path / "demo"
    assert main(["demo", "--output", str(out), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and all(n in captured.err for n in names)
    assert not out.exists()


@pytest.mark.parametrize("name, kind, columns", [("d.parquet", "census-like", 15), ("g.csv", "gaussian", 5)])
def test_demo_data(tmp_path, name, kind, columns):
    out = tmp_path / name
    assert main(["demo-data", str(out), "--n", "500", "--kind", kind, "--m", "5", "--seed", "3"]) == 0
    df = pd.read_parquet(out) if name.endswith(".parquet") else pd.read_csv(out)
    assert df.shape == (500, columns)
    assert main(["demo-data", str(out), "--n", "500", "--kind", kind]) == 2  # exists, no --overwrite
    assert main(["demo-data", str(tmp_path / "x.txt")]) == 2
