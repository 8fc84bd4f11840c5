"""Lake output that is committed whole or not at all, with a ``_SUCCESS`` manifest.

Layout (:mod:`daskmicro.io.layout`).  The release rows are ordered by seeded keys of their
global row ids (:func:`daskmicro.publish.shuffle_keys`) and cut into files by key rank, so the
content and the bytes of every file depend only on the input rows, the configuration and the
seed — not on the number of workers or of input files.  With partition columns the files go
under hive directories ``col=value/``; each partition holds ``ceil(rows / rows_per_file)`` files
``part-NNNNN.parquet`` of exactly ``rows_per_file`` rows, the last one excepted.

Interrupted runs (:func:`open_staging`, :func:`discard_staging`, :func:`sweep_stale`).  Writers
never create directories; on any failure the outstanding writes are cancelled and the staging
directory is moved away and deleted, and the next run to the same target deletes what an
interrupted run could not.

Commit protocol (:func:`commit`).  The workers write into a hidden sibling of the target
(``.NAME.tmp-<8 hex digits>``); the files are re-read and verified (rows in = rows out, each row once,
the promised schema, every QI tuple at least k times).  Then ``_SUCCESS`` is written into the
staging directory, every file and directory of it is fsynced, and a journal ``.NAME.commit``
(:mod:`daskmicro.io.journal`) naming the staging directory and the name the old release will
wait under is written durably; only then does anything move: an existing target is renamed
aside (``.NAME.old-<8 hex digits>``), the staging directory renamed into place, the journal
removed, and the old release deleted last.  A directory without ``_SUCCESS`` is not a committed
release, and a release never appears without it.

Recovery (:func:`recover`), run by every entry that commits before it does anything else: a
journal means the staging directory was complete and verified, so an interrupted commit is
rolled forward (or, when the new release is gone, the old one put back); without a journal, an
old release left aside by an older version (``.NAME.old-*`` and no target) is put back.  A
moved-aside release is never deleted while it may be the only copy.  Readers refuse a directory
that is a daskmicro release but has no ``_SUCCESS`` (:func:`refuse_uncommitted`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, VerificationError
from ..publish import shuffle_keys
from .journal import fault, fsync_dir, fsync_tree, journal_path, read_journal, remove_journal, write_journal
from .interrupt import check as check_interrupt
from .paths import inside
from .formats import arrow_to_pandas, dump_json

__all__ = ["SUCCESS", "OWNER", "verify_file", "commit", "range_checksum",
           "read_manifest", "fingerprint", "row_checksum", "staging_dir", "open_staging", "discard_staging",
           "sweep_stale", "sweep_files", "recover", "recover_journal", "refuse_uncommitted"]

SUCCESS = "_SUCCESS"
_MASK = (1 << 64) - 1


#: Marks a staging directory with the process that owns it (removed before the commit).
OWNER = "_daskmicro_owner.json"
_STALE_KINDS = ("tmp", "old", "trash")
#: A staging directory owned by another machine counts as stale after this many seconds.
_FOREIGN_STALE_SECONDS = 24 * 3600
#: A staging directory without an owner file is left alone for this long (it may be starting).
_UNOWNED_GRACE_SECONDS = 60


def staging_dir(target: Path) -> Path:
    """A fresh hidden sibling name ``.NAME.tmp-<8 hex digits>`` for staging ``target`` (not created)."""
    return target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"


def open_staging(target: Path, subdirs=()) -> Path:
    """Create the staging directory of ``target`` with every sub-directory the writers need.

    Writers never create directories (:mod:`daskmicro.io.shuffle`): once :func:`discard_staging` has
    moved the staging directory away, a write still running on a worker fails instead of
    re-creating it.  The owner file names this process so that a later run can tell a folder
    left by an interrupted run (:func:`sweep_stale`) from one in use.
    """
    staging = staging_dir(Path(target))
    staging.mkdir()
    _remember(staging)
    (staging / OWNER).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                             "started": time.time()}), encoding="utf-8")
    for rel in subdirs:
        if rel:
            if not inside(staging / rel, staging):  # resolved, not compared as text
                discard_staging(staging)
                raise VerificationError("a release directory made from the data would lie outside the release")
            (staging / rel).mkdir(parents=True, exist_ok=True)
    return staging


#: Staging directories this process opened; whatever of them still exists when it exits (an
#: interrupt or error between the write and the commit that no caller's clean-up covered) is
#: discarded then, so an interrupted run leaves nothing even before the next run sweeps.
_OPENED: list = []


def _remember(staging: Path) -> None:
    if not _OPENED:
        atexit.register(_discard_opened)
    _OPENED.append(Path(staging))


def _discard_opened() -> None:
    for staging in _OPENED:
        if staging.exists():  # never committed (a commit renames it away)
            discard_staging(staging)


def discard_staging(staging: Path, client=None, futures=()) -> None:
    """Remove an uncommitted staging directory so that nothing of it is left.

    The outstanding tasks are cancelled first; a task already running on a worker cannot be
    stopped, so the directory is then renamed (atomically) to ``.NAME.trash-<8 hex digits>``: a late
    write resolves its path under the old name and fails, because writers never create
    directories.  The renamed tree is deleted, with a few retries for a file that was being
    created at the moment of the rename; whatever still remains is swept by the next run.
    """
    staging = Path(staging)
    if client is not None and futures:
        try:
            client.cancel(list(futures), force=True)
        except Exception:  # the cluster may be gone already: nothing is running then
            pass
    if not staging.exists():
        return
    trash = staging.parent / f"{staging.name.split('.tmp-')[0]}.trash-{uuid.uuid4().hex[:8]}"
    try:
        os.replace(staging, trash)
    except OSError:
        trash = staging
    for delay in (0.0, 0.2, 0.5, 1.0):
        time.sleep(delay)
        shutil.rmtree(trash, ignore_errors=True)
        if not trash.exists():
            return


def _owner_alive(folder: Path) -> bool:
    try:
        owner = json.loads((folder / OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no owner: an interrupted run of an older version, or one just starting
        return time.time() - folder.stat().st_mtime < _UNOWNED_GRACE_SECONDS
    if owner.get("host") != socket.gethostname():
        return time.time() - float(owner.get("started", 0)) < _FOREIGN_STALE_SECONDS
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    return True


def sweep_stale(target: Path) -> list:
    """Delete the staging, moved-aside and trash folders of ``target`` left by interrupted runs.

    Only siblings named exactly ``.NAME.tmp-<8 hex digits>``, ``.NAME.old-<8 hex digits>`` or
    ``.NAME.trash-<8 hex digits>`` for this target are considered, and a staging folder whose owner
    process is still alive is left alone.  While a commit journal of ``target`` is unresolved
    nothing but trash is touched, and a moved-aside release only once ``target`` is a committed
    release (it may otherwise be the only copy: :func:`recover` puts it back).  Returns the
    names removed.
    """
    target = Path(target)
    removed = []
    if not target.parent.is_dir():
        return removed
    pending = journal_path(target).exists()
    for kind in _STALE_KINDS:
        for folder in target.parent.glob(f".{target.name}.{kind}-*"):
            suffix = folder.name[len(f".{target.name}.{kind}-"):]
            if len(suffix) != 8 or not all(ch in "0123456789abcdef" for ch in suffix) or not folder.is_dir():
                continue
            if kind == "tmp" and _owner_alive(folder):
                continue
            # a moved-aside release may be the only copy: kept while a commit is unresolved or
            # the target is not a committed release (recover() puts it back)
            if kind in ("tmp", "old") and pending:
                continue
            if kind == "old" and not _replaced_by(target, folder):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed


def fingerprint(obj) -> str:
    """SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def row_checksum(rids: np.ndarray) -> int:
    """Order-free checksum of a multiset of row ids (sum of mixed ids mod 2^64)."""
    with np.errstate(over="ignore"):
        return int(shuffle_keys(0x2545F4914F6CDD1D, np.asarray(rids, dtype=np.int64)).sum(dtype=np.uint64))


#: Row ids per block of :func:`range_checksum`.
CHECKSUM_BLOCK = 1 << 22


def range_checksum(n: int, block: int = CHECKSUM_BLOCK) -> int:
    """:func:`row_checksum` of the row ids 0 … n − 1, ``block`` ids at a time: what a release of
    ``n`` rows must add up to, computed without holding n ids (0.8 GB, and as much again of
    temporaries, at 100M rows, held by the client through the write stage)."""
    total = 0
    for start in range(0, int(n), int(block)):
        total += row_checksum(np.arange(start, min(int(n), start + int(block)), dtype=np.int64))
    return total % (1 << 64)


def verify_file(path: str, schema, columns: list, constants: dict | None = None, rows: tuple | None = None):
    """Re-read a written file: (rows, schema as promised, counts of the published tuples over
    ``columns`` — stratum columns and QIs — in the dtypes as written).

    ``constants`` are the hive partition values of the file's directory (``col=value/``): they
    are published by the path, not in the file, and join each of its tuples.  ``rows`` =
    (start, stop) counts only those rows of the file (the whole file is read: a part of a large
    file is checked by one task and the rest by others, whose counts are merged).
    """
    import pyarrow.parquet as pq

    from ..privacy.verify import tuple_counts

    import pyarrow as pa

    constants = constants or {}
    table = pq.read_table(path)
    same = table.schema.remove_metadata().equals(schema)
    if rows is not None:
        table = table.slice(rows[0], rows[1] - rows[0])
    n = table.num_rows
    # float columns straight from Arrow (a null reads as NaN, as in pandas): no copy through pandas
    values = {c: table.column(c).to_numpy() for c in columns
              if c not in constants and pa.types.is_floating(table.schema.field(c).type)}
    rest = arrow_to_pandas(table.select([c for c in columns if c not in constants and c not in values]))
    values.update({c: rest[c] for c in rest.columns})
    for c, v in constants.items():
        if c in columns:
            values[c] = pd.array([v] * n, dtype=object)
    return n, same, tuple_counts(values, list(columns), n)


def read_manifest(target: Path):
    """The ``_SUCCESS`` manifest of a committed release, or None."""
    path = Path(target) / SUCCESS
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def commit(staging: Path, target: Path, manifest: dict | None) -> None:
    """Move the verified ``staging`` directory into place as ``target``, with ``_SUCCESS``.

    ``_SUCCESS`` (``manifest``; None writes none, for a plain data directory) is written into the
    staging directory, which is then fsynced whole; the journal is written before the first
    rename, an existing ``target`` is moved aside and deleted only after the new one is in place
    and the journal removed (module docstring).  Each step is a :func:`~daskmicro.io.journal.fault`
    point of the fault-injection tests: ``dir.staged``, ``dir.journal``, ``dir.aside``,
    ``dir.publish``, ``dir.unjournal``.
    """
    staging, target = Path(staging), Path(target)
    text = dump_json(manifest) if manifest is not None else None  # serialisable before anything moves
    check_interrupt()     # a run asked to stop never commits
    recover_journal(target)
    if text is not None:
        (staging / SUCCESS).write_text(text, encoding="utf-8")
    fsync_tree(staging)
    fsync_dir(target.parent)
    fault("dir.staged")
    old = None
    if os.path.lexists(target):
        old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    write_journal(target, {"kind": "dir", "state": "forward", "target": str(target.absolute()),
                              "staging": str(staging.absolute()),
                              "old": str(old.absolute()) if old is not None else None})
    # the owner file goes only now: until the journal names the staging directory, a kill here
    # leaves a staging folder of a dead process, which the next run sweeps
    (staging / OWNER).unlink(missing_ok=True)
    fsync_dir(staging)
    fault("dir.journal")
    try:
        if old is not None:
            os.replace(target, old)
            fsync_dir(target.parent)
            fault("dir.aside")
        try:
            os.replace(staging, target)
        except BaseException:
            if old is not None:
                os.replace(old, target)
            raise
    except BaseException:
        remove_journal(target)
        raise
    fsync_dir(target.parent)
    fault("dir.publish")
    remove_journal(target)
    fault("dir.unjournal")
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- recovery


def _name(target) -> Path:
    target = Path(target)
    return target.resolve() if target.name in ("", ".", "..") else target


def _old_dirs(target: Path) -> list:
    out = []
    for folder in target.parent.glob(f".{target.name}.old-*"):
        suffix = folder.name[len(f".{target.name}.old-"):]
        if len(suffix) == 8 and all(ch in "0123456789abcdef" for ch in suffix) and folder.is_dir():
            out.append(folder)
    return sorted(out)


def _replaced_by(target: Path, old: Path) -> bool:
    """Whether the moved-aside ``old`` is no longer needed: ``target`` is in place and is not an
    interrupted commit of an older version (no ``_SUCCESS`` where the old release had one)."""
    if not target.is_dir():
        return False
    return (target / SUCCESS).is_file() or not (old / SUCCESS).is_file()


def _trash(path: Path) -> None:
    """Rename ``path`` to a trash sibling (atomic) and delete it."""
    name = path.name.split(".old-")[0].split(".tmp-")[0]
    trash = path.parent / f"{name}.trash-{uuid.uuid4().hex[:8]}"
    os.replace(path, trash)
    fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


def _recover_dir(target: Path, record: dict) -> str | None:
    staging = Path(record["staging"])
    old = Path(record["old"]) if record.get("old") else None
    done = None
    if staging.is_dir() and os.path.lexists(target) and (old is None or os.path.lexists(old)):
        # a target the journal did not expect (another run committed one since): it stays
        _trash(staging)
        done = f"dropped the interrupted commit of {target} (another release is in place)"
    elif staging.is_dir():  # complete and verified (the journal is written after it is): roll forward
        (staging / OWNER).unlink(missing_ok=True)
        if os.path.lexists(target):
            os.replace(target, old)
            fsync_dir(target.parent)
        os.replace(staging, target)
        done = f"completed the interrupted commit of {target}"
    elif not os.path.lexists(target) and old is not None and old.is_dir():
        os.replace(old, target)
        done = f"put the previous release of {target} back (its interrupted commit left no new one)"
    fsync_dir(target.parent)
    remove_journal(target)
    if old is not None and old.is_dir() and target.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    return done


def _recover_files(record: dict) -> str | None:
    pairs = [(Path(p["tmp"]), Path(p["target"]), Path(p["old"]) if p.get("old") else None)
             for p in record.get("pairs", [])]
    if record.get("state") == "back":  # the renames failed in the committing process: all old
        for tmp, target, old in pairs:
            if old is not None and os.path.lexists(old):
                os.replace(old, target)
                old.unlink(missing_ok=True)  # still there when the target was never replaced (same file)
            elif old is None and not os.path.lexists(tmp):
                target.unlink(missing_ok=True)  # placed by the failed commit, no old version
        done = "put back the files of an interrupted commit: " + ", ".join(str(t) for _, t, _ in pairs)
    else:  # every staged file was complete before the journal: finish the renames
        for tmp, target, _ in pairs:
            if os.path.lexists(tmp):
                os.replace(tmp, target)
        done = "completed the interrupted commit of " + ", ".join(str(t) for _, t, _ in pairs)
    for folder in {t.parent for _, t, _ in pairs}:
        fsync_dir(folder)
    return done


def recover_journal(target: Path) -> str | None:
    """Resolve the commit journal of ``target``, if any; returns what was done."""
    record = read_journal(target)
    if record is None:
        return None
    if not record or record.get("kind") not in ("dir", "files"):
        raise InputError(f"unreadable commit journal {journal_path(target)}: "
                         f"check {target} and remove the journal")
    if record["kind"] == "dir":
        return _recover_dir(target, record)
    done = _recover_files(record)
    remove_journal(target)
    for pair in record.get("pairs", []):
        for key in ("tmp", "old"):
            if pair.get(key):
                Path(pair[key]).unlink(missing_ok=True)
    return done


def _recover_legacy(target: Path) -> str | None:
    """No journal: a release moved aside by an interrupted commit and not replaced is put back."""
    olds = _old_dirs(target)
    if not olds:
        return None
    if not os.path.lexists(target):
        if len(olds) > 1:
            raise InputError(f"{target} is missing and {len(olds)} moved-aside copies of it are left by "
                             f"interrupted runs ({', '.join(o.name for o in olds)}): rename the one to keep to {target}")
        os.replace(olds[0], target)
        fsync_dir(target.parent)
        return f"put the previous release of {target} back (an interrupted commit had moved it aside)"
    if target.is_dir() and not (target / SUCCESS).is_file():
        committed = [o for o in olds if (o / SUCCESS).is_file()]
        if len(committed) == 1:  # renamed into place, killed before its _SUCCESS: not a release
            _trash(target)
            os.replace(committed[0], target)
            fsync_dir(target.parent)
            return f"put the previous release of {target} back (the new one was never committed)"
    return None


def _owner_dead(pid_text: str) -> bool:
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False
    return False


def sweep_files(target) -> list:
    """Delete the temporary and moved-aside files of ``target`` left by dead processes.

    :class:`~daskmicro.io.tables.AtomicBatch` names them ``.NAME.<32 hex>.<pid>.tmp`` /
    ``.old`` (and a journal being written ``.NAME.commit.<pid>.new``); one whose process is gone
    is deleted — never while a commit journal of ``target`` is unresolved.  Names of older
    versions without a pid (``.NAME.<32 hex>.tmp`` / ``.old``) are deleted when ``target``
    exists (an old one is a second link of it) or, for a temporary file, after a minute.
    Returns the names removed.
    """
    target = _name(target)
    removed = []
    if not target.parent.is_dir() or journal_path(target).exists():
        return removed
    prefix = f".{target.name}."
    for path in target.parent.glob(f".{glob_escape(target.name)}.*"):
        rest = path.name[len(prefix):].split(".")
        if not path.is_file() and not path.is_symlink():
            continue
        if len(rest) == 3 and rest[2] in ("tmp", "old") and _is_hex(rest[0], 32) and rest[1].isdigit():
            stale = _owner_dead(rest[1])
        elif len(rest) == 3 and rest[0] == "commit" and rest[2] == "new" and rest[1].isdigit():
            stale = _owner_dead(rest[1])
        elif len(rest) == 2 and rest[1] in ("tmp", "old") and _is_hex(rest[0], 32):
            stale = (rest[1] == "old" and target.exists()) or \
                (rest[1] == "tmp" and time.time() - path.lstat().st_mtime > _UNOWNED_GRACE_SECONDS)
        else:
            continue
        if stale:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def _is_hex(text: str, n: int) -> bool:
    return len(text) == n and all(ch in "0123456789abcdef" for ch in text)


def recover(*targets, sweep: bool = True) -> list:
    """Resolve every interrupted commit of ``targets`` (outputs of the run about to start), then
    sweep what interrupted runs left of them; returns one line per thing done.

    Called first by every entry that commits, whatever it is then asked to do: an interrupted
    commit is rolled forward when its new version is complete (a journal exists), else its old
    version is put back.  Raises :class:`~daskmicro.errors.InputError` (one line naming the
    path) when the state cannot be decided.
    """
    lines = []
    names = [_name(t) for t in targets if t is not None]
    for target in names:
        if not target.parent.is_dir():
            continue
        for step in (recover_journal, _recover_legacy):
            done = step(target)
            if done:
                lines.append(done)
    if sweep:
        for target in names:
            if not target.parent.is_dir():
                continue
            removed = sweep_stale(target)
            if removed:
                lines.append(f"removed {len(removed)} staging folder(s) of {target} left by an interrupted run: "
                             f"{', '.join(removed)}")
            removed = sweep_files(target)
            if removed:
                lines.append(f"removed {len(removed)} temporary file(s) of {target} left by an interrupted run: "
                             f"{', '.join(removed)}")
    return lines


def refuse_uncommitted(path) -> None:
    """Refuse (:class:`~daskmicro.errors.InputError`, one line) to read a directory that is a
    daskmicro release but not a committed one: no ``_SUCCESS``, while it holds a ``_report.json``
    or a commit of it is unresolved (a journal, or a moved-aside release with ``_SUCCESS``, beside it).  A plain
    directory of Parquet files (no ``_SUCCESS``, nothing of daskmicro's) is read as it is."""
    path = Path(path)
    if not path.is_dir() or (path / SUCCESS).is_file():
        return
    target = _name(path)
    aside = any((o / SUCCESS).is_file() for o in _old_dirs(target))  # a release moved aside for it
    if (path / "_report.json").is_file() or journal_path(target).exists() or aside:
        raise InputError(f"not a committed release (no {SUCCESS}; an interrupted run? run daskmicro "
                         f"on it again as the output to recover it): {path}")


def check_written(results: list, n: int, expected_checksum: int, schema_ok: list, k_check, rows_read: int):
    """Raise VerificationError unless the written files hold each input row once and pass k."""
    rows = sum(r["rows"] for r in results)
    checksum = 0
    for r in results:
        checksum = (checksum + r["checksum"]) & _MASK
    if rows != n or rows_read != n:
        raise VerificationError(f"rows in = {n}, rows written = {rows}, rows read back = {rows_read}")
    if checksum != expected_checksum:
        raise VerificationError("the written files do not hold each input row exactly once")
    if not all(schema_ok):
        raise VerificationError("a written file does not have the promised schema")
    k_check.raise_if_failed()
