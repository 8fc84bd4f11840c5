"""Faults in lake runs: a worker process killed during the write, the driver killed during the write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
from distributed import Client

from daskmicro import cli as lake_cli
from daskmicro.graph import executor
from daskmicro.cli import build_parser
from daskmicro.io.commit import SUCCESS
from daskmicro.runtime.cluster import local_cluster

ROOT = Path(__file__).resolve().parents[1]


def _lake(root: Path, n=4000, files=4) -> Path:
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n), "s": np.arange(n) % 2})
    root.mkdir()
    for i, idx in enumerate(np.array_split(np.arange(n), files)):
        df.iloc[idx].to_parquet(root / f"f{i}.parquet", index=False)
    return root


OPTS = ["--qi", "x,y", "--k", "5", "--strata", "s", "--seed", "3", "--partition-size", "500", "--K", "100",
        "--rows-per-file", "1000"]


def _bytes(out: Path) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("part-*.parquet")}


def test_worker_killed_during_the_write_stage_gives_the_same_release(tmp_path, monkeypatch):
    monkeypatch.setattr(executor, "SMALL_GROUP_ROWS", 100)   # both strata through the pipeline
    src = _lake(tmp_path / "in")
    out = tmp_path / "out"
    # a LocalCluster of two single-threaded worker processes of its own (one is killed), set up as the
    # command line sets up its own: its workers forked from daskmicro's fork server, not spawned
    with local_cluster(2, silence_logs=50) as lc, Client(lc) as c:
        args = build_parser().parse_args(["anonymize", str(src), str(tmp_path / "ref"), *OPTS])
        assert lake_cli.run_anonymize(args, client=c) == 0
        pids = list(c.run(os.getpid).values())
        finished = threading.Event()
        seen = {}

        def killer():  # kill one worker process once the run is writing (its staging directory exists)
            deadline = time.monotonic() + 120
            while not list(tmp_path.glob(".out.tmp-*")) and not finished.is_set() and time.monotonic() < deadline:
                time.sleep(0.005)
            seen["staging"] = bool(list(tmp_path.glob(".out.tmp-*")))
            os.kill(pids[0], signal.SIGKILL)
            seen["killed"] = pids[0]
            # looked at after the kill: a run not finished and not committed now was not at the kill
            seen["finished"] = finished.is_set() or out.exists()

        th = threading.Thread(target=killer, daemon=True)
        args = build_parser().parse_args(["anonymize", str(src), str(out), *OPTS])
        th.start()
        try:
            assert lake_cli.run_anonymize(args, client=c) == 0
        finally:
            finished.set()
            th.join(timeout=30)
    # the worker was killed while the run was writing: staging open before it, nothing committed after it
    assert seen.get("killed") == pids[0]
    assert seen["staging"] and not seen["finished"]
    assert _bytes(out) == _bytes(tmp_path / "ref")
    assert (out / SUCCESS).exists()


def test_driver_killed_during_write_commits_nothing_and_rerun_succeeds(tmp_path, client, capsys):
    src = _lake(tmp_path / "in")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "daskmicro", "anonymize", str(src), str(out), *OPTS, "--workers", "1"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(tmp_path.glob(".out.tmp-*")):
            assert proc.poll() is None, "the run ended before its staging directory appeared"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)   # the driver and its LocalCluster, mid-write
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not out.exists()                      # nothing committed: no target, no _SUCCESS
    # the rerun (what the killed run left on disk is all it shares with it): in this process, on the
    # suite's shared cluster
    rerun = lake_cli.main(["anonymize", str(src), str(out), *OPTS, "--scheduler", client.scheduler.address])
    assert rerun == 0, capsys.readouterr().err
    assert (out / SUCCESS).exists() and len(pd.read_parquet(out)) == 4000
