"""Workflows submitted to a real `dask scheduler` with two `dask worker` processes on loopback.

The submitter is a separate process that exits right after submitting; the cluster waits for the
slot (a time-delayed stage), runs the pipeline and commits the release.  Also: the same over TLS
with certificates made here by openssl, a refusal without them, cancellation, and a cron schedule
on a compressed clock that fires once per slot across a restart of the submitter.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.privacy import verify_k_anonymity
from daskmicro.workflow import Clock, load_workflow
from daskmicro.workflow.submit import RUNS

from _clusters import ENV, connect, start_dask_processes

QI = ["AGI", "FEDTAX", "FICA"]
# published as they are: record_id and the other census columns (nearly one value per record)
KEEP = ["record_id", *(c for c in CENSUS_COLUMNS if c not in QI)]

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("wf")
    census_like(600, seed=3, with_extra_columns=True).to_parquet(d / "census.parquet", index=False)
    return d


@pytest.fixture(scope="module")
def cluster(dask_processes):
    return dask_processes.address, dask_processes.client


def _spec(path: Path, name: str, output: str, schedule: str = "", extra: str = "") -> Path:
    path.write_text(f"""name: {name}
input: {{path: census.parquet, keep: {json.dumps(KEEP)}}}
qi: {json.dumps(QI)}
k: 5
method: mdav
parameters: {{seed: 1}}
output: {{path: "{output}"}}
series: {{ledger: "off"}}
{schedule}{extra}""")
    return path


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _submit_process(spec: Path, address: str, state: Path, *extra, env=None):
    return subprocess.run([sys.executable, "-m", "daskmicro", "submit", str(spec), "--scheduler", address,
                           *extra], env={**ENV, "DASKMICRO_STATE": str(state), **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_submitted_run_waits_for_its_slot_and_commits_after_the_client_exits(cluster, data_dir, capsys):
    address, client = cluster
    start = time.time() + 6
    spec = _spec(data_dir / "delayed.yaml", "delayed", "out/delayed-{slot}", f"schedule: {{at: [{_iso(start)}]}}\n")
    (data_dir / "out").mkdir()
    state = data_dir / "state-delayed.json"
    proc = _submit_process(spec, address, state)
    returned = time.time()
    assert proc.returncode == 0, proc.stderr
    slot = dt.datetime.fromtimestamp(int(start), dt.timezone.utc)
    key = load_workflow(spec).key(slot)
    assert f"submitted {key}" in proc.stdout
    out = data_dir / "out" / f"delayed-{slot.strftime('%Y%m%dT%H%M%SZ')}"
    if returned < int(start):            # the submitter is gone and the stage has not started yet
        assert not out.exists()
    report = _wait_for(lambda: (out / "_report.json").exists() and json.loads((out / "_report.json").read_text()),
                       90, "the release")
    release = pd.read_parquet(out)
    assert len(release) == 600 and verify_k_anonymity(release, QI, 5)
    assert report["workflow"]["key"] == key
    started = dt.datetime.fromisoformat(report["workflow"]["started"]).timestamp()
    assert started >= int(start) - 0.01                       # it ran at its slot, not at submission
    assert json.loads(state.read_text())["runs"][key]["scheduler"] == address
    rec = _wait_for(lambda: client.get_metadata([RUNS, key], default={}).get("state") == "committed"
                    and client.get_metadata([RUNS, key]), 30, "the committed record")
    assert rec["executions"] == 1 and rec["rows"] == 600
    # a second submission of the same run is recognised and not run again
    assert main(["submit", str(spec), "--scheduler", address, "--state", str(state)]) == 0
    assert f"skipped   {key}  already committed on the cluster" in capsys.readouterr().out
    time.sleep(1)
    assert client.get_metadata([RUNS, key])["executions"] == 1
    assert main(["status", "--scheduler", address, "--state", str(state)]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(key)][0]
    assert "committed" in line and str(out) in line


def test_cancel_stops_a_waiting_run_and_nothing_is_written(cluster, data_dir, capsys):
    address, client = cluster
    start = time.time() + 120
    spec = _spec(data_dir / "cancel.yaml", "cancelme", "cancelled-{slot}", f"schedule: {{at: [{_iso(start)}]}}\n")
    state = data_dir / "state-cancel.json"
    assert main(["submit", str(spec), "--scheduler", address, "--state", str(state)]) == 0
    key = load_workflow(spec).key(dt.datetime.fromtimestamp(int(start), dt.timezone.utc))
    _wait_for(lambda: client.get_metadata([RUNS, key], default={}).get("state") == "waiting", 30, "waiting")
    assert main(["cancel", key, "--scheduler", address]) == 0
    _wait_for(lambda: client.get_metadata([RUNS, key]).get("state") == "cancelled", 30, "the cancellation")
    assert not list(data_dir.glob("cancelled-*"))
    capsys.readouterr()
    assert main(["cancel", key, "--scheduler", address]) == 2              # already ended
    assert main(["cancel", "nope-0000000000-once", "--scheduler", address]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "already ended (cancelled)" in err[0] and "no run 'nope-0000000000-once'" in err[1]


def test_cron_schedule_fires_once_per_slot_on_a_compressed_clock_across_a_restart(cluster, data_dir, monkeypatch,
                                                                                  capsys):
    address, client = cluster
    # 60 simulated seconds per real second: the slots 00:01 … 00:04 of 1 January come 1 s apart,
    # the first one 7 s from now (time for the submitter process to start; one that starts later
    # catches the missed slots up, which the checks below accept as well).
    real0 = time.time() + 6
    clock = Clock(speed=60.0, sim_origin=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp(), real_origin=real0)
    monkeypatch.setenv("DASKMICRO_CLOCK", f"2026-01-01T00:00:00Z,{real0},60")
    spec = _spec(data_dir / "cron.yaml", "cron", "cron/{slot}", 'schedule: {cron: "1-4 0 1 1 *"}\n')
    (data_dir / "cron").mkdir()
    state = data_dir / "state-cron.json"
    args = ["--horizon", "90s", "--catch-up", "1h", "--until", "2026-01-01T00:04:00Z"]
    first = _submit_process(spec, address, state, *args, env={"DASKMICRO_CLOCK": os.environ["DASKMICRO_CLOCK"]})
    assert first.returncode == 0, first.stderr
    assert "submitted cron-" in first.stdout
    # the submitter restarts (a new client, the same state file) while the schedule is under way
    assert main(["submit", str(spec), "--scheduler", address, "--state", str(state), *args]) == 0
    second = capsys.readouterr().out

    def submitted(text):
        return {ln.split()[1] for ln in text.splitlines() if ln.startswith("submitted")}
    assert "skipped" in second and not submitted(first.stdout) & submitted(second)   # later slots may be new
    wf = load_workflow(spec)
    slots = [dt.datetime(2026, 1, 1, 0, m, tzinfo=dt.timezone.utc) for m in (1, 2, 3, 4)]
    keys = [wf.key(s) for s in slots]

    def all_committed():
        runs = client.get_metadata(RUNS, default={})
        return all((runs.get(k) or {}).get("state") == "committed" for k in keys) and runs
    runs = _wait_for(all_committed, 120, "four committed slots")
    assert sorted(p.name for p in (data_dir / "cron").iterdir()) == [s.strftime("%Y%m%dT%H%M%SZ") for s in slots]
    assert sorted(k for k in runs if k.startswith(f"cron-{wf.digest[:10]}-2026")) == sorted(keys)
    for s, k in zip(slots, keys):
        assert runs[k]["executions"] == 1
        started = dt.datetime.fromisoformat(runs[k]["started"]).timestamp()
        assert started >= int(clock.real_time(s)) - 1            # not before its slot (1 s: iso precision)
    _wait_for(lambda: client.get_metadata([RUNS, f"cron-{wf.digest[:10]}-follow"]).get("state") == "finished", 30,
              "the follower to end")
    # after the schedule: a third submitter sees every slot as done
    assert main(["submit", str(spec), "--scheduler", address, "--state", str(state), *args]) == 0
    third = capsys.readouterr().out
    assert third.count("already committed on the cluster") == 4 and "submitted" not in third
    # the local state alone also prevents a resubmission (e.g. after a scheduler restart lost its records)
    client.set_metadata([RUNS, keys[0]], None)
    assert main(["submit", str(spec), "--scheduler", address, "--state", str(state), "--slot", "2026-01-01T00:01:00Z"]) == 0
    assert f"skipped   {keys[0]}  already submitted (local state)" in capsys.readouterr().out
    time.sleep(0.5)
    assert not client.get_metadata([RUNS, keys[0]])


# --------------------------------------------------------------------------- TLS


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test TLS certificates (install openssl)")
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=daskmicro-test-ca",
             "-keyout", "ca-key.pem", "-out", "ca.pem", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "node-key.pem",
             "-out", "node.csr", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", "node.pem", cwd=d)
    return {"ca": str(d / "ca.pem"), "cert": str(d / "node.pem"), "key": str(d / "node-key.pem")}


def test_submit_over_tls_and_refusal_without_certificates(certs, data_dir, capsys):
    from distributed.security import Security

    cluster = start_dask_processes(2, tls=certs)
    address = cluster.address
    try:
        security = Security(tls_ca_file=certs["ca"], tls_client_cert=certs["cert"], tls_client_key=certs["key"],
                            require_encryption=True)
        with connect(cluster, security) as client:
            spec = _spec(data_dir / "tls.yaml", "overtls", "tls-release.parquet")
            state = data_dir / "state-tls.json"
            assert main(["submit", str(spec), "--scheduler", address, "--state", str(state)]) == 2
            assert "uses TLS: give the CA, certificate and key files" in capsys.readouterr().err
            assert not state.exists()
            tls = ["--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"]]
            assert main(["submit", str(spec), "--scheduler", address, "--state", str(state), *tls]) == 0
            key = load_workflow(spec).key(None)
            assert f"submitted {key}" in capsys.readouterr().out
            out = data_dir / "tls-release.parquet"
            _wait_for(lambda: client.get_metadata([RUNS, key], default={}).get("state") in ("committed", "failed"),
                      90, "the TLS run")
            assert client.get_metadata([RUNS, key])["state"] == "committed"
            release = pd.read_parquet(out)
            assert len(release) == 600 and verify_k_anonymity(release, QI, 5)
            assert json.loads((data_dir / "tls-release.report.json").read_text())["workflow"]["key"] == key
            assert main(["status", "--scheduler", address, "--state", str(state), *tls]) == 0
            assert "committed" in capsys.readouterr().out
    finally:
        cluster.stop()
