"""Workflow specs: a YAML description of a k-anonymous release, validated key by key.

A spec names the input (a table or a Parquet lake, with row filters and strata), the
quasi-identifiers, k, the microaggregation method and its parameters, optional incremental and
p-probabilistic (participation) options, the output, the report, the cluster to run on and a
schedule (a 5-field cron expression or a list of one-off times).  The schema is documented in
``workflows/SCHEMA.md``.

Every mistake is refused with one line that names the key path and what was expected, e.g.
``workflow spec: output.path: expected a string, got 3``; unknown keys are named as well.

Runs have stable keys ``NAME-HASH-SLOT``: ``HASH`` is a digest of the spec (without its
``cluster`` section, so moving a workflow to another cluster does not change its runs) and
``SLOT`` the scheduled time in UTC (``20261121T020000Z``) or ``once`` for an unscheduled spec.
Submitting the same run twice is recognised by its key.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ParameterError
from .slots import UTC, Clock, check_cron, fill, parse_time, run_key, slot_id, slots_between, zone  # noqa: F401 (re-exported)

__all__ = ["SpecError", "WorkflowSpec", "parse_spec", "run_key", "slots_between", "slot_id",
           "parse_time", "fill", "Clock", "UTC", "PLACEHOLDERS", "METHODS"]

#: Placeholders allowed in input/output/report paths and filter values, filled per run.
PLACEHOLDERS = ("name", "slot", "date", "yesterday", "time")

#: Methods a spec may name: those of :func:`daskmicro.anonymize` plus ``incremental``.
METHODS = ("auto", "mdav", "pca-mdav", "pcl", "partitioned", "proximal-distal", "incremental")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_FILTER_OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")

_TOP = ("version", "name", "description", "input", "qi", "k", "method", "parameters", "incremental",
        "participation", "output", "report", "cluster", "schedule")
_REQUIRED_TOP = ("name", "input", "qi", "k", "output")
_SECTIONS = {
    "input": ("path", "filters", "strata", "missing", "merge_small_strata", "columns", "drop"),
    "parameters": ("K", "nu", "partition_size", "task_rows", "max_task_rows", "energy_loss", "n_components",
                   "sse_threshold", "seed", "keep_row_id", "quality", "refine", "refine_iter", "macro", "macro_iter",
                   "reference"),
    "incremental": ("close_at", "zeta", "nu", "arrivals", "deadline", "base_method", "increment", "reference"),
    "participation": ("pi", "column", "max_cell_failure"),
    "output": ("path", "overwrite", "partition_by", "rows_per_file", "force"),
    "report": ("path", "dask_report"),
    "cluster": ("address", "workers", "memory_limit", "spill_directory", "tls"),
    "tls": ("ca_file", "cert", "key"),
    "schedule": ("cron", "at", "timezone"),
}


class SpecError(ParameterError):
    """A workflow spec is malformed; the message names the key path and what was expected."""


def _fail(path: str, message: str):
    raise SpecError(f"workflow spec: {path}: {message}" if path else f"workflow spec: {message}")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --------------------------------------------------------------------------- scalar checks


def _mapping(value, path: str, allowed) -> dict:
    if not isinstance(value, dict):
        _fail(path, f"expected a mapping with keys {', '.join(allowed)}, got {_show(value)}")
    unknown = [str(k) for k in value if k not in allowed]
    if unknown:
        where = f"{path}: " if path else ""
        raise SpecError(f"workflow spec: {where}unknown key(s) {', '.join(repr(u) for u in unknown)} "
                        f"(expected one of: {', '.join(allowed)})")
    return value


def _str(value, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(path, f"expected a non-empty string, got {_show(value)}")
    return value.strip()


def _bool(value, path: str) -> bool:
    if not isinstance(value, bool):
        _fail(path, f"expected true or false, got {_show(value)}")
    return value


def _int(value, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(path, f"expected an integer ≥ {minimum}, got {_show(value)}")
    return int(value)


def _float(value, path: str, low: float, high: float, *, low_open=False, high_open=False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        x = float(value)
        ok = (x > low if low_open else x >= low) and (x < high if high_open else x <= high)
    if not ok:
        lo, hi = ("(" if low_open else "[") + f"{low:g}", f"{high:g}" + (")" if high_open else "]")
        what = f"a number > {low:g}" if high == math.inf else f"a number in {lo}, {hi}"
        _fail(path, f"expected {what}, got {_show(value)}")
    return float(value)


def _columns(value, path: str) -> list[str]:
    if isinstance(value, str):  # names exactly as written: " x" names the column " x"
        value = value.split(",")
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        _fail(path, f"expected a list of column names (or one comma-separated string), got {_show(value)}")
    cols = list(value)
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        _fail(path, f"column(s) named twice: {', '.join(dup)}")
    return cols


def _duration(value, path: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    from ..durations import parse_duration

    try:
        seconds = parse_duration(value) if isinstance(value, str) else None
    except ParameterError:
        seconds = None
    if seconds is None or not seconds > 0:
        _fail(path, f"expected a duration such as 90, 45s, 10m, 2h or 1h30m, got {_show(value)}")
    return float(seconds)


def _template(value, path: str) -> str:
    text = _str(value, path)
    try:
        fields = [f for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
        specs = [(spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:
        _fail(path, f"bad placeholder in {text!r} ({exc}); write literal braces as {{{{ and }}}}")
    bad = [f for f in fields if f not in PLACEHOLDERS]
    if bad or any(s or c for s, c in specs):
        _fail(path, f"unknown placeholder {{{(bad or fields)[0]}}} (known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
    return text


def _path(value, path: str, base: Path) -> str:
    text = _template(value, path)
    p = Path(os.path.expanduser(text))
    return str(p if p.is_absolute() else base / p)


# --------------------------------------------------------------------------- sections


def _check_input(value, base: Path) -> dict:
    sec = _mapping(value, "input", _SECTIONS["input"])
    if "path" not in sec:
        _fail("input.path", "missing (the table or Parquet directory to read)")
    out = {"path": _path(sec["path"], "input.path", base), "filters": [], "strata": []}
    filters = sec.get("filters") or []
    if not isinstance(filters, list):
        _fail("input.filters", f"expected a list of [column, op, value] triples, got {_show(filters)}")
    for i, f in enumerate(filters):
        where = f"input.filters[{i}]"
        if not isinstance(f, list) or len(f) != 3:
            _fail(where, f"expected [column, op, value], got {_show(f)}")
        col, op, val = f
        _str(col, where + "[0]")
        if op not in _FILTER_OPS:
            _fail(where + "[1]", f"expected one of {', '.join(_FILTER_OPS)}, got {_show(op)}")
        if op in ("in", "not in") and not isinstance(val, list):
            _fail(where + "[2]", f"expected a list of values for {op!r}, got {_show(val)}")
        vals = val if isinstance(val, list) else [val]
        for v in vals:
            if isinstance(v, (dict, list)) or v is None:
                _fail(where + "[2]", f"expected numbers or strings, got {_show(v)}")
            if isinstance(v, str):
                _template(v, where + "[2]")
        out["filters"].append([col, op, _jsonable(val)])  # column names exactly as written
    if "strata" in sec and sec["strata"] is not None:
        out["strata"] = _columns(sec["strata"], "input.strata")
    for key in ("columns", "drop"):
        if sec.get(key) is not None:
            out[key] = _columns(sec[key], f"input.{key}")
    if "missing" in sec:
        if sec["missing"] not in ("refuse", "separate"):
            _fail("input.missing", f"expected refuse or separate, got {_show(sec['missing'])}")
        out["missing"] = sec["missing"]
    if "merge_small_strata" in sec:
        out["merge_small_strata"] = _bool(sec["merge_small_strata"], "input.merge_small_strata")
    return out


def _jsonable(value):
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return value


def _check_parameters(value) -> dict:
    sec = _mapping(value, "parameters", _SECTIONS["parameters"])
    checks = {
        "K": lambda v, p: _int(v, p, 3),
        "nu": lambda v, p: _float(v, p, 0, 1),
        "partition_size": lambda v, p: _int(v, p, 2),
        "task_rows": lambda v, p: _int(v, p, 2),
        "max_task_rows": lambda v, p: _int(v, p, 2),
        "energy_loss": lambda v, p: _float(v, p, 0, 1, high_open=True),
        "n_components": lambda v, p: _int(v, p, 1),
        "sse_threshold": lambda v, p: _float(v, p, 0, math.inf),
        "seed": lambda v, p: _int(v, p, 0),
        "keep_row_id": _bool,
        "quality": lambda v, p: _str(v, p),
        "refine": lambda v, p: _str(v, p),
        "refine_iter": lambda v, p: _int(v, p, 1),
        "macro": lambda v, p: _str(v, p),
        "macro_iter": lambda v, p: _int(v, p, 1),
        "reference": lambda v, p: _str(v, p),
    }
    out = {key: checks[key](v, f"parameters.{key}") for key, v in sec.items() if v is not None}
    if "energy_loss" in out and "n_components" in out:
        _fail("parameters", "give energy_loss or n_components, not both")
    return out


def _check_incremental(value) -> dict:
    sec = _mapping(value, "incremental", _SECTIONS["incremental"])
    from ..io.arrivals import PROFILES

    out: dict = {}
    if "close_at" not in sec:
        _fail("incremental.close_at", "missing (when the survey closes: a duration after the run starts, or a time)")
    close = sec["close_at"]
    if isinstance(close, (dt.datetime, dt.date)) or (isinstance(close, str) and re.match(r"^\d{4}-\d\d-\d\d", close)):
        try:
            out["close_at"] = parse_time(close).isoformat()
        except ValueError:
            _fail("incremental.close_at", f"expected an ISO 8601 time or a duration, got {_show(close)}")
    else:
        try:
            out["close_at_seconds"] = _duration(close, "incremental.close_at")
        except SpecError:
            _fail("incremental.close_at", f"expected an ISO 8601 time or a duration such as 2h, got {_show(close)}")
    if "zeta" in sec:
        out["zeta"] = _float(sec["zeta"], "incremental.zeta", 0, math.inf, low_open=True)
    if "nu" in sec:
        out["nu"] = _float(sec["nu"], "incremental.nu", 0, 1)
    if "zeta" not in out and "nu" not in out:
        _fail("incremental", "give zeta (arrivals coefficient) or nu (incremental data ratio)")
    if "arrivals" in sec:
        if sec["arrivals"] not in PROFILES:
            _fail("incremental.arrivals", f"expected one of {', '.join(PROFILES)}, got {_show(sec['arrivals'])}")
        out["arrivals"] = sec["arrivals"]
    if "deadline" in sec:
        out["deadline"] = _duration(sec["deadline"], "incremental.deadline")
    if "base_method" in sec:
        if sec["base_method"] not in INCREMENTAL_BASE_METHODS:
            _fail("incremental.base_method", f"expected one of {', '.join(INCREMENTAL_BASE_METHODS)}, "
                  f"got {_show(sec['base_method'])}")
        out["base_method"] = sec["base_method"]
    if "increment" in sec:
        from ..graph.incremental_fixed import FIXED_INCREMENTS
        from ..kernels.incremental import METHODS

        increments = METHODS + FIXED_INCREMENTS
        out["increment"] = _str(sec["increment"], "incremental.increment")
        if out["increment"] not in increments:
            _fail("incremental.increment", f"expected one of {', '.join(increments)}, got {_show(sec['increment'])}")
        if out["increment"] in FIXED_INCREMENTS and out.get("base_method", "mdav") != "partitioned":
            _fail("incremental.increment", f"{out['increment']} needs base_method: partitioned")
    if "reference" in sec:
        out["reference"] = _bool(sec["reference"], "incremental.reference")
    return out


#: Base-stage methods of ``method: incremental`` (those of :data:`daskmicro.incremental_run.BASE_METHODS`).
INCREMENTAL_BASE_METHODS = ("mdav", "pca-mdav", "partitioned")
#: ``parameters`` an incremental run uses: the seed, and the pipeline layout of a partitioned base.
INCREMENTAL_PIPELINE_PARAMETERS = ("K", "nu", "partition_size", "task_rows", "energy_loss", "n_components")


def _check_incremental_parameters(data: dict) -> None:
    """Every parameter of an incremental spec is used by its base method, or refused in one line."""
    base = data["incremental"].get("base_method", "mdav")
    allowed = ("seed",) + (INCREMENTAL_PIPELINE_PARAMETERS if base == "partitioned" else ())
    extra = [key for key in data["parameters"] if key not in allowed]
    if extra:
        _fail(f"parameters.{extra[0]}", f"not used by method: incremental with base_method {base} "
              f"(it takes {', '.join(allowed)})")


def _check_participation(value) -> dict:
    sec = _mapping(value, "participation", _SECTIONS["participation"])
    if ("pi" in sec) == ("column" in sec):
        _fail("participation", "give exactly one of pi (a probability) or column (per-record probabilities)")
    out = {}
    if "pi" in sec:
        out["pi"] = _float(sec["pi"], "participation.pi", 0, 1, low_open=True)
    else:
        out["column"] = _str(sec["column"], "participation.column")
    if "max_cell_failure" not in sec:
        _fail("participation.max_cell_failure", "missing (largest accepted probability that a cell falls below k)")
    out["max_cell_failure"] = _float(sec["max_cell_failure"], "participation.max_cell_failure", 0, 1,
                                     low_open=True, high_open=True)
    return out


def _check_output(value, base: Path) -> dict:
    sec = _mapping(value, "output", _SECTIONS["output"])
    if "path" not in sec:
        _fail("output.path", "missing (a .parquet file, or a directory for a partitioned release)")
    if not isinstance(sec["path"], str):
        _fail("output.path", f"expected a string, got {_show(sec['path'])}")
    out = {"path": _path(sec["path"], "output.path", base), "overwrite": False}
    if "overwrite" in sec:
        out["overwrite"] = _bool(sec["overwrite"], "output.overwrite")
    if "force" in sec:
        out["force"] = _bool(sec["force"], "output.force")
    if sec.get("partition_by") is not None:
        out["partition_by"] = _columns(sec["partition_by"], "output.partition_by")
    if "rows_per_file" in sec:
        out["rows_per_file"] = _int(sec["rows_per_file"], "output.rows_per_file", 1)
    suffix = Path(out["path"]).suffix.lower()
    if suffix and suffix not in (".parquet", ".pq"):
        _fail("output.path", f"expected a .parquet file or a directory (no extension), got {_show(sec['path'])}")
    return out


def _size(value, path: str) -> int:
    """Bytes: an integer, or a size such as 3GiB (dask's notation), checked as the API checks it."""
    from ..config import FIELDS

    try:
        return FIELDS["memory_limit"](path, value)
    except ParameterError as exc:
        _fail(path, str(exc).replace(f"{path} must be", "expected"))


def _check_cluster(value, base: Path) -> dict:
    sec = _mapping(value, "cluster", _SECTIONS["cluster"])
    out: dict = {}
    if "address" in sec and sec["address"] is not None:
        addr = _str(sec["address"], "cluster.address")
        if not re.match(r"^(tcp|tls|inproc|ucx|ws|wss)://", addr):
            _fail("cluster.address", f"expected an address such as tcp://host:8786 or tls://host:8786, got {_show(addr)}")
        out["address"] = addr
    if "workers" in sec:
        out["workers"] = _int(sec["workers"], "cluster.workers", 1)
    if sec.get("memory_limit") is not None:
        out["memory_limit"] = _size(sec["memory_limit"], "cluster.memory_limit")
    if sec.get("spill_directory") is not None:
        out["spill_directory"] = _path(sec["spill_directory"], "cluster.spill_directory", base)
    if "address" in out and ("memory_limit" in out or "spill_directory" in out):
        _fail("cluster", "memory_limit and spill_directory set up the LocalCluster of a run without an address; the "
                         "workers at an address keep their own (dask worker --memory-limit, --local-directory)")
    if "tls" in sec:
        tls = _mapping(sec["tls"], "cluster.tls", _SECTIONS["tls"])
        missing = [k for k in _SECTIONS["tls"] if k not in tls]
        if missing:
            _fail("cluster.tls", f"expected ca_file, cert and key; missing {', '.join(missing)}")
        out["tls"] = {k: _path(tls[k], f"cluster.tls.{k}", base) for k in _SECTIONS["tls"]}
    if out.get("address", "").startswith("tls://") and "tls" not in out:
        _fail("cluster.tls", "a tls:// address needs ca_file, cert and key")
    return out


def _check_schedule(value) -> dict:
    sec = _mapping(value, "schedule", _SECTIONS["schedule"])
    if ("cron" in sec) == ("at" in sec):
        _fail("schedule", "give exactly one of cron (a 5-field cron expression) or at (a list of times)")
    tzname = sec.get("timezone", "UTC")
    tz = _timezone(tzname)
    out: dict = {"timezone": tzname}
    if "cron" in sec:
        expr = _str(sec["cron"], "schedule.cron")
        try:
            out["cron"] = check_cron(expr)
        except ValueError as exc:
            _fail("schedule.cron", f"{exc}, got {_show(expr)}")
    else:
        times = sec["at"]
        if not isinstance(times, list):
            times = [times]
        if not times:
            _fail("schedule.at", "expected a non-empty list of times")
        parsed = []
        for i, t in enumerate(times):
            try:
                parsed.append(parse_time(t, tz))
            except ValueError:
                _fail(f"schedule.at[{i}]", f"expected an ISO 8601 time such as 2026-11-21T02:00:00Z, got {_show(t)}")
        out["at"] = sorted({p.isoformat() for p in parsed})
    return out


def _timezone(name) -> dt.tzinfo:
    try:
        return zone(name)
    except ValueError:
        if not isinstance(name, str):
            _fail("schedule.timezone", f"expected an IANA time zone name such as UTC or Europe/Madrid, got {_show(name)}")
        _fail("schedule.timezone", f"unknown time zone {_show(name)}")


# --------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class WorkflowSpec:
    """A validated workflow spec: ``data`` is the normalised spec (plain JSON types, absolute paths)."""

    data: dict
    source: str | None = None
    digest: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def schedule(self) -> dict | None:
        return self.data.get("schedule")

    @property
    def cluster(self) -> dict:
        return self.data.get("cluster") or {}

    def slots(self, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
        """Scheduled times t with start < t ≤ end (UTC); [] for an unscheduled spec."""
        return slots_between(self.schedule, start, end) if self.schedule else []

    def key(self, slot: dt.datetime | None) -> str:
        return run_key(self, slot)


def parse_spec(obj, base_dir=".", source: str | None = None) -> WorkflowSpec:
    """Validate a spec given as a mapping (from YAML); relative paths are taken from ``base_dir``."""
    base = Path(base_dir).resolve()
    top = _mapping(obj, "", _TOP)
    for key in _REQUIRED_TOP:
        if key not in top:
            _fail(key, "missing (required keys: " + ", ".join(_REQUIRED_TOP) + ")")
    if "version" in top and top["version"] != 1:
        _fail("version", f"expected 1, got {_show(top['version'])}")
    name = top["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        _fail("name", f"expected letters, digits, '_', '.', '-' (at most 64, starting with a letter or digit), got {_show(name)}")
    data: dict = {"name": name}
    if "description" in top:
        data["description"] = _str(top["description"], "description")
    data["input"] = _check_input(top["input"], base)
    data["qi"] = _columns(top["qi"], "qi")
    data["k"] = _int(top["k"], "k", 2)
    method = top.get("method", "auto")
    if method not in METHODS:
        _fail("method", f"expected one of {', '.join(METHODS)}, got {_show(method)}")
    data["method"] = method
    data["parameters"] = _check_parameters(top.get("parameters") or {})
    if method == "incremental":
        if "incremental" not in top:
            _fail("incremental", "missing: method incremental needs close_at and zeta or nu")
        data["incremental"] = _check_incremental(top["incremental"])
    elif "incremental" in top:
        _fail("incremental", f"only used with method: incremental (method is {method})")
    if "participation" in top:
        data["participation"] = _check_participation(top["participation"])
    data["output"] = _check_output(top["output"], base)
    if "report" in top:
        rep = _mapping(top["report"], "report", _SECTIONS["report"])
        report = {}
        if "path" in rep:
            report["path"] = _path(rep["path"], "report.path", base)
        if "dask_report" in rep:
            report["dask_report"] = _bool(rep["dask_report"], "report.dask_report")
        if report:
            data["report"] = report
    if "cluster" in top:
        data["cluster"] = _check_cluster(top["cluster"], base)
    if "schedule" in top:
        data["schedule"] = _check_schedule(top["schedule"])
    if data["input"]["strata"] and method == "incremental":
        _fail("input.strata", "strata are not supported with method: incremental")
    if method == "incremental":
        _check_incremental_parameters(data)
    unscheduled_template = any(f in _fields(data["output"]["path"]) for f in ("slot", "date", "yesterday", "time"))
    if unscheduled_template and "schedule" not in data:
        _fail("output.path", "slot placeholders ({slot}, {date}, ...) need a schedule")
    if "schedule" in data and not unscheduled_template and not data["output"]["overwrite"]:
        _fail("output.path", "a scheduled workflow writes one release per slot: put {slot} or {date} in the path, or set output.overwrite: true")
    if method != "incremental":  # the run's options, validated once by the run description
        from ..config import RunConfig

        try:
            RunConfig.from_spec(data)
        except ParameterError as exc:
            _fail("", str(exc))
    canonical = {k: v for k, v in data.items() if k != "cluster"}
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
    return WorkflowSpec(data=data, source=source, digest=digest)


def _fields(text: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(text) if f]
