"""The options of an incremental survey run: :class:`IncrementalOptions`, one field of the run
description (:class:`daskmicro.config.RunConfig`), checked once when the description is built.

The schedule of *Incremental k-Anonymous Microaggregation in Large-Scale Electronic Surveys With
Optimized Scheduling* (§III-B, §IV-B) is set by the data ratio ν (given, or ν* from the arrivals
coefficient ζ or a time model), the base method and the increment algorithm (§IV-A, §IV-D).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..io.arrivals import positive_number
from ..schedule_model import TimeModel, check_ratio, check_real, check_zeta

__all__ = ["IncrementalOptions", "IncrementalPlan", "not_taken_by_a_survey", "incremental_value", "BASE_METHODS", "INCREMENTS", "FIXED_INCREMENTS",
           "PIPELINE_OPTIONS", "check_increment_size"]

#: Base-stage methods by name (a callable ``f(Z, k) -> labels`` is accepted too): exact MDAV and
#: PCA-MDAV run in one task; "partitioned" runs the partitioned pipeline across the cluster.
BASE_METHODS = ("mdav", "pca-mdav", "partitioned")
#: Increment algorithms: 2MDAV (§IV-A) and nearest-neighbour assignment with cell splitting (§IV-D).
INCREMENTS = ("2mdav", "nn", "nn-split-mid", "nn-split-end")
#: Increments whose base cells are published before the close (a partitioned base only).
FIXED_INCREMENTS = ("nn-fixed",)
#: Pipeline options a partitioned base takes from the run description (its K, ν = distal fraction, …).
PIPELINE_OPTIONS = ("K", "partition_size", "task_rows", "nu", "energy_loss", "n_components")
#: The option names of :class:`IncrementalOptions`.
NAMES = ("nu", "zeta", "close_at", "base_method", "increment", "reference", "timeout", "time_column", "time_model",
         "expected_rows")


#: What an incremental run does not take, and why: the survey is one group microaggregated in two
#: stages at two moments (§III-B), so nothing that splits, refines or re-reads it applies.
_NOT_INCREMENTAL = {
    "strata": lambda c: bool(c.strata), "missing": lambda c: c.missing != "refuse",
    "merge_small_strata": lambda c: c.merge_small_strata, "participation": lambda c: c.participation is not None,
    "reference": lambda c: c.reference is not None, "quality": lambda c: c.quality != "balanced",
    "refine": lambda c: c.refine is not None, "macro": lambda c: c.macro != "mdav",
    "sse_threshold": lambda c: c.sse_threshold is not None, "max_task_rows": lambda c: c.max_task_rows is not None,
    "filters": lambda c: bool(c.filters), "columns": lambda c: c.columns is not None,
    "partition_by": lambda c: c.partition_by is not None, "keep_row_id": lambda c: c.keep_row_id,
    "force": lambda c: c.force, "risk": lambda c: c.risk,
}
_BASE_PIPELINE = ("K", "nu", "partition_size", "task_rows", "energy_loss", "n_components")


def not_taken_by_a_survey(c) -> list:
    """The options of run description ``c`` (method incremental) that a survey does not take."""
    if c.method != "incremental":
        return []
    out = [name for name, given in _NOT_INCREMENTAL.items() if given(c)]
    if c.incremental is None or not c.incremental.partitioned:
        out += [name for name in _BASE_PIPELINE if getattr(c, name) is not None]
    return out


def _time_model(model):
    if model is None or isinstance(model, TimeModel):
        return model
    try:
        a, beta = model
    except (TypeError, ValueError):
        raise ParameterError(f"time_model must be a schedule.TimeModel or an (a, beta) pair, got {model!r}") from None
    return TimeModel(a=check_real(a, "a"), beta=check_real(beta, "beta"))


def check_increment_size(nu: float, total: int, k: int, increment: str) -> None:
    """The base stage needs at least k records (its cells are the increment's); 2MDAV needs at
    least k late records of its own (§IV-A)."""
    base = max(1, math.ceil((1.0 - nu) * total - 1e-9))   # what the base stage waits for
    if total >= k and base < k:
        raise ParameterError(f"nu = {nu:.4g} leaves {base} of the {total} records to the base stage, fewer than "
                             f"k = {k}: lower nu")
    if increment == "2mdav" and nu > 0 and math.ceil(nu * total - 1e-9) < k:
        raise ParameterError(f"nu = {nu:.4g} leaves fewer than k = {k} of the {total} records to the 2mdav increment; "
                             "raise nu or use increment='nn-split-end'")


@dataclass(frozen=True)
class IncrementalOptions:
    """When and how the two stages of an incremental run are scheduled (§III-B, §IV-B).

    ``nu``: the data ratio ν, the fraction left to the increment stage (default ν* of §IV-B);
    ``zeta``: the arrivals coefficient ζ; ``close_at``: when the survey closes (POSIX seconds;
    default the lake's close marker or a frame's last arrival); ``base_method``: "mdav",
    "pca-mdav", "partitioned" or a callable ``f(Z, k) -> labels``; ``increment``: the increment
    algorithm; ``reference``: also run one-pass microaggregation for τ and δ (§III-B.4);
    ``timeout``: seconds to wait for the base fraction and the close; ``time_column``: a frame's
    arrival times (read, never published); ``time_model``: ``t(n) = a·nᵝ`` of the base method;
    ``expected_rows``: a lake's records when it has no simulator manifest.
    """

    nu: float | None = None
    zeta: float | None = None
    close_at: float | None = None
    base_method: Any = "mdav"
    increment: str = "2mdav"
    reference: bool = False
    timeout: float | None = None
    time_column: Any = None
    time_model: TimeModel | None = None
    expected_rows: int | None = None

    @classmethod
    def build(cls, **options) -> "IncrementalOptions":
        """Options checked one by one (None: not set); a bad one raises ParameterError in one line."""
        from ..io.survey import to_epoch

        unknown = sorted(set(options) - set(NAMES))
        if unknown:
            raise ParameterError(f"incremental: unknown option(s) {', '.join(unknown)}; expected some of {', '.join(NAMES)}")
        o = {key: v for key, v in options.items() if v is not None}
        if "nu" in o:
            o["nu"] = check_ratio(o["nu"], "nu")
            if o["nu"] >= 1.0:
                raise ParameterError("nu must be < 1: the base stage needs some records")
        if "zeta" in o:
            o["zeta"] = check_zeta(o["zeta"])
        if "close_at" in o:
            o["close_at"] = to_epoch(o["close_at"])
        base = o.get("base_method", "mdav")
        if not callable(base) and base not in BASE_METHODS:
            raise ParameterError(f"base_method must be one of {', '.join(BASE_METHODS)} or a callable f(Z, k); got {base!r}")
        inc = o.get("increment", "2mdav")
        if inc not in INCREMENTS + FIXED_INCREMENTS:
            raise ParameterError(f"increment must be one of {', '.join(INCREMENTS + FIXED_INCREMENTS)}; got {inc!r}")
        if inc in FIXED_INCREMENTS and base != "partitioned":
            raise ParameterError(f"increment={inc!r} needs base_method='partitioned' (its release is made before the close)")
        if not isinstance(o.get("reference", False), (bool, np.bool_)):
            raise ParameterError(f"reference must be True or False, got {o['reference']!r}")
        if "reference" in o:
            o["reference"] = bool(o["reference"])
        if "timeout" in o:
            o["timeout"] = positive_number(o["timeout"], "timeout", "seconds")
        if "time_model" in o:
            o["time_model"] = _time_model(o["time_model"])
        if "expected_rows" in o:
            v = o["expected_rows"]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ParameterError(f"expected_rows must be a positive integer, got {v!r}")
            o["expected_rows"] = int(v)
        return cls(**o)

    @property
    def base_name(self) -> str:
        b = self.base_method
        return getattr(b, "__name__", "custom") if callable(b) else b

    @property
    def partitioned(self) -> bool:
        return self.base_method == "partitioned"

    def fingerprint_dict(self) -> dict:
        out = asdict(self)
        out["base_method"] = self.base_name
        if self.time_model is not None:
            out["time_model"] = [self.time_model.a, self.time_model.beta]
        return out


@dataclass(frozen=True)
class IncrementalPlan:
    """An incremental run resolved for its executor: the options, the pipeline options of a
    partitioned base (None for a one-task base) and the columns left out of the release."""

    options: IncrementalOptions
    base_options: dict | None
    drop: tuple

    @classmethod
    def from_config(cls, cfg) -> "IncrementalPlan":
        opts = cfg.incremental_options
        base = None
        if opts.partitioned:
            base = {key: getattr(cfg, key) for key in PIPELINE_OPTIONS if getattr(cfg, key) is not None}
        return cls(options=opts, base_options=base, drop=tuple(cfg.drop))


def incremental_value(name: str, value) -> IncrementalOptions:
    """The ``incremental`` field of a run description: IncrementalOptions, or a mapping of its options."""
    if isinstance(value, IncrementalOptions):
        return value
    if isinstance(value, dict):
        return IncrementalOptions.build(**value)
    raise ParameterError(f"{name} must be a mapping of incremental options, got {type(value).__name__}")


def from_spec_section(section: dict) -> IncrementalOptions:
    """The options of a workflow spec's validated ``incremental`` section (``close_at`` as a time,
    or as a duration from now: the moment the run starts; ``deadline``: the timeout)."""
    import datetime as dt
    import time

    close = section.get("close_at")
    if close is not None:
        close = dt.datetime.fromisoformat(close) if isinstance(close, str) else close
    elif section.get("close_at_seconds") is not None:
        close = time.time() + float(section["close_at_seconds"])
    return IncrementalOptions.build(
        nu=section.get("nu"), zeta=section.get("zeta"), close_at=close, base_method=section.get("base_method"),
        increment=section.get("increment"), reference=section.get("reference"), timeout=section.get("deadline"))
