"""The checks of each section of a workflow spec (input, parameters, incremental, participation,
output, cluster, schedule): every key known, every value checked, the section normalised.

:func:`daskmicro.workflow.workflow_spec.parse_spec` calls them in turn and checks what spans sections.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from pathlib import Path

from ..errors import ParameterError
from .slots import check_cron, parse_time, zone
from .values import (SpecError, as_bool, as_columns, as_duration, as_float, as_int, as_mapping, as_path, as_str,
                     as_template, fail, show)

__all__ = ["SECTIONS", "INCREMENTAL_BASE_METHODS", "INCREMENTAL_PIPELINE_PARAMETERS", "check_input",
           "check_parameters", "check_incremental", "check_incremental_parameters", "check_participation",
           "check_output", "check_cluster", "check_schedule", "check_series"]

_FILTER_OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")

#: The keys each section (and ``cluster.tls``) accepts.
SECTIONS = {
    "input": ("path", "filters", "strata", "missing", "merge_small_strata", "columns", "drop", "keep",
              "storage_options"),
    "parameters": ("K", "nu", "partition_size", "task_rows", "max_task_rows", "energy_loss", "n_components",
                   "sse_threshold", "seed", "keep_row_id", "quality", "refine", "refine_iter", "macro", "macro_iter",
                   "reference"),
    "incremental": ("close_at", "zeta", "nu", "arrivals", "deadline", "base_method", "increment", "reference"),
    "participation": ("pi", "column", "max_cell_failure"),
    "output": ("path", "overwrite", "partition_by", "rows_per_file", "force", "table_format"),
    "report": ("path", "dask_report", "risk"),
    "cluster": ("address", "workers", "memory_limit", "spill_directory", "tls"),
    "tls": ("ca_file", "cert", "key"),
    "schedule": ("cron", "at", "timezone"),
    "series": ("ledger", "new_series", "id_column"),
}


def check_input(value, base: Path) -> dict:
    sec = as_mapping(value, "input", SECTIONS["input"])
    if "path" not in sec:
        fail("input.path", "missing (the table or Parquet directory to read)")
    out = {"path": as_path(sec["path"], "input.path", base), "filters": [], "strata": []}
    filters = sec.get("filters") or []
    if not isinstance(filters, list):
        fail("input.filters", f"expected a list of [column, op, value] triples, got {show(filters)}")
    for i, f in enumerate(filters):
        where = f"input.filters[{i}]"
        if not isinstance(f, list) or len(f) != 3:
            fail(where, f"expected [column, op, value], got {show(f)}")
        col, op, val = f
        as_str(col, where + "[0]")
        if op not in _FILTER_OPS:
            fail(where + "[1]", f"expected one of {', '.join(_FILTER_OPS)}, got {show(op)}")
        if op in ("in", "not in") and not isinstance(val, list):
            fail(where + "[2]", f"expected a list of values for {op!r}, got {show(val)}")
        vals = val if isinstance(val, list) else [val]
        for v in vals:
            if isinstance(v, (dict, list)) or v is None:
                fail(where + "[2]", f"expected numbers or strings, got {show(v)}")
            if isinstance(v, str):
                as_template(v, where + "[2]")
        out["filters"].append([col, op, _jsonable(val)])  # column names exactly as written
    if "strata" in sec and sec["strata"] is not None:
        out["strata"] = as_columns(sec["strata"], "input.strata")
    for key in ("columns", "drop", "keep"):
        if sec.get(key) is not None:
            out[key] = as_columns(sec[key], f"input.{key}")
    if "missing" in sec:
        if sec["missing"] not in ("refuse", "separate"):
            fail("input.missing", f"expected refuse or separate, got {show(sec['missing'])}")
        out["missing"] = sec["missing"]
    if "merge_small_strata" in sec:
        out["merge_small_strata"] = as_bool(sec["merge_small_strata"], "input.merge_small_strata")
    if sec.get("storage_options") is not None:
        out["storage_options"] = _storage_options(sec["storage_options"], out["path"])
    return out


#: Option names that hold a credential: never in a spec, whose text is copied into every report.
_SECRET_OPTION = re.compile(r"(^key$|_key$|key_id|secret|token|password|credential|connection_string|^sas)",
                            re.IGNORECASE)


def _storage_options(value, path: str) -> dict:
    """``input.storage_options``: the file system options (s3fs, adlfs, gcsfs) of an object-store input, credentials refused (the
    spec's text is part of the published report; the environment, a profile or an instance role
    give them)."""
    from ..io.objectstore import is_remote

    if not isinstance(value, dict):
        fail("input.storage_options", f"expected a mapping of the store's file system options, got {show(value)}")
    if not is_remote(path):
        fail("input.storage_options", "applies only to an object-store input.path (s3://BUCKET/KEY, "
             "abfs://CONTAINER/KEY, gs://BUCKET/KEY)")

    def walk(obj, where):
        for name, v in obj.items():
            if _SECRET_OPTION.search(str(name)):
                fail(f"{where}.{name}", "credentials are never written in a spec (its text is copied into the "
                     "report): give them through the environment (AWS_ACCESS_KEY_ID, "
                     "AZURE_STORAGE_CONNECTION_STRING, GOOGLE_APPLICATION_CREDENTIALS, …), a profile "
                     "(storage_options.profile) or the machine's role")
            if isinstance(v, dict):
                walk(v, f"{where}.{name}")
    walk(value, "input.storage_options")
    return dict(value)


def _jsonable(value):
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return value


def check_parameters(value) -> dict:
    sec = as_mapping(value, "parameters", SECTIONS["parameters"])
    checks = {
        "K": lambda v, p: as_int(v, p, 3),
        "nu": lambda v, p: as_float(v, p, 0, 1),
        "partition_size": lambda v, p: as_int(v, p, 2),
        "task_rows": lambda v, p: as_int(v, p, 2),
        "max_task_rows": lambda v, p: as_int(v, p, 2),
        "energy_loss": lambda v, p: as_float(v, p, 0, 1, high_open=True),
        "n_components": lambda v, p: as_int(v, p, 1),
        "sse_threshold": lambda v, p: as_float(v, p, 0, math.inf),
        "seed": lambda v, p: as_int(v, p, 0),
        "keep_row_id": as_bool,
        "quality": lambda v, p: as_str(v, p),
        "refine": lambda v, p: as_str(v, p),
        "refine_iter": lambda v, p: as_int(v, p, 1),
        "macro": lambda v, p: as_str(v, p),
        "macro_iter": lambda v, p: as_int(v, p, 1),
        "reference": lambda v, p: as_str(v, p),
    }
    out = {key: checks[key](v, f"parameters.{key}") for key, v in sec.items() if v is not None}
    if "energy_loss" in out and "n_components" in out:
        fail("parameters", "give energy_loss or n_components, not both")
    return out


def check_incremental(value) -> dict:
    sec = as_mapping(value, "incremental", SECTIONS["incremental"])
    out: dict = {}
    if "close_at" not in sec:
        fail("incremental.close_at", "missing (when the survey closes: a duration after the run starts, or a time)")
    close = sec["close_at"]
    if isinstance(close, (dt.datetime, dt.date)) or (isinstance(close, str) and re.match(r"^\d{4}-\d\d-\d\d", close)):
        try:
            out["close_at"] = parse_time(close).isoformat()
        except ValueError:
            fail("incremental.close_at", f"expected an ISO 8601 time or a duration, got {show(close)}")
    else:
        try:
            out["close_at_seconds"] = as_duration(close, "incremental.close_at")
        except SpecError:
            fail("incremental.close_at", f"expected an ISO 8601 time or a duration such as 2h, got {show(close)}")
    if "zeta" in sec:
        out["zeta"] = as_float(sec["zeta"], "incremental.zeta", 0, math.inf, low_open=True)
    if "nu" in sec:
        out["nu"] = as_float(sec["nu"], "incremental.nu", 0, 1)
    if "zeta" not in out and "nu" not in out:
        fail("incremental", "give zeta (arrivals coefficient) or nu (incremental data ratio)")
    if "arrivals" in sec:  # a run follows the records as they land: an arrival profile would be ignored
        fail("incremental.arrivals", "not an option of a run: the schedule follows the records as they land "
             "(an arrival profile is an option of the simulator, daskmicro.io.arrivals); remove it")
    if "deadline" in sec:
        out["deadline"] = as_duration(sec["deadline"], "incremental.deadline")
    if "base_method" in sec:
        if sec["base_method"] not in INCREMENTAL_BASE_METHODS:
            fail("incremental.base_method", f"expected one of {', '.join(INCREMENTAL_BASE_METHODS)}, "
                  f"got {show(sec['base_method'])}")
        out["base_method"] = sec["base_method"]
    if "increment" in sec:
        from ..incremental.options import FIXED_INCREMENTS, INCREMENTS

        increments = INCREMENTS + FIXED_INCREMENTS
        out["increment"] = as_str(sec["increment"], "incremental.increment")
        if out["increment"] not in increments:
            fail("incremental.increment", f"expected one of {', '.join(increments)}, got {show(sec['increment'])}")
        if out["increment"] in FIXED_INCREMENTS and out.get("base_method", "mdav") != "partitioned":
            fail("incremental.increment", f"{out['increment']} needs base_method: partitioned")
    if "reference" in sec:
        out["reference"] = as_bool(sec["reference"], "incremental.reference")
    return out


#: Base-stage methods of ``method: incremental`` (those of :data:`daskmicro.incremental.options.BASE_METHODS`).
INCREMENTAL_BASE_METHODS = ("mdav", "pca-mdav", "partitioned")
#: ``parameters`` an incremental run uses: the seed, and the pipeline layout of a partitioned base.
INCREMENTAL_PIPELINE_PARAMETERS = ("K", "nu", "partition_size", "task_rows", "energy_loss", "n_components")


def check_incremental_parameters(data: dict) -> None:
    """Every parameter of an incremental spec is used by its base method, or refused in one line."""
    base = data["incremental"].get("base_method", "mdav")
    allowed = ("seed",) + (INCREMENTAL_PIPELINE_PARAMETERS if base == "partitioned" else ())
    extra = [key for key in data["parameters"] if key not in allowed]
    if extra:
        fail(f"parameters.{extra[0]}", f"not used by method: incremental with base_method {base} "
              f"(it takes {', '.join(allowed)})")


def check_participation(value) -> dict:
    sec = as_mapping(value, "participation", SECTIONS["participation"])
    if ("pi" in sec) == ("column" in sec):
        fail("participation", "give exactly one of pi (a probability) or column (per-record probabilities)")
    out = {}
    if "pi" in sec:
        out["pi"] = as_float(sec["pi"], "participation.pi", 0, 1, low_open=True)
    else:
        out["column"] = as_str(sec["column"], "participation.column")
    if "max_cell_failure" not in sec:
        fail("participation.max_cell_failure", "missing (largest accepted probability that a cell falls below k)")
    out["max_cell_failure"] = as_float(sec["max_cell_failure"], "participation.max_cell_failure", 0, 1,
                                     low_open=True, high_open=True)
    return out


def check_output(value, base: Path) -> dict:
    sec = as_mapping(value, "output", SECTIONS["output"])
    if "path" not in sec:
        fail("output.path", "missing (a .parquet file, or a directory for a partitioned release)")
    if not isinstance(sec["path"], str):
        fail("output.path", f"expected a string, got {show(sec['path'])}")
    out = {"path": as_path(sec["path"], "output.path", base), "overwrite": False}
    if "overwrite" in sec:
        out["overwrite"] = as_bool(sec["overwrite"], "output.overwrite")
    if "force" in sec:
        out["force"] = as_bool(sec["force"], "output.force")
    if sec.get("partition_by") is not None:
        out["partition_by"] = as_columns(sec["partition_by"], "output.partition_by")
    if "rows_per_file" in sec:
        out["rows_per_file"] = as_int(sec["rows_per_file"], "output.rows_per_file", 1)
    if "table_format" in sec:
        if sec["table_format"] not in ("parquet", "delta"):
            fail("output.table_format", f"expected 'parquet' or 'delta', got {show(sec['table_format'])}")
        out["table_format"] = sec["table_format"]
    suffix = Path(out["path"]).suffix.lower()
    if suffix and suffix not in (".parquet", ".pq"):
        fail("output.path", f"expected a .parquet file or a directory (no extension), got {show(sec['path'])}")
    return out


def _size(value, path: str) -> int:
    """Bytes: an integer, or a size such as 3GiB (dask's notation), checked as the API checks it."""
    from ..config import FIELDS

    try:
        return FIELDS["memory_limit"](path, value)
    except ParameterError as exc:
        fail(path, str(exc).replace(f"{path} must be", "expected"))


def check_cluster(value, base: Path) -> dict:
    sec = as_mapping(value, "cluster", SECTIONS["cluster"])
    out: dict = {}
    if "address" in sec and sec["address"] is not None:
        addr = as_str(sec["address"], "cluster.address")
        if not re.match(r"^(tcp|tls|inproc|ucx|ws|wss)://", addr):
            fail("cluster.address", f"expected an address such as tcp://host:8786 or tls://host:8786, got {show(addr)}")
        out["address"] = addr
    if "workers" in sec:
        out["workers"] = as_int(sec["workers"], "cluster.workers", 1)
    if sec.get("memory_limit") is not None:
        out["memory_limit"] = _size(sec["memory_limit"], "cluster.memory_limit")
    if sec.get("spill_directory") is not None:
        out["spill_directory"] = as_path(sec["spill_directory"], "cluster.spill_directory", base)
    if "address" in out and ("memory_limit" in out or "spill_directory" in out):
        fail("cluster", "memory_limit and spill_directory set up the LocalCluster of a run without an address; the "
                         "workers at an address keep their own (dask worker --memory-limit, --local-directory)")
    if "tls" in sec:
        tls = as_mapping(sec["tls"], "cluster.tls", SECTIONS["tls"])
        missing = [k for k in SECTIONS["tls"] if k not in tls]
        if missing:
            fail("cluster.tls", f"expected ca_file, cert and key; missing {', '.join(missing)}")
        out["tls"] = {k: as_path(tls[k], f"cluster.tls.{k}", base) for k in SECTIONS["tls"]}
    if out.get("address", "").startswith("tls://") and "tls" not in out:
        fail("cluster.tls", "a tls:// address needs ca_file, cert and key")
    return out


def check_series(value, base: Path) -> dict:
    """``series:``: the release ledger (a directory, or ``off`` for a trial run), ``new_series``, ``id_column``."""
    sec = as_mapping(value, "series", SECTIONS["series"])
    out: dict = {}
    if sec.get("ledger") is not None:
        led = sec["ledger"]
        if led is False or (isinstance(led, str) and led.strip().lower() == "off"):
            out["ledger"] = "off"
        else:
            out["ledger"] = as_path(as_str(led, "series.ledger"), "series.ledger", base)
    if "new_series" in sec:
        out["new_series"] = as_bool(sec["new_series"], "series.new_series")
    if sec.get("id_column") is not None:
        out["id_column"] = as_str(sec["id_column"], "series.id_column")
    return out


def check_schedule(value) -> dict:
    sec = as_mapping(value, "schedule", SECTIONS["schedule"])
    if ("cron" in sec) == ("at" in sec):
        fail("schedule", "give exactly one of cron (a 5-field cron expression) or at (a list of times)")
    tzname = sec.get("timezone", "UTC")
    tz = _timezone(tzname)
    out: dict = {"timezone": tzname}
    if "cron" in sec:
        expr = as_str(sec["cron"], "schedule.cron")
        try:
            out["cron"] = check_cron(expr)
        except ValueError as exc:
            fail("schedule.cron", f"{exc}, got {show(expr)}")
    else:
        times = sec["at"]
        if not isinstance(times, list):
            times = [times]
        if not times:
            fail("schedule.at", "expected a non-empty list of times")
        parsed = []
        for i, t in enumerate(times):
            try:
                parsed.append(parse_time(t, tz))
            except ValueError:
                fail(f"schedule.at[{i}]", f"expected an ISO 8601 time such as 2026-11-21T02:00:00Z, got {show(t)}")
        out["at"] = sorted({p.isoformat() for p in parsed})
    return out


def _timezone(name) -> dt.tzinfo:
    try:
        return zone(name)
    except ValueError:
        if not isinstance(name, str):
            fail("schedule.timezone", f"expected an IANA time zone name such as UTC or Europe/Madrid, got {show(name)}")
        fail("schedule.timezone", f"unknown time zone {show(name)}")
