"""Sources of an incremental run: records that arrive while a survey is open.

The incremental mode (*Incremental k-Anonymous Microaggregation … With Optimized Scheduling*, §III-B) needs to know, at any moment, which
records have arrived, when the fraction 1 − ν of them is in (the base stage may start) and when
the survey has closed (the increment stage may start).  Two kinds of source answer that:

* :class:`SurveyLake` — a Parquet lake directory being filled, by
  :class:`~daskmicro.io.arrivals.ArrivalSimulator` or by a real collector, or a prefix of an object
  store whose objects land the same way (:mod:`daskmicro.io.objectsurvey`).  The total number of
  records comes from the simulator's ``_arrivals.json`` (or ``expected_rows``); the close is the
  ``_closed.json`` marker (any collector may write one) or a given ``close_at`` time.
* :class:`SurveyFrame` — a pandas DataFrame with a timestamp column: a record has arrived once
  the wall clock passes its timestamp; the survey closes at ``close_at`` or at the last timestamp.

A source hands out *chunks*: lists of files (paths, or objects of a store; the workers read them:
:func:`read_arrival`) or DataFrames (frames; scattered to the cluster).  No Dask import here.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pandas.api import types as ptypes

from ..errors import InputError, ParameterError, describe, masked_path
from .arrivals import ARRIVAL_NAME, CLOSED, is_closed, read_manifest

__all__ = ["SurveyTimeoutError", "LocalArrivals", "SurveyLake", "SurveyFrame", "open_survey", "to_epoch", "arrival_name",
           "read_arrival", "arrival_rows", "schema_change"]


class SurveyTimeoutError(InputError, TimeoutError):
    """The base fraction or the close of the survey was not reached within the run's timeout."""


def to_epoch(value, name: str = "close_at") -> float:
    """A point in time as POSIX seconds: a number (already POSIX), a datetime or a Timestamp.

    Naive datetimes are taken as UTC (as naive values of a datetime ``time_column`` are).
    """
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be a time (POSIX seconds or a datetime), got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        x = float(value)
        if not math.isfinite(x):
            raise ParameterError(f"{name} must be finite, got {value!r}")
        return x
    if isinstance(value, (_dt.datetime, pd.Timestamp)):
        if value.tzinfo is None:  # naive times are UTC, as for a datetime time_column
            value = value.replace(tzinfo=_dt.timezone.utc)
        return float(value.timestamp())
    raise ParameterError(f"{name} must be a time (POSIX seconds or a datetime), got {type(value).__name__}")


def _remaining(deadline: float | None) -> float:
    return math.inf if deadline is None else deadline - time.time()


class LocalArrivals:
    """Where a :class:`SurveyLake`'s files land: a local or mounted directory.  A file counts once it
    is in the directory under its own name (collectors write under a hidden name and rename)."""

    #: Seconds between two looks at the directory.
    poll = 0.05

    def __init__(self, lake_dir):
        self.path = Path(lake_dir)
        if not self.path.is_dir():
            raise InputError(f"source lake directory does not exist: {self.path}")

    @property
    def shown(self):
        return self.path

    def manifest(self) -> dict | None:
        return read_manifest(self.path)

    def look(self) -> list:
        """``[(name, path, version)]`` of the Parquet files in the directory (hidden and ``_``
        names left out); the version (size, modification time) tells a file rewritten in place."""
        out = []
        for entry in os.scandir(self.path):
            name = entry.name
            if not name.endswith(".parquet") or name.startswith((".", "_")) or not entry.is_file():
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:   # removed since it was listed: not landed
                continue
            out.append((name, Path(entry.path), (st.st_size, st.st_mtime_ns)))
        return out

    def rows(self, path: Path) -> int:
        return self.footer(path).num_rows

    def footer(self, path: Path):
        """The file's Parquet metadata (``num_rows``, ``schema``), or a one-line refusal."""
        try:
            return pq.read_metadata(path)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"unreadable Parquet file in the lake: {masked_path(str(path))}: {describe(exc)}") from None

    def columns(self, path: Path) -> list:
        return list(pq.read_schema(path).names)

    def closed(self) -> bool:
        return is_closed(self.path)

    def marker_time(self) -> float:
        return _marker_time(self.path / CLOSED)


class SurveyLake:
    """A Parquet lake whose files land while the survey is open: a directory (local or mounted),
    or a prefix of an object store (:class:`daskmicro.io.objectsurvey.StoreArrivals`).

    Parameters
    ----------
    lake_dir : path, or where the files land
        The directory (Parquet files directly inside it are the records), or an object with the
        interface of :class:`LocalArrivals` (``look``, ``footer``, ``columns``, ``manifest``,
        ``closed``, ``marker_time``, ``shown``, ``poll``).

    Every file of the survey must have the schema of the first one landed (the same columns, of the
    same types; their order aside): a file that differs is refused in one line, naming it and the
    column, before any of its records is read.  Its rows would otherwise be published with
    values of another type, or without a column (missing there), or with one the others lack —
    each telling the records of that file, and so their arrival, apart from the rest.
    close_at : float, optional
        POSIX time at which the survey closes, whatever the ``_closed.json`` marker says.
    expected_rows : int, optional
        Total number of records of the survey (needed for the base trigger when the lake has no
        ``_arrivals.json`` manifest).
    poll : float, optional
        Seconds between two looks (default: that of where the files land).
    """

    kind = "lake"

    def __init__(self, lake_dir, close_at: float | None = None, expected_rows: int | None = None,
                 poll: float | None = None):
        self.where = LocalArrivals(lake_dir) if isinstance(lake_dir, (str, os.PathLike)) else lake_dir
        self.path = self.where.shown
        self.manifest = self.where.manifest()
        self.close_at = close_at
        self.poll = self.where.poll if poll is None else poll
        rows = None if self.manifest is None else int(self.manifest["rows"])
        if expected_rows is not None:
            rows = expected_rows
        self.total_rows = rows
        self.closed_at: float | None = None
        self._rows: dict = {}    # name -> (rows, version) of each file seen
        self._schema = None      # (name, Arrow schema) of the first file seen: every file's schema
        self._seen: set = set()

    # -- what the planner needs ------------------------------------------------------------

    def schema(self):
        """The Arrow schema every landed file shares (None until one is seen)."""
        return self._schema[1] if self._schema is not None else None

    def withheld(self) -> list:
        """The survey's own arrival-time column (the manifest's ``timestamp_column``), if any: each
        record's time is near-unique, so it is never published, as a frame's ``time_column`` is not."""
        name = (self.manifest or {}).get("timestamp_column")
        return [name] if name else []

    def columns(self) -> list | None:
        """Column names (the arrival-time column left out): from the manifest, else from the first
        landed file (None when none has)."""
        if self.manifest is not None and self.manifest.get("columns"):
            return list(self.manifest["columns"])
        files = self._landed()
        if not files:
            return None
        return [c for c in self.where.columns(files[0][0]) if c not in self.withheld()]

    def survey_seconds(self) -> float | None:
        """Length of the whole survey in real seconds, when known (simulator manifest or close_at)."""
        if self.manifest is not None:
            return float(self.manifest["duration"]) / float(self.manifest["speed"])
        return None

    def opened_at(self) -> float | None:
        return None if self.manifest is None else float(self.manifest["opened_at"])

    # -- arrivals ----------------------------------------------------------------------------

    def _clock(self) -> float | None:
        """Survey seconds since the simulated opening (None without a manifest)."""
        if self.manifest is None:
            return None
        return (time.time() - float(self.manifest["opened_at"])) * float(self.manifest["speed"])

    def _landed(self) -> list:
        """Landed files as (file, rows), by arrival time then name; footers are read once per file.
        A file that changes once it has landed is refused (its records may have been read already)."""
        until = self._clock()
        landed = []
        for name, item, version in self.where.look():
            m = ARRIVAL_NAME.match(name)
            offset = int(m.group(2)) / 1000.0 if m else math.inf
            if until is None or not m or offset <= until:
                landed.append((offset, name, item, version))
        landed.sort(key=lambda e: (e[0], e[1]))   # footers in arrival order: the first file sets the schema
        out = []
        for _, name, item, version in landed:
            known = self._rows.get(name)
            if known is None:
                meta = self.where.footer(item)
                self._check_schema(name, meta.schema.to_arrow_schema())
                known = self._rows[name] = (meta.num_rows, version)
            elif known[1] != version:
                raise InputError(f"{name} of the survey in {self.path} changed after it landed (a survey's files are "
                                 "written once; its records may have been read already); no release made")
            out.append((item, known[0]))
        return out

    def _check_schema(self, name: str, schema) -> None:
        """Refuse a file whose columns or their types differ from those of the first file seen."""
        if self._schema is None:
            self._schema = (name, schema)
            return
        first, expected = self._schema
        change = schema_change(expected, schema)
        if change is not None:
            raise InputError(f"{name} of the survey in {masked_path(str(self.path))} does not have the columns of "
                             f"{first}: {change}; every file of a survey must have the same columns, of the same "
                             "types; no release made")

    def rows(self, chunk: list) -> int:
        """Number of records in a chunk (files handed out by this source)."""
        return sum(self._rows[arrival_name(p)][0] for p in chunk)

    def _closed_now(self) -> bool:
        if self.close_at is not None and time.time() >= self.close_at:
            return True
        if not self.where.closed():
            return False
        if self.manifest is not None and self.manifest.get("mode") == "instant":
            return self._clock() >= float(self.manifest["duration"])
        return True

    def _look(self, on_new) -> list:
        files = self._landed()
        new = [p for p, _ in files if arrival_name(p) not in self._seen]
        if new:
            self._seen.update(arrival_name(p) for p in new)
            if on_new is not None:
                on_new(new)
        return files

    def wait_base(self, fraction: float, deadline: float | None, on_new=None) -> list:
        """Block until ``fraction`` of the records has landed; return the landed files.

        ``on_new(files)`` is called with each batch of newly landed files as they are seen (the
        run hands them to the workers to read while the survey goes on).
        """
        if self.total_rows is None:
            raise ParameterError(f"the lake {self.path} has no _arrivals.json manifest: give expected_rows (total records)")
        need = max(1, math.ceil(fraction * self.total_rows - 1e-9))
        while True:
            files = self._look(on_new)
            got = sum(r for _, r in files)
            if got >= need or (self._closed_now() and got > 0):
                # (a survey that closed short of the base fraction: the base is what arrived)
                return [p for p, _ in files]
            if self._closed_now():
                raise InputError(f"the survey in {self.path} closed with no records")
            left = _remaining(deadline)
            if left <= 0:
                raise SurveyTimeoutError(f"timeout: {got} of the {need} records of the base stage had landed in {self.path}")
            time.sleep(min(self.poll, left))

    def wait_close(self, taken: list, deadline: float | None, on_new=None, on_poll=None) -> list:
        """Block until the survey closes; return the files not in ``taken``.

        ``on_poll()`` is called at each look (the run collects finished base work meanwhile).
        """
        while not self._closed_now():
            self._look(on_new)
            if on_poll is not None:
                on_poll()
            left = _remaining(deadline)
            if left <= 0:
                got = sum(r for _, r in self._landed())
                total = "?" if self.total_rows is None else self.total_rows
                raise SurveyTimeoutError(
                    f"timeout: the survey in {self.path} had not closed ({got} of {total} records landed); no release made"
                )
            time.sleep(min(self.poll, left))
        self.closed_at = self._close_time()
        files = self._look(on_new)
        if self.manifest is not None and (self.close_at is None or self.where.closed()):
            got = sum(r for _, r in files)
            if got != self.total_rows:
                raise InputError(f"the lake {self.path} closed with {got} records but its manifest announces {self.total_rows}")
        seen = {arrival_name(p) for p in taken}
        return [p for p, _ in files if arrival_name(p) not in seen]

    def _close_time(self) -> float:
        """When the survey closed: the earlier of the marker's time and ``close_at`` (if reached)."""
        times = []
        if self.where.closed():
            if self.manifest is not None and self.manifest.get("mode") == "instant":
                times.append(float(self.manifest["opened_at"]) + float(self.manifest["duration"]) / float(self.manifest["speed"]))
            else:
                times.append(self.where.marker_time())
        if self.close_at is not None and time.time() >= self.close_at:
            times.append(float(self.close_at))
        return min(times) if times else time.time()


def schema_change(expected, schema) -> str | None:
    """What sets the Arrow ``schema`` of a survey's file apart from the ``expected`` one — a column
    missing, an extra column, a column of another type — in words (names and types, never a
    value), or None when they have the same columns of the same types (in any order)."""
    want = {f.name: f.type for f in expected}
    got = {f.name: f.type for f in schema}
    for c, t in want.items():
        if c not in got:
            return f"column {c!r} is missing"
        if not got[c].equals(t):
            return f"column {c!r} is {got[c]}, not {t}"
    extra = [c for c in got if c not in want]
    if extra:
        return f"it has the extra column {extra[0]!r}"
    if len(schema) != len(expected):
        return "it names a column twice"
    return None


def _marker_time(marker: Path) -> float:
    import json

    try:
        return float(json.loads(marker.read_text(encoding="utf-8"))["closed_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return marker.stat().st_mtime


def arrival_name(item) -> str:
    """The name a survey's file is known by: a local file's name, or an object's last key segment."""
    return Path(item).name if isinstance(item, (str, os.PathLike)) else item.name


def read_arrival(item):
    """A survey's landed file as a pyarrow Table (on the worker that reads it): a local path, or
    an object of a store (:class:`daskmicro.io.objectsurvey.LandedObject`)."""
    if not isinstance(item, (str, os.PathLike)):
        return item.read()
    try:
        return pq.read_table(item)
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable Parquet file {Path(item).name}: {describe(exc)}") from None


def arrival_rows(item) -> int:
    """The records of a survey's landed file, from its footer."""
    if not isinstance(item, (str, os.PathLike)):
        return item.num_rows()
    return pq.read_metadata(str(item)).num_rows


class SurveyFrame:
    """A pandas DataFrame whose records arrive at the times of a timestamp column.

    Timestamps are POSIX seconds (numbers) or datetimes (naive ones are taken as UTC).  A record
    has arrived once the wall clock passes its timestamp; the survey closes at ``close_at``, or at
    the last timestamp.  A frame whose timestamps are all in the past is a finished survey: both
    stages start at once, split by arrival time.
    """

    kind = "frame"

    def __init__(self, df: pd.DataFrame, time_column, close_at: float | None = None):
        if time_column is None:
            raise ParameterError("a DataFrame source needs time_column, the column of arrival times")
        if time_column not in df.columns:
            raise ParameterError(f"time_column {time_column!r} is not a column of the source DataFrame")
        if len(df) == 0:
            raise InputError("source DataFrame has no rows")
        col = df[time_column]
        if ptypes.is_datetime64_any_dtype(col.dtype):
            ts = pd.to_datetime(col)
            if ts.dt.tz is None:
                ts = ts.dt.tz_localize("UTC")
            if ts.isna().any():
                raise InputError(f"time_column {time_column!r} has missing times")
            times = (ts - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(np.float64)
        elif ptypes.is_numeric_dtype(col.dtype) and not ptypes.is_bool_dtype(col.dtype):
            times = col.to_numpy(dtype=np.float64, na_value=np.nan)
            if not np.isfinite(times).all():
                raise InputError(f"time_column {time_column!r} has missing or infinite times")
        else:
            raise InputError(f"time_column {time_column!r} must hold POSIX seconds or datetimes, not {col.dtype}")
        self.time_column = time_column
        order = np.argsort(times, kind="stable")
        # arrival times are near-unique per record: they schedule the stages and are never published
        self.frame = df.drop(columns=[time_column]).iloc[order].reset_index(drop=True)
        self.times = times[order]
        self.total_rows = len(df)
        self.close_at = float(self.times[-1]) if close_at is None else close_at
        self.closed_at: float | None = None
        self._taken = 0

    def schema(self):
        """None: the frame's columns are pandas', with no Arrow type of their own."""
        return None

    def withheld(self) -> list:
        return []   # the time column is not in the frame the workers read

    def columns(self) -> list:
        return list(self.frame.columns)

    def survey_seconds(self) -> float:
        return max(self.close_at - float(self.times[0]), 0.0)

    def opened_at(self) -> float:
        return float(self.times[0])

    def rows(self, chunk: list) -> int:
        return sum(len(part) for part in chunk)

    def wait_base(self, fraction: float, deadline: float | None, on_new=None) -> list:
        """Sleep until ``fraction`` of the records' timestamps have passed; return them as one chunk."""
        need = max(1, math.ceil(fraction * self.total_rows - 1e-9))
        due = min(float(self.times[need - 1]), self.close_at)
        self._sleep_until(due, deadline, lambda: f"timeout: {int(np.searchsorted(self.times, time.time(), 'right'))} of the {need} records of the base stage had arrived")
        # The base is what had arrived at the trigger, also for a survey already over.
        self._taken = int(np.searchsorted(self.times, due, "right"))
        return [self.frame.iloc[: self._taken]]

    def wait_close(self, taken: list, deadline: float | None, on_new=None, on_poll=None) -> list:
        self._sleep_until(self.close_at, deadline, lambda: "timeout: the survey had not closed (close_at not reached); no release made",
                          on_poll)
        self.closed_at = float(self.close_at)
        rest = self.frame.iloc[self._taken:]
        return [rest] if len(rest) else []

    @staticmethod
    def _sleep_until(due: float, deadline: float | None, message, on_poll=None) -> None:
        while True:
            if on_poll is not None:
                on_poll()
            now = time.time()
            if now >= due:
                return
            if deadline is not None and now >= deadline:
                raise SurveyTimeoutError(message())
            step = min(due - now, 0.05)
            if deadline is not None:
                step = min(step, deadline - now)
            time.sleep(max(step, 0.0))


def open_survey(source, *, time_column=None, close_at=None, expected_rows=None, poll: float | None = None,
                storage_options=None):
    """Wrap a lake directory (str/Path), a prefix of an object store (an ``s3://`` URL, read with
    ``storage_options``: :mod:`daskmicro.io.objectsurvey`) or a timestamped DataFrame as a source
    of an incremental run."""
    close = None if close_at is None else to_epoch(close_at)
    if expected_rows is not None:
        if isinstance(expected_rows, bool) or not isinstance(expected_rows, (int, np.integer)) or expected_rows < 1:
            raise ParameterError(f"expected_rows must be a positive integer, got {expected_rows!r}")
        expected_rows = int(expected_rows)
    if isinstance(source, pd.DataFrame):
        if expected_rows is not None:
            raise ParameterError("expected_rows applies to a lake directory source, not a DataFrame")
        return SurveyFrame(source, time_column, close)
    if isinstance(source, (str, Path)):
        if time_column is not None:
            raise ParameterError("time_column applies to a DataFrame source; a lake's arrivals are its files")
        from .objectstore import is_remote

        if is_remote(source):
            from .objectsurvey import StoreArrivals

            source = StoreArrivals(source, storage_options)
        return SurveyLake(source, close, expected_rows, poll)
    raise InputError(f"source must be a Parquet lake directory or a pandas DataFrame, got {type(source).__name__}")
