"""Lake input through :mod:`pyarrow.dataset`: a file, a directory of files, or a hive-partitioned lake.

:func:`open_source` checks the input before any work starts — every file readable, not empty,
one schema across files (the first file that differs is named), no duplicate column names —
and returns a :class:`LakeSource`: the sorted file list (the order of the global row ids), the
schema with the hive partition keys, the projection and the filter, and a fingerprint of the
input (paths, sizes, modification times) for the commit manifest.

The workers read one file each (:func:`read_piece`), with the filter and projection applied
and a global row id column added from the row offsets of the pre-scan (:func:`scan_piece`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError, describe, masked_path
from . import hive as hive_dirs
from .filters import parse_filters
from .formats import filter_rows
from .prescan import scan_frame
from .tables import CSV_SUFFIXES, PARQUET_SUFFIXES, arrow_to_pandas, check_csv_header, one_line

__all__ = ["LakeSource", "RemoteSource", "open_source", "read_piece", "scan_piece", "arrow_to_pandas", "RID"]

#: Internal column holding each record's global row id while a run is in flight.
RID = "__daskmicro_rid__"


@dataclass
class LakeSource:
    """A checked lake input (see :func:`open_source`)."""

    path: Path
    files: list                  # absolute paths, sorted: the order of the global row ids
    fmt: str                     # "parquet" or "csv"
    schema: object               # pyarrow schema of the projected columns, partition keys included
    full_schema: object          # every column of the input, partition keys included
    partition_fields: list       # hive keys (directory names), in directory order
    filter: object = None        # pyarrow.dataset.Expression or None
    filter_text: list = field(default_factory=list)

    @property
    def columns(self) -> list:
        return list(self.schema.names)

    def fingerprint(self) -> dict:
        """Input identity for the manifest: each file's path, size and mtime, plus filter and columns."""
        files = []
        for f in self.files:
            st = os.stat(f)
            files.append({"path": os.path.relpath(f, self.path) if self.path.is_dir() else Path(f).name,
                          "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
        return {"path": str(self.path.resolve()), "format": self.fmt, "files": files,
                "filter": list(self.filter_text), "columns": self.columns}

    def attach(self, client) -> None:
        """Nothing to send: every task reads its own file."""

    def dtype_name(self, column) -> str:
        """The column's type as pandas names it (float64, int32, ...), else Arrow's name."""
        import pyarrow as pa

        t = self.schema.field(column).type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            return str(np.dtype(t.to_pandas_dtype()))
        return str(t)

    def scan_task(self, i: int, qi: list, keys: list):
        import dask

        return dask.delayed(scan_piece, pure=True)(*self.piece_args(i), qi=list(qi), keys=list(keys))

    def read_task(self, i: int, columns, row0: int):
        import dask

        return dask.delayed(read_piece, pure=True)(*self.piece_args(i), columns=list(columns), row0=int(row0))

    def piece_args(self, i: int) -> tuple:
        """Arguments of :func:`read_piece` / :func:`scan_piece` for file ``i`` (picklable)."""
        return (self.files[i], self.fmt, str(self.path.resolve()) if self.path.is_dir() else None,
                self.full_schema, self.partition_fields, self.filter)


@dataclass
class RemoteSource(LakeSource):
    """A lake input on an object store (:mod:`daskmicro.io.objectstore`): ``files`` are keys
    (``bucket/key``), read by the workers through ``store``; ``path`` is the URL as given."""

    store: object = None
    root: str = ""               # the prefix (``bucket/key``) the hive keys are relative to
    prefix: bool = False         # a prefix of objects, not one object
    listing: list = field(default_factory=list)   # (key, bytes, etag) of each file
    remote = True
    rows_hint = None

    def fingerprint(self) -> dict:
        """The URL, each object's key below it, size and ETag, the filter and the columns."""
        files = [{"path": k[len(self.root):].lstrip("/") if self.prefix else k.rsplit("/", 1)[-1], "bytes": b,
                  "etag": e} for k, b, e in self.listing]
        return {"path": str(self.path), "format": self.fmt, "files": files, "filter": list(self.filter_text),
                "columns": self.columns}

    def piece_args(self, i: int) -> tuple:
        from .objectstore import RemoteFile

        return (RemoteFile(self.store, self.files[i]), self.fmt, self.root if self.prefix else None,
                self.full_schema, self.partition_fields, self.filter)


def _data_files(root: Path, suffixes) -> list:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for name in filenames:
            if not name.startswith((".", "_")) and name.lower().endswith(suffixes):
                out.append(os.path.join(dirpath, name))
    return sorted(out)


def _directory_files(path: Path) -> list:
    """The data files of a directory input: a Delta table's current version
    (:func:`daskmicro.io.delta.delta_files`), else every Parquet file of a committed release or
    plain directory."""
    from .delta import delta_files, is_delta_table

    if is_delta_table(path):
        return delta_files(path)
    from .recovery import refuse_uncommitted

    from .paths import refuse_repeated_files

    refuse_uncommitted(path)  # a daskmicro release is read only once committed
    files = _data_files(path, PARQUET_SUFFIXES)
    refuse_repeated_files(files, path)
    return files


def _file_schema(path: str, fmt: str, store=None, size=None):
    import pyarrow.dataset as ds

    shown = path if store is None else f"{store.protocol}://{path}"
    if (os.path.getsize(path) if store is None else size) == 0:
        raise InputError(f"empty file (0 bytes): {masked_path(shown)}")
    fs = None if store is None else store.filesystem()
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(path, filesystem=fs)  # the file's own schema, duplicate names included
        elif fs is None:
            check_csv_header(Path(path))  # a repeated name is refused by name, before pyarrow reads it
            schema = ds.dataset(path, format=fmt).schema
        else:
            with fs.open(path, "rb") as fh:
                check_csv_header(fh, masked_path(shown))
            schema = ds.dataset(path, format=fmt, filesystem=fs).schema
    except InputError:
        raise
    except Exception as exc:  # ArrowInvalid, OSError, botocore's errors, ...
        text = one_line(exc) if store is None else store.scrub(describe(exc))
        raise InputError(f"cannot read {masked_path(shown)}: {text}") from None
    names = schema.names
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"duplicate column name(s) {', '.join(map(repr, dup))} in {masked_path(path)}")
    if fmt == "csv":
        _refuse_rounded_integers(path, schema, fs)
    return schema.remove_metadata()


def _refuse_rounded_integers(path: str, schema, fs=None) -> None:
    """Refuse a CSV column that Arrow reads as double although its text holds integers beyond
    ±2^53: an integer too large for int64 makes Arrow infer double for the whole column, which
    rounds it silently (a QI would look constant and be published raw; any column would be
    published with values it never held).  Columns and counts only, never a value."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    if not floats:
        return
    bad: dict = {}
    opts = pcsv.ConvertOptions(include_columns=floats, column_types={c: pa.string() for c in floats})
    try:
        reader = pcsv.open_csv(path if fs is None else fs.open(path, "rb"), convert_options=opts)
        for batch in reader:
            for c in floats:
                text = pc.utf8_trim_whitespace(batch.column(c))
                long = pc.filter(text, pc.match_substring_regex(text, r"^[+-]?0*[0-9]{16,}$"))
                count = sum(abs(int(v)) > 2 ** 53 for v in long.to_pylist())
                if count:
                    bad[c] = bad.get(c, 0) + count
    except Exception as exc:  # ArrowInvalid, OSError, ...
        raise InputError(f"cannot read {masked_path(path)}: {one_line(exc)}") from None
    if bad:
        cols = ", ".join(f"{c!r} ({n})" for c, n in bad.items())
        raise InputError(f"column(s) of {masked_path(path)} holding integers beyond ±2^53, which would be read as rounded "
                         f"floats: {cols}; subtract an offset or rescale them (or write them as text) first")


def _schema_difference(a, b) -> str:
    for f in a:
        if f.name not in b.names:
            return f"column {f.name!r} missing"
        if not b.field(f.name).type.equals(f.type):
            return f"column {f.name!r} is {b.field(f.name).type}, not {f.type}"
    extra = [n for n in b.names if n not in a.names]
    if extra:
        return f"extra column {extra[0]!r}"
    return "column order differs"


def _hive_fields(root: Path, files: list) -> list:
    """Hive keys from the directory names (key=value) between ``root`` and each file."""
    keys = None
    for f in files:
        parts = Path(f).relative_to(root).parts[:-1]
        these = [kv[0] for kv in map(hive_dirs.parse_segment, parts) if kv is not None]
        if keys is None:
            keys = these
        elif these != keys:
            raise InputError(f"hive partition directories of {masked_path(f)} ({'/'.join(these) or 'none'}) differ "
                             f"from those of {masked_path(files[0])} ({'/'.join(keys) or 'none'})")
    return keys or []


def open_source(path, filters=(), columns=None, drop=(), needed=(), storage_options=None) -> LakeSource:
    """Open and check a lake input.

    Parameters
    ----------
    path : str or path-like
        A Parquet file, a CSV file, or a directory of Parquet files (hive ``key=value``
        sub-directories become columns).  Files and directories whose names start with ``.`` or
        ``_`` are ignored (staging directories, ``_SUCCESS``).
    filters : sequence of str
        Row filters (:func:`daskmicro.io.filters.parse_filter`), combined with AND.
    columns : sequence of str, optional
        Projection: the columns to read (default all).
    drop : sequence of str
        Columns to leave out (direct identifiers); they must exist.
    needed : sequence of str
        Columns the run names (QIs, strata, …): read even when the file stores them as its
        pandas index, which is otherwise never read (row labels, often an identifier).
    storage_options : dict, optional
        Options of the object store's file system (s3fs, adlfs, gcsfs) for an ``s3://``,
        ``abfs://`` or ``gs://`` URL (:mod:`daskmicro.io.objectstore`); a ``file://`` URL is read as the local path it names.

    Raises
    ------
    InputError
        Missing path, no data files, empty or unreadable file, duplicate column names, a file
        whose schema differs from the first file's (named).
    ParameterError
        Unknown columns in ``columns``, ``drop`` or a filter.
    """
    from .objectstore import is_remote, local_path

    path = local_path(path)
    if is_remote(str(path)):
        return _open_remote(str(path), storage_options, filters, columns, drop, needed)
    path = Path(path)
    if not path.exists():
        raise InputError(f"input not found: {path}")
    if path.is_dir():
        files = _directory_files(path)
        if not files:
            raise InputError(f"directory holds no Parquet files: {path}")
        fmt = "parquet"
        hive = _hive_fields(path, files)
    else:
        name = path.name.lower()
        if name.endswith(PARQUET_SUFFIXES):
            fmt = "parquet"
        elif name.endswith(CSV_SUFFIXES):
            fmt = "csv"
        else:
            raise InputError(f"unknown input format for {path}: expected .parquet, .csv or a directory")
        files, hive = [str(path.resolve())], []
    files = [str(Path(f).resolve()) for f in files]
    root = str(path.resolve()) if path.is_dir() else None
    schema = _checked_schema(files, fmt, hive, root, [None] * len(files))
    return _projected(LakeSource, dict(path=path, files=files, fmt=fmt), schema, hive, filters, columns, drop,
                      needed)


def _open_remote(url, storage_options, filters, columns, drop, needed) -> "RemoteSource":
    """:func:`open_source` of an object-store URL (:func:`daskmicro.io.objectstore.open_remote`)."""
    from .deltastore import delta_listing, is_delta_prefix
    from .objectcommit import is_release_prefix, release_listing
    from .objectstore import open_remote
    from .recovery import SUCCESS

    store, root, listing, prefix, names = open_remote(url, storage_options, PARQUET_SUFFIXES)
    delta = prefix and is_delta_prefix(names)
    if delta:   # a Delta table: the files of its current version only
        listing = delta_listing(store, root, url, listing)
    elif prefix and is_release_prefix(names):   # a release written there: only what its manifest lists
        root, listing, names = release_listing(store, root, url)
    if prefix:
        if "_report.json" in names and SUCCESS not in names and not delta:
            raise InputError(f"not a committed release (no {SUCCESS}): {url}")
        if not listing:
            raise InputError(f"prefix holds no Parquet objects: {url}")
        fmt = "parquet"
    else:
        name = root.rsplit("/", 1)[-1].lower()
        fmt = "parquet" if name.endswith(PARQUET_SUFFIXES) else "csv" if name.endswith(CSV_SUFFIXES) else None
        if fmt is None:
            raise InputError(f"unknown input format for {url}: expected .parquet, .csv or a prefix of Parquet objects")
    files = [k for k, _, _ in listing]
    hive = _hive_fields(Path(root), files) if prefix else []
    schema = _checked_schema(files, fmt, hive, root if prefix else None, [b for _, b, _ in listing], store)
    given = dict(path=url, files=files, fmt=fmt, store=store, root=root, prefix=prefix, listing=listing)
    return _projected(RemoteSource, given, schema, hive, filters, columns, drop, needed)


def _checked_schema(files, fmt, hive, root, sizes, store=None):
    """The input's schema (hive keys included) and its stored pandas index, every file checked
    against the first."""
    import pyarrow as pa

    shown = (lambda f: f) if store is None else (lambda f: f"{store.protocol}://{f}")
    first = _file_schema(files[0], fmt, store, sizes[0])
    fs = None if store is None else store.filesystem()
    index = _stored_index(_pq_schema(files[0], fs)) if fmt == "parquet" else []
    for f, size in zip(files[1:], sizes[1:]):
        s = _file_schema(f, fmt, store, size)
        if not s.equals(first):
            raise InputError(f"schema of {masked_path(shown(f))} differs from that of {masked_path(shown(files[0]))}: "
                             f"{_schema_difference(first, s)}")
    clash = [k for k in hive if k in first.names]
    if clash:
        raise InputError(f"hive partition key(s) {', '.join(map(repr, clash))} also stored as column(s) in the files")
    return pa.schema(list(first) + [_hive_field(root, files, k) for k in hive]), index


def _projected(cls, given: dict, schema, hive, filters, columns, drop, needed):
    """The source with its projection and filter (see :func:`open_source`)."""
    import pyarrow as pa

    full, index = schema
    names = list(full.names)
    for label, cols in (("--columns", columns or []), ("--drop", drop or [])):
        unknown = [c for c in cols if c not in names]
        if unknown:
            raise ParameterError(f"{label}: unknown column(s) {', '.join(map(repr, unknown))}")
    # a pandas index stored in the file is row labels, not data: never read unless named
    index = [c for c in index if c not in set(columns or ()) | set(needed)]
    keep = [c for c in (columns or names) if c not in set(drop or ()) and c not in index]
    if not keep:
        raise ParameterError("no column left to read after --columns/--drop")
    expr = parse_filters(filters, full)
    schema = pa.schema([full.field(c) for c in keep])
    return cls(schema=schema, full_schema=full, partition_fields=hive, filter=expr,
               filter_text=list(filters or ()), **given)


def _pq_schema(path, fs=None):
    import pyarrow.parquet as pq

    return pq.read_schema(path, filesystem=fs)


def _stored_index(schema) -> list:
    """The columns a Parquet file's pandas metadata marks as its stored index."""
    try:
        meta = schema.pandas_metadata or {}
    except Exception:  # no or unreadable pandas metadata: nothing is an index
        return []
    return [c for c in meta.get("index_columns", []) if isinstance(c, str) and c in schema.names]


def _hive_field(root: Path, files, key):
    """A hive key's type: int64 when every value is an integer, else string."""
    import pyarrow as pa

    values = set()
    for f in files:
        for p in Path(f).relative_to(root).parts[:-1]:
            kv = hive_dirs.parse_segment(p)
            if kv is not None and kv[0] == key and kv[1] is not None:
                values.add(kv[1])
    ints = all(v.lstrip("-").isdigit() and v.lstrip("-").isascii() for v in values) and values
    return pa.field(key, pa.int64() if ints else pa.string())


#: A Parquet object of a store up to this size is read with one GET (its bytes held while it is
#: decoded); a larger one through ranged reads of its column chunks.
WHOLE_OBJECT_BYTES = 256 * 2**20


def _read_table(file, fmt, root, full_schema, hive, expr, columns):
    """One file's table; an unreadable file (a malformed CSV row past the pre-scan's first block, a
    damaged Parquet page) is an :class:`InputError` naming the file and the position, never the row."""
    import pyarrow as pa

    try:
        return _read_file(file, fmt, root, full_schema, hive, expr, columns)
    except MemoryError:
        raise
    except (pa.lib.ArrowException, OSError, ValueError) as exc:
        text = describe(exc) if isinstance(file, str) else file.store.scrub(describe(exc))
        why = _csv_column(exc, full_schema, hive) if fmt == "csv" else ""
        raise InputError(f"cannot read {masked_path(str(file))}: {text}{why}") from None


def _csv_column(exc, full_schema, hive) -> str:
    """For a CSV value that does not convert to its column's type: the column named (the reader's
    message gives only its position) and why — its type is inferred from the file's first block,
    so a later value of another kind (text after integers, anything after an empty start) cannot
    be read as one.  Names and types only, never a value; empty for any other error."""
    import re

    m = re.search(r"In CSV column #(\d+)", " ".join(str(exc).split()))
    names = [f.name for f in full_schema if f.name not in hive]
    if m is None or int(m[1]) >= len(names):
        return ""
    field_ = full_schema.field(names[int(m[1])])
    return (f" (column {field_.name!r}: its type, {field_.type}, is inferred from the file's first rows, and a later "
            "value is not of it; give the column values of one type throughout, or convert the file to Parquet with the "
            "type meant)")


def _read_file(file, fmt, root, full_schema, hive, expr, columns):
    import pyarrow as pa
    import pyarrow.dataset as ds

    fs = None
    if not isinstance(file, str):  # an object of a store (objectstore.RemoteFile)
        fs, file = file.store.filesystem(), file.key
    file_schema = pa.schema([f for f in full_schema if f.name not in hive])
    if fs is not None and fmt == "parquet" and fs.size(file) <= WHOLE_OBJECT_BYTES:
        import pyarrow.parquet as pq

        # one GET for the object instead of a request per column chunk
        table = pq.read_table(pa.BufferReader(fs.cat_file(file)), schema=file_schema)
    else:
        table = ds.dataset(file, format=fmt, schema=file_schema if fmt == "parquet" else None, filesystem=fs).to_table()
    if hive:
        values = {}
        for p in Path(file).relative_to(root).parts[:-1]:
            kv = hive_dirs.parse_segment(p)
            if kv is not None:
                values[kv[0]] = kv[1]
        for key in hive:
            f = full_schema.field(key)
            v = int(values[key]) if pa.types.is_integer(f.type) and values[key] is not None else values[key]
            table = table.append_column(f, pa.array([v] * table.num_rows, type=f.type))
    if expr is not None:
        table = filter_rows(table, expr)
    return table.select(columns) if columns is not None else table


def read_piece(file, fmt, root, full_schema, hive, expr, columns, row0: int) -> pd.DataFrame:
    """One file's rows (filtered, projected) as pandas, with the global row id column :data:`RID`."""
    df = arrow_to_pandas(_read_table(file, fmt, root, full_schema, hive, expr, list(columns)))
    df[RID] = np.arange(row0, row0 + len(df), dtype=np.int64)
    return df


def scan_piece(file, fmt, root, full_schema, hive, expr, qi: list, keys: list) -> dict:
    """Pre-scan of one file: rows, per-QI missing/infinite counts and largest magnitude, and the
    record counts of each (key values, missingness pattern) combination.  No values leave the
    worker except key values (strata and partition keys, which are published anyway)."""
    table = _read_table(file, fmt, root, full_schema, hive, expr, list(dict.fromkeys(list(qi) + list(keys))))
    return scan_frame(arrow_to_pandas(table), qi, keys)
