"""Delta Lake tables on an S3-compatible store (daskmicro.io.deltastore), against moto's S3 server on
loopback (the suite's ``store``, the helpers of test_object_store) and the suite's shared cluster: releases committed as
table versions from the CLI, the API and a workflow spec, read back with deltalake from the store;
a table on the store as input; two writers; a failed version taken back; bad targets refused in one
line with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pyarrow as pa
import pytest

import _s3 as s3t
from _s3 import set_env
from daskmicro import anonymize_file
from daskmicro.cli import main
from daskmicro.errors import ParameterError

deltalake = pytest.importorskip("deltalake")

BUCKET = s3t.BUCKET
QI = ["x", "y"]


def _options(endpoint) -> dict:
    """deltalake's options to read the tables back (the credentials come from the environment)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}


def _table(endpoint, url, version=None) -> pa.Table:
    return deltalake.DeltaTable(url, version=version, storage_options=_options(endpoint)).to_pyarrow_table()


def _k_anonymous(table: pa.Table, columns, k) -> None:
    """Every published tuple (the values as read, in their dtype) occurs at least k times."""
    sizes = table.select(list(columns)).to_pandas().groupby(list(columns), dropna=False, observed=True).size()
    assert sizes.min() >= k, sizes.min()


def _keys(fs, prefix) -> list:
    fs.invalidate_cache()
    return sorted(k[len(f"{BUCKET}/{prefix}/"):] for k in fs.find(f"{BUCKET}/{prefix}"))


def _input(tmp_path, n=2000, seed=0):
    src = tmp_path / "in.parquet"
    s3t.frame(n, seed).to_parquet(src, index=False)
    return src


def test_cli_release_as_versions_of_a_table_on_s3(store, client, tmp_path, monkeypatch, capsys):
    """The CLI commits a release as version 0 of a table on the store, then, with --overwrite, as
    version 1: each read back from the store with deltalake, rows kept and k-anonymous; the run
    prefix gone, the report beside the log, nothing on the local disk, no credential anywhere."""
    endpoint, fs = store
    monkeypatch.chdir(tmp_path)
    src = _input(tmp_path)
    url = f"s3://{BUCKET}/cli-delta"
    argv = ["anonymize", str(src), url, "--qi", "x,y", "--k", "3", "--drop", "id", "--seed", "1",
            "--table-format", "delta", "--scheduler", client.scheduler.address]
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert f"release: {url}/ (" in captured.out and "version 0 of the Delta table" in captured.out
    first = _table(endpoint, url)
    assert first.num_rows == 2000 and "id" not in first.column_names
    _k_anonymous(first, QI, 3)
    assert sorted(first.column("year").to_pylist()) == sorted(s3t.frame(2000, 0)["year"])   # other columns as they are
    report = json.loads(fs.cat_file(f"{BUCKET}/cli-delta/_report.json"))
    assert report["delta"]["version"] == 0 and report["delta"]["k_check"]["ok"] and report["n"] == 2000
    keys = _keys(fs, "cli-delta")
    assert not [k for k in keys if k.startswith(".run-")] and "_SUCCESS" not in keys
    assert all(k.startswith("_delta_log/") or k == "_report.json" or ("/" not in k and k.endswith(".parquet"))
               for k in keys), keys
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    s3t.no_credentials(captured.out, captured.err, s3t.store_text(fs, "cli-delta"))

    assert main(argv) == 2   # a table there: --overwrite makes its next version
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"output already exists: {url}" in err
    assert main([*argv[:-2], "--k", "5", "--overwrite", "--dask-report", "--scheduler", client.scheduler.address]) == 0
    out = capsys.readouterr().out
    assert "version 1 of the Delta table" in out and f"dask:    {url}/_dask-report.html" in out
    fs.invalidate_cache()
    assert "bokeh" in fs.cat_file(f"{BUCKET}/cli-delta/_dask-report.html").decode().lower()   # beside the log
    assert deltalake.DeltaTable(url, storage_options=_options(endpoint)).version() == 1
    second = _table(endpoint, url)
    assert second.num_rows == 2000
    _k_anonymous(second, QI, 5)
    old = _table(endpoint, url, version=0)   # the earlier version, as it was
    assert old.num_rows == 2000 and old.sort_by("x").equals(first.sort_by("x"))
    assert json.loads(fs.cat_file(f"{BUCKET}/cli-delta/_report.json"))["delta"]["version"] == 1
    assert json.loads(fs.cat_file(f"{BUCKET}/cli-delta/_report.json"))["performance_report"] == "_dask-report.html"
    assert not [k for k in _keys(fs, "cli-delta") if k.startswith(".run-")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    # the page of the current version: one object beside the table, which is left as it was
    keys = _keys(fs, "cli-delta")
    capsys.readouterr()
    assert main(["report", url]) == 0
    assert capsys.readouterr().out.strip() == f"report: {url}.report.html"
    page = fs.cat_file(f"{BUCKET}/cli-delta.report.html").decode()
    assert "<svg" in page and "k — smallest group size promised</td><td class=\"num\">5<" in page
    assert _keys(fs, "cli-delta") == keys and sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    s3t.no_credentials(page)


def test_api_and_spec_write_tables_on_s3(store, client, tmp_path):
    """The API (credentials as storage_options only, written nowhere; partitioned) and a workflow
    spec (a first version, then the next with output.overwrite) commit tables on the store."""
    from daskmicro.workflow import parse_spec
    from daskmicro.workflow.runner import execute_run

    endpoint, fs = store
    src = _input(tmp_path, 1500, seed=2)
    url = f"s3://{BUCKET}/api-delta"
    options = {"key": s3t.KEY_ID, "secret": s3t.OPT_SECRET, "endpoint_url": endpoint}
    old = set_env({"AWS_SECRET_ACCESS_KEY": None})
    try:   # this process has only the options' credentials (moto accepts any)
        report = anonymize_file(src, url, QI, 4, client=client, drop=["id"], table_format="delta",
                                partition_by=["s"], storage_options=options)
    finally:
        set_env(old)
    dt = deltalake.DeltaTable(url, storage_options=_options(endpoint))
    assert dt.version() == 0 and dt.metadata().partition_columns == ["s"]
    table = dt.to_pyarrow_table()
    assert report.n == 1500 and table.num_rows == 1500
    assert sorted(set(table.column("s").to_pylist())) == ["a", "b", "c"]
    _k_anonymous(table, ["s", *QI], 4)
    assert {k.split("/")[0] for k in _keys(fs, "api-delta") if "/" in k} == {"_delta_log", "s=a", "s=b", "s=c"}
    s3t.no_credentials(s3t.store_text(fs, "api-delta"), json.dumps(report.to_dict(), default=str))

    spec_url = f"s3://{BUCKET}/spec-delta"
    for k, overwrite in ((3, False), (6, True)):
        spec = parse_spec({"name": "delta-s3", "input": {"path": str(src), "drop": ["id"]}, "qi": QI, "k": k,
                           "output": {"path": spec_url, "table_format": "delta", "overwrite": overwrite}},
                          base_dir=tmp_path)
        summary = execute_run(spec, client=client)
        assert summary["rows"] == 1500 and summary["report"] == f"{spec_url}/_report.json"
        table = _table(endpoint, spec_url)
        assert table.num_rows == 1500
        _k_anonymous(table, QI, k)
    assert deltalake.DeltaTable(spec_url, storage_options=_options(endpoint)).version() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_a_table_on_s3_as_input_is_read_as_its_current_version(store, client, tmp_path):
    """A Delta table on the store as input (CLI to a local release; API to a table on the store):
    the rows of its current version only, never those of the version it replaced."""
    endpoint, fs = store
    url = f"s3://{BUCKET}/delta-src"
    deltalake.write_deltalake(url, pa.Table.from_pandas(s3t.frame(700, 7), preserve_index=False),
                              partition_by=["s"], storage_options=_options(endpoint))
    current = s3t.frame(450, 8)
    deltalake.write_deltalake(url, pa.Table.from_pandas(current, preserve_index=False), mode="overwrite",
                              partition_by=["s"], storage_options=_options(endpoint))
    out = tmp_path / "release"
    assert main(["anonymize", url, str(out), "--qi", "x,y", "--k", "3", "--drop", "id",
                 "--scheduler", client.scheduler.address, "--quiet"]) == 0
    release = pd.read_parquet(out)
    assert len(release) == 450   # only the current version's rows, never those of version 0
    assert sorted(release["year"]) == sorted(current["year"])
    assert release.groupby(QI).size().min() >= 3
    target = f"s3://{BUCKET}/delta-from-delta"
    report = anonymize_file(url, target, QI, 4, client=client, drop=["id"], table_format="delta",
                            storage_options={"endpoint_url": endpoint})
    table = _table(endpoint, target)
    assert report.n == 450 and table.num_rows == 450
    _k_anonymous(table, ["s", *QI], 4)


def test_two_writers_of_one_table_the_first_commit_wins(store, client, tmp_path):
    """Another writer commits a version while a run works: the run's commit is refused in one line,
    its run prefix deleted, the other version left as it is (a new table, then an existing one)."""
    from daskmicro.config import RunConfig
    from daskmicro.plan import RunPaths, run

    endpoint, fs = store
    src = _input(tmp_path, 600, seed=3)
    theirs = pa.Table.from_pandas(s3t.frame(50, 9), preserve_index=False)

    for version, overwrite in ((0, False), (1, True)):
        url = f"s3://{BUCKET}/race-delta-{version}"
        if overwrite:   # a table of daskmicro's (a trial run, as this one) that the other writer then changes
            anonymize_file(src, url, QI, 3, drop=["id"], table_format="delta")

        def other():
            deltalake.write_deltalake(url, theirs, mode="overwrite", schema_mode="overwrite",
                                      storage_options=_options(endpoint))

        cfg = RunConfig.build(qi=QI, k=3, drop=["id"], table_format="delta", overwrite=overwrite)
        with pytest.raises(ParameterError) as err:
            run(cfg, paths=RunPaths(input=src, output=url), client=client, before_commit=other)
        assert str(err.value).startswith(f"output {url}: another run committed a version of the Delta table "
                                         "while this one ran") and "\n" not in str(err.value)
        dt = deltalake.DeltaTable(url, storage_options=_options(endpoint))
        assert dt.version() == version and dt.to_pyarrow_table().num_rows == 50
        assert not [k for k in _keys(fs, f"race-delta-{version}") if k.startswith(".run-")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


_COMMIT = textwrap.dedent("""
    import json, sys
    from daskmicro.errors import VerificationError
    from daskmicro.io.delta import commit_delta
    from daskmicro.io.deltastore import DeltaTableTarget
    from daskmicro.io.objectcommit import RemoteRun

    target = DeltaTableTarget(sys.argv[1])
    target.check(True)
    try:
        done = commit_delta(RemoteRun(target, sys.argv[2]), target, [{"path": "part-00000.parquet"}], ["x", "y"],
                            3, int(sys.argv[3]))
        print(json.dumps({"version": done["version"]}))
    except VerificationError as exc:
        print(json.dumps({"refused": str(exc)}))
""")


def test_a_version_that_fails_its_check_is_taken_back(store, tmp_path):
    """A committed version that fails its read-back check (here: other rows than the run counted) is
    taken back at once: a new table removed, else the previous version restored and the failed
    version's files deleted, so that it cannot be read by version either.  (Run in a process of its
    own: deltalake's restore holds the GIL that this process's S3 server needs.)"""
    endpoint, fs = store
    url, run = f"s3://{BUCKET}/undo-delta", ".run-00000000000000dd"
    rows = s3t.frame(100, 10)[["x", "y"]]   # each tuple three times: k = 3 holds, only the count is off
    s3t.put(fs, f"undo-delta/{run}/part-00000.parquet", pd.concat([rows] * 3, ignore_index=True))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), DASKMICRO_LEDGER="off")

    def commit(n):
        done = subprocess.run([sys.executable, "-c", _COMMIT, url, run, str(n)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert "rows in = 299, rows read back = 300" in commit(299)["refused"]
    assert _keys(fs, "undo-delta") == [f"{run}/part-00000.parquet"]   # the table it created is gone
    assert commit(300) == {"version": 0}
    v0 = deltalake.DeltaTable(url, storage_options=_options(endpoint))
    kept = sorted(v0.file_uris())
    assert "rows read back = 300" in commit(301)["refused"]
    dt = deltalake.DeltaTable(url, storage_options=_options(endpoint))
    assert dt.version() == 2 and sorted(dt.file_uris()) == kept and dt.to_pyarrow_table().num_rows == 300
    data = [k for k in _keys(fs, "undo-delta") if k.endswith(".parquet") and not k.startswith(".run-")]
    assert [f"s3://{BUCKET}/undo-delta/{k}" for k in data] == kept   # version 1's own files deleted
    with pytest.raises(Exception):
        deltalake.DeltaTable(url, version=1, storage_options=_options(endpoint)).to_pyarrow_table()


def test_bad_delta_targets_and_inputs_one_line_nothing_written(store, client, tmp_path, capsys):
    endpoint, fs = store
    src = _input(tmp_path, 200, seed=4)
    fs.pipe_file(f"{BUCKET}/not-delta/notes.txt", b"theirs")
    fs.pipe_file(f"{BUCKET}/broken-delta/_delta_log/00000000000000000000.json", b"not a log")
    s3t.put(fs, "parquet-lake/part-0.parquet", s3t.frame(60))
    fs.invalidate_cache()
    assert main(["anonymize", str(src), f"s3://{BUCKET}/parquet-release", "--qi", "x,y", "--k", "3", "--drop", "id",
                 "--quiet", "--scheduler", client.scheduler.address]) == 0   # a Parquet release (_SUCCESS) on the store
    fs.invalidate_cache()
    before = sorted(fs.find(BUCKET))
    cases = [
        (["s3://no-such-bucket-d/table"], "output: bucket not found: s3://no-such-bucket-d/table"),
        ([f"s3://{BUCKET}/not-delta"], f"output s3://{BUCKET}/not-delta holds objects and is not a Delta table "
                                       "(e.g. notes.txt)"),
        ([f"s3://{BUCKET}/parquet-release"], f"output s3://{BUCKET}/parquet-release holds objects and is not a "
                                             "Delta table (e.g. _SUCCESS)"),
        ([f"s3://{BUCKET}/broken-delta", "--overwrite"],
         f"output s3://{BUCKET}/broken-delta holds a _delta_log/ that is not a readable Delta table"),
        ([f"s3://{BUCKET}/t.parquet"], "table_format 'delta' (--table-format) needs a directory OUTPUT, not a single "
                                       f"file (a Delta table is a directory of files and its log): s3://{BUCKET}/t.parquet"),
        ([f"s3://{s3t.KEY_ID}:{s3t.SECRET}@{BUCKET}/t"], f"credentials in a URL are refused (they would be recorded "
                                                          f"with the input's path): s3://{BUCKET}/t"),
        (["gs://bucket/table"], "Delta tables are read and written in local directories and on s3:// stores, not on gs://"),
        ([f"s3://{BUCKET}/parquet-lake/t"], f"output s3://{BUCKET}/parquet-lake/t is the input or lies inside or "
                                            "around it"),
    ]
    for argv, message in cases:
        source = f"s3://{BUCKET}/parquet-lake" if "parquet-lake" in argv[0] else str(src)
        code = main(["anonymize", source, *argv, "--qi", "x,y", "--k", "3", "--drop", "id", "--table-format",
                     "delta", "--scheduler", client.scheduler.address])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, (argv, err)
        s3t.no_credentials(err)
    fs.invalidate_cache()
    assert sorted(fs.find(BUCKET)) == before and sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    with pytest.raises(ParameterError, match=r"^storage_options\.requester_pays: not an option a Delta table on an "
                                             r"object store can take"):
        anonymize_file(src, f"s3://{BUCKET}/t", QI, 3, table_format="delta",
                       storage_options={"endpoint_url": endpoint, "requester_pays": True})
    # a Delta table as input: a file its log names is missing
    url = f"s3://{BUCKET}/holed-delta"
    deltalake.write_deltalake(url, pa.Table.from_pandas(s3t.frame(90), preserve_index=False), partition_by=["s"],
                              storage_options=_options(endpoint))
    gone = sorted(k for k in fs.find(f"{BUCKET}/holed-delta") if "/s=b/" in k)[0]
    fs.rm(gone)
    fs.invalidate_cache()
    before = sorted(fs.find(BUCKET))
    code = main(["anonymize", url, str(tmp_path / "rel"), "--qi", "x,y", "--k", "3", "--drop", "id"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"the Delta table {url} is incomplete: {gone[len(BUCKET) + len('/holed-delta/'):]} is missing" in err
    fs.invalidate_cache()
    assert sorted(fs.find(BUCKET)) == before and sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_a_trial_run_is_refused_beside_a_recorded_version_on_s3(store, client, tmp_path):
    """On the store as locally: a table holding a recorded release takes no trial run's version (the
    earlier versions stay readable by version beside it), a table daskmicro did not write takes no
    release; refused before any work, nothing written."""
    endpoint, fs = store
    src, ledger = _input(tmp_path, 300, seed=5), tmp_path / "ledger"
    url, theirs = f"s3://{BUCKET}/recorded-delta", f"s3://{BUCKET}/their-delta"
    anonymize_file(src, url, QI, 3, drop=["id"], table_format="delta", ledger=str(ledger))
    deltalake.write_deltalake(theirs, pa.Table.from_pandas(s3t.frame(90), preserve_index=False),
                              storage_options=_options(endpoint))
    fs.invalidate_cache()
    before = sorted(fs.find(BUCKET))
    with pytest.raises(ParameterError, match=r"holds a recorded release: a trial run \(ledger off\)"):
        anonymize_file(src, url, QI, 4, drop=["id"], table_format="delta", overwrite=True, ledger="off")
    with pytest.raises(ParameterError, match="is a Delta table daskmicro did not write"):
        anonymize_file(src, theirs, QI, 4, drop=["id"], table_format="delta", overwrite=True, ledger=str(ledger))
    fs.invalidate_cache()
    assert sorted(fs.find(BUCKET)) == before
    assert deltalake.DeltaTable(url, storage_options=_options(endpoint)).version() == 0
    anonymize_file(src, url, QI, 4, drop=["id"], table_format="delta", overwrite=True, ledger=str(ledger))
    assert deltalake.DeltaTable(url, storage_options=_options(endpoint)).version() == 1
