"""Delta Lake tables: a release committed as one table version, a table read as its current version.

A release with ``table_format="delta"`` is written and verified in its staging area exactly as a
Parquet lake (:func:`daskmicro.graph.release.write_and_verify`): a staging directory beside a
local table, a run prefix under a table on an object store (:mod:`daskmicro.io.deltastore`).
:func:`commit_delta` then commits the verified files as one Delta transaction
(``deltalake.write_deltalake``, streamed batch by batch), reads that version back from where it
was written and checks it again: as many rows as the input and every published tuple at least k
times, on the values as read.  A reader sees the previous version until the transaction is
committed and the new one after.

:func:`delta_files` lists the Parquet files of a local table's current version, so that files of
earlier versions are never read as input (:func:`daskmicro.io.source.open_source`);
:func:`current_files` does it for a table anywhere ``deltalake`` reads.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import InputError, ParameterError, VerificationError, describe
from . import hive as hive_dirs

__all__ = ["TABLE_FORMATS", "is_delta_table", "delta_files", "current_files", "refuse_unread_features",
           "refuse_delta_output", "check_delta_target", "commit_delta", "LocalTable", "load_deltalake",
           "UNREAD_FEATURES", "DELTA_LOG", "MISSING", "MISSING_WRITE", "check_versions", "COMMIT_KEY",
           "is_commit_file", "log_commits"]

#: Values of ``table_format`` (--table-format).
TABLE_FORMATS = ("parquet", "delta")
DELTA_LOG = "_delta_log"
MISSING = "reading a Delta table needs the delta extra: pip install 'daskmicro[delta]'"
MISSING_WRITE = "table_format 'delta' (--table-format) needs the delta extra: pip install 'daskmicro[delta]'"
#: The key of the commit metadata daskmicro gives each version it commits: "recorded" (a release
#: recorded in the release ledger) or "trial" (the ledger off).
COMMIT_KEY = "daskmicro"
#: Rows per batch streamed into the Delta transaction and read back by the check.
BATCH_ROWS = 256 * 1024


def load_deltalake(message: str = MISSING):
    """The ``deltalake`` module, or ``message`` as a one-line ParameterError without it."""
    try:
        import deltalake
    except ImportError:
        raise ParameterError(message) from None
    return deltalake


def is_delta_table(path) -> bool:
    """Whether the local directory ``path`` holds a Delta table (a ``_delta_log/`` directory)."""
    return (Path(path) / DELTA_LOG).is_dir()


def current_files(uri: str, storage_options=None, shown=None, scrub=str) -> list:
    """The file URIs of the current version of the Delta table at ``uri`` (``shown`` in messages,
    which ``scrub`` clears of option values); refused in one line: an unreadable log, a table whose
    files are not its rows (:func:`refuse_unread_features`), a version with no files."""
    deltalake = load_deltalake(MISSING)
    shown = shown or uri
    try:
        table = deltalake.DeltaTable(uri, storage_options=storage_options)
        protocol = table.protocol()
        uris = table.file_uris()
    except Exception as exc:  # a damaged or unreadable log, the store's own errors
        raise InputError(f"cannot read the Delta table {shown}: {scrub(describe(exc))}") from None
    refuse_unread_features(shown, protocol)
    if not uris:
        raise InputError(f"the current version of the Delta table holds no files: {shown}")
    return list(uris)


def delta_files(path) -> list:
    """The Parquet files of the current version of the local Delta table at ``path``, each as a path
    under ``path`` as given (relative when it is); refused in one line: a file the log names
    outside the table's directory, or missing."""
    root = Path(path).resolve()
    out = []
    for u in current_files(str(path)):
        local = Path(u[len("file://"):] if u.startswith("file://") else u).resolve()
        if not local.is_relative_to(root):
            raise InputError(f"the Delta table {path} names a file outside its directory (daskmicro reads only the "
                             "files under it)")
        if not local.is_file():
            raise InputError(f"the Delta table {path} is incomplete: {local.relative_to(root).as_posix()} is missing")
        out.append(str(Path(path) / local.relative_to(root)))
    return sorted(out)


#: Reader features under which a table's rows are not simply the rows of its files: deleted rows
#: still in the files (deletion vectors), physical column names that differ from the logical ones
#: (column mapping).
UNREAD_FEATURES = ("deletionVectors", "columnMapping")


def refuse_unread_features(path, protocol) -> None:
    """Refuse, in one line, a table whose rows are not the rows of its files: reading them whole
    would bring back rows the table deleted (a withdrawn respondent) or misname its columns."""
    features = set(getattr(protocol, "reader_features", None) or ())
    found = sorted(f for f in UNREAD_FEATURES if f in features)
    if not found and protocol.min_reader_version == 2:   # reader version 2 is column mapping
        found = ["columnMapping"]
    if found:
        raise InputError(f"the Delta table {path} uses {', '.join(found)}: its files hold rows or names that are "
                         f"not the table's, and daskmicro reads files whole; rewrite the table without "
                         f"{'them' if len(found) > 1 else 'it'} (for example into a new table) first")


def refuse_delta_output(table_format, output) -> None:
    """Refuse, in one line, a Delta release to anything but a directory: a local one or a prefix
    of an object store (its URL checked: scheme, bucket, no credentials)."""
    if table_format != "delta":
        return
    from .objectstore import check_url, is_remote

    if output is None:
        raise ParameterError("table_format 'delta' (--table-format) needs a directory OUTPUT: a Delta table is a "
                             "directory")
    text = str(output)
    if text.lower().endswith((".parquet", ".pq", ".csv")):
        raise ParameterError("table_format 'delta' (--table-format) needs a directory OUTPUT, not a single file "
                             f"(a Delta table is a directory of files and its log): {text}")
    if is_remote(text):
        check_url(text)
    load_deltalake(MISSING_WRITE)


def check_delta_target(output, recorded: bool = False) -> None:
    """Refuse an existing non-empty directory that is not a Delta table (its files would stay beside
    the table), and a table whose versions this run's must not be published with (:func:`check_versions`)."""
    p = Path(output)
    if p.is_dir() and not is_delta_table(p) and any(p.iterdir()):
        raise ParameterError(f"output exists and is not a Delta table (table_format 'delta'): {p}")
    if is_delta_table(p):
        check_versions(log_commits(p), str(p), recorded)


def check_versions(logs, shown: str, recorded: bool) -> None:
    """Refuse a new version of an existing table beside versions it must not be published with:
    every version stays readable by version until the table is vacuumed, so each must be a release
    of daskmicro's, all of one kind — recorded in the release ledger (whose later releases of the
    same records repeat the published cells) or trial runs (whose cells intersect each other's and a
    recorded release's, and are never published).  ``logs``: ``(name, text)`` of the log's commit
    files (:func:`log_commits`); a restore republishes an earlier version."""
    import json

    kinds = set()
    for name, text in logs:
        info = next((json.loads(line)["commitInfo"] for line in text.splitlines() if '"commitInfo"' in line), {})
        kind = info.get(COMMIT_KEY) if isinstance(info, dict) else None
        if kind is None and isinstance(info, dict) and info.get("operation") == "RESTORE":
            continue
        if kind not in ("recorded", "trial"):
            raise ParameterError(f"output {shown} is a Delta table daskmicro did not write (version "
                                 f"{int(name.split('.')[0])}): its versions stay readable by version beside a "
                                 "release; write the release to a new table")
        kinds.add(kind)
    if not recorded and "recorded" in kinds:
        raise ParameterError(f"output {shown} holds a recorded release: a trial run (ledger off) would stay readable "
                             "by version beside it, its cells intersecting the published ones; write the trial to a "
                             "new table")
    if recorded and "trial" in kinds:
        raise ParameterError(f"output {shown} holds a trial run's version (ledger off), readable by version beside a "
                             "release until the table is vacuumed; write the release to a new table")


def is_commit_file(name: str) -> bool:
    """Whether ``name`` (a file of ``_delta_log/``) is the commit of one version: ``NNN….json``."""
    stem, _, ext = name.rpartition(".")
    return ext == "json" and len(stem) == 20 and stem.isdigit()


def log_commits(path) -> list:
    """``(name, text)`` of the commit files of the local table at ``path``."""
    log = Path(path) / DELTA_LOG
    return [(f.name, f.read_text(encoding="utf-8", errors="replace"))
            for f in sorted(log.iterdir()) if is_commit_file(f.name)]


class LocalTable:
    """A Delta table in a local directory as :func:`commit_delta` writes it.  A table on an object
    store (:class:`daskmicro.io.deltastore.DeltaTableTarget`) answers the same: ``uri``,
    ``options``, ``url``, :meth:`expected_version`, :meth:`relative`, :meth:`remove_table`,
    :meth:`remove_files`, :meth:`scrub`."""

    options = None

    def __init__(self, path):
        self.path = Path(path)
        self.uri = self.url = str(path)

    def expected_version(self, deltalake):
        """The version this run makes the next one after (None: it creates the table)."""
        return deltalake.DeltaTable(self.uri).version() if is_delta_table(self.path) else None

    def relative(self, uri: str) -> str:
        return os.path.relpath(uri[len("file://"):] if uri.startswith("file://") else uri, self.path)

    def remove_table(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def remove_files(self, names) -> None:
        for name in names:
            (self.path / name).unlink(missing_ok=True)

    @staticmethod
    def scrub(text: str) -> str:
        return text


def table_of(target):
    """The table :func:`commit_delta` writes: ``target`` itself when it is a table on a store."""
    return target if hasattr(target, "expected_version") else LocalTable(target)


def _partitioning(names: list):
    """Hive partitioning of the staged files (``names``: relative to the staging area): int64 keys
    where every value is an integer, else string (as :func:`daskmicro.io.source.open_source` reads
    hive keys)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    values: dict = {}
    for name in names:
        for part in name.split("/")[:-1]:
            kv = hive_dirs.parse_segment(part)
            if kv is not None:
                values.setdefault(kv[0], set())
                if kv[1] is not None:
                    values[kv[0]].add(kv[1])
    if not values:
        return None, []
    fields = [pa.field(key, pa.int64() if vs and all(v.lstrip("-").isdigit() and v.isascii() for v in vs)
                       else pa.string()) for key, vs in values.items()]
    return ds.partitioning(pa.schema(fields), flavor="hive"), list(values)


def _staged(staging, files: list):
    """A reader of the verified staged files (a local staging directory, or a run prefix of a store,
    :class:`daskmicro.io.objectcommit.RemoteRun`) and the partition keys."""
    import pyarrow.dataset as ds

    names = [f["path"] for f in files]
    partitioning, keys = _partitioning(names)
    if isinstance(staging, Path):
        paths, base, fs = [str(staging / n) for n in names], str(staging), None
    else:
        paths, base, fs = [staging.key(n) for n in names], staging.prefix, staging.store.filesystem()
    dataset = ds.dataset(paths, format="parquet", partitioning=partitioning, partition_base_dir=base,
                         filesystem=fs)
    return dataset.scanner(batch_size=BATCH_ROWS).to_reader(), keys


def _check_version(deltalake, table, version: int, columns: list, k: int, n: int):
    """The k-anonymity verdict of table version ``version`` as read back (batch by batch, the values
    in the types read); raises VerificationError unless it holds ``n`` rows and passes ``k``."""
    import numpy as np
    import pyarrow as pa

    from ..privacy.verify import TupleCounts, add_tuple_counts, check_tuple_counts, tuple_counts
    from .commit import table_values

    dataset = deltalake.DeltaTable(table.uri, version=version, storage_options=table.options).to_pyarrow_dataset()
    total = TupleCounts(np.empty(0, np.uint64), np.empty(0, np.int64), np.empty((0, 0), np.uint64))
    rows = 0
    for batch in dataset.to_batches(columns=list(columns), batch_size=BATCH_ROWS):
        part = pa.Table.from_batches([batch])
        total = add_tuple_counts(total, tuple_counts(table_values(part, list(columns)), list(columns),
                                                     part.num_rows))
        rows += part.num_rows
    if rows != n:
        raise VerificationError(f"Delta table version {version}: rows in = {n}, rows read back = {rows}")
    check = check_tuple_counts(total, k)
    check.raise_if_failed()
    return check


def _conflict(table) -> ParameterError:
    return ParameterError(f"output {table.url}: another run committed a version of the Delta table while this one "
                          "ran; this run's release is not committed; run it again (--overwrite) to make the next "
                          "version")


def _write(deltalake, table, reader, keys, recorded: bool):
    """One Delta transaction: the table created (version 0), or its next version after the one the
    run found (overwrite); a table changed meanwhile is refused in one line, by the check here or by
    the transaction's own conflict check.  Returns (previous version or None, committed version)."""
    expected = table.expected_version(deltalake)
    kind = deltalake.CommitProperties(custom_metadata={COMMIT_KEY: "recorded" if recorded else "trial"})
    try:
        if expected is None:
            deltalake.write_deltalake(table.uri, reader, mode="error", partition_by=keys or None,
                                      storage_options=table.options, commit_properties=kind)
            return None, 0
        current = deltalake.DeltaTable(table.uri, storage_options=table.options)
        if current.version() != expected:
            raise _conflict(table)
        pinned = deltalake.DeltaTable(table.uri, version=expected, storage_options=table.options)
        deltalake.write_deltalake(pinned, reader, mode="overwrite", partition_by=keys or None,
                                  schema_mode="overwrite", commit_properties=kind)
        return expected, int(pinned.version())
    except ParameterError:
        raise
    except Exception as exc:  # deltalake's errors: a concurrent commit, the store's own errors
        if type(exc).__name__ == "CommitFailedError" or (expected is None and "already exists" in str(exc)):
            raise _conflict(table) from None
        if expected is None:   # a table this run was creating: nothing of it is left behind
            table.remove_table()
        raise ParameterError(f"output: cannot commit the Delta table {table.url}: "
                             f"{table.scrub(describe(exc))}") from None


def _undo(deltalake, table, previous, version: int) -> None:
    """Take back version ``version``, which failed its check: a table this run created removed, else
    the previous version restored and the failed version's own files deleted (so that it cannot be
    read by version either)."""
    if previous is None:
        table.remove_table()
        return
    opened = (lambda v: deltalake.DeltaTable(table.uri, version=v, storage_options=table.options))
    failed = {table.relative(u) for u in opened(version).file_uris()}
    kept = {table.relative(u) for u in opened(previous).file_uris()}
    deltalake.DeltaTable(table.uri, storage_options=table.options).restore(previous)
    table.remove_files(sorted(failed - kept))


def commit_delta(staging, target, files: list, columns: list, k: int, n: int, recorded: bool = False) -> dict:
    """Commit the verified release files ``files`` (the manifest's listing, paths relative to
    ``staging``) as one version of the Delta table ``target`` (created, or overwritten as a new
    version; its commit metadata says whether it is ``recorded`` in the release ledger or a trial,
    :func:`check_versions`), then check that version as read back.  Returns ``{"version", "files", "k_check"}``.
    A version that fails the check is undone at once (:func:`_undo`) and VerificationError raised."""
    from .interrupt import check as check_interrupt

    deltalake = load_deltalake(MISSING_WRITE)
    table = table_of(target)
    reader, keys = _staged(staging, files)
    check_interrupt()     # a run asked to stop never commits
    previous, version = _write(deltalake, table, reader, keys, recorded)
    try:
        check = _check_version(deltalake, table, version, columns, k, n)
    except BaseException as failed:
        try:
            _undo(deltalake, table, previous, version)
        except Exception as exc:  # the failed version stays current: say so, never quietly
            raise VerificationError(f"version {version} of the Delta table {table.url} was committed but not "
                                    f"verified ({failed if isinstance(failed, VerificationError) else describe(failed)})"
                                    f", and could not be taken back "
                                    f"({table.scrub(describe(exc))}): do not publish it; restore the table to "
                                    f"{'its previous version' if previous is not None else 'nothing'}") from None
        raise
    uris = deltalake.DeltaTable(table.uri, version=version, storage_options=table.options).file_uris()
    return {"version": int(version), "files": sorted(table.relative(u) for u in uris), "k_check": check}
