"""Progress of ``daskmicro anonymize``: a live line on a terminal (no silent gap), plain stage lines
in a pipe, nothing with ``--quiet`` — run as a user would, in a real pseudo-terminal, on the
suite's shared LocalCluster of worker processes (``--scheduler``)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

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


def _run_in_pty(argv, timeout=240) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; (exit status, everything it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "daskmicro", *argv], stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL, close_fds=True)
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
    rc, out = _run_in_pty(["anonymize", str(table), str(tmp_path / "out"), *OPTIONS, "--workers", "1"])
    assert rc == 0, out[-2000:]
    assert "working …" in out and "\r" in out          # the live line, rewritten in place
    for stage in ("pre-scan", "write + verify"):
        assert f"  {stage}" in out
    assert "  cells" in out or ("  fan_out" in out and "  gather" in out)
    assert "anonymized 3,000 records" in out


def test_quiet_shows_no_progress(table, tmp_path, ARGS):
    rc, out = _run_in_pty(["anonymize", str(table), str(tmp_path / "out"), *ARGS, "--quiet"])
    assert rc == 0, out[-2000:]
    assert "working" not in out and "pre-scan" not in out and "dashboard" not in out
    assert "anonymized 3,000 records" in out            # the summary still prints


def test_a_pipe_gets_plain_stage_lines(table, tmp_path, ARGS):
    proc = subprocess.run([sys.executable, "-m", "daskmicro", "anonymize", str(table), str(tmp_path / "out"), *ARGS],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "  pre-scan" in proc.stderr and "working" not in proc.stderr and "\r" not in proc.stderr


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
    rc, out = _run_in_pty(["run", _spec(tmp_path, table), "--workers", "1"])   # its own cluster: a wait
    assert rc == 0, out[-2000:]
    assert "working …" in out and "\r" in out
    for stage in ("pre-scan", "write + verify", "commit"):
        assert f"  {stage}" in out
    # the cells as one task per top cell, or as the pipeline's stages (which one depends on the workers)
    assert "  cells" in out or ("  fan_out" in out and "  gather" in out)


def test_a_quiet_workflow_run_shows_none(table, tmp_path, client):
    rc, out = _run_in_pty(["run", _spec(tmp_path, table), "--quiet", "--scheduler", client.scheduler.address])
    assert rc == 0, out[-2000:]
    assert "working" not in out and "pre-scan" not in out and "dashboard" not in out
    assert "committed 3,000 rows" in out
