"""CLI runs on clusters: Parquet directory in and out, and a real `dask scheduler`/`dask worker`."""

from __future__ import annotations

import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.privacy import verify_k_anonymity

from _clusters import free_port

QI = ",".join(CENSUS_COLUMNS)


@pytest.fixture(scope="module")
def lake_in(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake") / "in"
    root.mkdir()
    df = census_like(6000, seed=4, with_extra_columns=True)
    for i in range(3):
        df.iloc[i * 2000:(i + 1) * 2000].to_parquet(root / f"part-{i}.parquet", index=False)
    return root


def test_lake_in_lake_out_commits_atomically(lake_in, tmp_path, capsys, client):
    out = tmp_path / "release"
    address = client.scheduler.address   # the suite's shared LocalCluster of two worker processes
    args = ["anonymize", str(lake_in), str(out), "--qi", QI, "--keep", "record_id", "--k", "5", "--method", "partitioned",
            "--partition-size", "1000", "--K", "200", "--nu", "0.5", "--seed", "1", "--scheduler", address]
    assert main(args) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["_SUCCESS", "_report.json", "part-00000.parquet"]  # no Dask performance report unless asked
    release = pd.read_parquet(out)
    assert len(release) == 6000 and verify_k_anonymity(release, list(CENSUS_COLUMNS), 5)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]      # no staging left behind
    capsys.readouterr()
    assert main(args) == 0                                                      # same run: a no-op
    assert "nothing to do" in capsys.readouterr().out
    assert main(args[:-4] + ["--seed", "2", "--scheduler", address]) == 2       # other run, no --overwrite
    assert "already exists" in capsys.readouterr().err
    before = sorted(p.stat().st_mtime_ns for p in out.iterdir())
    assert main(args[:-2] + ["--nu", "2"]) == 2                                 # bad ν: nothing replaced
    assert sorted(p.stat().st_mtime_ns for p in out.iterdir()) == before
    assert main(args + ["--overwrite"]) == 0
    assert main(["anonymize", str(lake_in), str(lake_in / "out"), "--qi", QI, "--k", "5"]) == 2  # inside input


def test_relative_paths_on_a_cluster_with_another_working_directory(lake_in, tmp_path, client, monkeypatch):
    """Paths given relative to this process's working directory reach workers that do not share it:
    the input read, the release staged and committed where the command names it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").symlink_to(lake_in)
    assert main(["anonymize", "in", "release", "--qi", QI, "--keep", "record_id", "--k", "5", "--quiet",
                 "--scheduler", client.scheduler.address]) == 0
    release = pd.read_parquet(tmp_path / "release")
    assert len(release) == 6000 and verify_k_anonymity(release, list(CENSUS_COLUMNS), 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "release"]


def test_single_file_in_lake_out(lake_in, tmp_path):
    out = tmp_path / "release"
    src = lake_in / "part-0.parquet"
    assert main(["anonymize", str(src), str(out), "--qi", QI, "--k", "5", "--method", "partitioned",
                 "--partition-size", "1000", "--K", "200", "--workers", "1", "--keep", "record_id"]) == 0
    release = pd.read_parquet(out)
    assert len(release) == 2000 and verify_k_anonymity(release, list(CENSUS_COLUMNS), 5)


def test_cli_on_a_running_dask_scheduler_and_worker(lake_in, tmp_path, dask_processes):
    out = tmp_path / "release"
    rc = main(["anonymize", str(lake_in), str(out), "--qi", QI, "--k", "5", "--method", "partitioned",
               "--partition-size", "1000", "--scheduler", dask_processes.address, "--seed", "2",
               "--keep", "record_id"])
    assert rc == 0
    release = pd.read_parquet(out)
    assert len(release) == 6000 and verify_k_anonymity(release, list(CENSUS_COLUMNS), 5)


def test_unreachable_scheduler_and_half_given_tls_are_refused(lake_in, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DASKMICRO_CONNECT_TIMEOUT", "3")
    out = tmp_path / "release"
    base = ["anonymize", str(lake_in), str(out), "--qi", QI, "--k", "5"]
    assert main(base + ["--scheduler", f"tcp://127.0.0.1:{free_port()}"]) == 2
    assert main(base + ["--scheduler", "tls://127.0.0.1:1", "--tls-ca-file", "ca.pem"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "cannot connect to the Dask scheduler at tcp://127.0.0.1:" in err[0] and "within 3 s" in err[0] and "missing --tls-cert, --tls-key" in err[1]
    assert not out.exists()
