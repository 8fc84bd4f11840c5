"""A series of releases on a cluster whose workers share no disk with the client's release ledger.

Real ``dask scheduler`` / ``dask worker`` processes; the workers run in a mount namespace of their
own where the ledger's directory is an empty file system (a tmpfs mounted over it), so they cannot
see the ledger, its key or the staging directory of a release — as workers on other machines.
Each piece's ledger rows are then sent back and written by the client: the ledger records every
published record and its cell's columns published as they are, and a re-release through those
workers republishes only values published before, and refuses values revised since.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pandas as pd
import pytest

from _clusters import BIN, ENV, DaskProcesses, connect, free_port
from test_series import QI, _people, _smallest, _tuples

from daskmicro import anonymize_file
from daskmicro.errors import ParameterError


def _workers_without(hidden, n_workers: int = 2) -> DaskProcesses:
    """A scheduler, and ``n_workers`` workers that see an empty tmpfs at ``hidden``."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    cluster = DaskProcesses(address, n_workers=n_workers)
    cluster.procs.append(subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                                           str(port), "--no-dashboard"], **quiet))
    worker = (f"mount -t tmpfs tmpfs '{hidden}' && exec '{BIN / 'dask'}' worker {address} --nworkers {n_workers} "
              "--nthreads 1 --no-dashboard")
    cluster.procs.append(subprocess.Popen(["unshare", "-m", "sh", "-c", worker], **quiet))
    return cluster


def _can_hide(path) -> bool:
    done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs tmpfs '{path}'"], capture_output=True)
    return done.returncode == 0


def test_a_series_on_workers_that_do_not_see_the_ledger(tmp_path):
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    if not _can_hide(ledger):
        pytest.skip("needs root in a mount namespace that allows mounting a tmpfs (unshare -m; mount -t tmpfs)")
    people = _people(6000, seed=21)
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(3):
        people.iloc[i * 2000:(i + 1) * 2000].to_parquet(lake / f"p{i}.parquet", index=False)
    cluster = _workers_without(ledger)
    try:
        with connect(cluster) as client:
            opts = dict(qi=QI, k=5, seed=3, ledger=ledger, client=client, keep=["pid"])
            anonymize_file(lake, tmp_path / "r1", **opts)
            # the workers did not see the ledger: the client wrote what they sent back
            seen = client.run(os.path.isdir, str(ledger / "series"))
            assert os.path.isdir(ledger / "series") and not any(seen.values()), seen
            (release,) = [p for s in (ledger / "series").iterdir() for p in s.glob("r*") if p.is_dir()]
            records = pd.concat([pd.read_parquet(f) for f in sorted(release.glob("records-*.parquet"))])
            assert len(records) == 6000 and records[["hi", "lo"]].drop_duplicates().shape[0] == 6000
            _people(700, seed=22, start=50_000).to_parquet(lake / "p3.parquet", index=False)  # new records
            anonymize_file(lake, tmp_path / "r2", **{**opts, "k": 6})                        # a larger k
            # the sums of the columns published as they are came back too: a revised one is refused
            pieces = len(list(release.glob("records-*.parquet")))
            assert len(list(release.glob("content-*.parquet"))) == pieces and (release / "columns.json").is_file()
            revised = people.iloc[:2000].copy()
            revised.loc[5, "pid"] = 99_999
            revised.to_parquet(lake / "p0.parquet", index=False)
            with pytest.raises(ParameterError, match="other values of their columns published as they are"):
                anonymize_file(lake, tmp_path / "r3", **{**opts, "k": 6})
            assert not (tmp_path / "r3").exists()
            assert len([p for s in (ledger / "series").iterdir() for p in s.glob("r*") if p.is_dir()]) == 2
    finally:
        cluster.stop()
    r1, r2 = pd.read_parquet(tmp_path / "r1"), pd.read_parquet(tmp_path / "r2")
    old = r2[r2.pid < 50_000]
    assert len(r2) == 6700 and len(old) == 6000 and _smallest(r2, QI) >= 6
    # every value republished for a record published before was published before
    assert set(map(tuple, old[QI].to_numpy(np.float64))) <= _tuples(r1)
    series = json.loads((tmp_path / "r2" / "_report.json").read_text())["series"]
    assert series["republished"] == 6000 and series["new"] == 700
