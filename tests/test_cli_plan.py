"""``daskmicro plan``: the paper's worked example, JSON output, time-model calibration and bad input."""

import json
import subprocess
import sys

import pytest

from daskmicro.cli import main
from daskmicro.workflow.durations import format_duration, parse_duration
from daskmicro.errors import ParameterError


def _run(capsys, *argv):
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_paper_example(capsys):
    code, out, err = _run(capsys, "--zeta", "5", "--t-ref", "2h", "--deadline", "1h")
    assert code == 0 and err == ""
    assert "ν*    = 0.1459" in out and "14.6 %" in out
    assert "ν₋    = 0.1459" in out
    assert "Δτ*   = 0.9787 → release 2 min 33 s after the close" in out
    assert "ν_end = 0.0729" in out
    assert "survey 10 h, one-pass run 2 h" in out
    # The timeline ends one hour after the close (the deadline).
    assert "11 h  release ready" in out
    assert "release 1 h after the close, vs 2 h for one pass" in out


def test_relative_only(capsys):
    code, out, _ = _run(capsys, "--zeta", "0")
    assert code == 0
    assert "ν*    = 0.5000" in out and "Δτ*   = 0.5000" in out
    assert "t_ref" in out  # timeline in units of the one-pass time


def test_json_and_survey_duration(capsys):
    code, out, _ = _run(capsys, "--survey", "10h", "--t-ref", "2h", "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["zeta"] == pytest.approx(5)
    assert plan["nu_star"] == pytest.approx(0.1459, abs=1e-4)
    assert plan["finish_after_close"] == pytest.approx(153.26, abs=0.01)
    assert [e["event"] for e in plan["timeline"]][0] == "survey opens"
    assert plan["timeline"][-1]["event"] == "release ready"


def test_calibrated_time_model(capsys):
    # Runs timed at t = 1e-8·n²: β ≈ 2, and 100 000 records take 100 s.
    code, out, _ = _run(capsys, "--survey", "1000s", "--n", "100000", "--calibrate", "10000:1,20000:4,40000:16", "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["time_model"]["beta"] == pytest.approx(2)
    assert plan["t_ref"] == pytest.approx(100)
    assert plan["zeta"] == pytest.approx(10)


def test_beta_uses_numerical_optimum(capsys):
    code, out, _ = _run(capsys, "--zeta", "5", "--beta", "1")
    assert code == 0
    assert "numerical optimum" in out and "ν*    = 0.1667" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "one of the arguments --zeta --survey is required"),
        (["--zeta", "-1"], "argument --zeta: expected a number in [0, 1e+15]"),
        (["--zeta", "five"], "argument --zeta: expected a number"),
        (["--zeta", "5", "--survey", "1h"], "not allowed with argument"),
        (["--zeta", "5", "--t-ref", "2x"], "argument --t-ref: cannot read duration '2x'"),
        (["--zeta", "5", "--t-ref", "0"], "argument --t-ref: expected a duration between 0.001s and 1000000000000s"),
        (["--zeta", "5", "--deadline", "1h"], "--deadline needs the one-pass running time"),
        (["--survey", "10h"], "--survey needs the one-pass running time"),
        (["--zeta", "5", "--t-ref", "2h", "--deadline", "1m"], "--deadline 1 min cannot be met: the earliest release is 2 min 33 s after the close"),
        (["--zeta", "5", "--beta", "0"], "argument --beta: expected a number in [0.1, 10]"),
        (["--zeta", "5", "--calibrate", "1000:1"], "at least two N:SECONDS"),
        (["--zeta", "5", "--calibrate", "1000-1,2000:3"], "expected N:SECONDS pairs"),
        (["--zeta", "5", "--calibrate", "1000:1,2000:4", "--beta", "2"], "either --beta or --calibrate"),
        (["--zeta", "5", "--n", "1000"], "--n needs --calibrate"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("daskmicro: error: ")
    assert message in err


def test_help_and_subprocess():
    proc = subprocess.run([sys.executable, "-m", "daskmicro", "plan", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "--deadline" in proc.stdout and "examples:" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "daskmicro", "plan", "--zeta", "5"], capture_output=True, text=True)
    assert proc.returncode == 0 and "0.1459" in proc.stdout


def test_durations():
    assert parse_duration("90") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2.5h") == 9000
    assert parse_duration("1d 2h") == 93600
    assert parse_duration("1 h 30 min") == 5400
    for bad in ("", "h", "2x", "1h2", "-1h"):
        with pytest.raises(ParameterError, match="cannot read duration"):
            parse_duration(bad)
    assert format_duration(153.26) == "2 min 33 s"
    assert format_duration(7200) == "2 h"
    assert format_duration(4.2) == "4.2 s"
    assert format_duration(90061) == "1 d 1 h 1 min 1 s"


def test_the_duration_bounds_a_refusal_names_are_accepted_as_written(capsys):
    """The refusal said 'between 1 ms and 1e+12 s', two forms the duration reader refuses ('1ms', '1e+12s')."""
    import re

    assert main(["plan", "--zeta", "5", "--t-ref", "0"]) == 2
    lo, hi = re.search(r"between (\S+) and (\S+),", capsys.readouterr().err).groups()
    for bound in (lo, hi):
        assert main(["plan", "--zeta", "5", "--t-ref", bound]) == 0, capsys.readouterr().err
