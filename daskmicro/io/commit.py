"""Lake output that is committed whole or not at all, with a ``_SUCCESS`` manifest.

Layout (:mod:`daskmicro.io.layout`).  The release rows are ordered by seeded keys of their
global row ids (:func:`daskmicro.release.publish.shuffle_keys`) and cut into files by key rank, so the
content and the bytes of every file depend only on the input rows, the configuration and the
seed — not on the number of workers or of input files.  With partition columns the files go
under hive directories ``col=value/``; each partition holds ``ceil(rows / rows_per_file)`` files
``part-NNNNN.parquet`` of exactly ``rows_per_file`` rows, the last one excepted.

Interrupted runs (:func:`open_staging`, :func:`discard_staging`, :func:`daskmicro.io.recovery.sweep_stale`).  Writers
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

from ..errors import VerificationError
from ..release.publish import shuffle_keys
from .journal import fault, fsync_dir, fsync_tree, remove_journal, write_journal
from .interrupt import check as check_interrupt
from .paths import inside
from .recovery import OWNER, SUCCESS, recover_journal
from .formats import arrow_to_pandas, dump_json

__all__ = ["SUCCESS", "OWNER", "verify_file", "commit", "range_checksum",
           "read_manifest", "fingerprint", "row_checksum", "staging_dir", "open_staging", "discard_staging",
           "check_written", "table_values"]

_MASK = (1 << 64) - 1


def _remote(obj) -> bool:
    """Whether ``obj`` is a target or run prefix on an object store (:mod:`daskmicro.io.objectcommit`)."""
    from .objectcommit import RemoteRun, RemoteTarget

    return isinstance(obj, (RemoteTarget, RemoteRun))


def staging_dir(target: Path) -> Path:
    """A fresh hidden sibling name ``.NAME.tmp-<8 hex digits>`` for staging ``target`` (not created),
    absolute: the workers that write into it need not share this process's working directory."""
    target = target.absolute()
    return target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"


def open_staging(target: Path, subdirs=()) -> Path:
    """Create the staging directory of ``target`` with every sub-directory the writers need.

    Writers never create directories (:mod:`daskmicro.io.shuffle`): once :func:`discard_staging` has
    moved the staging directory away, a write still running on a worker fails instead of
    re-creating it.  The owner file names this process so that a later run can tell a folder
    left by an interrupted run (:func:`daskmicro.io.recovery.sweep_stale`) from one in use.
    A target on an object store (:class:`daskmicro.io.objectcommit.RemoteTarget`) gets a run
    prefix there instead (no directories to make).
    """
    if _remote(target):
        return target.open_run()
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
    A run prefix on an object store (:class:`daskmicro.io.objectcommit.RemoteRun`) is deleted.
    """
    if _remote(staging):
        staging.discard(client, futures)
        return
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


def verify_file(path: str, schema, columns: list, constants: dict | None = None, rows: tuple | None = None,
                with_values: bool = False):
    """Re-read a written file: (rows, schema as promised, counts of the published tuples over
    ``columns`` — stratum columns and QIs — in the dtypes as written), and with ``with_values``
    the values read (``{column: array or Series}``) as a fourth item.

    ``constants`` are the hive partition values of the file's directory (``col=value/``): they
    are published by the path, not in the file, and join each of its tuples.  ``rows`` =
    (start, stop) counts only those rows of the file (the whole file is read: a part of a large
    file is checked by one task and the rest by others, whose counts are merged).
    """
    import pyarrow.parquet as pq

    from ..privacy.verify import tuple_counts

    constants = constants or {}
    table = pq.read_table(path)
    same = table.schema.remove_metadata().equals(schema)
    if rows is not None:
        table = table.slice(rows[0], rows[1] - rows[0])
    n = table.num_rows
    values = table_values(table, [c for c in columns if c not in constants])
    for c, v in constants.items():
        if c in columns:
            values[c] = pd.array([v] * n, dtype=object)
    counts = tuple_counts(values, list(columns), n)
    return (n, same, counts, values) if with_values else (n, same, counts)


def table_values(table, columns: list) -> dict:
    """``columns`` of an Arrow table as the tuple counts take them, in the types read: float columns
    straight from Arrow (a null reads as NaN, as in pandas; no copy through pandas), the others
    through pandas."""
    import pyarrow as pa

    values = {c: table.column(c).to_numpy() for c in columns if pa.types.is_floating(table.schema.field(c).type)}
    rest = arrow_to_pandas(table.select([c for c in columns if c not in values]))
    values.update({c: rest[c] for c in rest.columns})
    return values


def read_manifest(target: Path):
    """The ``_SUCCESS`` manifest of a committed release, or None."""
    if _remote(target):
        return target.read_manifest()
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
