"""Simulated survey arrivals: a Parquet lake whose files land over time, and readers for it.

The incremental mode (*Incremental k-Anonymous Microaggregation … With Optimized Scheduling*, §III-B) starts a base stage once a fraction
1 − ν of the records has arrived and an increment stage when the survey closes.  To demonstrate,
test and benchmark that without a real survey, :class:`ArrivalSimulator` writes a data set into a
lake directory as ``n_files`` Parquet files whose arrival times follow a chosen profile over a
survey of ``duration`` seconds, in compressed time (``speed`` survey seconds per real second):

* ``realtime`` mode: a writer thread sleeps until each file's arrival time and writes it then;
* ``instant`` mode: every file is written at once; readers see it "land" by its arrival time.

Either way each file's arrival time (survey seconds since the opening) is in its name,
``part-00003-t0000000012500.parquet`` (milliseconds), and in the Parquet metadata; an optional
column gives each record's own arrival time.  Files are written under a hidden temporary name
and renamed into place, so a reader never sees half a file.  The lake also holds
``_arrivals.json`` (opening time, totals, speed; written first) and ``_closed.json`` (written
when the last file has landed); names starting with ``_`` or ``.`` are skipped by Parquet readers.

:func:`arrived` lists the files landed so far, :func:`wait_for_fraction` blocks until a fraction
of the records has landed, :func:`survey_clock` and :func:`is_closed` read the survey's state.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError, ParameterError, describe, masked_path

__all__ = [
    "PROFILES",
    "Arrival",
    "ArrivalSimulator",
    "arrival_offsets",
    "arrived",
    "wait_for_fraction",
    "survey_clock",
    "is_closed",
    "read_manifest",
    "positive_number",
]

#: Arrival profiles: cumulative fraction of records arrived at fraction u of the survey.
PROFILES = {
    "uniform": "F(u) = u: records arrive at a constant rate (the paper's assumption, §III-B.1)",
    "front": "F(u) = 1 − (1 − u)²: most records arrive early, the rate falls to zero at the close",
    "back": "F(u) = u²: few records early, most towards the close",
}

MANIFEST = "_arrivals.json"
CLOSED = "_closed.json"
OFFSET_KEY = b"daskmicro.arrival_offset"
#: File name of one arrival: ``part-<index>-t<offset in ms>.parquet``.
ARRIVAL_NAME = re.compile(r"^part-(\d+)-t(\d+)\.parquet$")


def _inverse_cdf(profile: str, p: np.ndarray) -> np.ndarray:
    if profile == "uniform":
        return p
    if profile == "front":
        return 1.0 - np.sqrt(1.0 - p)
    return np.sqrt(p)


def arrival_offsets(n: int, duration: float, profile: str = "uniform") -> np.ndarray:
    """Arrival times (survey seconds since the opening) of ``n`` records under an arrival profile.

    Record i (0-based) arrives when the fraction (i + 1)/n has arrived: ``duration·F⁻¹((i+1)/n)``;
    the last one arrives at the close, ``duration``.
    """
    if profile not in PROFILES:
        raise ParameterError(f"profile must be one of {', '.join(PROFILES)}; got {profile!r}")
    n = _count(n, "n")
    duration = positive_number(duration, "duration", "seconds")
    return duration * _inverse_cdf(profile, np.arange(1, n + 1, dtype=np.float64) / n)


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def positive_number(value, name: str, unit: str = "") -> float:
    """``value`` as a finite number > 0, else ParameterError naming ``name`` (``unit``, e.g.
    ``"seconds"``, is said in the message)."""
    what = f"a positive number{' of ' + unit if unit else ''}"
    if isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be {what}, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be {what}, got {value!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise ParameterError(f"{name} must be {what}, got {value!r}")
    return x


def _write_atomic(path: Path, write) -> None:
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_json(path: Path, obj) -> None:
    text = json.dumps(obj, indent=2) + "\n"
    _write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


class ArrivalSimulator:
    """Write a data set into a Parquet lake as files that land over a simulated survey.

    Parameters
    ----------
    data : pandas.DataFrame or 2-D array
        The records, in arrival order (arrays get columns ``x01, x02, …``).
    lake_dir : path
        Directory to write (created if missing); it must not hold Parquet files already unless
        ``overwrite`` (which deletes them and the lake's ``_*.json`` files first).
    n_files : int
        Number of files (1 ≤ n_files ≤ rows); records are split into contiguous, near-equal chunks.
    duration : float
        Survey duration in survey seconds; the last file lands at the close, ``duration``.
    profile : {"uniform", "front", "back"}
        Arrival profile, see :data:`PROFILES`.
    speed : float
        Survey seconds per real second (time compression), e.g. 3600 turns an hour into a second.
    mode : {"realtime", "instant"}
        ``realtime``: :meth:`start` launches a writer thread that writes each file at its arrival
        time.  ``instant``: :meth:`start` writes every file at once (readers that follow
        :func:`survey_clock` still see them land on schedule).
    timestamp_column : str, optional
        Name of a column to add with each record's own arrival time (survey seconds).
    overwrite : bool
        Allow a lake directory that already holds Parquet files (they are deleted).

    Examples
    --------
    >>> with ArrivalSimulator(df, "lake", n_files=20, duration=36000, speed=36000) as sim:  # doctest: +SKIP
    ...     base = wait_for_fraction("lake", 0.85)         # the base stage can start
    ...     sim.join()                                     # the survey has closed
    """

    def __init__(self, data, lake_dir, *, n_files: int = 10, duration: float = 60.0, profile: str = "uniform",
                 speed: float = 1.0, mode: str = "realtime", timestamp_column: str | None = None, overwrite: bool = False):
        if isinstance(data, np.ndarray):
            if data.ndim != 2:
                raise InputError(f"data must be a 2-D array or a DataFrame, got {data.ndim} dimensions")
            width = max(2, len(str(data.shape[1])))
            data = pd.DataFrame(data, columns=[f"x{j:0{width}d}" for j in range(1, data.shape[1] + 1)])
        if not isinstance(data, pd.DataFrame):
            raise InputError(f"data must be a pandas DataFrame or a 2-D numpy array, got {type(data).__name__}")
        if len(data) == 0:
            raise InputError("data has no records")
        self.n_files = _count(n_files, "n_files")
        if self.n_files > len(data):
            raise ParameterError(f"n_files = {self.n_files} exceeds the number of records ({len(data)})")
        self.duration = positive_number(duration, "duration", "seconds")
        self.speed = positive_number(speed, "speed")
        if profile not in PROFILES:
            raise ParameterError(f"profile must be one of {', '.join(PROFILES)}; got {profile!r}")
        if mode not in ("realtime", "instant"):
            raise ParameterError(f"mode must be 'realtime' or 'instant', got {mode!r}")
        if timestamp_column is not None and timestamp_column in data.columns:
            raise ParameterError(f"timestamp_column {timestamp_column!r} is already a column of the data")
        self.profile, self.mode, self.timestamp_column = profile, mode, timestamp_column
        from .objectstore import is_remote, shown_url

        if is_remote(lake_dir):
            raise ParameterError(f"lake_dir: the simulator writes a local or mounted directory, not {shown_url(lake_dir)} "
                                 "(a survey on an object store is written by its own collector; a run reads it from "
                                 "its s3:// prefix)")
        self.lake_dir = Path(lake_dir)
        if self.lake_dir.exists() and not self.lake_dir.is_dir():
            raise ParameterError(f"lake_dir is not a directory: {self.lake_dir}")
        if self.lake_dir.is_dir():
            existing = [p for p in self.lake_dir.iterdir() if p.suffix == ".parquet" and not p.name.startswith((".", "_"))]
            if existing and not overwrite:
                raise ParameterError(f"lake_dir already holds Parquet files: {self.lake_dir} (use overwrite=True)")
        self._overwrite = overwrite
        self.data = data.reset_index(drop=True)
        record_times = arrival_offsets(len(self.data), self.duration, profile)
        bounds = np.linspace(0, len(self.data), self.n_files + 1).round().astype(int)
        self._chunks = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self._record_times = record_times
        #: Arrival time of each file (survey seconds): that of its last record.
        self.offsets = np.array([record_times[b - 1] for _, b in self._chunks])
        self.opened_at: float | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.written: list[Path] = []

    # ------------------------------------------------------------------ control

    def start(self) -> "ArrivalSimulator":
        """Open the survey: write the manifest, then the files (thread in realtime mode)."""
        if self.opened_at is not None:
            raise ParameterError("this simulator has already been started")
        self.lake_dir.mkdir(parents=True, exist_ok=True)
        if self._overwrite:
            for p in self.lake_dir.iterdir():
                if p.is_file() and (p.suffix == ".parquet" or p.name in (MANIFEST, CLOSED)) and not p.name.startswith("."):
                    p.unlink()
        self.opened_at = time.time()
        _write_json(self.lake_dir / MANIFEST, {
            "opened_at": self.opened_at, "duration": self.duration, "speed": self.speed, "profile": self.profile,
            "mode": self.mode, "n_files": self.n_files, "rows": len(self.data), "columns": list(self.data.columns),
            "timestamp_column": self.timestamp_column,
        })
        if self.mode == "instant":
            self._run(sleep=False)
        else:
            self._thread = threading.Thread(target=self._run, kwargs={"sleep": True}, name="daskmicro-arrivals", daemon=True)
            self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the last file (and ``_closed.json``); True if the survey closed.  Re-raises writer errors."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        if self._error is not None:
            raise self._error
        return is_closed(self.lake_dir)

    def stop(self) -> None:
        """Stop the writer thread early (the files written so far stay; the survey does not close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "ArrivalSimulator":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.join()
        else:
            self.stop()

    # ------------------------------------------------------------------ writing

    def file_name(self, j: int) -> str:
        return f"part-{j:05d}-t{int(round(self.offsets[j] * 1000)):013d}.parquet"

    def _run(self, sleep: bool) -> None:
        try:
            for j, (a, b) in enumerate(self._chunks):
                if sleep:
                    due = self.opened_at + self.offsets[j] / self.speed
                    if self._stop.wait(max(0.0, due - time.time())):
                        return
                self._write_file(j, a, b)
            _write_json(self.lake_dir / CLOSED, {"closed_at": time.time(), "rows": len(self.data), "n_files": self.n_files})
        except BaseException as exc:  # surfaced by join()
            self._error = exc

    def _write_file(self, j: int, a: int, b: int) -> None:
        chunk = self.data.iloc[a:b]
        if self.timestamp_column is not None:
            chunk = chunk.assign(**{self.timestamp_column: self._record_times[a:b]})
        table = pa.Table.from_pandas(chunk, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[OFFSET_KEY] = repr(float(self.offsets[j])).encode()
        table = table.replace_schema_metadata(meta)
        path = self.lake_dir / self.file_name(j)
        _write_atomic(path, lambda tmp: pq.write_table(table, tmp))
        self.written.append(path)


# --------------------------------------------------------------------------- readers


@dataclass(frozen=True)
class Arrival:
    """A landed file: its path, index and arrival time (survey seconds; None if not in its name), rows."""

    path: Path
    index: int | None
    offset: float | None
    rows: int


def _lake(lake_dir) -> Path:
    path = Path(lake_dir)
    if not path.is_dir():
        raise InputError(f"lake directory does not exist: {path}")
    return path


def read_manifest(lake_dir) -> dict | None:
    """The simulator's ``_arrivals.json`` of a lake, or None when there is none."""
    path = _lake(lake_dir) / MANIFEST
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable lake manifest {path}: {describe(exc)}") from None


def survey_clock(lake_dir) -> float | None:
    """Survey seconds elapsed since the simulated opening (None for a lake without a manifest)."""
    manifest = read_manifest(lake_dir)
    if manifest is None:
        return None
    return (time.time() - manifest["opened_at"]) * manifest["speed"]


def is_closed(lake_dir) -> bool:
    """True once the last file has landed (``_closed.json`` exists)."""
    return (_lake(lake_dir) / CLOSED).exists()


def arrived(lake_dir, until: float | None = None) -> list[Arrival]:
    """Files of a lake that have landed, by arrival time (then name).

    Parameters
    ----------
    lake_dir : path
        Lake directory.  Hidden (``.``) and ``_``-prefixed files are ignored, so temporary files
        of an atomic write in progress never show.
    until : float, optional
        Survey time (seconds since the opening): keep only files whose name gives an arrival
        time ≤ ``until``.  Files without an arrival time in their name always count as landed.
    """
    lake = _lake(lake_dir)
    if until is not None:
        try:
            until = float(until)
        except (TypeError, ValueError):
            raise ParameterError(f"until must be a number of survey seconds, got {until!r}") from None
    out = []
    for path in lake.iterdir():
        name = path.name
        if not name.endswith(".parquet") or name.startswith((".", "_")) or not path.is_file():
            continue
        m = ARRIVAL_NAME.match(name)
        index, offset = (int(m.group(1)), int(m.group(2)) / 1000.0) if m else (None, None)
        if until is not None and offset is not None and offset > until:
            continue
        try:
            rows = pq.read_metadata(path).num_rows
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"unreadable Parquet file in the lake: {masked_path(path)}: {describe(exc)}") from None
        out.append(Arrival(path=path, index=index, offset=offset, rows=rows))
    out.sort(key=lambda a: (math.inf if a.offset is None else a.offset, a.path.name))
    return out


def wait_for_fraction(lake_dir, fraction: float, *, total_rows: int | None = None, timeout: float | None = None,
                      poll: float = 0.02) -> list[Arrival]:
    """Block until at least ``fraction`` of the records have landed; return the landed files.

    The total comes from the manifest (or ``total_rows``).  For a simulated lake, files count
    once the survey clock has passed their arrival time (so an ``instant`` lake lands on schedule
    too).  Raises :class:`TimeoutError` after ``timeout`` seconds, and
    :class:`~daskmicro.errors.InputError` if the survey closed without enough records.
    """
    try:
        fraction = float(fraction)
    except (TypeError, ValueError):
        raise ParameterError(f"fraction must be a number in [0, 1], got {fraction!r}") from None
    if not 0.0 <= fraction <= 1.0:
        raise ParameterError(f"fraction must lie in [0, 1], got {fraction}")
    if timeout is not None:
        timeout = positive_number(timeout, "timeout", "seconds")
    poll = positive_number(poll, "poll", "seconds")
    manifest = read_manifest(lake_dir)
    if total_rows is None:
        if manifest is None:
            raise ParameterError(f"total_rows is needed: the lake {lake_dir} has no {MANIFEST}")
        total_rows = int(manifest["rows"])
    total_rows = _count(total_rows, "total_rows")
    need = math.ceil(fraction * total_rows - 1e-9)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        closed = is_closed(lake_dir)
        until = survey_clock(lake_dir) if manifest is not None else None
        files = arrived(lake_dir, until=until)
        got = sum(a.rows for a in files)
        if got >= need:
            return files
        instant = manifest is not None and manifest.get("mode") == "instant"
        if closed and (not instant or until >= float(manifest["duration"])):
            raise InputError(f"the survey in {lake_dir} closed with {got} of the {need} records waited for")
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"{got} of the {need} records waited for had landed in {lake_dir} after {timeout:g} s")
        time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
