"""The example specs in workflows/ work as written against data from `daskmicro demo-data`."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.privacy import verify_k_anonymity
from daskmicro.workflow import load_workflow

from _oracles import binom_failure, binom_n_min

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"
EXAMPLES = sorted(p.name for p in WORKFLOWS.glob("*.yaml"))


@pytest.fixture()
def copy(tmp_path):
    for name in EXAMPLES:
        shutil.copy(WORKFLOWS / name, tmp_path / name)
    (tmp_path / "data").mkdir()
    return tmp_path


def test_every_example_is_a_valid_spec():
    assert EXAMPLES == ["census-demo.yaml", "incremental-survey.yaml", "nightly-lake.yaml", "object-store-lake.yaml",
                        "probabilistic-survey.yaml"]
    for name in EXAMPLES:
        spec = load_workflow(WORKFLOWS / name)
        assert spec.name == name.removesuffix(".yaml")


def test_census_demo_runs_as_written(copy, capsys):
    assert main(["demo-data", str(copy / "data/census_like.parquet"), "--n", "1000"]) == 0
    assert main(["run", str(copy / "census-demo.yaml"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "protected 1,000 records" in out and "verification passed" in out
    release = pd.read_parquet(copy / "data/census-demo-release.parquet")
    spec = load_workflow(copy / "census-demo.yaml")
    assert len(release) == 1000 and verify_k_anonymity(release, spec.data["qi"], 5)
    report = json.loads((copy / "data/census-demo-release.report.json").read_text())
    assert report["workflow"]["key"] == spec.key(None) and report["k"] == 5


def test_nightly_lake_processes_the_partition_of_the_day_before(copy, capsys):
    day = copy / "data/lake/date=2026-11-21"
    day.mkdir(parents=True)
    assert main(["demo-data", str(day / "part-0.parquet"), "--n", "1500", "--kind", "gaussian"]) == 0
    (copy / "data/releases").mkdir()
    args = ["run", str(copy / "nightly-lake.yaml"), "--local", "--workers", "1", "--slot", "2026-11-22T02:00:00Z"]
    assert main(args) == 0
    out = copy / "data/releases/date=2026-11-21"
    release = pd.read_parquet(out)
    assert len(release) == 1500 and verify_k_anonymity(release, [f"x{j:02d}" for j in range(1, 14)], 10)
    assert json.loads((out / "_report.json").read_text())["workflow"]["slot"] == "2026-11-22T02:00:00+00:00"
    capsys.readouterr()
    assert main(args) == 2                                  # that night's release exists: not replaced
    assert "output already exists" in capsys.readouterr().err
    assert main(args[:-1] + ["2026-11-23T02:00:00Z"]) == 2  # no partition for 2026-11-22
    assert "input not found" in capsys.readouterr().err and not (copy / "data/releases/date=2026-11-22").exists()


def test_probabilistic_survey_runs_as_written(copy, capsys):
    assert main(["demo-data", str(copy / "data/census_like.parquet"), "--n", "600"]) == 0
    assert main(["run", str(copy / "probabilistic-survey.yaml"), "--workers", "1"]) == 0, capsys.readouterr().err
    release = pd.read_parquet(copy / "data/probabilistic-release")
    spec = load_workflow(copy / "probabilistic-survey.yaml")
    # every published (region, QI) tuple is a cell of at least n_min records for π = 0.8, p̄ = 0.05
    sizes = release.groupby(["region", *spec.data["qi"]], observed=True).size()
    assert len(release) == 600 and int(sizes.min()) >= binom_n_min(5, 0.8, 0.05) > 5
    assert max(binom_failure(5, 0.8, int(n)) for n in sizes.unique()) <= 0.05


def _readme_commands() -> list:
    """The command lines of the first bash block of workflows/README.md, comments removed."""
    text = (WORKFLOWS / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("   #", 1)[0].split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_commands_run_as_written(tmp_path, monkeypatch, capsys):
    """From a fresh copy (no workflows/data/): every command of the README that runs here, as
    written, with a smaller --n and one worker; the cluster commands (submit, status, cancel) name
    the compose scheduler and are left out."""
    shutil.copytree(WORKFLOWS, tmp_path / "workflows", ignore=shutil.ignore_patterns("data"))
    monkeypatch.chdir(tmp_path)
    ran = []
    for line in _readme_commands():
        args = shlex.split(line)
        if args[0] == "mkdir":
            for d in args[1:]:
                if d != "-p":
                    Path(d).mkdir(parents=True, exist_ok=True)
            continue
        assert args[0] == "daskmicro", line
        args = args[1:]
        if args[0] in ("submit", "status", "cancel"):
            continue
        if "--n" in args:
            args[args.index("--n") + 1] = "800"
        if args[0] == "run":
            args += ["--workers", "1"]
        assert main(args) == 0, (line, capsys.readouterr().err)
        ran.append(args[0])
    assert ran == ["demo-data", "run", "run", "demo-data", "run"]
    assert len(pd.read_parquet("workflows/data/census-demo-release.parquet")) == 800
    assert len(pd.read_parquet("workflows/data/probabilistic-release")) == 800
    assert len(pd.read_parquet("workflows/data/releases/date=2026-11-21")) == 800


def test_run_before_the_data_says_the_input_is_missing_first(tmp_path, capsys):
    """A spec run before its data exists stops at the missing input, before any cluster starts
    (no dashboard line) and without writing anything."""
    shutil.copy(WORKFLOWS / "census-demo.yaml", tmp_path / "census-demo.yaml")
    assert main(["run", str(tmp_path / "census-demo.yaml"), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "input not found" in err and "census_like.parquet" in err and "dashboard" not in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["census-demo.yaml"]


def test_demo_data_creates_the_directories_of_its_output(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "data.parquet"
    assert main(["demo-data", str(out), "--n", "50"]) == 0
    assert len(pd.read_parquet(out)) == 50 and sorted(p.name for p in out.parent.iterdir()) == ["data.parquet"]
    (tmp_path / "file").write_text("x")
    assert main(["demo-data", str(tmp_path / "file" / "sub" / "d.parquet"), "--n", "50"]) == 2
    assert "cannot be created" in capsys.readouterr().err and (tmp_path / "file").read_text() == "x"
    assert main(["demo-data", str(tmp_path / "c" / "d" / "lake"), "--n", "5", "--files", "9"]) == 2
    assert not (tmp_path / "c").exists()   # refused: the directories are not made
