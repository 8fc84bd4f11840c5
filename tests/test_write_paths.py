"""A run writes only its own output, and never where data or a link would lead it.

The classes under test:

* partition values become paths: whatever a partition column holds (text with ``/``, ``..``,
  ``%``, ``=``, control characters and any script, numbers, dates, nulls), the release lies
  entirely inside its directory, every hive reader (pyarrow's datasets, Dask) reads back the values
  written, and the release is k-anonymous as a hive reader sees it (partition columns count in
  the published tuple); what readers cannot give back (an empty text, hive's null marker as a
  text, a column name that readers skip) is refused before anything is written;
* inputs are known by identity: an output reached through a symbolic link, a hard link or a
  directory link into the input is refused before any work and the input stays byte for byte
  the same;
* a spill directory must exist and lie outside every input and output.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize_file
from daskmicro.errors import InputError, ParameterError

K = 3


def _tree(root: Path) -> dict:
    """sha256 of every file below ``root`` (links not followed), by relative path."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = "link" if p.is_symlink() else ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _frame(values, seed=0):
    """``K``–``K + 3`` records for each partition value, two QIs."""
    rng = np.random.default_rng(seed)
    reps = [K + int(r) for r in rng.integers(0, 4, len(values))]
    col = [v for v, r in zip(values, reps) for _ in range(r)]
    n = len(col)
    return pd.DataFrame({"x": rng.normal(size=n) * 100, "y": rng.integers(0, 1000, n), "reg": col})


def _text(v):
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


_TEXT = st.lists(st.sampled_from(list("ab/.%=\\:?* \n\t#&~_-ü中é'\"\x00") + ["..", "%2F", "a%2", "../../v"]),
                 min_size=1, max_size=8).map("".join)
_VALUES = st.one_of(
    st.lists(_TEXT.filter(lambda t: t != "__HIVE_DEFAULT_PARTITION__"), min_size=1, max_size=4, unique=True),
    st.lists(st.one_of(_TEXT, st.none()), min_size=2, max_size=4, unique=True).filter(lambda v: None in v and "" not in v),
    st.lists(st.integers(-10 ** 12, 10 ** 12), min_size=1, max_size=4, unique=True),
    st.lists(st.dates(), min_size=1, max_size=3, unique=True),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=_VALUES, seed=st.integers(0, 10 ** 6))
def test_partition_values_never_leave_the_release_and_read_back_the_same(tmp_path_factory, values, seed):
    tmp = tmp_path_factory.mktemp("part")
    (tmp / "victim").mkdir()
    (tmp / "victim" / "part-00000.parquet").write_bytes(b"user's file")
    df = _frame(values, seed)
    df.to_parquet(tmp / "in.parquet", index=False)
    before = _tree(tmp)
    out = tmp / "rel"
    try:
        anonymize_file(tmp / "in.parquet", out, qi=["x", "y"], k=K, seed=seed, partition_by=["reg"])
    except (InputError, ParameterError) as exc:  # only what hive readers cannot give back is refused
        assert "" in values, str(exc)
        assert _tree(tmp) == before
        return
    after = _tree(tmp)
    assert {p: h for p, h in after.items() if not p.startswith("rel")} == before  # nothing else touched
    for dirpath, _, filenames in os.walk(out):
        for name in filenames:
            real = Path(os.path.realpath(Path(dirpath) / name))
            assert real.is_relative_to(out.resolve())
    # every partition is one directory right below the release
    assert all(p.parent == out for p in out.glob("reg=*"))
    assert len(list(out.glob("reg=*"))) == len(values)
    expected = df.reg.map(_text).value_counts(dropna=False).sort_index()
    for table in (ds.dataset(out, partitioning="hive").to_table().to_pandas(),):
        got = table.reg.map(_text).value_counts(dropna=False).sort_index()
        assert got.to_dict() == expected.to_dict()
        # k-anonymous as a hive reader sees it: partition column and QIs together
        sizes = table.assign(reg=table.reg.astype(object).where(table.reg.notna(), "<null>")).groupby(
            ["reg", "x", "y"], dropna=False).size()
        assert sizes.min() >= K


def test_dask_reads_back_the_values_written(tmp_path):
    import dask.dataframe as dd

    values = ["a/../../victim", "a/b", "%2F", "x=y", "sp ace", "ü"]
    df = _frame(values)
    df.to_parquet(tmp_path / "in.parquet", index=False)
    anonymize_file(tmp_path / "in.parquet", tmp_path / "rel", qi=["x", "y"], k=K, partition_by=["reg"])
    got = dd.read_parquet(tmp_path / "rel").compute()
    assert sorted(got.reg.astype(str)) == sorted(df.reg)
    assert got.groupby(["reg", "x", "y"]).size().min() >= K
    assert not (tmp_path / "victim").exists()


def test_null_partition_is_hives_null_and_counts_as_a_value(tmp_path):
    df = _frame(["a", None, "b"])
    df.to_parquet(tmp_path / "in.parquet", index=False)
    anonymize_file(tmp_path / "in.parquet", tmp_path / "rel", qi=["x", "y"], k=K, partition_by=["reg"])
    assert (tmp_path / "rel" / "reg=__HIVE_DEFAULT_PARTITION__").is_dir()
    table = ds.dataset(tmp_path / "rel", partitioning="hive").to_table().to_pandas()
    assert int(table.reg.isna().sum()) == int(df.reg.isna().sum())
    # read back by daskmicro itself as a lake input: the nulls stay nulls
    anonymize_file(tmp_path / "rel", tmp_path / "again.parquet", qi=["x", "y"], k=K, strata=["reg"],
                   merge_small_strata=True)
    again = pd.read_parquet(tmp_path / "again.parquet")
    assert int(again.reg.isna().sum()) == int(df.reg.isna().sum())


@pytest.mark.parametrize("values, column, words", [
    (["a", ""], "reg", "empty text"),
    (["a", "__HIVE_DEFAULT_PARTITION__"], "reg", "null partition"),
    (["a", "b"], "_reg", "start with"),
    (["a", "b"], ".reg", "start with"),
])
def test_values_readers_cannot_give_back_are_refused(tmp_path, values, column, words):
    df = _frame(values).rename(columns={"reg": column})
    df.to_parquet(tmp_path / "in.parquet", index=False)
    before = _tree(tmp_path)
    with pytest.raises((InputError, ParameterError)) as info:
        anonymize_file(tmp_path / "in.parquet", tmp_path / "rel", qi=["x", "y"], k=K, partition_by=[column])
    assert words in str(info.value) and column in str(info.value)
    assert "__HIVE_DEFAULT_PARTITION__" not in str(info.value)
    assert _tree(tmp_path) == before


def test_partitions_below_k_are_refused_not_published(tmp_path):
    """A partition directory is read on its own: one with fewer than k records is refused."""
    df = _frame(["a", "b"])
    df = pd.concat([df, df.iloc[:1].assign(reg="c")], ignore_index=True)
    df.to_parquet(tmp_path / "in.parquet", index=False)
    with pytest.raises(ParameterError, match="fewer than k"):
        anonymize_file(tmp_path / "in.parquet", tmp_path / "rel", qi=["x", "y"], k=K, partition_by=["reg"])
    assert not (tmp_path / "rel").exists()


# --------------------------------------------------------------------------- inputs by identity


def _lake(tmp: Path) -> Path:
    lake = tmp / "lake"
    lake.mkdir()
    _frame(["a", "b", "c"]).to_parquet(lake / "a.parquet", index=False)
    _frame(["a", "b", "c"], seed=1).to_parquet(tmp / "raw.parquet", index=False)
    return lake


def _cli(*args, cwd):
    """The command as a user runs it: a process of its own in ``cwd``, everything it prints captured."""
    return subprocess.run([sys.executable, "-m", "daskmicro", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)



@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_output_that_is_an_input_file_through_a_link_is_refused(tmp_path, link, cli):
    lake = _lake(tmp_path)
    (os.symlink if link == "symlink" else os.link)(tmp_path / "raw.parquet", lake / "b.parquet")
    before = _tree(tmp_path)
    done = cli("anonymize", lake, tmp_path / "raw.parquet", "--qi", "x,y", "--k", K, "--overwrite", cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "input" in lines[0], done.stderr
    assert _tree(tmp_path) == before


def test_output_inside_the_input_through_a_directory_link_is_refused(tmp_path):
    lake = _lake(tmp_path)
    os.symlink(lake, tmp_path / "elsewhere")
    before = _tree(tmp_path)
    for out in (tmp_path / "elsewhere" / "rel", tmp_path / "elsewhere" / "rel.parquet"):
        with pytest.raises(ParameterError, match="inside"):
            anonymize_file(lake, out, qi=["x", "y"], k=K)
    assert _tree(tmp_path) == before


def test_output_directory_holding_an_input_through_a_link_is_refused(tmp_path):
    lake = _lake(tmp_path)
    (tmp_path / "old").mkdir()
    os.link(lake / "a.parquet", tmp_path / "old" / "a.parquet")   # the old output holds the input's inode
    before = _tree(tmp_path)
    with pytest.raises(ParameterError, match="input"):
        anonymize_file(lake, tmp_path / "old", qi=["x", "y"], k=K, overwrite=True)
    assert _tree(tmp_path) == before


def test_output_through_a_bind_mount_of_the_input_is_refused(tmp_path):
    lake = _lake(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "--bind", str(lake), str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("needs root in a mount namespace that allows bind mounts (mount --bind failed)")
    try:
        with pytest.raises(ParameterError, match="input"):
            anonymize_file(lake, mnt / "rel.parquet", qi=["x", "y"], k=K)
        assert not (lake / "rel.parquet").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("where, words", [
    ("lake", "input"), ("lake/sub", "does not exist"), ("nowhere/dir", "does not exist"), ("rel", "does not exist"),
])
def test_spill_directory_must_exist_outside_inputs_and_outputs(tmp_path, where, words, cli):
    lake = _lake(tmp_path)
    if where == "lake":
        (lake / "spill").mkdir()
        where = "lake/spill"
    before = _tree(tmp_path)
    done = cli("anonymize", lake, tmp_path / "rel", "--qi", "x,y", "--k", K, "--spill-dir", tmp_path / where,
                cwd=tmp_path)
    assert done.returncode != 0 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _tree(tmp_path) == before


def test_spill_directory_around_the_output_is_refused(tmp_path):
    lake = _lake(tmp_path)
    (tmp_path / "spill").mkdir()
    with pytest.raises(ParameterError, match="spill"):
        anonymize_file(lake, tmp_path / "spill" / "rel", qi=["x", "y"], k=K, spill_directory=str(tmp_path / "spill"))
    assert not (tmp_path / "spill" / "rel").exists()


def test_full_disk_under_quiet_prints_one_line_and_leaves_nothing(tmp_path):
    """A real full file system (a 200 KiB tmpfs): the write stage fails on the workers; --quiet
    prints only the one-line error (no Dask task-failure logs) and the output holds nothing."""
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("needs root in a mount namespace that allows mounting a small tmpfs (mount -t tmpfs failed)")
    try:
        lake = tmp_path / "lake"
        lake.mkdir()
        rng = np.random.default_rng(0)
        for i in range(2):
            pd.DataFrame({"x": rng.normal(size=10_000), "y": rng.normal(size=10_000)}).to_parquet(
                lake / f"p{i}.parquet", index=False)
        done = _cli("anonymize", lake, small / "out", "--qi", "x,y", "--k", K, "--quiet", cwd=tmp_path)
        assert done.returncode != 0 and done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("daskmicro: error:") and "No space left" in lines[0], done.stderr
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


@pytest.mark.parametrize("state, output", [
    ("rel/state", "rel"), ("rel", "rel"), ("lake/state", "rel"), ("lake/state", "rel.parquet"), ("rel/x/y", "rel"),
])
def test_private_run_record_never_lands_in_an_input_or_an_output(tmp_path, monkeypatch, state, output):
    """The run record (seed, input paths) goes under $XDG_STATE_HOME/daskmicro/runs: a state home
    set inside, at or around the release or an input is refused before any work."""
    lake = _lake(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / state))
    before = _tree(tmp_path)
    with pytest.raises(ParameterError, match="run record"):
        anonymize_file(lake, tmp_path / output, qi=["x", "y"], k=K, ledger=False, overwrite=True)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_lake_reaching_one_file_twice_is_refused(tmp_path, link):
    """Three links to one file would be three copies of each record: cells of k = 3 copies publish
    the records as they are, though every published tuple occurs k times."""
    lake = _lake(tmp_path)
    for name in ("b.parquet", "c.parquet"):
        (os.symlink if link == "symlink" else os.link)(lake / "a.parquet", lake / name)
    before = _tree(tmp_path)
    with pytest.raises(InputError, match="second time"):
        anonymize_file(lake, tmp_path / "rel.parquet", qi=["x", "y"], k=K, ledger=False)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("kind", ["plain directory", "release with a file added", "release with a folder added",
                                  "Delta table"])
def test_overwrite_replaces_only_a_release_never_other_files(tmp_path, kind):
    """--overwrite replaces a committed release, never a directory of files daskmicro did not write
    there (a mistyped OUTPUT naming a folder of the user's, a note left inside a release, a Delta
    table): the commit deletes the whole directory it replaces, so such a directory is refused
    before any work and stays as it was, as a prefix holding other objects is on an object store."""
    lake = _lake(tmp_path)
    out = tmp_path / "out"
    if kind == "plain directory":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        (out / "sub").mkdir()
        (out / "sub" / "data.csv").write_text("1,2\n")
    elif kind == "Delta table":
        anonymize_file(lake, out, qi=["x", "y"], k=K, ledger=False, table_format="delta")
    else:
        anonymize_file(lake, out, qi=["x", "y"], k=K, ledger=False, partition_by=["reg"])
        if kind == "release with a file added":
            (out / "README.txt").write_text("mine")
        else:
            (out / "reg=a" / "extra").mkdir()
    before = _tree(tmp_path)
    with pytest.raises(ParameterError, match="did not write"):
        anonymize_file(lake, out, qi=["x", "y"], k=K, ledger=False, overwrite=True)
    assert _tree(tmp_path) == before
    done = _cli("anonymize", lake, out, "--qi", "x,y", "--k", K, "--ledger", "off", "--overwrite", cwd=tmp_path)
    assert done.returncode == 2 and "did not write" in done.stderr and done.stderr.count("\n") == 1
    assert _tree(tmp_path) == before
    if kind.startswith("release"):   # the same run again replaces nothing: a no-op, or refused with --force
        assert anonymize_file(lake, out, qi=["x", "y"], k=K, ledger=False, partition_by=["reg"]) is None
        with pytest.raises(ParameterError, match="did not write"):
            anonymize_file(lake, out, qi=["x", "y"], k=K, ledger=False, partition_by=["reg"], force=True)
        assert _tree(tmp_path) == before


def test_overwrite_still_replaces_a_release_and_an_empty_directory(tmp_path):
    lake = _lake(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    anonymize_file(lake, out, qi=["x", "y"], k=K, ledger=False, overwrite=True)
    anonymize_file(lake, out, qi=["x", "y"], k=K, ledger=False, partition_by=["reg"], overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_report.json", "reg=a", "reg=b", "reg=c"]
    anonymize_file(lake, out, qi=["x", "y"], k=K + 1, ledger=False, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "_report.json", "part-00000.parquet"]


def test_overwrite_of_an_output_that_is_a_link_is_refused(tmp_path):
    """OUTPUT a symbolic link to a directory: the commit would move the link aside, put the release
    in its place and leave the link behind as a hidden sibling (.out.old-*), never writing where it
    points; refused before any work instead, the link and its directory left as they were."""
    lake = _lake(tmp_path)
    (tmp_path / "real").mkdir()
    anonymize_file(lake, tmp_path / "real", qi=["x", "y"], k=K, ledger=False, overwrite=True)
    os.symlink(tmp_path / "real", tmp_path / "out")
    before = _tree(tmp_path)
    with pytest.raises(ParameterError, match="symbolic link"):
        anonymize_file(lake, tmp_path / "out", qi=["x", "y"], k=K + 1, ledger=False, overwrite=True)
    assert _tree(tmp_path) == before


# --------------------------------------------------------------------------- a committed release is never added to


@pytest.mark.parametrize("kind", ["directory release", "Delta table"])
def test_nothing_is_written_inside_a_committed_release(tmp_path, cli, kind):
    """A file written into a directory release becomes part of it for every reader of the directory
    (a second release's rows read as the first's); the report page, a release file, a spec or demo
    data were all written there."""
    _frame(["a", "b", "c"]).to_parquet(tmp_path / "raw.parquet", index=False)
    rel = tmp_path / "rel"
    if kind == "directory release":
        anonymize_file(tmp_path / "raw.parquet", rel, qi=["x", "y"], k=K, keep=["reg"], ledger="off")
    else:
        (rel / "_delta_log").mkdir(parents=True)
        (rel / "_delta_log" / "00000000000000000000.json").write_text("{}")
    (rel / "region=a").mkdir(exist_ok=True)
    before = _tree(tmp_path)
    attempts = [
        ("anonymize", tmp_path / "raw.parquet", rel / "second.parquet", "--qi", "x,y", "--k", K, "--keep", "reg"),
        ("anonymize", tmp_path / "raw.parquet", tmp_path / "o.parquet", "--qi", "x,y", "--k", K, "--keep", "reg",
         "--report", rel / "region=a" / "r.json"),
        ("spec", tmp_path / "raw.parquet", rel / "s.json", "--qi", "x,y", "--k", K),
        ("demo-data", rel / "more.csv", "--n", "10"),
        ("demo", "--output", rel, "--n", "200", "--k", K, "--workers", "1"),
        ("sweep", tmp_path / "raw.parquet", "--qi", "x,y", "--k", K, "--nu", "1", "--out", rel),
    ]
    if kind == "directory release":
        attempts += [("report", rel, "--output", rel / "page.html"), ("report", rel / "_report.json")]
    for args in attempts:
        done = cli(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "inside the committed release" in lines[0], (args, done.stderr)
        assert _tree(tmp_path) == before, args


@pytest.mark.parametrize("where", ["ledger", "ledger below", "run records"])
def test_private_folders_never_lie_inside_a_committed_release(tmp_path, monkeypatch, where):
    """A release ledger given as (or below) a directory release got its key and series written into
    the release, to be published with it."""
    _frame(["a", "b", "c"]).to_parquet(tmp_path / "raw.parquet", index=False)
    rel = tmp_path / "rel"
    anonymize_file(tmp_path / "raw.parquet", rel, qi=["x", "y"], k=K, keep=["reg"], ledger="off")
    before = _tree(tmp_path)
    ledger = {"ledger": rel, "ledger below": rel / "ledger", "run records": "off"}[where]
    if where == "run records":
        monkeypatch.setenv("XDG_STATE_HOME", str(rel / "state"))
    with pytest.raises(ParameterError, match="inside the committed release") as err:
        anonymize_file(tmp_path / "raw.parquet", tmp_path / "o.parquet", qi=["x", "y"], k=K, keep=["reg"], ledger=ledger)
    assert "\n" not in str(err.value)
    assert _tree(tmp_path) == before
