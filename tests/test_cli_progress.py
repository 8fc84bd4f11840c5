"""Progress of ``daskmicro anonymize``: a live line on a terminal (no silent gap), plain step lines
in a pipe (reading, grouping, writing + checking: the user's steps; Dask's stage names only with
``--verbose``), nothing with ``--quiet`` — run as a user would, in a real pseudo-terminal, on the
suite's shared LocalCluster of worker processes (``--scheduler``)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import re
import time

import numpy as np
import pandas as pd
import pytest

#: The planner's stage names a plain run never prints (the user's steps stand for them).
DASK_STAGES = ("pre-scan", "ingest", "top_level", "fan_out", "gather", "cells", "write + verify",
               "collect + verify", "kernel load", "kernel compile")

OPTIONS = ["--qi", "a,b,c", "--k", "5", "--method", "partitioned", "--partition-size", "400", "--K", "40",
           "--no-dask-report", "--seed", "1"]


@pytest.fixture(scope="module")
def ARGS(client):
    return [*OPTIONS, "--scheduler", client.scheduler.address]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("progress") / "in.parquet"
    pd.DataFrame(rng.normal(size=(3000, 3)), columns=["a", "b", "c"]).to_parquet(path)
    return path


def run_in_pty(argv, timeout=240, env=None, cwd=None) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; (exit status, everything it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "daskmicro", *argv], stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL, close_fds=True, env=env, cwd=cwd)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=30), out.decode("utf-8", "replace")


def test_a_terminal_shows_live_progress_and_every_stage(table, tmp_path):
    # a LocalCluster of its own: its start is a wait the live line must cover
    rc, out = run_in_pty(["anonymize", str(table), str(tmp_path / "out"), *OPTIONS, "--workers", "1"])
    assert rc == 0, out[-2000:]
    assert "working …" in out and "\r" in out          # the live line, rewritten in place
    for step in ("checking the input", "reading", "grouping", "writing + checking"):
        assert f"  {step}" in out
    for stage in DASK_STAGES:                          # Dask's stage names only with --verbose
        assert f"  {stage} " not in out
    assert "protected 3,000 records" in out


def test_verbose_shows_the_stages_of_dask(table, tmp_path, ARGS):
    rc, out = run_in_pty(["anonymize", str(table), str(tmp_path / "out"), *ARGS, "--verbose"])
    assert rc == 0, out[-2000:]
    for stage in ("pre-scan", "ingest", "gather"):
        assert f"  {stage}" in out
    assert "  write + verify" in out or "  collect + verify" in out
    assert "  cells" in out or "  fan_out" in out
    assert "layout:" in out and "microaggregation time:" in out and "protected 3,000 records" in out


def test_quiet_shows_no_progress(table, tmp_path, ARGS):
    rc, out = run_in_pty(["anonymize", str(table), str(tmp_path / "out"), *ARGS, "--quiet"])
    assert rc == 0, out[-2000:]
    assert "working" not in out and "reading" not in out and "pre-scan" not in out and "dashboard" not in out
    assert "protected 3,000 records" in out             # the summary still prints


def test_a_pipe_gets_plain_stage_lines(table, tmp_path, ARGS):
    proc = subprocess.run([sys.executable, "-m", "daskmicro", "anonymize", str(table), str(tmp_path / "out"), *ARGS],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "  reading" in proc.stderr and "  grouping" in proc.stderr
    assert "working" not in proc.stderr and "\r" not in proc.stderr and "dashboard" not in proc.stderr
    assert not any(f"  {stage} " in proc.stderr for stage in DASK_STAGES)


def _spec(tmp_path, table) -> str:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""name: progress
input: {{path: {table}}}
qi: [a, b, c]
k: 5
method: partitioned
parameters: {{partition_size: 400, K: 40, seed: 1}}
output: {{path: {tmp_path / 'release'}}}
""")
    return str(spec)


def test_a_workflow_run_shows_progress_like_anonymize(table, tmp_path):
    rc, out = run_in_pty(["run", _spec(tmp_path, table), "--workers", "1"])   # its own cluster: a wait
    assert rc == 0, out[-2000:]
    assert "working …" in out and "\r" in out
    for step in ("reading", "grouping", "writing + checking", "committing"):
        assert f"  {step}" in out
    assert not any(f"  {stage} " in out for stage in DASK_STAGES) and "dashboard" not in out
    assert "protected 3,000 records" in out and "run key:" in out


def test_a_quiet_workflow_run_shows_none(table, tmp_path, client):
    rc, out = run_in_pty(["run", _spec(tmp_path, table), "--quiet", "--scheduler", client.scheduler.address])
    assert rc == 0, out[-2000:]
    assert "working" not in out and "reading" not in out and "pre-scan" not in out and "dashboard" not in out
    assert "protected 3,000 records" in out


def test_the_compile_line_counts_the_marked_units(tmp_path):
    """The units a compile has done, as the live line counts them from the marks the compiling
    processes leave (here the calling process, as an in-process run's compile); a run that only
    loads or reuses its kernels shows no compile line."""
    import io

    from daskmicro.cli.common import StageProgress
    from daskmicro.graph.local import InProcess
    from daskmicro.runtime import compile_progress as cp
    from daskmicro.runtime.warmup import units, warm, warm_workers

    warm(["mdav"])                                   # compiled or loaded here before: nothing compiles below
    marks = tmp_path / "marks"
    marks.mkdir()
    warm(["mdav"], marks=str(marks))
    n = len(units(["mdav"]))
    assert len(list(marks.glob("*.done"))) == n and cp.status_text(marks, n, 3.0) is None
    (marks / cp.COMPILING).touch()
    assert cp.status_text(marks, n, 12.4) == f"compiling the kernels once: {n} of {n} units (12 s)"
    stream = io.StringIO()
    with StageProgress(stream=stream, live=True, after=0.0) as progress:
        progress.status(lambda s: cp.status_text(marks, n, s))
        time.sleep(0.5)
        progress.status(None)                        # its last line drawn once more as it ends
        assert re.search(rf"compiling the kernels once: {n} of {n} units \(\d+ s\)$", stream.getvalue())
        warm_workers(InProcess(), ["mdav"], progress)
    assert stream.getvalue().count("compiling") == stream.getvalue().count(f"{n} of {n} units")
