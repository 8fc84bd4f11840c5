"""In-memory input of a run: a pandas or Dask DataFrame with the interface of a lake source.

The planner (:mod:`daskmicro.plan`) reads every input the same way — a list of pieces, each
scanned once (rows, missing and infinite values, magnitudes, counts per stratum and missingness
pattern) and read when a task needs it, with a global row id column added — whether the pieces
are files (:class:`daskmicro.io.source.LakeSource`) or the chunks of a DataFrame
(:class:`FrameSource`, here).  A pandas DataFrame is cut into chunks of :data:`CHUNK_ROWS` rows
(sent to the cluster once, by :meth:`FrameSource.attach`); a Dask DataFrame's partitions are its
pieces.  Columns, drop and row filters apply as on a lake.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError
from .prescan import scan_frame
from .source import RID

__all__ = ["FrameSource", "open_frame", "is_dask_frame", "pieces_frame", "CHUNK_ROWS"]

#: Rows per piece of a pandas DataFrame.
CHUNK_ROWS = 250_000


def is_dask_frame(obj) -> bool:
    try:
        import dask.dataframe as dd
    except ImportError:  # pragma: no cover - dask is a dependency
        return False
    return isinstance(obj, dd.DataFrame)


def _select(df: pd.DataFrame, columns, expr, full_schema) -> pd.DataFrame:
    if expr is not None:
        import pyarrow as pa

        from .formats import filter_rows
        from .source import arrow_to_pandas

        table = pa.Table.from_pandas(df, schema=full_schema, preserve_index=False)
        df = arrow_to_pandas(filter_rows(table, expr))
    return df[list(columns)] if columns is not None else df


def frame_piece(df: pd.DataFrame, columns, expr, full_schema, row0: int) -> pd.DataFrame:
    """One chunk's rows (filtered, projected) with the global row id column :data:`RID`."""
    out = _select(df, columns, expr, full_schema).reset_index(drop=True)
    if out is df:
        out = out.copy()
    out[RID] = np.arange(row0, row0 + len(out), dtype=np.int64)
    return out


def frame_scan(df: pd.DataFrame, expr, full_schema, qi: list, keys: list) -> dict:
    """Pre-scan of one chunk (see :func:`daskmicro.io.source.scan_frame`)."""
    return scan_frame(_select(df, list(dict.fromkeys(list(qi) + list(keys))), expr, full_schema), qi, keys)


class FrameSource:
    """A pandas or Dask DataFrame as the input of a run (see the module docstring)."""

    fmt = "frame"
    partition_fields: list = []

    def __init__(self, frame, columns=None, drop=(), filters=()):
        import pyarrow as pa

        from .filters import parse_filters

        self.dask = is_dask_frame(frame)
        meta = frame._meta if self.dask else frame.iloc[:0]
        names = list(meta.columns)
        dup = sorted({repr(c) for c in names if names.count(c) > 1})
        if dup:
            raise InputError(f"duplicate column name(s) {', '.join(dup)} in the input")
        for label, cols in (("columns", columns or []), ("drop", drop or [])):
            unknown = [c for c in cols if c not in names]
            if unknown:
                raise ParameterError(f"{label}: unknown column(s) {', '.join(map(repr, unknown))}")
        keep = [c for c in (columns or names) if c not in set(drop or ())]
        if not keep:
            raise ParameterError("no column left to read after columns/drop")
        self._keep = keep
        self.frame = frame
        self.filter_text = list(filters or ())
        self.full_schema = None
        self.filter = None
        if self.filter_text:
            try:
                self.full_schema = pa.Schema.from_pandas(meta, preserve_index=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
                raise InputError(f"filters need columns Arrow can represent: {type(exc).__name__}") from None
            self.filter = parse_filters(self.filter_text, self.full_schema)
        self._meta = meta[keep]
        if self.dask:
            self.pieces = list(frame[keep].to_delayed()) if not self.filter_text else list(frame.to_delayed())
            self.rows_hint = None
        else:
            n = len(frame)
            step = max(1, math.ceil(n / max(1, math.ceil(n / CHUNK_ROWS))))
            base = frame if self.filter_text else frame[keep]
            self.pieces = [base.iloc[i:i + step] for i in range(0, n, step)] or [base.iloc[:0]]
            self.rows_hint = n
        self.files = list(range(len(self.pieces)))   # one entry per piece, as a lake source has files

    # the lake-source interface -----------------------------------------------------------

    @property
    def columns(self) -> list:
        return list(self._keep)

    @property
    def meta(self) -> pd.DataFrame:
        return self._meta

    @property
    def schema(self):
        import pyarrow as pa

        return pa.Schema.from_pandas(self._meta, preserve_index=False)

    def dtype_name(self, column) -> str:
        return str(self._meta[column].dtype)

    def fingerprint(self) -> dict:
        return {"kind": "dask" if self.dask else "pandas", "columns": [str(c) for c in self.columns],
                "pieces": len(self.pieces), "filter": list(self.filter_text)}

    def attach(self, client) -> None:
        """Send the chunks of a pandas DataFrame to the cluster once (no-op in process)."""
        if not self.dask and hasattr(client, "scatter"):
            self.pieces = client.scatter(self.pieces, hash=False) if len(self.pieces) else []

    def scan_task(self, i: int, qi: list, keys: list):
        import dask

        return dask.delayed(frame_scan, pure=True)(self.pieces[i], self.filter, self.full_schema, list(qi), list(keys))

    def read_task(self, i: int, columns, row0: int):
        import dask

        return dask.delayed(frame_piece, pure=True)(self.pieces[i], list(columns), self.filter, self.full_schema,
                                                    int(row0))


def open_frame(frame, columns=None, drop=(), filters=()) -> FrameSource:
    """A checked in-memory source; refuses what is not a pandas or Dask DataFrame."""
    if not isinstance(frame, pd.DataFrame) and not is_dask_frame(frame):
        raise InputError(f"input must be a pandas or Dask DataFrame, got {type(frame).__name__}")
    return FrameSource(frame, columns, drop, filters)


def pieces_frame(pieces: list, meta, in_process: bool):
    """Delayed pandas ``pieces`` (columns as ``meta``) as one frame: computed here by Dask's synchronous
    scheduler when ``in_process``, else a lazy Dask DataFrame of them for the cluster."""
    if in_process:
        import dask

        return pd.concat(dask.compute(*pieces, scheduler="sync"), ignore_index=True)
    import dask.dataframe as dd

    return dd.from_delayed(pieces, meta=meta, verify_meta=False)
