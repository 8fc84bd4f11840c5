"""A commit killed at every step never loses a release.

A real process (a fresh child forked by a server that imported daskmicro once, ``_forked``) runs
the real commit (:func:`daskmicro.io.commit.commit` for a directory release,
:class:`daskmicro.io.tables.AtomicBatch` for a release file with its report) and is killed at one
step (the ``DASKMICRO_FAULT_AT`` test hook: ``os._exit(137)`` there, no clean-up).  Then a run of
the real CLI that fails (an unknown ``--qi``) must first roll the commit forward or back, and a
later commit must succeed and leave nothing behind.  After every step the output is the old
release or the new one, whole: the sha256 of every file matches one of the two sets, a directory
has its ``_SUCCESS``, a release file and its report belong together.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.io import commit as cm
from daskmicro.io import recovery as rec
from daskmicro.io import journal as jr
from daskmicro.io.tables import AtomicBatch, dump_json

from _forked import run_script

ROOT = Path(__file__).resolve().parents[1]

DIR_POINTS = ["dir.staged", "dir.journal", "dir.aside", "dir.publish", "dir.unjournal"]
FILE_POINTS = ["file.staged", "file.aside", "file.journal", "file.rename.1", "file.rename.2", "file.rename.3",
               "file.unjournal"]
#: crash points reached in this module (asserted at the end)
COVERED: set = set()

CHILD_DIR = """
import json, shutil, sys
from pathlib import Path
from daskmicro.io import commit as cm
src, target, manifest = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
staging = cm.open_staging(target)
for f in sorted(src.rglob("*")):
    if f.is_dir():
        (staging / f.relative_to(src)).mkdir(exist_ok=True)
    else:
        shutil.copyfile(f, staging / f.relative_to(src))
cm.commit(staging, target, manifest)
"""

CHILD_FILES = """
import sys
from pathlib import Path
from daskmicro.io.tables import AtomicBatch
with AtomicBatch() as batch:
    for src, target in zip(sys.argv[1::2], sys.argv[2::2]):
        batch.blob(Path(src).read_bytes(), target)
"""


def commit_dir_here(src: Path, target: Path, manifest: dict) -> None:
    """What CHILD_DIR does, in this process (a commit that is not killed)."""
    import shutil

    staging = cm.open_staging(target)
    for f in sorted(src.rglob("*")):
        if f.is_dir():
            (staging / f.relative_to(src)).mkdir(exist_ok=True)
        else:
            shutil.copyfile(f, staging / f.relative_to(src))
    cm.commit(staging, target, manifest)


def commit_files_here(srcs, targets) -> None:
    """What CHILD_FILES does, in this process (a commit that is not killed)."""
    with AtomicBatch() as batch:
        for src, target in zip(srcs, targets):
            batch.blob(Path(src).read_bytes(), target)


def env(fault=None) -> dict:
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop(jr.FAULT_ENV, None)
    if fault:
        e[jr.FAULT_ENV] = fault
    return e


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): sha(p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(parent: Path, *names) -> list:
    return sorted(p.name for p in parent.iterdir() for n in names if p.name.startswith(f".{n}."))


def child(script: str, args, fault=None) -> int:
    """Run ``script`` (CHILD_DIR, CHILD_FILES) in a process of its own, killed at ``fault``: a fresh
    child forked by a server that has imported daskmicro's commit once (``_forked``), so that the
    many crash points do not each start an interpreter and import daskmicro."""
    code = run_script(script, args, env(fault), preload=("daskmicro.io.commit", "daskmicro.io.tables"))
    assert code in (0, 137), code
    return code


@pytest.fixture
def data_input(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "in.parquet"
    pd.DataFrame({"x": rng.normal(size=60), "y": rng.normal(size=60)}).to_parquet(path, index=False)
    return path


def failing_run(inp: Path, out: Path, capsys) -> str:
    """A real CLI run that is refused (unknown QI) after it has resolved the output's commit."""
    rc = main(["anonymize", str(inp), str(out), "--qi", "nope", "--k", "3", "--no-dask-report"])
    err = capsys.readouterr().err
    assert rc == 2, err
    return err


# --------------------------------------------------------------------------- directory releases


def release_dir(root: Path, tag: str, files: int = 3) -> tuple[Path, dict, dict]:
    """A staged directory release's content, its manifest and the file set it commits to."""
    src = root / f"src-{tag}"
    (src / "s=1").mkdir(parents=True)
    for i in range(files):
        (src / "s=1" / f"part-{i:05d}.parquet").write_bytes(f"{tag}-{i}".encode() * 50)
    (src / "_report.json").write_text(json.dumps({"tag": tag}))
    manifest = {"format": "daskmicro-release/1", "fingerprint": tag}
    expected = tree(src)
    expected[cm.SUCCESS] = sha(dump_json(manifest).encode())
    return src, manifest, expected


def assert_dir_is(out: Path, *choices) -> dict:
    assert out.is_dir() and (out / cm.SUCCESS).is_file(), sorted(p.name for p in out.parent.iterdir())
    got = tree(out)
    assert got in choices, "the release is neither the old one nor the new one"
    return got


@pytest.mark.parametrize("with_old", [True, False], ids=["replace", "first"])
def test_directory_commit_killed_at_every_step(tmp_path, data_input, capsys, with_old):
    points = [p for p in DIR_POINTS if with_old or p != "dir.aside"]
    for point in points:
        root = tmp_path / point / ("replace" if with_old else "first")
        root.mkdir(parents=True)
        out = root / "R"
        old = None
        if with_old:
            src, manifest, old = release_dir(root, "old")
            commit_dir_here(src, out, manifest)
            assert_dir_is(out, old)
        src, manifest, new = release_dir(root, "new")
        assert child(CHILD_DIR, [src, out, json.dumps(manifest)], fault=point) == 137, point
        COVERED.add(("dir", with_old, point))
        if out.exists() and (out / cm.SUCCESS).is_file():  # even before recovery: never a torn release
            assert_dir_is(out, *(c for c in (old, new) if c))
        err = failing_run(data_input, out, capsys)
        if with_old or point not in ("dir.staged",):
            assert_dir_is(out, *(c for c in (old, new) if c))
        else:  # killed before the journal: nothing was ever committed, nothing is
            assert not out.exists(), err
        # the new release is kept once the journal said it was complete
        if point != "dir.staged":
            assert tree(out) == new, point
        elif with_old:
            assert tree(out) == old, point
        assert not jr.journal_path(out).exists() and not leftovers(root, "R"), (point, leftovers(root, "R"))
        src, manifest, newer = release_dir(root, "newer")
        commit_dir_here(src, out, manifest)
        assert_dir_is(out, newer)
        assert not leftovers(root, "R")


def test_directory_commit_end_to_end_killed(tmp_path, data_input, capsys):
    """The real CLI killed between moving the old release aside and renaming the new one in."""
    base = ["anonymize", str(data_input), "--qi", "x,y", "--k", "3", "--no-dask-report", "--overwrite"]
    out, ref = tmp_path / "R", tmp_path / "ref"
    assert main(base[:1] + [base[1], str(out)] + base[2:] + ["--seed", "1"]) == 0
    assert main(base[:1] + [base[1], str(ref)] + base[2:] + ["--seed", "2"]) == 0
    capsys.readouterr()
    parts = lambda d: {k: v for k, v in tree(d).items() if k.endswith(".parquet")}  # noqa: E731
    fp = lambda d: json.loads((d / cm.SUCCESS).read_text())["fingerprint"]  # noqa: E731
    old_parts, old_fp, new_parts, new_fp = parts(out), fp(out), parts(ref), fp(ref)
    assert old_parts != new_parts
    for point in ("dir.aside", "dir.publish"):
        proc = subprocess.run([sys.executable, "-m", "daskmicro", *base[:2], str(out), *base[2:], "--seed", "2"],
                              env=env(point), cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 137, proc.stderr
        COVERED.add(("cli-dir", True, point))
        if point == "dir.aside":
            assert not out.exists()  # the old release waits aside; the journal names it
            rc = main(["report", str(out)])
            assert rc == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
        failing_run(data_input, out, capsys)
        assert (out / cm.SUCCESS).is_file() and (parts(out), fp(out)) == (new_parts, new_fp)
        assert json.loads((out / "_report.json").read_text())["lake"]["fingerprint"] == new_fp
        assert not leftovers(tmp_path, "R")
        # back to the old one for the next point
        assert main(base[:1] + [base[1], str(out)] + base[2:] + ["--seed", "1"]) == 0
        assert (parts(out), fp(out)) == (old_parts, old_fp) and not leftovers(tmp_path, "R")
        capsys.readouterr()


def test_demo_data_directory_killed_then_recovered_by_a_failing_run(tmp_path, capsys):
    """``demo-data`` commits its directory as a release is committed, and recovers it first."""
    out, ref = tmp_path / "D", tmp_path / "ref"
    assert main(["demo-data", str(out), "--n", "300", "--files", "2", "--seed", "1"]) == 0
    assert main(["demo-data", str(ref), "--n", "300", "--files", "2", "--seed", "2"]) == 0
    old, new = tree(out), tree(ref)
    proc = subprocess.run([sys.executable, "-m", "daskmicro", "demo-data", str(out), "--n", "300", "--files", "2",
                           "--seed", "2", "--overwrite"], env=env("dir.aside"), cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 137, proc.stderr
    COVERED.add(("cli-demo-data", True, "dir.aside"))
    assert not out.exists()
    assert main(["demo-data", str(out), "--n", "3", "--files", "5"]) == 2  # refused, after the recovery
    assert tree(out) == new and tree(out) != old and not leftovers(tmp_path, "D")
    capsys.readouterr()


# --------------------------------------------------------------------------- release files


def file_versions(root: Path, tag: str) -> tuple[list, tuple]:
    srcs = []
    for name, body in (("release", f"{tag}-release"), ("report", f'{{"tag": "{tag}"}}'), ("perf", f"<p>{tag}</p>")):
        path = root / f"src-{tag}.{name}"
        path.write_bytes(body.encode() * 20)
        srcs.append(path)
    return srcs, tuple(sha(p.read_bytes()) for p in srcs)


def file_state(targets) -> tuple:
    return tuple(sha(t.read_bytes()) if t.exists() else None for t in targets)


@pytest.mark.parametrize("with_old", [True, False], ids=["replace", "first"])
def test_file_commit_killed_at_every_step(tmp_path, data_input, capsys, with_old):
    for point in FILE_POINTS:
        root = tmp_path / point / ("replace" if with_old else "first")
        root.mkdir(parents=True)
        targets = [root / "F.parquet", root / "F.report.json", root / "F.report.dask.html"]
        names = [t.name for t in targets]
        args = lambda srcs: [a for pair in zip(srcs, targets) for a in pair]  # noqa: E731
        none = (None, None, None)
        old = none
        if with_old:
            srcs, old = file_versions(root, "old")
            commit_files_here(srcs, targets)
            assert file_state(targets) == old
        srcs, new = file_versions(root, "new")
        assert child(CHILD_FILES, args(srcs), fault=point) == 137, point
        COVERED.add(("file", with_old, point))
        failing_run(data_input, targets[0], capsys)
        state = file_state(targets)
        assert state in (old, new), (point, state)
        journaled = point not in ("file.staged", "file.aside")
        assert state == (new if journaled else old), point
        assert not leftovers(root, *names), (point, leftovers(root, *names))
        srcs, newer = file_versions(root, "newer")
        commit_files_here(srcs, targets)
        assert file_state(targets) == newer
        assert not leftovers(root, *names)


def test_file_commit_end_to_end_killed(tmp_path, data_input, capsys):
    """The real CLI killed between the release's rename and its report's."""
    out = tmp_path / "F.parquet"
    report = tmp_path / "F.report.json"
    base = ["anonymize", str(data_input), str(out), "--qi", "x,y", "--k", "3", "--no-dask-report", "--overwrite"]
    assert main(base + ["--seed", "1"]) == 0
    old = file_state([out, report])
    proc = subprocess.run([sys.executable, "-m", "daskmicro", *base, "--seed", "2"], env=env("file.rename.1"),
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 137, proc.stderr
    COVERED.add(("cli-file", True, "file.rename.1"))
    assert file_state([out, report])[1] == old[1]  # killed: the report is still the old one
    failing_run(data_input, out, capsys)
    new = file_state([out, report])
    assert new[0] != old[0] and new[1] != old[1]   # the killed run's release and report, together
    assert not leftovers(tmp_path, out.name, report.name)
    assert main(base + ["--seed", "3"]) == 0
    third = file_state([out, report])
    assert third[0] != new[0] and third[1] != new[1]
    assert not leftovers(tmp_path, out.name, report.name)


# --------------------------------------------------------------------------- older versions' leftovers


def test_old_release_left_aside_without_journal_is_put_back(tmp_path, data_input, capsys):
    root = tmp_path
    src, manifest, old = release_dir(root, "old")
    out = root / "R"
    commit_dir_here(src, out, manifest)
    aside = root / ".R.old-0123abcd"
    os.replace(out, aside)  # as an older version left it: moved aside, killed before the new one
    assert rec.sweep_stale(out) == [] and aside.is_dir()  # the only copy is never deleted
    failing_run(data_input, out, capsys)
    assert_dir_is(out, old) and not leftovers(root, "R")


def test_uncommitted_release_is_put_back_and_refused_by_readers(tmp_path, data_input, capsys):
    src, manifest, old = release_dir(tmp_path, "old")
    out = tmp_path / "R"
    commit_dir_here(src, out, manifest)
    aside = tmp_path / ".R.old-0123abcd"
    os.replace(out, aside)
    src, _, _ = release_dir(tmp_path, "new")
    os.replace(src, out)  # renamed into place by an older version, killed before _SUCCESS
    for argv in (["report", str(out)], ["anonymize", str(out), str(tmp_path / "o"), "--qi", "x", "--k", "2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "_SUCCESS" in err and str(out) in err
    failing_run(data_input, out, capsys)
    assert_dir_is(out, old) and not leftovers(tmp_path, "R")


def test_plain_parquet_directory_is_still_an_input(tmp_path, capsys):
    lake = tmp_path / "lake"
    lake.mkdir()
    rng = np.random.default_rng(1)
    pd.DataFrame({"x": rng.normal(size=40), "y": rng.normal(size=40)}).to_parquet(lake / "a.parquet")
    rec.refuse_uncommitted(lake)  # no _SUCCESS, nothing of daskmicro's: read as it is
    (lake / "_report.json").write_text("{}")
    with pytest.raises(Exception, match="_SUCCESS"):
        rec.refuse_uncommitted(lake)


def test_legacy_file_leftovers_are_swept(tmp_path, data_input, capsys):
    out = tmp_path / "F.parquet"
    base = ["anonymize", str(data_input), str(out), "--qi", "x,y", "--k", "3", "--no-dask-report", "--overwrite", "--seed", "1"]
    assert main(base) == 0
    stale = [tmp_path / f".F.parquet.{'a' * 32}.old", tmp_path / f".F.report.json.{'b' * 32}.99999999.tmp"]
    for p in stale:
        p.write_bytes(b"x")
    assert main(base) == 0
    assert not leftovers(tmp_path, "F.parquet", "F.report.json")


def test_every_crash_point_was_covered():
    expected = {("dir", True, p) for p in DIR_POINTS} | {("dir", False, p) for p in DIR_POINTS if p != "dir.aside"}
    expected |= {("file", w, p) for p in FILE_POINTS for w in (True, False)}
    expected |= {("cli-dir", True, "dir.aside"), ("cli-dir", True, "dir.publish"), ("cli-file", True, "file.rename.1"),
                 ("cli-demo-data", True, "dir.aside")}
    missing = expected - COVERED
    print(f"crash points covered: {len(COVERED)} of {len(expected)}")
    assert not missing, sorted(missing)
    assert len(COVERED) == 27


def test_file_commit_whose_rename_fails_puts_every_old_file_back(tmp_path, monkeypatch):
    targets = [tmp_path / "F.parquet", tmp_path / "F.report.json", tmp_path / "F.report.dask.html"]
    srcs, old = file_versions(tmp_path, "old")
    commit_files_here(srcs, targets)
    srcs, _ = file_versions(tmp_path, "new")
    real, calls = os.replace, []

    def failing(src, dst, *a, **kw):
        calls.append(dst)
        if Path(dst) == targets[1] and calls.count(dst) == 1:  # the report's rename, after the release's
            raise OSError("disk full")
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError):
        commit_files_here(srcs, targets)
    monkeypatch.setattr(os, "replace", real)
    assert file_state(targets) == old
    assert not leftovers(tmp_path, *(t.name for t in targets))


def test_staging_whose_target_was_replaced_since_is_dropped(tmp_path):
    src, manifest, first = release_dir(tmp_path, "first")
    out = tmp_path / "R"
    staging = cm.open_staging(out)
    (staging / "part-00000.parquet").write_bytes(b"never committed")
    jr.write_journal(out, {"kind": "dir", "state": "forward", "target": str(out), "staging": str(staging),
                           "old": None})
    os.replace(jr.journal_path(out), tmp_path / "journal")
    commit_dir_here(src, out, manifest)  # committed by another run while the journal was away
    os.replace(tmp_path / "journal", jr.journal_path(out))
    assert any("another release" in line for line in rec.recover(out))
    assert_dir_is(out, first)
    assert not staging.exists() and not leftovers(tmp_path, "R")
