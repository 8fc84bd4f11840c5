"""Reading input tables and writing releases without ever leaving a half-written file.

Reading: :func:`read_table` accepts a CSV file (``.csv``, ``.csv.gz``), a Parquet file
(``.parquet``, ``.pq``) or a directory of Parquet files (read as one dataset with
:mod:`pyarrow.dataset`).  Any problem — missing, unreadable, unknown format, no rows — is an
:class:`~daskmicro.errors.InputError` with a one-line message naming the file.

Writing: every file is first written to a hidden temporary sibling and then moved into place
with :func:`os.replace`, which is atomic on POSIX and Windows: a reader sees the old file or the
new one, never a torn one.  Each file is fsynced before it is moved, and its directory after.
:class:`AtomicBatch` extends this to several files — a release and its report — that appear
together or not at all: a commit journal (:mod:`daskmicro.io.journal`) naming every
(temporary file → target) pair is written before the first move, so a crash between two moves
is completed by the next run (:func:`daskmicro.io.recovery.recover`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ..errors import InputError, describe
from .journal import fault, fsync_dir, fsync_file, remove_journal, write_journal
from .formats import arrow_to_pandas, dump_json
from .interrupt import check as check_interrupt

__all__ = [
    "arrow_table",
    "CSV_SUFFIXES",
    "PARQUET_SUFFIXES",
    "AtomicBatch",
    "read_table",
    "table_format",
    "write_json_atomic",
    "write_parquet_atomic",
    "write_table_atomic",
    "verify_written_table",
    "arrow_to_pandas",
    "dump_json",
]

CSV_SUFFIXES = (".csv", ".csv.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")


def table_format(path) -> str | None:
    """``"csv"`` or ``"parquet"`` from a file name's extension (case-insensitive), else None."""
    name = Path(path).name.lower()
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def one_line(exc: BaseException) -> str:
    """Another library's error on one line: its type and a data-free description
    (:func:`daskmicro.errors.describe`), never its message verbatim (it may quote a row)."""
    return describe(exc)


def read_table(path) -> pd.DataFrame:
    """Read a CSV or Parquet table into a pandas DataFrame.

    Parameters
    ----------
    path : str or path-like
        A ``.csv`` / ``.csv.gz`` file, a ``.parquet`` / ``.pq`` file, or a directory holding
        Parquet files (a partitioned data set, read with :func:`pyarrow.dataset.dataset`).

    Returns
    -------
    pandas.DataFrame
        At least one row.

    Raises
    ------
    InputError
        The path does not exist, has an unknown extension, cannot be parsed, or holds no rows.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"input file not found: {path}")
    try:
        if path.is_dir():
            df = _read_parquet_dir(path)
        else:
            fmt = table_format(path)
            if fmt is None:
                raise InputError(
                    f"unknown input format for {path}: expected a .csv or .parquet file or a directory of Parquet files"
                )
            if fmt == "csv":
                check_csv_header(path)
                df = pd.read_csv(path)
            else:
                import pyarrow.parquet as pq

                _refuse_duplicates(pq.read_schema(path).names, path)
                df = pd.read_parquet(path)
    except InputError:
        raise
    except pd.errors.EmptyDataError:
        raise InputError(f"input file is empty: {path}") from None
    except Exception as exc:  # parsers raise many types (ArrowInvalid, ParserError, OSError, …)
        raise InputError(f"cannot read {path}: {one_line(exc)}") from exc
    if len(df) == 0:
        raise InputError(f"input has no rows: {path}")
    return df


def check_csv_header(path, name=None) -> None:
    """Refuse a CSV whose header names a column twice: pandas would rename the second ``age`` to
    ``age.1``, and a QI named ``age`` would then leave that copy unprotected in the release.

    The header is read by the same parser (pandas, as a data row: no renaming) that reads the
    table, so the names compared are the names pandas sees — a byte-order mark, quoting or a
    compressed file cannot make a second parser disagree with it.  ``path`` may be an open
    binary file (an object of a store), ``name`` then names it in the message."""
    header = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False)
    _refuse_duplicates(header.iloc[0].tolist() if len(header) else [], name or path)


def _refuse_duplicates(names, path) -> None:
    from .qi import repeated

    dup = repeated(names)
    if dup:
        raise InputError(f"duplicate column name(s) {', '.join(map(repr, dup))} in {path}")


def _read_parquet_dir(path: Path) -> pd.DataFrame:
    import pyarrow.dataset as ds

    from .recovery import refuse_uncommitted

    refuse_uncommitted(path)  # a daskmicro release is read only once committed

    files = [p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(PARQUET_SUFFIXES)]
    if not files:
        raise InputError(f"directory holds no Parquet files: {path}")
    return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pandas()


# --------------------------------------------------------------------------- atomic writes


def verify_written_table(path, fmt: str, columns: list, k: int, rows: int, gzip: bool = False):
    """Read a written release back and check rows and k-anonymity on the values as written."""
    import pyarrow.parquet as pq

    from ..errors import VerificationError
    from ..privacy.verify import check_tuple_counts, tuple_counts

    if fmt == "parquet":
        table = pq.read_table(path)
        n = table.num_rows
        written = arrow_to_pandas(table.select(columns))
    else:
        written = pd.read_csv(path, dtype=str, keep_default_na=False, compression="gzip" if gzip else None)
        if any(c not in written.columns for c in columns):
            raise VerificationError("the written CSV does not hold each published column exactly once")
        n = len(written)
        written = written[columns]
    if n != rows:
        raise VerificationError(f"row count check failed: {rows} records in, {n} records read back from the file")
    return check_tuple_counts(tuple_counts(written, columns), k).raise_if_failed()


def arrow_table(df: pd.DataFrame, schema=None):
    """``df`` as an Arrow table (no index), each column in its type in ``schema`` (a release's
    promised schema: the input's Arrow types, which pandas holds as Python objects for maps,
    decimals of their own precision, large binaries, 32-bit times, fixed-size lists), as a
    directory release writes them; a column ``schema`` does not type (absent, or null: a frame's
    object column) as pandas gives it."""
    import pyarrow as pa

    given = {} if schema is None else {f.name: f for f in schema if not pa.types.is_null(f.type)}
    if not any(c in given for c in df.columns):
        return pa.Table.from_pandas(df, preserve_index=False)
    # (pandas' inference runs only on the columns the schema leaves: it fails on a map's pairs)
    fields = [given[c] if c in given else pa.Schema.from_pandas(df[[c]], preserve_index=False).field(c)
              for c in df.columns]
    return pa.Table.from_pandas(df, schema=pa.schema(fields), preserve_index=False)


class AtomicBatch:
    """Stage several files and move them into place together when the block ends without error.

    Examples
    --------
    >>> with AtomicBatch() as batch:                                   # doctest: +SKIP
    ...     batch.parquet(release, "out/release.parquet")
    ...     batch.json(report.to_dict(), "out/report.json")

    If the block raises, every staged temporary file is deleted and no target is touched.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def _stage(self, path, write: Callable[[Path], None]) -> Path:
        target = Path(path)
        # A unique hidden sibling (same directory, hence same file system, so os.replace is a rename);
        # created by the writer itself so it gets the usual permissions (mkstemp would make it 0600).
        # the pid lets a later run tell a file of a dead process (swept) from one being written
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.{os.getpid()}.tmp"
        try:
            write(tmp)
            fsync_file(tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._staged.append((tmp, target))
        return target

    def parquet(self, df: pd.DataFrame, path, schema=None) -> Path:
        """Stage ``df`` as a Parquet file (without the pandas index) for ``path``, its columns in the
        Arrow types of ``schema`` where it gives one (:func:`arrow_table`)."""
        import pyarrow.parquet as pq

        return self._stage(path, lambda tmp: pq.write_table(arrow_table(df, schema), tmp))

    def csv(self, df: pd.DataFrame, path) -> Path:
        """Stage ``df`` as a CSV file (without the pandas index) for ``path``."""
        compression = "gzip" if str(path).lower().endswith(".gz") else None
        return self._stage(path, lambda tmp: df.to_csv(tmp, index=False, compression=compression))

    def release(self, df: pd.DataFrame, path, columns: list, k: int, schema=None):
        """Stage ``df`` as a release (Parquet or CSV by extension), read the staged file back and
        verify what it holds, as written: as many rows as ``df`` and every published tuple over
        ``columns`` (stratum columns + QIs) at least ``k`` times, compared in the dtypes the file
        holds (Parquet) or as the text it holds (CSV).  Raises
        :class:`~daskmicro.errors.VerificationError` (the staged file is deleted, nothing is
        committed) otherwise; returns the :class:`~daskmicro.privacy.verify.KAnonymityCheck`.
        """
        fmt = table_format(path)
        if fmt is None:
            raise InputError(f"unknown output format for {path}: use a .csv or .parquet extension")
        target = self.parquet(df, path, schema) if fmt == "parquet" else self.csv(df, path)
        tmp = next(t for t, dest in reversed(self._staged) if dest == target)
        try:
            return verify_written_table(tmp, fmt, list(columns), int(k), len(df), str(path).lower().endswith(".gz"))
        except BaseException:
            self._staged = [(t, d) for t, d in self._staged if t != tmp]
            tmp.unlink(missing_ok=True)
            raise

    def json(self, obj: Any, path) -> Path:
        """Stage ``obj`` as indented JSON for ``path`` (numpy scalars and arrays are converted)."""
        text = dump_json(obj)  # serialise first: a TypeError must not leave a temporary file
        return self._stage(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))

    def blob(self, data: bytes, path) -> Path:
        """Stage raw ``data`` (e.g. a PNG image) for ``path``."""
        return self._stage(path, lambda tmp: tmp.write_bytes(data))

    def text(self, text: str, path) -> Path:
        """Stage ``text`` (UTF-8) for ``path``."""
        return self._stage(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))

    def commit(self) -> None:
        """Move every staged file into place, all or none.

        A target that is a directory is refused before anything moves; an interrupted commit of
        a target is resolved first (:func:`daskmicro.io.recovery.recover`).  One file is moved by
        one atomic rename.  For several, each existing target is kept under a hidden sibling name
        (a hard link, so the target never disappears) and a journal naming every (temporary →
        target, old) triple is written beside the first target before the first rename: a crash
        between renames is rolled forward by the next run, since every temporary file is
        complete.  If a rename fails here, the journal is switched to "back", the files already
        placed are removed and the old ones put back, so the targets end up all new or all as
        they were.  Fault points of the tests: ``file.staged``, ``file.aside``, ``file.journal``,
        ``file.rename.N`` (after the N-th rename), ``file.unjournal``.
        """
        from .recovery import recover_journal

        staged, self._staged = self._staged, []
        try:
            check_interrupt()  # a run asked to stop never commits
            dirs = [str(target) for _, target in staged if target.is_dir() and not target.is_symlink()]
            if dirs:
                raise InputError(f"cannot replace a directory with a file: {', '.join(dirs)}")
            for _, target in staged:
                recover_journal(target)
            folders = list(dict.fromkeys(target.parent for _, target in staged))
            if len(staged) == 1:
                tmp, target = staged[0]
                os.replace(tmp, target)
                fsync_dir(target.parent)
                return
            for folder in folders:
                fsync_dir(folder)
            fault("file.staged")
            aside: list[tuple[Path, Path]] = []   # (target, where its old version waits)
            for tmp, target in staged:
                if os.path.lexists(target):
                    old = tmp.with_name(tmp.name[: -len(".tmp")] + ".old")
                    try:
                        os.link(target, old, follow_symlinks=False)
                    except OSError:  # a file system without hard links: a copy does as well
                        shutil.copy2(target, old, follow_symlinks=False)
                        fsync_file(old)
                    aside.append((target, old))
            for folder in folders:
                fsync_dir(folder)
            fault("file.aside")
            olds = dict(aside)
            first = staged[0][1]
            pairs = [{"tmp": str(tmp.absolute()), "target": str(target.absolute()),
                      "old": str(olds[target].absolute()) if target in olds else None} for tmp, target in staged]
            write_journal(first, {"kind": "files", "state": "forward", "pairs": pairs})
            fault("file.journal")
            placed: list[Path] = []
            try:
                for i, (tmp, target) in enumerate(staged, 1):
                    os.replace(tmp, target)
                    placed.append(target)
                    fault(f"file.rename.{i}")
                for folder in folders:
                    fsync_dir(folder)
            except BaseException:
                write_journal(first, {"kind": "files", "state": "back", "pairs": pairs})
                for target in placed:
                    if target not in olds:
                        target.unlink(missing_ok=True)
                for target, old in aside:
                    os.replace(old, target)
                    # a target never replaced is the same file as its old link: rename does nothing then
                    old.unlink(missing_ok=True)
                for folder in folders:
                    fsync_dir(folder)
                remove_journal(first)
                raise
            remove_journal(first)
            fault("file.unjournal")
            for _, old in aside:
                old.unlink(missing_ok=True)
        finally:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)

    def discard(self) -> None:
        """Delete every staged file; no target is touched."""
        staged, self._staged = self._staged, []
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)

    def __enter__(self) -> "AtomicBatch":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def write_parquet_atomic(df: pd.DataFrame, path) -> Path:
    """Write ``df`` to a Parquet file at ``path`` atomically (temporary sibling, then :func:`os.replace`).

    Returns the target path.  The pandas index is not written.
    """
    with AtomicBatch() as batch:
        batch.parquet(df, path)
    return Path(path)


def write_json_atomic(obj: Any, path) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically; returns the target path."""
    with AtomicBatch() as batch:
        batch.json(obj, path)
    return Path(path)


def write_table_atomic(df: pd.DataFrame, path) -> Path:
    """Write ``df`` atomically as CSV or Parquet, chosen by the extension of ``path``."""
    fmt = table_format(path)
    if fmt is None:
        raise InputError(f"unknown output format for {path}: use a .csv or .parquet extension")
    with AtomicBatch() as batch:
        batch.parquet(df, path) if fmt == "parquet" else batch.csv(df, path)
    return Path(path)
