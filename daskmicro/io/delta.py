"""Delta Lake tables: a release committed as one table version, a table read as its current version.

A release with ``table_format="delta"`` is written and verified in its staging directory exactly
as a Parquet lake (:func:`daskmicro.graph.release.write_and_verify`); :func:`commit_delta` then
commits the verified files as one Delta transaction (``deltalake.write_deltalake``, streamed
batch by batch), reads that version back and checks it again: as many rows as the input and
every published tuple at least k times, on the values as read.  A reader sees the previous
version until the transaction is committed and the new one after.

:func:`delta_files` lists the Parquet files of a table's current version, so that files of
earlier versions are never read as input (:func:`daskmicro.io.source.open_source`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import InputError, ParameterError, VerificationError, describe
from . import hive as hive_dirs

__all__ = ["TABLE_FORMATS", "is_delta_table", "delta_files", "refuse_unread_features", "refuse_delta_output",
           "check_delta_target", "commit_delta", "UNREAD_FEATURES"]

#: Values of ``table_format`` (--table-format).
TABLE_FORMATS = ("parquet", "delta")
DELTA_LOG = "_delta_log"
MISSING = "reading a Delta table needs the delta extra: pip install 'daskmicro[delta]'"
MISSING_WRITE = "table_format 'delta' (--table-format) needs the delta extra: pip install 'daskmicro[delta]'"
#: Rows per batch streamed into the Delta transaction and read back by the check.
BATCH_ROWS = 256 * 1024


def _deltalake(message: str):
    try:
        import deltalake
    except ImportError:
        raise ParameterError(message) from None
    return deltalake


def is_delta_table(path) -> bool:
    """Whether the local directory ``path`` holds a Delta table (a ``_delta_log/`` directory)."""
    return (Path(path) / DELTA_LOG).is_dir()


def delta_files(path) -> list:
    """Absolute paths of the Parquet files of the current version of the Delta table at ``path``."""
    deltalake = _deltalake(MISSING)
    try:
        table = deltalake.DeltaTable(str(path))
        protocol = table.protocol()
        uris = table.file_uris()
    except Exception as exc:  # a damaged or unreadable log
        raise InputError(f"cannot read the Delta table {path}: {describe(exc)}") from None
    refuse_unread_features(path, protocol)
    out = []
    for u in uris:
        local = u[len("file://"):] if u.startswith("file://") else u
        out.append(str(Path(local).resolve()))
    if not out:
        raise InputError(f"the current version of the Delta table holds no files: {path}")
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
    """Refuse, in one line, a Delta release to anything but a local directory."""
    if table_format != "delta":
        return
    from .objectstore import is_remote

    if output is None:
        raise ParameterError("table_format 'delta' (--table-format) needs a directory OUTPUT: a Delta table is a "
                             "directory")
    text = str(output)
    if is_remote(text):
        raise ParameterError("table_format 'delta' (--table-format) writes a local directory only: a release on an "
                             f"object store is committed by its _SUCCESS object: {text}")
    if text.lower().endswith((".parquet", ".pq", ".csv")):
        raise ParameterError("table_format 'delta' (--table-format) needs a directory OUTPUT, not a single file "
                             f"(a Delta table is a directory of files and its log): {text}")
    _deltalake(MISSING_WRITE)


def check_delta_target(output) -> None:
    """Refuse an existing non-empty directory that is not a Delta table (its files would stay beside the table)."""
    p = Path(output)
    if p.is_dir() and not is_delta_table(p) and any(p.iterdir()):
        raise ParameterError(f"output exists and is not a Delta table (table_format 'delta'): {p}")


def _partitioning(staging: Path, paths: list):
    """Hive partitioning of the staged files: int64 keys where every value is an integer, else string
    (as :func:`daskmicro.io.source.open_source` reads hive keys)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    values: dict = {}
    for p in paths:
        for part in Path(p).relative_to(staging).parts[:-1]:
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


def _check_version(deltalake, target: Path, version: int, columns: list, k: int, n: int):
    """The k-anonymity verdict of table version ``version`` as read back (batch by batch, the values
    in the types read); raises VerificationError unless it holds ``n`` rows and passes ``k``."""
    import pyarrow as pa

    from ..privacy.verify import TupleCounts, add_tuple_counts, check_tuple_counts, tuple_counts
    import numpy as np

    from .commit import table_values

    dataset = deltalake.DeltaTable(str(target), version=version).to_pyarrow_dataset()
    total = TupleCounts(np.empty(0, np.uint64), np.empty(0, np.int64), np.empty((0, 0), np.uint64))
    rows = 0
    for batch in dataset.to_batches(columns=list(columns), batch_size=BATCH_ROWS):
        table = pa.Table.from_batches([batch])
        total = add_tuple_counts(total, tuple_counts(table_values(table, list(columns)), list(columns),
                                                     table.num_rows))
        rows += table.num_rows
    if rows != n:
        raise VerificationError(f"Delta table version {version}: rows in = {n}, rows read back = {rows}")
    check = check_tuple_counts(total, k)
    check.raise_if_failed()
    return check


def commit_delta(staging, target, files: list, columns: list, k: int, n: int) -> dict:
    """Commit the verified release files ``files`` (the manifest's listing, paths relative to
    ``staging``) as one version of the Delta table ``target`` (created, or overwritten as a new
    version), then check that version as read back.  Returns ``{"version", "files", "k_check"}``.
    A version that fails the check is undone at once (the previous version restored, or a table
    this run created removed) and VerificationError raised."""
    import pyarrow.dataset as ds

    deltalake = _deltalake(MISSING_WRITE)
    staging, target = Path(staging), Path(target)
    paths = [str(staging / f["path"]) for f in files]
    partitioning, keys = _partitioning(staging, paths)
    dataset = ds.dataset(paths, format="parquet", partitioning=partitioning, partition_base_dir=str(staging))
    reader = dataset.scanner(batch_size=BATCH_ROWS).to_reader()
    previous = deltalake.DeltaTable(str(target)).version() if is_delta_table(target) else None
    deltalake.write_deltalake(str(target), reader, mode="overwrite" if previous is not None else "error",
                              partition_by=keys or None,
                              schema_mode="overwrite" if previous is not None else None)
    version = deltalake.DeltaTable(str(target)).version()
    try:
        check = _check_version(deltalake, target, version, columns, k, n)
    except BaseException:
        if previous is None:
            shutil.rmtree(target, ignore_errors=True)
        else:
            deltalake.DeltaTable(str(target)).restore(previous)
        raise
    uris = deltalake.DeltaTable(str(target), version=version).file_uris()
    listed = [os.path.relpath(u[len("file://"):] if u.startswith("file://") else u, target) for u in uris]
    return {"version": int(version), "files": sorted(listed), "k_check": check}
