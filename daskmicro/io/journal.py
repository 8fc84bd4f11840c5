"""Durable commits: fsync helpers, the commit journal and the test hook that kills a commit.

A commit that moves more than one thing into place (a directory release replacing an older one,
a release file together with its report) first writes a *journal*: a hidden sibling
``.NAME.commit`` of its (first) target, holding JSON that names every path of the commit::

    {"format": "daskmicro-commit/1", "kind": "dir",  "target": "/abs/R",
     "staging": "/abs/.R.tmp-1a2b3c4d", "old": "/abs/.R.old-1a2b3c4d" | null, "state": "forward"}

    {"format": "daskmicro-commit/1", "kind": "files", "state": "forward" | "back",
     "pairs": [{"tmp": "/abs/.F.parquet.<hex>.<pid>.tmp", "target": "/abs/F.parquet",
                "old": "/abs/.F.parquet.<hex>.<pid>.old" | null}, ...]}

The journal is written (temporary file, fsync, rename, fsync of the directory) only once every
new file is complete and on disk, so its presence means "the new version is whole": a later run
that finds it completes the renames (``state`` "forward") or, for a batch whose renames failed in
the process that made them, puts the old files back (``state`` "back"), and then removes it
(:func:`daskmicro.io.recovery.recover`).  The journal is removed only after the last rename is on
disk; the moved-aside old versions are deleted after that.

Test hook: when the environment variable ``DASKMICRO_FAULT_AT`` names a step (the names are the
arguments of :func:`fault` in :mod:`daskmicro.io.commit` and :class:`daskmicro.io.tables.AtomicBatch`),
the process exits at once with status 137 when it reaches that step, as if killed there.  It is
read by the fault-injection tests only; unset, :func:`fault` does nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FORMAT", "journal_path", "write_journal", "read_journal", "remove_journal", "fsync_file",
           "fsync_dir", "fsync_tree", "fault"]

FORMAT = "daskmicro-commit/1"
FAULT_ENV = "DASKMICRO_FAULT_AT"


def fault(step: str) -> None:
    """Test hook: exit at once (status 137, no clean-up) if ``DASKMICRO_FAULT_AT`` is ``step``."""
    if os.environ.get(FAULT_ENV) == step:
        os._exit(137)


def journal_path(target) -> Path:
    """The journal of a commit whose (first) target is ``target``: ``.NAME.commit`` beside it."""
    target = Path(target)
    return target.parent / f".{target.name}.commit"


def fsync_file(path) -> None:
    """Flush a written file's contents to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path) -> None:
    """Flush a directory's entries (renames, new and removed names) to disk, where supported."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # e.g. Windows: directories cannot be opened; renames are durable there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root) -> None:
    """fsync every file under ``root``, then every directory, deepest first (one pass)."""
    dirs = []
    for folder, _, files in os.walk(root):
        dirs.append(folder)
        for name in files:
            fsync_file(os.path.join(folder, name))
    for folder in reversed(dirs):
        fsync_dir(folder)


def write_journal(target, record: dict) -> Path:
    """Write the journal of ``target`` durably (temporary file, fsync, rename, fsync of the directory)."""
    path = journal_path(target)
    tmp = path.with_name(path.name + f".{os.getpid()}.new")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(dict(record, format=FORMAT, pid=os.getpid()), fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path


def read_journal(target):
    """The journal of ``target`` as a dict, None when there is none; an unreadable journal (a
    crash cannot leave one: it is renamed into place whole) reads as ``{}``."""
    path = journal_path(target)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) and record.get("format") == FORMAT else {}


def remove_journal(target) -> None:
    """Remove the journal of ``target`` (the commit is resolved) and make that durable."""
    path = journal_path(target)
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)
