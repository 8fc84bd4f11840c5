"""Interrupted lake runs leave nothing, stale staging folders are swept, files hold exactly
``--rows-per-file`` rows.  Real processes, real signals, real Parquet files."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from daskmicro.cli import main
from daskmicro.io import commit


def make_lake(root: Path, files: int = 4, rows: int = 3000, seed: int = 0) -> None:
    root.mkdir()
    rng = np.random.default_rng(seed)
    for i in range(files):
        n = rows + 17 * i
        pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n),
                      "s": rng.integers(0, 3, size=n)}).to_parquet(root / f"p{i}.parquet")


def digest(folder: Path, pattern: str = "*") -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob(pattern) if p.is_file()):
        h.update(f.read_bytes())
    return h.hexdigest()


def leftovers(parent: Path, name: str) -> list:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


def test_sigint_while_parts_are_written_leaves_nothing(tmp_path):
    lake = tmp_path / "lake"
    make_lake(lake, files=6, rows=10000)
    before = digest(lake)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "daskmicro", "anonymize", str(lake), str(out), "--qi", "x,y", "--k", "5",
           "--rows-per-file", "40", "--workers", "2", "--no-dask-report", "--seed", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    caught = False
    while time.monotonic() < deadline and proc.poll() is None:
        staging = [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")]
        if staging and any(staging[0].glob("part-*.parquet")):
            proc.send_signal(signal.SIGINT)
            caught = True
            break
        time.sleep(0.01)
    _, err = proc.communicate(timeout=240)
    assert caught, f"the run ended before any part was written: {err[-500:]}"
    assert proc.returncode != 0
    time.sleep(2.0)  # anything a late worker could still do has happened by now
    assert leftovers(tmp_path, "out") == []
    assert not out.exists()
    assert digest(lake) == before
    assert "daskmicro: error: interrupted" in err


def test_stale_staging_folders_are_swept_and_reported(tmp_path, capsys, client):
    lake = tmp_path / "lake"
    make_lake(lake, files=2, rows=500)
    stale = tmp_path / ".out.tmp-0badc0de"
    (stale / "s=1").mkdir(parents=True)
    (stale / "s=1" / "part-00000.parquet").write_bytes(b"partial")
    (stale / commit.OWNER).write_text('{"pid": %d, "host": "%s", "started": 0}' % (_dead_pid(), socket.gethostname()))
    unowned = tmp_path / ".out.tmp-00c0ffee"          # an older version's, an hour old
    unowned.mkdir()
    os.utime(unowned, (time.time() - 3600, time.time() - 3600))
    (tmp_path / ".out.trash-12345678").mkdir()
    alive = commit.open_staging(tmp_path / "out")          # owned by this (live) process: kept
    unrelated = tmp_path / ".other.tmp-0badc0de"
    unrelated.mkdir()
    rc = main([str(a) for a in ["anonymize", lake, tmp_path / "out", "--qi", "x,y", "--k", "4",
                                "--scheduler", client.scheduler.address, "--no-dask-report", "--seed", "2"]])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "removed 3 staging folder(s)" in err and ".out.tmp-0badc0de" in err
    assert not stale.exists() and not unowned.exists() and not (tmp_path / ".out.trash-12345678").exists()
    assert alive.exists() and unrelated.exists()
    assert (tmp_path / "out" / commit.SUCCESS).is_file()
    assert not (tmp_path / "out" / commit.OWNER).exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_discard_staging_defeats_a_late_writer(tmp_path):
    staging = commit.open_staging(tmp_path / "out", ["s=1"])
    late = staging / "s=1" / "part-00000.parquet"
    commit.discard_staging(staging)
    with pytest.raises(OSError):   # a writer never creates directories: its late write fails
        pq.write_table(pq.read_table(_tiny(tmp_path)), late)
    assert leftovers(tmp_path, "out") == []


def _tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.parquet"
    pd.DataFrame({"a": [1.0]}).to_parquet(path)
    return path


@pytest.mark.parametrize("rows_per_file,partition", [(700, True), (1000, False), (1, False)])
def test_rows_per_file_is_exact(tmp_path, capsys, rows_per_file, partition, client, clients):
    lake = tmp_path / "lake"
    make_lake(lake, files=3, rows=700 if rows_per_file > 1 else 30)
    n = sum(pq.read_metadata(p).num_rows for p in lake.glob("*.parquet"))
    layouts = []
    for cluster, name in ((clients(1), "a"), (client, "b")):   # 1 worker, then 2 (the shared clusters)
        out = tmp_path / name
        args = ["anonymize", lake, out, "--qi", "x,y", "--k", "3", "--rows-per-file", rows_per_file,
                "--scheduler", cluster.scheduler.address, "--no-dask-report", "--seed", "4"] + (["--partition-by", "s"] if partition else [])
        rc = main([str(a) for a in args])
        assert rc == 0, capsys.readouterr().err
        sizes = {str(p.relative_to(out)): pq.read_metadata(p).num_rows for p in sorted(out.rglob("*.parquet"))}
        by_dir: dict = {}
        for rel, rows in sizes.items():
            by_dir.setdefault(os.path.dirname(rel), []).append(rows)
        for rows in by_dir.values():
            assert all(r == rows_per_file for r in rows[:-1]) and 0 < rows[-1] <= rows_per_file
        assert sum(sizes.values()) == n
        layouts.append((sizes, digest(out, "part-*.parquet")))
    assert layouts[0] == layouts[1]  # the same bytes whatever the number of workers


def test_rows_per_file_below_one_refused(tmp_path, capsys):
    lake = tmp_path / "lake"
    make_lake(lake, files=1, rows=50)
    for bad in ("0", "-3"):
        rc = main(["anonymize", str(lake), str(tmp_path / "out"), "--qi", "x,y", "--k", "3", "--rows-per-file", bad])
        err = capsys.readouterr().err
        assert rc == 2 and "--rows-per-file" in err
    assert leftovers(tmp_path, "out") == [] and not (tmp_path / "out").exists()
