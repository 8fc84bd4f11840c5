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

Single values are checked by :mod:`daskmicro.workflow.values` and each section by
:mod:`daskmicro.workflow.sections`; :func:`parse_spec` checks the whole spec with them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ParameterError
from .sections import (SECTIONS, check_cluster, check_incremental, check_incremental_parameters, check_input,
                       check_output, check_parameters, check_participation, check_schedule, check_series)
from .slots import UTC, Clock, fill, parse_time, run_key, slot_id, slots_between
from .values import PLACEHOLDERS, SpecError, as_bool, as_columns, as_int, as_mapping, as_path, as_str, fail, show

__all__ = ["SpecError", "WorkflowSpec", "parse_spec", "run_key", "slots_between", "slot_id",
           "parse_time", "fill", "Clock", "UTC", "PLACEHOLDERS", "METHODS"]

#: Methods a spec may name: those of :func:`daskmicro.anonymize` plus ``incremental``.
METHODS = ("auto", "mdav", "pca-mdav", "pcl", "partitioned", "proximal-distal", "incremental")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_TOP = ("version", "name", "description", "input", "qi", "qi_except", "k", "method", "parameters", "incremental",
        "participation", "output", "report", "cluster", "schedule", "series")
_REQUIRED_TOP = ("name", "input", "qi", "k", "output")


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
    top = as_mapping(obj, "", _TOP)
    for key in _REQUIRED_TOP:
        if key not in top:
            fail(key, "missing (required keys: " + ", ".join(_REQUIRED_TOP) + ")")
    if "version" in top and top["version"] != 1:
        fail("version", f"expected 1, got {show(top['version'])}")
    name = top["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        fail("name", f"expected letters, digits, '_', '.', '-' (at most 64, starting with a letter or digit), got {show(name)}")
    data: dict = {"name": name}
    if "description" in top:
        data["description"] = as_str(top["description"], "description")
    data["input"] = check_input(top["input"], base)
    data["qi"] = as_columns(top["qi"], "qi")
    if "qi_except" in top:   # with qi: all-numeric (checked by the run description below)
        data["qi_except"] = as_columns(top["qi_except"], "qi_except")
    data["k"] = as_int(top["k"], "k", 2)
    method = top.get("method", "auto")
    if method not in METHODS:
        fail("method", f"expected one of {', '.join(METHODS)}, got {show(method)}")
    data["method"] = method
    data["parameters"] = check_parameters(top.get("parameters") or {})
    if method == "incremental":
        if "incremental" not in top:
            fail("incremental", "missing: method incremental needs close_at and zeta or nu")
        data["incremental"] = check_incremental(top["incremental"])
    elif "incremental" in top:
        fail("incremental", f"only used with method: incremental (method is {method})")
    if "participation" in top:
        data["participation"] = check_participation(top["participation"])
    data["output"] = check_output(top["output"], base)
    if "report" in top:
        rep = as_mapping(top["report"], "report", SECTIONS["report"])
        report = {}
        if "path" in rep:
            report["path"] = as_path(rep["path"], "report.path", base)
        if "dask_report" in rep:
            report["dask_report"] = as_bool(rep["dask_report"], "report.dask_report")
        if "risk" in rep:
            report["risk"] = as_bool(rep["risk"], "report.risk")
            if report["risk"] and method == "incremental":
                fail("report.risk", "method incremental publishes no row id that pairs a released row with its "
                     "arriving record: its disclosure risk cannot be measured")
        if report:
            data["report"] = report
    if "cluster" in top:
        data["cluster"] = check_cluster(top["cluster"], base)
    if "schedule" in top:
        data["schedule"] = check_schedule(top["schedule"])
    if "series" in top:
        data["series"] = check_series(top["series"], base)
    if data["input"]["strata"] and method == "incremental":
        fail("input.strata", "strata are not supported with method: incremental")
    if method == "incremental":
        check_incremental_parameters(data)
    unscheduled_template = any(f in _fields(data["output"]["path"]) for f in ("slot", "date", "yesterday", "time"))
    if unscheduled_template and "schedule" not in data:
        fail("output.path", "slot placeholders ({slot}, {date}, ...) need a schedule")
    if "schedule" in data and not unscheduled_template and not data["output"]["overwrite"]:
        fail("output.path", "a scheduled workflow writes one release per slot: put {slot} or {date} in the path, or set output.overwrite: true")
    if method != "incremental":  # the run's options, validated once by the run description
        from ..config import RunConfig

        try:
            RunConfig.from_spec(data)
        except ParameterError as exc:
            fail("", str(exc))
    canonical = {k: v for k, v in data.items() if k != "cluster"}
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
    return WorkflowSpec(data=data, source=source, digest=digest)


def _fields(text: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(text) if f]
