"""Inputs on an S3-compatible object store (daskmicro.io.objectstore), against a real S3 server:
moto's server mode on loopback, reached through s3fs by this process and by the workers of the
shared cluster.  Lakes, single objects, the CLI, the API and a workflow spec; bad URLs refused in
one line with nothing written; credentials never written anywhere; outputs on a store refused."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from _s3 import (BUCKET, KEY_ID, OPT_SECRET, SECRET, frame, no_credentials, put, put_lake, read_object,  # the store
                 release_on_store, run_cli, run_record, runs, set_env as _set_env, store_text, tree_text)  # fixture: conftest.py
from daskmicro import anonymize_file
from daskmicro import cli as lake_cli
from daskmicro.errors import ParameterError
from daskmicro.privacy import verify_k_anonymity

s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")


def test_cli_hive_lake_on_s3(store, client, tmp_path, capsys):
    """A hive lake on the store → a local directory release: filters and projection pushed down,
    k-anonymous as published, rows kept, a no-op re-run, a changed object seen as another input."""
    endpoint, fs = store
    df = frame()
    url = put_lake(fs, "lake", df)
    out = tmp_path / "rel"
    argv = [url, out, "--qi", "x,y", "--k", "3", "--filter", "year>=2019 and s in (a,b)", "--drop", "id",
            "--seed", "3"]
    capsys.readouterr()
    assert run_cli(argv, client) == (0, "")
    captured = capsys.readouterr()
    keep = df[(df.year >= 2019) & df.s.isin(["a", "b"])]
    parts = sorted({str(p.parent.relative_to(out)) for p in out.rglob("*.parquet")})
    assert parts == sorted(f"year={y}/s={s}" for y in (2019, 2020, 2021) for s in "ab")
    rel = pd.read_parquet(out)
    assert len(rel) == len(keep) and "id" not in rel.columns
    assert verify_k_anonymity(rel.assign(year=rel.year.astype(int), s=rel.s.astype(str)), ["year", "s", "x", "y"], 3)
    assert sorted(rel.groupby(["year", "s"], observed=True).size().tolist()) == \
        sorted(keep.groupby(["year", "s"]).size().tolist())
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["rows"] == {"in": len(keep), "out": len(keep)}
    record = run_record(captured.err)
    assert url in record                       # the private record names the input, never a credential
    no_credentials(captured.out, captured.err, record, tree_text(out))
    assert run_cli(argv, client) == (0, "") and "nothing to do" in capsys.readouterr().out
    # an object rewritten on the store is another input: the committed release is not it
    put(fs, "lake/year=2019/s=a/part-0.parquet", df[(df.year == 2019) & (df.s == "a")].drop(columns=["year", "s"])
        .assign(x=lambda d: d.x + 1))
    code, err = run_cli(argv, client)
    assert code == 2 and "already exists" in err


def test_api_single_objects_with_storage_options(store, client, tmp_path):
    """One Parquet object and one CSV object, read by the workers with credentials given as
    storage_options: written nowhere (report, run record, release)."""
    endpoint, fs = store
    df = frame(90, seed=1).drop(columns=["s"])
    options = {"key": "AKIAOPTIONKEY", "secret": OPT_SECRET, "endpoint_url": endpoint}
    for fmt in ("parquet", "csv"):
        url = put(fs, f"single/table.{fmt}", df, fmt)
        out = tmp_path / f"rel-{fmt}.parquet"
        report = anonymize_file(url, out, ["x", "y"], 4, client=client, seed=1, drop=["id"],
                                storage_options=options)
        rel = pd.read_parquet(out)
        assert len(rel) == len(df) and verify_k_anonymity(rel, ["x", "y"], 4)
        assert sorted(rel.year) == sorted(df.year)      # other columns pass through
        assert report.n == len(df)
        published = out.with_suffix(".report.json").read_text()
        no_credentials(published, json.dumps(report.to_dict(), default=str), out.read_bytes().decode("latin-1"))
    records = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "daskmicro/runs"
    newest = sorted(records.glob("*.json"), key=lambda p: p.stat().st_mtime)[-2:]
    no_credentials(*(p.read_text() for p in newest))


def test_file_url_input(tmp_path):
    df = frame(60, seed=2).drop(columns=["s"])
    src = tmp_path / "in put.parquet"
    df.to_parquet(src, index=False)
    out = tmp_path / "rel.parquet"
    anonymize_file("file://" + str(src).replace(" ", "%20"), "file://" + str(out), ["x", "y"], 3, seed=0,
                   drop=["id"])
    assert len(pd.read_parquet(out)) == len(df) and out.with_suffix(".report.json").is_file()
    with pytest.raises(ParameterError, match="storage_options apply only to an object-store input"):
        anonymize_file(src, tmp_path / "o.parquet", ["x", "y"], 3, storage_options={"anon": True})


def test_workflow_spec_reads_s3(store, client, tmp_path):
    from daskmicro.workflow import parse_spec
    from daskmicro.workflow.runner import execute_run

    endpoint, fs = store
    url = put_lake(fs, "spec-lake", frame(120, seed=3))
    spec = parse_spec({"name": "s3in", "input": {"path": url, "drop": ["id"], "storage_options": {
        "endpoint_url": endpoint}}, "qi": ["x", "y"], "k": 3, "output": {"path": "rel"}}, base_dir=tmp_path)
    summary = execute_run(spec, client=client)
    rel = pd.read_parquet(tmp_path / "rel")
    assert summary["rows"] == 120 and len(rel) == 120
    no_credentials(tree_text(tmp_path / "rel"))
    # credentials never in a spec (its text is copied into the report)
    with pytest.raises(ParameterError, match=r"input\.storage_options\.secret: credentials are never written"):
        parse_spec({"name": "s", "input": {"path": url, "storage_options": {"secret": OPT_SECRET}}, "qi": ["x"],
                    "k": 3, "output": {"path": "o"}}, base_dir=tmp_path)


def _cases(fs):
    put(fs, "bad/notes.txt", frame(10))
    return [
        ("s3://no-such-bucket-x/lake", "input not found: s3://no-such-bucket-x/lake"),
        (f"s3://{BUCKET}/no/such/key.parquet", f"input not found: s3://{BUCKET}/no/such/key.parquet"),
        (f"s3://{BUCKET}/bad", f"prefix holds no Parquet objects: s3://{BUCKET}/bad"),
        (f"s3://{KEY_ID}:{SECRET}@{BUCKET}/lake", f"credentials in a URL are refused (they would be recorded "
                                                   f"with the input's path): s3://{BUCKET}/lake"),
        ("hdfs://bucket/lake", "unsupported URL scheme hdfs://"),
    ]


def test_bad_inputs_one_line_nothing_written(store, client, tmp_path, capsys):
    endpoint, fs = store
    before = sorted(fs.find(BUCKET))
    for url, message in _cases(fs):
        out = tmp_path / "rel"
        capsys.readouterr()
        code = lake_cli.main(["anonymize", url, str(out), "--qi", "x,y", "--k", "3"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
        no_credentials(err)
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    # a release ledger on the store is refused before anything is read or written
    lake = put_lake(fs, "lake2", frame(60))
    code = lake_cli.main(["anonymize", lake, f"s3://{BUCKET}/out/", "--ledger", f"s3://{BUCKET}/ledger", "--qi", "x,y",
                          "--k", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "writing the release ledger to an object store is not supported" in err
    assert lake_cli.main(["report", f"s3://{BUCKET}/lake2"]) == 2   # a lake, not a release: no report
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("not a committed release (no _SUCCESS naming its run, no _delta_log/ of a Delta table): "
                                   f"s3://{BUCKET}/lake2") in err
    fs.invalidate_cache()
    assert sorted(fs.find(BUCKET)) == sorted(before + [f"{BUCKET}/bad/notes.txt"] +
                                             [k for k in fs.find(f"{BUCKET}/lake2")])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_missing_extra_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "s3fs", None)   # as if the s3 extra were not installed
    code = lake_cli.main(["anonymize", f"s3://{BUCKET}/lake", str(tmp_path / "rel"), "--qi", "x,y", "--k", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err == ("daskmicro: error: reading s3://… needs the s3 extra: "
                                 "pip install 'daskmicro[s3]'\n")


# --------------------------------------------------------------------------- directory releases on the store


def test_cli_release_to_s3_replaced_and_cleaned(store, client, tmp_path, monkeypatch, capsys):
    """A hive lake on the store → a directory release on the store, committed by _SUCCESS: k-anonymous
    on the values as read back (their dtypes), rows kept, only the report copy written locally; a
    no-op re-run; a changed configuration refused without --overwrite; with it, the release is
    replaced and the old objects deleted."""
    endpoint, fs = store
    monkeypatch.chdir(tmp_path)
    df = frame(seed=4)
    url = put_lake(fs, "lake-out", df)
    target = f"s3://{BUCKET}/rel-out"
    report = tmp_path / "local.json"
    argv = [url, target, "--qi", "x,y", "--k", "3", "--drop", "id", "--seed", "1", "--report", report]
    capsys.readouterr()
    assert run_cli(argv, client) == (0, "")
    captured = capsys.readouterr()
    assert f"release: {target}/" in captured.out
    manifest, rel, keys = release_on_store(fs, "rel-out")
    assert manifest["rows"] == {"in": len(df), "out": len(df)} and len(rel) == len(df)
    assert rel.x.dtype == np.float64 and rel.y.dtype == np.float64 and "id" not in rel.columns
    assert verify_k_anonymity(rel, ["year", "s", "x", "y"], 3)
    assert sorted(rel.groupby(["year", "s"]).size().tolist()) == sorted(df.groupby(["year", "s"]).size().tolist())
    run1 = manifest["run"]
    assert re.fullmatch(r"\.run-[0-9a-f]{16}", run1) and runs(keys, "rel-out") == [run1]
    assert all(len(e["sha256"]) == 64 and e["bytes"] > 0 for e in manifest["files"])
    listed = {f"{BUCKET}/rel-out/{run1}/{e['path']}" for e in manifest["files"]}
    assert set(keys) == listed | {f"{BUCKET}/rel-out/_SUCCESS", f"{BUCKET}/rel-out/{run1}/_report.json"}
    assert json.loads(report.read_text())["paths"]["output"] == target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.json"]   # nothing else on the local disk
    no_credentials(captured.out, captured.err, store_text(fs, "rel-out"), report.read_text())
    assert run_cli(argv[:-2], client) == (0, "") and "nothing to do" in capsys.readouterr().out
    argv4 = [a if a != "3" else "4" for a in argv]
    code, err = run_cli(argv4, client)
    assert code == 2 and f"output already exists: {target}" in err
    assert run_cli(argv4 + ["--overwrite"], client) == (0, "")
    manifest2, rel2, keys2 = release_on_store(fs, "rel-out")
    assert manifest2["run"] != run1 and runs(keys2, "rel-out") == [manifest2["run"]]   # old objects deleted
    assert len(rel2) == len(df) and verify_k_anonymity(rel2, ["year", "s", "x", "y"], 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.json"]
    assert lake_cli.main(["report", str(report)]) == 0    # the local copy renders as any report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.html", "local.json"]


def test_interrupted_runs_leave_the_release_and_are_swept(store, client, tmp_path, monkeypatch):
    """A run stopped before its manifest and the leftovers of killed runs (run prefixes with parts
    and no manifest) leave the committed release intact and readable; the next run deletes them.
    A prefix with parts and no _SUCCESS is no release: readers refuse it."""
    import subprocess

    from daskmicro.config import RunConfig
    from daskmicro.io.source import open_source
    from daskmicro.plan import RunPaths, run

    endpoint, fs = store
    monkeypatch.chdir(tmp_path)
    url = tmp_path / "in.parquet"
    frame(120, seed=5).drop(columns=["s"]).to_parquet(url, index=False)
    target = f"s3://{BUCKET}/rel-int"
    argv = [url, target, "--qi", "x,y", "--k", "3", "--drop", "id"]
    assert run_cli(argv, client) == (0, "")
    before, rel, keys = release_on_store(fs, "rel-int")

    def stop():
        raise KeyboardInterrupt

    cfg = RunConfig.build(qi=["x", "y"], k=4, drop=["id"], overwrite=True)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, paths=RunPaths(input=url, output=target), client=client, before_commit=stop)
    after, rel_after, keys_after = release_on_store(fs, "rel-int")
    assert after == before and rel_after.equals(rel) and keys_after == keys   # untouched; its own prefix gone
    # leftovers of killed runs: parts of a run with no owner object, and of a run whose process is gone
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    put(fs, "rel-int/.run-00000000000000aa/x/part-00000.parquet", rel)
    put(fs, "rel-int/.run-00000000000000bb/part-00000.parquet", rel)
    fs.pipe_file(f"{BUCKET}/rel-int/.run-00000000000000bb/_daskmicro_owner.json",
                 json.dumps({"pid": int(dead.stdout), "host": os.uname().nodename, "started": 0}).encode())
    fs.invalidate_cache()
    source = open_source(target)   # the committed release, as its manifest lists it
    assert sorted(source.files) == sorted(f"{BUCKET}/rel-int/{before['run']}/{e['path']}" for e in before["files"])
    # a prefix of parts with no _SUCCESS is not read
    put(fs, "half/.run-00000000000000cc/part-00000.parquet", rel)
    code, err = run_cli([f"s3://{BUCKET}/half", tmp_path / "o", "--qi", "x,y", "--k", "3"], client)
    assert code == 2 and "not a committed release (no _SUCCESS" in err and f"s3://{BUCKET}/half" in err
    # the next run sweeps the leftovers and commits
    assert run_cli(argv + ["--k", "4", "--overwrite"], client) == (0, "")
    final, _, keys_final = release_on_store(fs, "rel-int")
    assert runs(keys_final, "rel-int") == [final["run"]] and final["run"] != before["run"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_api_and_spec_write_to_s3(store, client, tmp_path):
    """The API (credentials as storage_options, written nowhere) and a workflow spec write a
    directory release to the store through the same commit."""
    from daskmicro.workflow import parse_spec
    from daskmicro.workflow.runner import execute_run

    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(90, seed=6).drop(columns=["s"]).to_parquet(src, index=False)
    options = {"key": KEY_ID, "secret": OPT_SECRET, "endpoint_url": endpoint}
    old = _set_env({"AWS_SECRET_ACCESS_KEY": None})
    try:  # this process has only the options' credentials (moto accepts any)
        report = anonymize_file(src, f"s3://{BUCKET}/api-out/", ["x", "y"], 3, client=client, drop=["id"],
                                storage_options=options)
    finally:
        _set_env(old)
    manifest, rel, _ = release_on_store(fs, "api-out")
    assert report.n == 90 and len(rel) == 90 and verify_k_anonymity(rel, ["x", "y"], 3)
    no_credentials(store_text(fs, "api-out"), json.dumps(report.to_dict(), default=str))
    spec = parse_spec({"name": "s3out", "input": {"path": str(src), "drop": ["id"]}, "qi": ["x", "y"], "k": 3,
                       "output": {"path": f"s3://{BUCKET}/spec-out"}, "report": {"path": "copy.json"}},
                      base_dir=tmp_path)
    summary = execute_run(spec, client=client)
    manifest, rel, _ = release_on_store(fs, "spec-out")
    assert summary["rows"] == 90 and len(rel) == 90 and (tmp_path / "copy.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.json", "in.parquet"]


def test_bad_outputs_one_line_nothing_written(store, client, tmp_path, capsys):
    endpoint, fs = store
    lake = put_lake(fs, "lake3", frame(60))
    fs.pipe_file(f"{BUCKET}/foreign/notes.txt", b"theirs")
    fs.invalidate_cache()
    before = sorted(fs.find(BUCKET))
    for target, message in [("s3://no-such-bucket-y/out", "output: bucket not found: s3://no-such-bucket-y/out"),
                            (f"s3://{BUCKET}/foreign", f"output s3://{BUCKET}/foreign holds objects that daskmicro "
                                                       "did not write (e.g. notes.txt)"),
                            (f"s3://{BUCKET}/lake3/rel", f"output s3://{BUCKET}/lake3/rel is the input or lies inside"),
                            # one object: a release file
                            ("s3://no-such-bucket-y/o.parquet", "output: bucket not found: s3://no-such-bucket-y/o.parquet"),
                            (f"s3://{BUCKET}/lake3/o.parquet", f"output s3://{BUCKET}/lake3/o.parquet is the input or "
                                                               "lies inside it"),
                            (f"s3://{BUCKET}/foreign/notes.txt/o.parquet", None),
                            (f"s3://{BUCKET}.parquet", f"output: s3://{BUCKET}.parquet names a bucket, not an object")]:
        if message is None:   # a key that is a prefix of other objects
            fs.pipe_file(f"{BUCKET}/pfx.parquet/theirs", b"theirs")
            before.append(f"{BUCKET}/pfx.parquet/theirs")
            target, message = f"s3://{BUCKET}/pfx.parquet", f"output s3://{BUCKET}/pfx.parquet is a prefix of other objects"
        code = lake_cli.main(["anonymize", lake, target, "--qi", "x,y", "--k", "3", "--report",
                              str(tmp_path / "r.json")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
        no_credentials(err)
    # a release and its report as one object; a report inside the input
    for argv, message in [([f"s3://{BUCKET}/o2.parquet", "--report", f"s3://{BUCKET}/o2.parquet"],
                           f"the release and its report are the same object: s3://{BUCKET}/o2.parquet"),
                          ([tmp_path / "o3.parquet", "--report", f"s3://{BUCKET}/lake3/r.json"],
                           f"report s3://{BUCKET}/lake3/r.json is the input or lies inside it")]:
        code = lake_cli.main(["anonymize", lake, *map(str, argv), "--qi", "x,y", "--k", "3"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
    fs.invalidate_cache()
    assert sorted(fs.find(BUCKET)) == sorted(before) and sorted(p.name for p in tmp_path.iterdir()) == []


def test_killed_at_the_commit(store, tmp_path, capsys):
    """A run killed just before its _SUCCESS PUT leaves the release as it was; one killed just after
    it has committed the new one (the old objects left behind). The next run deletes the leftovers
    of both: only the committed run prefix remains.  (The killed runs are processes of their own;
    the run before them and the one after, in this process.)"""
    import subprocess

    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(60, seed=7).drop(columns=["s"]).to_parquet(src, index=False)
    target = f"s3://{BUCKET}/killed"
    args = ["anonymize", str(src), target, "--qi", "x,y", "--drop", "id", "--overwrite"]
    base = [sys.executable, "-m", "daskmicro", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    assert lake_cli.main(args + ["--k", "3"]) == 0, capsys.readouterr().err
    before, rel, _ = release_on_store(fs, "killed")
    done = subprocess.run(base + ["--k", "4"], env=dict(env, DASKMICRO_FAULT_AT="s3.staged"), capture_output=True)
    assert done.returncode == 137
    after, rel_after, keys = release_on_store(fs, "killed")
    assert after == before and rel_after.equals(rel) and len(runs(keys, "killed")) == 2
    done = subprocess.run(base + ["--k", "5"], env=dict(env, DASKMICRO_FAULT_AT="s3.published"), capture_output=True,
                          text=True)
    assert done.returncode == 137 and "run prefix(es)" in done.stderr     # the first leftovers swept
    after, rel_after, keys = release_on_store(fs, "killed")
    assert after["run"] != before["run"] and verify_k_anonymity(rel_after, ["x", "y"], 5)
    assert len(runs(keys, "killed")) == 2                                   # the old release not yet deleted
    capsys.readouterr()
    code = lake_cli.main(args + ["--k", "6"])
    out, err = capsys.readouterr()
    assert code == 0 and "run prefix(es)" in err, err
    no_credentials(out, err)
    final, rel_final, keys = release_on_store(fs, "killed")
    assert runs(keys, "killed") == [final["run"]] and verify_k_anonymity(rel_final, ["x", "y"], 6)


def test_object_store_example_runs_as_written(store, client, tmp_path, capsys):
    """``workflows/object-store-lake.yaml`` as shipped, run by ``daskmicro run`` on the shared cluster
    against the store of the environment (AWS_ENDPOINT_URL): lake in, release out, only URLs."""
    import shutil

    import yaml

    from daskmicro.cli import main

    endpoint, fs = store
    example = Path(__file__).resolve().parents[1] / "workflows" / "object-store-lake.yaml"
    spec = yaml.safe_load(example.read_text())
    bucket, prefix = spec["input"]["path"].removeprefix("s3://").rstrip("/").split("/", 1)
    fs.mkdir(bucket)
    rng = np.random.default_rng(11)
    qi = spec["qi"].split(",")
    for i in range(3):
        df = pd.DataFrame({c: rng.gamma(2.0, 10.0 ** (j % 3), 150).round(1) for j, c in enumerate(qi)})
        df.insert(0, "record_id", np.arange(150, dtype=np.int64) + 150 * i)
        with fs.open(f"{bucket}/{prefix}/year={2024 + i}/part-0.parquet", "wb") as fh:
            df.to_parquet(fh, index=False)
    shutil.copy(example, tmp_path / example.name)
    capsys.readouterr()
    assert main(["run", str(tmp_path / example.name), "--scheduler", client.scheduler.address, "--quiet"]) == 0, \
        capsys.readouterr().err
    out_prefix = spec["output"]["path"].removeprefix("s3://")
    fs.invalidate_cache()
    manifest = json.loads(fs.cat_file(f"{out_prefix}/_SUCCESS"))
    import pyarrow.parquet as pq

    rel = pd.concat([pq.read_table(f"{out_prefix}/{manifest['run']}/{e['path']}", filesystem=fs).to_pandas()
                     for e in manifest["files"]], ignore_index=True)
    assert len(rel) == 450 and "record_id" not in rel.columns
    assert verify_k_anonymity(rel, qi, spec["k"])
    copy = json.loads(fs.cat_file(spec["report"]["path"].removeprefix("s3://")))
    assert copy["n"] == 450 and copy["verification"]["passed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [example.name]   # only URLs: nothing written here
    no_credentials(tree_text(tmp_path), json.dumps(manifest), json.dumps(copy))


def test_workers_sharing_no_disk_one_killed_mid_write(store, tmp_path, monkeypatch):
    """Real ``dask scheduler`` / ``dask worker`` processes in a working directory of their own, given
    only URLs (lake in, release out on the store): a worker process killed while the run is writing
    its run prefix does not change the release (the same files, byte for byte, as an undisturbed run
    of the same seed), and neither the client's directory nor the workers' holds any of the data."""
    import signal
    import threading
    import time

    from _clusters import connect, start_dask_processes

    from daskmicro.graph import executor

    endpoint, fs = store
    monkeypatch.setattr(executor, "SMALL_GROUP_ROWS", 100)   # both strata through the pipeline
    rng = np.random.default_rng(2)
    n = 2000
    df = pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n), "s": np.arange(n) % 2})
    for i, idx in enumerate(np.array_split(np.arange(n), 4)):
        put(fs, f"nodisk/in/f{i}.parquet", df.iloc[idx])
    client_dir, worker_dir = tmp_path / "client", tmp_path / "workers"
    client_dir.mkdir()
    worker_dir.mkdir()
    monkeypatch.chdir(client_dir)
    env = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL",
                                      "AWS_DEFAULT_REGION")}
    cluster = start_dask_processes(2, cwd=str(worker_dir), env=env)
    opts = ["--qi", "x,y", "--k", "5", "--strata", "s", "--seed", "3", "--partition-size", "500", "--K", "100",
            "--rows-per-file", "500", "--reference", "none", "--quiet"]
    src = f"s3://{BUCKET}/nodisk/in"
    try:
        with connect(cluster) as c:
            assert run_cli([src, f"s3://{BUCKET}/nodisk/ref", *opts], c) == (0, "")
            pids = list(c.run(os.getpid).values())
            finished, seen = threading.Event(), {}

            def killer():  # one worker process, once the run's parts are being written
                deadline = time.monotonic() + 120
                while not finished.is_set() and time.monotonic() < deadline:
                    fs.invalidate_cache()
                    if [k for k in fs.find(f"{BUCKET}/nodisk/out") if "/.run-" in k and k.endswith(".parquet")]:
                        break
                    time.sleep(0.01)
                os.kill(pids[0], signal.SIGKILL)
                seen["killed"] = not finished.is_set() and not fs.exists(f"{BUCKET}/nodisk/out/_SUCCESS")

            th = threading.Thread(target=killer, daemon=True)
            th.start()
            try:
                assert run_cli([src, f"s3://{BUCKET}/nodisk/out", *opts], c) == (0, "")
            finally:
                finished.set()
                th.join(timeout=30)
    finally:
        cluster.stop()
    assert seen.get("killed"), "the worker was not killed while the run was writing"
    ref, rel, _ = release_on_store(fs, "nodisk/ref")
    out, rel_out, keys = release_on_store(fs, "nodisk/out")
    assert [(f["path"], f["sha256"]) for f in out["files"]] == [(f["path"], f["sha256"]) for f in ref["files"]]
    assert len(rel_out) == n and verify_k_anonymity(rel_out, ["s", "x", "y"], 5)
    assert all(k.startswith(f"{BUCKET}/nodisk/out/{out['run']}/") or k.endswith("/_SUCCESS") for k in keys)
    assert list(client_dir.iterdir()) == []
    assert not [p for p in worker_dir.rglob("*") if p.suffix in (".parquet", ".json", ".csv")]


def test_two_runs_into_one_target_the_first_commit_wins(store, client, tmp_path):
    """Two runs into one target, the second committing while the first runs (the first's last step
    before its commit): the first commit wins, the other fails in one line and deletes its own run
    prefix — onto an empty target (If-None-Match) and over a release both meant to replace (If-Match)."""
    from daskmicro.config import RunConfig
    from daskmicro.plan import RunPaths, run

    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(90, seed=8).drop(columns=["s"]).to_parquet(src, index=False)
    target = f"s3://{BUCKET}/race"

    def other(k, overwrite):
        def commit_first():
            run(RunConfig.build(qi=["x", "y"], k=k, drop=["id"], overwrite=overwrite),
                paths=RunPaths(input=src, output=target), client=client)
        return commit_first

    for first_k, (k, overwrite) in enumerate([(3, False), (5, True)], start=4):
        cfg = RunConfig.build(qi=["x", "y"], k=first_k, drop=["id"], overwrite=overwrite)
        with pytest.raises(ParameterError) as err:
            run(cfg, paths=RunPaths(input=src, output=target), client=client, before_commit=other(k, overwrite))
        assert str(err.value).startswith(f"output {target}: another run committed a release there while this one ran")
        assert "\n" not in str(err.value)
        manifest, rel, keys = release_on_store(fs, "race")
        assert manifest["configuration"]["k"] == k and runs(keys, "race") == [manifest["run"]]
        assert len(rel) == 90 and verify_k_anonymity(rel, ["x", "y"], k)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def _wide(tmp_path, n: int, others: int, seed: int) -> Path:
    """A Parquet file of ``n`` rows: QIs ``x``, ``y`` and ``others`` more normal columns (a release
    file of several parts)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({f"v{j}": rng.normal(size=n) for j in range(others)})
    df.insert(0, "y", rng.normal(size=n))
    df.insert(0, "x", rng.normal(size=n))
    src = tmp_path / "wide.parquet"
    df.to_parquet(src, index=False)
    return src


def test_large_files_go_up_in_parts_and_unfinished_uploads_are_aborted(store, client, tmp_path):
    """A release file larger than the store's part size (s3fs's ``default_block_size``, given as a
    storage option) is uploaded in parts and appears whole: its multipart ETag, its bytes the
    manifest's SHA-256, k-anonymous as read back.  The multipart upload a killed writer left under a
    run prefix is aborted when the prefix is swept."""
    import hashlib

    endpoint, fs = store
    n = 50_000
    src = _wide(tmp_path, n, 30, seed=9)
    bucket_key = "parts/.run-00000000000000dd/part-00000.parquet"
    fs.pipe_file(f"{BUCKET}/{bucket_key.replace('part-00000.parquet', 'x.parquet')}", b"left by a killed run")
    left = fs.call_s3("create_multipart_upload", Bucket=BUCKET, Key=bucket_key)
    fs.call_s3("upload_part", Bucket=BUCKET, Key=bucket_key, UploadId=left["UploadId"], PartNumber=1,
               Body=b"0" * (5 * 2**20))
    options = {"default_block_size": 5 * 2**20}
    report = anonymize_file(src, f"s3://{BUCKET}/parts", ["x", "y"], 3, client=client, storage_options=options,
                            rows_per_file=n)
    assert report.n == n
    manifest, rel, keys = release_on_store(fs, "parts")
    assert runs(keys, "parts") == [manifest["run"]]
    (entry,) = manifest["files"]
    key = f"{BUCKET}/parts/{manifest['run']}/{entry['path']}"
    assert entry["bytes"] > 2 * 5 * 2**20
    etag = fs.info(key, refresh=True)["ETag"].strip('"')
    assert re.fullmatch(r"[0-9a-f]{32}-([0-9]+)", etag) and int(etag.split("-")[1]) >= 3, etag
    assert hashlib.sha256(fs.cat_file(key)).hexdigest() == entry["sha256"]
    assert len(rel) == n and verify_k_anonymity(rel, ["x", "y"], 3)
    uploads = fs.call_s3("list_multipart_uploads", Bucket=BUCKET, Prefix="parts/")
    assert not uploads.get("Uploads")


# --------------------------------------------------------------------------- one object: a single-file release, a report


def test_single_file_release_and_its_report_as_objects(store, client, tmp_path, capsys):
    """``s3://…/rel.parquet``: one object, k-anonymous as read back from the store in its published
    dtypes, rows kept, its report beside it; nothing written locally but the private run record.
    An existing object refused without --overwrite (nothing changed), replaced with it."""
    endpoint, fs = store
    src = tmp_path / "in.parquet"
    df = frame(150, seed=11).drop(columns=["s"])
    df.to_parquet(src, index=False)
    target = f"s3://{BUCKET}/files/rel.parquet"
    argv = ["anonymize", str(src), target, "--qi", "x,y", "--k", "3", "--drop", "id", "--seed", "2"]
    assert lake_cli.main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert f"release: {target}" in out and f"s3://{BUCKET}/files/rel.report.json" in out
    rel = read_object(fs, "files/rel.parquet")
    assert len(rel) == 150 and rel["y"].dtype == np.dtype("float64") or rel["y"].dtype.kind in "iuf"
    assert verify_k_anonymity(rel, ["x", "y"], 3) and rel.groupby(["x", "y"]).size().min() >= 3
    doc = json.loads(fs.cat_file(f"{BUCKET}/files/rel.report.json"))
    assert doc["verification"]["k_anonymity"]["min_count"] >= 3 and doc["paths"]["output"] == target
    no_credentials(store_text(fs, "files"), out, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    etag = fs.info(f"{BUCKET}/files/rel.parquet", refresh=True)["ETag"]
    # an existing object: refused in one line, the store unchanged
    assert lake_cli.main([*argv[:-2], "--seed", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"output already exists: {target} (use --overwrite" in err, err
    assert fs.info(f"{BUCKET}/files/rel.parquet", refresh=True)["ETag"] == etag
    # replaced with --overwrite, its report with it
    assert lake_cli.main([*argv[:-4], "--k", "5", "--drop", "id", "--seed", "5", "--overwrite"]) == 0
    capsys.readouterr()
    rel = read_object(fs, "files/rel.parquet")
    assert len(rel) == 150 and verify_k_anonymity(rel, ["x", "y"], 5)
    assert json.loads(fs.cat_file(f"{BUCKET}/files/rel.report.json"))["k"] == 5
    assert sorted(k.rsplit("/", 1)[1] for k in fs.find(f"{BUCKET}/files")) == ["rel.parquet", "rel.report.json"]


def test_reports_on_the_store_from_every_entry(store, client, tmp_path, capsys):
    """A report (or a report copy) written as an object from the API (a local release), a spec (a
    release and its report as objects) and a directory release on the store; the spec's summary
    names both objects."""
    from daskmicro.workflow import parse_spec
    from daskmicro.workflow.runner import execute_run

    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(90, seed=12).drop(columns=["s"]).to_parquet(src, index=False)
    report = anonymize_file(src, tmp_path / "local.parquet", ["x", "y"], 3, drop=["id"],
                            report=f"s3://{BUCKET}/reports/local.json")
    assert json.loads(fs.cat_file(f"{BUCKET}/reports/local.json"))["n"] == report.n == 90
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "local.parquet"]
    spec = parse_spec({"name": "objects", "input": {"path": str(src), "drop": ["id"]}, "qi": ["x", "y"], "k": 3,
                       "output": {"path": f"s3://{BUCKET}/reports/spec.parquet"},
                       "report": {"path": f"s3://{BUCKET}/reports/spec-report.json"}}, base_dir=tmp_path)
    summary = execute_run(spec, client=client)
    assert summary["output"] == f"s3://{BUCKET}/reports/spec.parquet"
    assert summary["report"] == f"s3://{BUCKET}/reports/spec-report.json"
    rel = read_object(fs, "reports/spec.parquet")
    assert len(rel) == 90 and verify_k_anonymity(rel, ["x", "y"], 3)
    anonymize_file(src, f"s3://{BUCKET}/reports/lake", ["x", "y"], 3, client=client, drop=["id"],
                   report=f"s3://{BUCKET}/reports/lake-copy.json")
    manifest, rel, _ = release_on_store(fs, "reports/lake")
    copy = json.loads(fs.cat_file(f"{BUCKET}/reports/lake-copy.json"))
    assert copy["n"] == 90 and len(rel) == 90
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "local.parquet"]
    # the page of each: beside it on the store, or where --output says
    capsys.readouterr()
    assert lake_cli.main(["report", f"s3://{BUCKET}/reports/spec-report.json"]) == 0
    assert capsys.readouterr().out.strip() == f"report: s3://{BUCKET}/reports/spec-report.html"
    assert "information loss" in fs.cat_file(f"{BUCKET}/reports/spec-report.html").decode()
    assert lake_cli.main(["report", f"s3://{BUCKET}/reports/lake", "--output", str(tmp_path / "lake.html")]) == 0
    assert "<svg" in (tmp_path / "lake.html").read_text()
    assert lake_cli.main(["report", f"s3://{BUCKET}/reports/local.json",
                          "--output", f"s3://{BUCKET}/reports/local.html"]) == 0
    capsys.readouterr()
    fs.invalidate_cache()
    before = sorted(fs.find(f"{BUCKET}/reports"))
    for argv, message in [([f"s3://{BUCKET}/reports/spec-report.json"], "page already exists: "
                                                                        f"s3://{BUCKET}/reports/spec-report.html"),
                          ([f"s3://{BUCKET}/reports/none.parquet"], f"report does not exist: s3://{BUCKET}/reports/none.report.json"),
                          ([f"s3://{BUCKET}/reports/lake", "--output", f"s3://{BUCKET}/reports/page.txt"],
                           "--output must end in .html")]:
        assert lake_cli.main(["report", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    fs.invalidate_cache()
    assert sorted(fs.find(f"{BUCKET}/reports")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "lake.html", "local.parquet"]


def test_two_writers_of_one_object_the_first_wins(store, client, tmp_path):
    """Another writer puts the object while the run works (its last step before the commit): the
    run fails in one line, the other object is left as it is, and nothing else is written — onto a
    key that held nothing (If-None-Match) and over an object being replaced (If-Match)."""
    from daskmicro.config import RunConfig
    from daskmicro.plan import RunPaths, run

    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(90, seed=13).drop(columns=["s"]).to_parquet(src, index=False)
    target = f"s3://{BUCKET}/race-file/rel.parquet"
    for overwrite in (False, True):
        theirs = f"theirs {overwrite}".encode()
        cfg = RunConfig.build(qi=["x", "y"], k=3, drop=["id"], overwrite=overwrite)
        with pytest.raises(ParameterError) as err:
            run(cfg, paths=RunPaths(input=src, output=target), client=client,
                before_commit=lambda: fs.pipe_file(f"{BUCKET}/race-file/rel.parquet", theirs))
        assert str(err.value).startswith(f"output {target}: another run wrote it while this one ran")
        assert "\n" not in str(err.value)
        fs.invalidate_cache()
        assert fs.cat_file(f"{BUCKET}/race-file/rel.parquet") == theirs
        assert sorted(fs.find(f"{BUCKET}/race-file")) == [f"{BUCKET}/race-file/rel.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_large_single_object_goes_up_in_parts(store, client, tmp_path):
    """A single-file release larger than twice the part size is a multipart upload completed on the
    same condition: it appears whole, with a multipart ETag, k-anonymous as read back."""
    endpoint, fs = store
    n = 40_000
    src = _wide(tmp_path, n, 36, seed=14)
    report = anonymize_file(src, f"s3://{BUCKET}/big/rel.parquet", ["x", "y"], 3, client=client,
                            storage_options={"default_block_size": 5 * 2**20})
    info = fs.info(f"{BUCKET}/big/rel.parquet", refresh=True)
    etag = info["ETag"].strip('"')
    assert info["size"] > 2 * 5 * 2**20 and re.fullmatch(r"[0-9a-f]{32}-([0-9]+)", etag), etag
    rel = read_object(fs, "big/rel.parquet")
    assert report.n == n == len(rel) and verify_k_anonymity(rel, ["x", "y"], 3)
    assert not fs.call_s3("list_multipart_uploads", Bucket=BUCKET, Prefix="big/").get("Uploads")


def test_a_store_without_conditional_writes_gets_plain_writes(store, client, tmp_path):
    """A store that answers 501 NotImplemented to If-None-Match / If-Match (a relay in front of the
    S3 server, as some S3-compatible stores answer): a release object, a directory release's
    _SUCCESS and their replacements are written without the condition, and committed as usual —
    k-anonymous as read back, rows kept; the relay saw and refused the conditional writes first."""
    from _s3 import NoConditionalWrites

    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(120, seed=17).drop(columns=["s"]).to_parquet(src, index=False)
    relay = NoConditionalWrites(endpoint)
    try:
        options = {"endpoint_url": relay.url}
        for k, overwrite in ((3, False), (4, True)):     # onto nothing (If-None-Match), then over it (If-Match)
            for target in (f"s3://{BUCKET}/plain/rel.parquet", f"s3://{BUCKET}/plain/lake"):
                refused = len(relay.refused)
                report = anonymize_file(src, target, ["x", "y"], k, drop=["id"], client=client, seed=1,
                                        overwrite=overwrite, storage_options=options)
                assert report.n == 120
                assert len(relay.refused) > refused, relay.refused     # the condition was asked for, and refused
        rel = read_object(fs, "plain/rel.parquet")
        assert len(rel) == 120 and verify_k_anonymity(rel, ["x", "y"], 4)
        manifest, lake, found = release_on_store(fs, "plain/lake")
        assert manifest["configuration"]["k"] == 4 and len(lake) == 120 and verify_k_anonymity(lake, ["x", "y"], 4)
        assert runs(found, "plain/lake") == [manifest["run"]]               # the replaced release deleted
        for key in ("plain/rel.parquet", "plain/lake/_SUCCESS"):
            asked = {line.rsplit(" ", 1)[1] for line in relay.refused if line.split(" ")[1].endswith(key)}
            assert asked == {"if-none-match", "if-match"}, relay.refused
    finally:
        relay.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_dask_performance_reports_on_the_store(store, client, tmp_path, capsys):
    """--dask-report with outputs on the store: a directory release's page in its run prefix (named
    by the report inside it, deleted with the run), a release object's beside its report object, a
    local release's beside its report object; each the Dask page, linked by the run report; nothing
    written locally."""
    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(90, seed=19).drop(columns=["s"]).to_parquet(src, index=False)
    common = ["--qi", "x,y", "--k", "3", "--drop", "id", "--dask-report", "--scheduler", client.scheduler.address]
    cases = [  # (output, --report, where the page goes, how the report links it)
        (f"s3://{BUCKET}/dask/lake", None, None, "_dask-report.html"),
        (f"s3://{BUCKET}/dask/rel.parquet", None, "dask/rel.report.dask.html", "rel.report.dask.html"),
        (str(tmp_path / "local.parquet"), f"s3://{BUCKET}/dask/local.json", "dask/local.dask.html", "local.dask.html"),
    ]
    for output, report, page, link in cases:
        capsys.readouterr()
        assert lake_cli.main(["anonymize", str(src), output, *common, *(["--report", report] if report else [])]) == 0
        out = capsys.readouterr().out
        if page is None:   # inside the run prefix the manifest names
            manifest, rel, found = release_on_store(fs, "dask/lake")
            page = f"dask/lake/{manifest['run']}/_dask-report.html"
            doc = json.loads(fs.cat_file(f"{BUCKET}/dask/lake/{manifest['run']}/_report.json"))
            assert f"{BUCKET}/{page}" in found and len(rel) == 90
            # the release's page beside the release links the Dask page where it lies, in the run prefix
            assert lake_cli.main(["report", output]) == 0
            assert f'href="lake/{manifest["run"]}/_dask-report.html"' in fs.cat_file(f"{BUCKET}/dask/lake.report.html").decode()
            capsys.readouterr()
        else:
            key = "dask/rel.report.json" if report is None else "dask/local.json"
            doc = json.loads(fs.cat_file(f"{BUCKET}/{key}"))
        fs.invalidate_cache()
        html = fs.cat_file(f"{BUCKET}/{page}").decode()
        assert "<html" in html.lower() and "bokeh" in html.lower()
        assert doc["performance_report"] == link and f"dask:    s3://{BUCKET}/{page}" in out, out
        no_credentials(html, json.dumps(doc))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "local.parquet"]


def test_a_refused_write_leaves_no_object_behind_even_those_still_being_written(store, client, tmp_path):
    """The store refuses the PUT of one file of a directory release (403 AccessDenied, a relay in
    front of the S3 server) while the other files' PUTs are held up on their way: the run fails in one
    line naming the refused object, and once the held PUTs have landed — after the failed run deleted
    its run prefix — nothing of the run is left under the target (the late writer finds its run
    gone and deletes its object).  A later run commits as usual."""
    import time

    from _s3 import RefusingStore

    endpoint, fs = store
    rng = np.random.default_rng(23)
    n = 4000
    src = tmp_path / "in.parquet"
    pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n)}).to_parquet(src, index=False)
    target = f"s3://{BUCKET}/refused"
    others = tuple(f"/part-{i:05d}.parquet" for i in range(1, 4))   # whichever the other worker writes
    relay = RefusingStore(endpoint, refuse="/part-00000.parquet", slow=others, hold=4)
    try:
        with pytest.raises(Exception) as info:
            anonymize_file(src, target, ["x", "y"], 3, client=client, seed=1, rows_per_file=1000,
                           storage_options={"endpoint_url": relay.url})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not relay.landed or len(relay.landed) < len(relay.held)):
            time.sleep(0.2)                     # every held PUT landed, after the failure
        assert relay.landed and len(relay.landed) == len(relay.held), (relay.held, relay.landed)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            fs.invalidate_cache()
            left = fs.find(f"{BUCKET}/refused")
            if not left:
                break
            time.sleep(0.5)
        assert left == [], left                 # nothing of the failed run: no part, no fragment, no owner
    finally:
        relay.close()
    message = str(info.value)
    assert info.type is ParameterError and "\n" not in message, (info.type, message)
    assert f"cannot write {target}/.run-" in message and "part-00000.parquet" in message, message
    report = anonymize_file(src, target, ["x", "y"], 3, client=client, seed=1, rows_per_file=1000)
    manifest, rel, keys = release_on_store(fs, "refused")
    assert report.n == n == len(rel) and verify_k_anonymity(rel, ["x", "y"], 3)
    assert runs(keys, "refused") == [manifest["run"]], keys
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_a_late_write_into_a_removed_scratch_folder_deletes_itself(store):
    """A fragment written into the run's scratch folder after that folder was removed — by a worker
    the scheduler gave up on, in a run that goes on and commits — deletes itself and fails in one
    line: a fragment (published rows beside their input row ids) never stays under a release."""
    import pyarrow as pa

    from daskmicro.io import shuffle as sh
    from daskmicro.io.objectcommit import RemoteTarget
    from daskmicro.io.recovery import OWNER
    from daskmicro.io.source import RID

    _, fs = store
    run = RemoteTarget(f"s3://{BUCKET}/late-scratch").open_run()
    try:
        df = pd.DataFrame({"x": np.arange(40, dtype=np.float64), RID: np.arange(40, dtype=np.int64)})
        schema = sh.fragment_schema(pa.schema([pa.field("x", pa.float64())]), False)
        cuts = np.array([2 ** 63], dtype=np.uint64)
        target = sh.FragmentTarget(5, [], {(): ("", 2, cuts)}, {(): 0}, schema, sh.location(run, sh.SHUFFLE_DIR),
                                   run.store)
        sh.open_scratch(run, sh.SHUFFLE_DIR)
        assert sum(sh.scatter_piece(df, 0, target).values()) == 40     # while the folder is open: written
        sh.remove_fragments(run)
        with pytest.raises(ParameterError) as info:
            sh.scatter_piece(df, 1, target)                             # late: after the folder went
        fs.invalidate_cache()
        left = [k.rsplit("/", 1)[-1] for k in fs.find(f"{BUCKET}/late-scratch")]
        assert not [k for k in left if k.endswith(".arrow")] and OWNER in left, left   # the run goes on
        assert "\n" not in str(info.value) and "scratch folder" in str(info.value)
    finally:
        run.discard()


def test_a_single_object_release_that_cannot_be_read_back_is_taken_back(store, client, tmp_path):
    """The store takes the release object's PUT but refuses to read it back (403 on its GET, a relay
    in front of the S3 server): the run fails in one line naming the object and deletes the object
    it wrote, so no release is left that the run reported as failed; nothing written locally."""
    from _s3 import Relay, error_response

    class NoReading(Relay):
        def answer(self, first: str, names: set):
            method, _, path = first.partition(" ")
            if method == "GET" and path.split("?", 1)[0].endswith("/unread.parquet"):
                return error_response("403 Forbidden", "AccessDenied", "Access Denied")
            return None

    endpoint, fs = store
    src = tmp_path / "in.parquet"
    frame(120, seed=4).drop(columns=["s"]).to_parquet(src, index=False)
    target = f"s3://{BUCKET}/unread/unread.parquet"
    relay = NoReading(endpoint)
    try:
        with pytest.raises(ParameterError) as info:
            anonymize_file(src, target, ["x", "y"], 3, client=client, seed=1, drop=["id"],
                           storage_options={"endpoint_url": relay.url})
    finally:
        relay.close()
    message = str(info.value)
    assert "\n" not in message and f"cannot read back {target}" in message, message
    fs.invalidate_cache()
    assert not fs.exists(f"{BUCKET}/unread/unread.parquet") and not fs.exists(f"{BUCKET}/unread/unread.report.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
