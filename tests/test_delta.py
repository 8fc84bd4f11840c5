"""A release committed as a Delta Lake table version, and a Delta table read as input: real files
on disk, the suite's shared cluster, checked with deltalake and with pyarrow on the files of the version."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from daskmicro.cli import main

deltalake = pytest.importorskip("deltalake")

QI = ["x", "y"]
K = 4


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.normal(size=n), "y": rng.integers(0, 100, size=n).astype(np.int64),
                         "region": rng.choice(["north", "south"], size=n), "v": rng.random(n)})


@pytest.fixture
def lake(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    _frame(300, 1).iloc[:150].to_parquet(src / "a.parquet", index=False)
    _frame(300, 1).iloc[150:].to_parquet(src / "b.parquet", index=False)
    return src


def _anonymize(src, out, client, *extra) -> int:
    return main(["anonymize", str(src), str(out), "--qi", ",".join(QI), "--k", str(K), "--seed", "3",
                 "--scheduler", client.scheduler.address, "--quiet", *extra])


def _k_anonymous(table: pa.Table, columns) -> None:
    """Every published tuple (the values as read, in their dtype) occurs at least K times."""
    df = table.select(list(columns)).to_pandas()
    sizes = df.groupby(list(columns), dropna=False, observed=True).size()
    assert sizes.min() >= K, sizes.min()


def _files_table(out, version=None) -> pa.Table:
    dt = deltalake.DeltaTable(str(out), version=version)
    parts = dt.metadata().partition_columns
    fields = [f for f in dt.to_pyarrow_dataset().schema if f.name in parts]
    part = ds.partitioning(pa.schema(fields), flavor="hive") if fields else None
    return ds.dataset(dt.file_uris(), format="parquet", partitioning=part,
                      partition_base_dir=str(out) if part else None).to_table()


def test_cli_writes_a_delta_version_and_overwrite_makes_the_next(lake, tmp_path, client):
    out = tmp_path / "release"
    assert _anonymize(lake, out, client, "--table-format", "delta") == 0
    dt = deltalake.DeltaTable(str(out))
    assert dt.version() == 0
    table = dt.to_pyarrow_table()
    assert table.num_rows == 300
    _k_anonymous(table, QI)
    files = _files_table(out)
    assert files.num_rows == 300 and table.schema.field("y").type == pa.float64()
    _k_anonymous(files, QI)
    report = json.loads((out / "_report.json").read_text())
    assert report["delta"]["version"] == 0 and report["delta"]["k_check"]["ok"]
    assert not (out / "_SUCCESS").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".release.")]   # the staging area is gone

    assert _anonymize(lake, out, client, "--table-format", "delta") == 2   # exists: --overwrite needed
    assert _anonymize(lake, out, client, "--table-format", "delta", "--overwrite", "--k", "5") == 0
    assert deltalake.DeltaTable(str(out)).version() == 1
    assert json.loads((out / "_report.json").read_text())["delta"]["version"] == 1
    old = deltalake.DeltaTable(str(out), version=0).to_pyarrow_table()
    assert old.num_rows == 300
    _k_anonymous(old, QI)
    _k_anonymous(deltalake.DeltaTable(str(out)).to_pyarrow_table(), QI)
    # the page of the table's current version, beside the table (the table is left as it was)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert main(["report", str(out)]) == 0
    page = (tmp_path / "release.report.html").read_text()
    assert "<svg" in page and "k — smallest group size promised</td><td class=\"num\">5<" in page
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_partitioned_delta_release(lake, tmp_path, client):
    out = tmp_path / "release"
    assert _anonymize(lake, out, client, "--table-format", "delta", "--partition-by", "region") == 0
    dt = deltalake.DeltaTable(str(out))
    assert dt.version() == 0 and dt.metadata().partition_columns == ["region"]
    table = dt.to_pyarrow_table()
    assert table.num_rows == 300
    assert sorted(set(table.column("region").to_pylist())) == ["north", "south"]
    _k_anonymous(table, ["region", *QI])
    files = _files_table(out)
    assert files.num_rows == 300
    _k_anonymous(files, ["region", *QI])


def test_a_delta_table_as_input_is_read_as_its_current_version(tmp_path, client):
    src, out = tmp_path / "table", tmp_path / "release"
    deltalake.write_deltalake(str(src), pa.Table.from_pandas(_frame(500, 7), preserve_index=False))
    current = _frame(240, 8)
    deltalake.write_deltalake(str(src), pa.Table.from_pandas(current, preserve_index=False), mode="overwrite")
    assert deltalake.DeltaTable(str(src)).version() == 1
    assert _anonymize(src, out, client) == 0
    release = pd.read_parquet(out)
    assert len(release) == 240   # only the current version's rows, never those of version 0
    assert sorted(release["v"]) == sorted(current["v"])   # the non-QI column as it is
    assert release.groupby(QI).size().min() >= K


def test_a_delta_table_named_by_a_relative_path_is_read(tmp_path, client, capsys, monkeypatch):
    """A table given relative to the working directory, partitioned (its hive directories become
    columns); a file its log names that is missing is refused in one line, nothing written."""
    monkeypatch.chdir(tmp_path)
    frame = _frame(200, 11)
    deltalake.write_deltalake("table", pa.Table.from_pandas(frame, preserve_index=False), partition_by=["region"])
    assert _anonymize("table", "release", client) == 0
    release = pd.read_parquet(tmp_path / "release")
    assert len(release) == 200 and sorted(release["v"]) == sorted(frame["v"])
    assert release.groupby(["region", *QI], observed=True).size().min() >= K
    capsys.readouterr()
    next((tmp_path / "table").glob("region=*/*.parquet")).unlink()
    assert _anonymize("table", "again", client) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the Delta table table is incomplete" in err[0], err
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize("output", ["out.parquet", "out.csv"])
def test_delta_output_refused_for_a_file(lake, tmp_path, capsys, output):
    code = main(["anonymize", str(lake), str(tmp_path / output), "--qi", ",".join(QI), "--k", str(K),
                 "--table-format", "delta"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "table_format 'delta' (--table-format)" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_delta_refused_for_an_incremental_run():
    from daskmicro.config import RunConfig
    from daskmicro.errors import ParameterError

    with pytest.raises(ParameterError, match="table_format 'delta'.*incremental"):
        RunConfig.build(qi=("x",), k=3, method="incremental", table_format="delta")


def test_spec_output_table_format(tmp_path):
    from daskmicro.config import RunConfig
    from daskmicro.workflow.sections import check_output
    from daskmicro.errors import ParameterError

    out = check_output({"path": "release", "table_format": "delta"}, tmp_path)
    assert out["table_format"] == "delta"
    cfg = RunConfig.from_spec({"qi": ["x"], "k": 3, "output": out})
    assert cfg.table_format == "delta"
    with pytest.raises(ParameterError, match="output.table_format"):
        check_output({"path": "release", "table_format": "orc"}, tmp_path)


@pytest.mark.parametrize("feature", ["DeletionVectors", "ColumnMapping"])
def test_a_table_whose_files_are_not_its_rows_is_refused(tmp_path, capsys, feature):
    """Deletion vectors keep deleted rows in the files (a withdrawn respondent would come back),
    column mapping renames the files' columns: such a table is refused in one line, nothing written."""
    src = tmp_path / "table"
    deltalake.write_deltalake(str(src), pa.Table.from_pandas(_frame(60, 9), preserve_index=False))
    deltalake.DeltaTable(str(src)).alter.add_feature(getattr(deltalake.TableFeatures, feature),
                                                     allow_protocol_versions_increase=True)
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(["anonymize", str(src), str(tmp_path / "release"), "--qi", ",".join(QI), "--k", str(K)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    name = {"DeletionVectors": "deletionVectors", "ColumnMapping": "columnMapping"}[feature]
    assert f"uses {name}" in err[0] and str(src) in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_version_that_fails_its_check_is_taken_back(tmp_path):
    """A committed version that fails its read-back check (here: other rows than the run counted) is
    taken back at once: a new table removed; else the previous version restored and the failed
    version's own files deleted, so that it cannot be read by version either."""
    from daskmicro.errors import VerificationError
    from daskmicro.io.delta import commit_delta

    staging, out = tmp_path / "staging", tmp_path / "table"
    staging.mkdir()
    rows = _frame(100, 11)[QI]   # each tuple three times: k = 3 holds, only the count is off
    pd.concat([rows] * 3, ignore_index=True).to_parquet(staging / "part-00000.parquet", index=False)
    files = [{"path": "part-00000.parquet"}]
    with pytest.raises(VerificationError, match="rows in = 299, rows read back = 300"):
        commit_delta(staging, out, files, QI, 3, 299)
    assert not out.exists()
    assert commit_delta(staging, out, files, QI, 3, 300)["version"] == 0
    kept = sorted(deltalake.DeltaTable(str(out)).file_uris())
    with pytest.raises(VerificationError, match="rows read back = 300"):
        commit_delta(staging, out, files, QI, 3, 301)
    dt = deltalake.DeltaTable(str(out))
    assert dt.version() == 2 and sorted(dt.file_uris()) == kept and dt.to_pyarrow_table().num_rows == 300
    assert sorted(str(p) for p in out.rglob("*.parquet")) == sorted(u.removeprefix("file://") for u in kept)
    with pytest.raises(Exception):
        deltalake.DeltaTable(str(out), version=1).to_pyarrow_table()


def test_a_table_delta_cannot_hold_leaves_no_directory(tmp_path, client, capsys):
    """A release Delta Lake cannot store (a float16 column: no such Delta type) fails at the commit
    in one line, and the table directory the run began is gone: nothing is left at OUTPUT."""
    src = tmp_path / "in"
    src.mkdir()
    _frame(120, 2).astype({"x": np.float16}).to_parquet(src / "a.parquet", index=False)
    out = tmp_path / "out"
    capsys.readouterr()
    assert _anonymize(src, out, client, "--table-format", "delta") != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Delta table" in err[0], err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_every_version_of_a_table_is_a_release_of_one_kind(lake, tmp_path, client, capsys):
    """A Delta table keeps every version readable by version (until vacuumed), so a new version is
    published beside the earlier ones: a trial run (ledger off) into a table holding a recorded
    release is refused (its cells, not the ledger's, would intersect the recorded ones), as are a
    recorded release into a table holding a trial run's version and any release into a table
    daskmicro did not write (its versions are not releases); nothing is written.  A recorded
    re-release, and a trial over a trial, make the next version."""
    out, ledger = tmp_path / "release", tmp_path / "ledger"
    delta = ("--table-format", "delta", "--overwrite")
    assert _anonymize(lake, out, client, "--table-format", "delta", "--ledger", str(ledger)) == 0
    capsys.readouterr()
    assert _anonymize(lake, out, client, *delta, "--k", "5", "--ledger", "off") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trial run" in err and str(out) in err, err
    assert deltalake.DeltaTable(str(out)).version() == 0
    assert _anonymize(lake, out, client, *delta, "--k", "5", "--ledger", str(ledger)) == 0
    assert deltalake.DeltaTable(str(out)).version() == 1

    trial = tmp_path / "trial"
    assert _anonymize(lake, trial, client, "--table-format", "delta", "--ledger", "off") == 0
    assert _anonymize(lake, trial, client, *delta, "--k", "5", "--ledger", "off") == 0   # still a trial table
    capsys.readouterr()
    assert _anonymize(lake, trial, client, *delta, "--ledger", str(ledger)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trial run's version" in err, err
    assert deltalake.DeltaTable(str(trial)).version() == 1

    theirs = tmp_path / "theirs"   # the user's own table: say raw records
    deltalake.write_deltalake(str(theirs), pa.Table.from_pandas(_frame(300, 1), preserve_index=False))
    for ledger_arg in (str(ledger), "off"):
        assert _anonymize(lake, theirs, client, *delta, "--ledger", ledger_arg) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "daskmicro did not write" in err, err
    assert deltalake.DeltaTable(str(theirs)).version() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "ledger", "release", "theirs", "trial"]
