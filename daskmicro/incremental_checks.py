"""Argument checks of :func:`daskmicro.incremental_run.anonymize_incremental`.

Each check returns its argument normalised (the base method as a kernel and a name, the pipeline
options of a partitioned base, the time model, the workers' memory settings) or raises
:class:`~daskmicro.errors.ParameterError` in one line.
"""

from __future__ import annotations

import math

import numpy as np

from .runtime.cluster import given_client_refusal
from .errors import ParameterError
from .graph.incremental import default_kernel, pca_mdav_kernel
from .graph.incremental_pipeline import PIPELINE_OPTIONS
from .schedule import TimeModel, check_real

__all__ = ["BASE_METHODS", "positive_seconds", "check_qi_names", "check_k", "check_base_method", "check_base_options",
           "check_time_model", "check_increment_size", "worker_settings"]

#: Base-stage methods by name (a callable ``f(Z, k) -> labels`` is accepted too): exact MDAV and
#: PCA-MDAV run in one task; "partitioned" runs the partitioned pipeline across the cluster.
BASE_METHODS = ("mdav", "pca-mdav", "partitioned")


def positive_seconds(value, name: str) -> float:
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be a positive number of seconds, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a positive number of seconds, got {value!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise ParameterError(f"{name} must be a positive number of seconds, got {value!r}")
    return x


def check_qi_names(qi, columns) -> list:
    if qi is None:
        raise ParameterError("qi must name at least one quasi-identifier column")
    if isinstance(qi, str) or not isinstance(qi, (list, tuple)):
        qi = [qi]
    qi = list(qi)
    if not qi:
        raise ParameterError("qi must name at least one quasi-identifier column")
    if len(set(qi)) != len(qi):
        raise ParameterError("qi names a column more than once")
    if columns is not None:
        unknown = [c for c in qi if c not in columns]
        if unknown:
            raise ParameterError(f"unknown QI column(s), not in the source: {', '.join(map(repr, unknown))}")
    return qi


def check_k(k, total) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ParameterError(f"k must be an integer ≥ 2, got {k!r}")
    k = int(k)
    if k < 2:
        raise ParameterError(f"k must be ≥ 2, got {k}")
    if total is not None and k > total:
        raise ParameterError(f"k = {k} exceeds the number of records of the survey ({total})")
    return k


def check_base_method(base_method):
    if callable(base_method):
        return base_method, getattr(base_method, "__name__", "custom")
    if base_method not in BASE_METHODS:
        raise ParameterError(f"base_method must be one of {', '.join(BASE_METHODS)} or a callable f(Z, k); got {base_method!r}")
    return {"mdav": default_kernel, "pca-mdav": pca_mdav_kernel, "partitioned": None}[base_method], base_method


def check_base_options(options, name):
    """The pipeline options of a partitioned base (a dict), None for a one-task base."""
    if name != "partitioned":
        if options:
            raise ParameterError(f"base_options apply to base_method='partitioned', not {name!r}")
        return None
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ParameterError(f"base_options must be a dict of pipeline options, got {type(options).__name__}")
    unknown = [key for key in options if key not in PIPELINE_OPTIONS]
    if unknown:
        raise ParameterError(f"base_options: unknown option(s) {', '.join(map(repr, unknown))}; expected some of "
                             f"{', '.join(PIPELINE_OPTIONS)}")
    from .graph.pipeline import check_options

    K, nu, size, rows, _, _ = check_options(options.get("K"), options.get("nu"), options.get("partition_size"),
                                             options.get("task_rows"), None, None)
    checked = {"K": K, "nu": nu, "partition_size": size, "task_rows": rows,
               "energy_loss": options.get("energy_loss"), "n_components": options.get("n_components")}
    return {key: v for key, v in checked.items() if v is not None}


def check_time_model(model):
    if model is None or isinstance(model, TimeModel):
        return model
    try:
        a, beta = model
    except (TypeError, ValueError):
        raise ParameterError(f"time_model must be a schedule.TimeModel or an (a, beta) pair, got {model!r}") from None
    return TimeModel(a=check_real(a, "a"), beta=check_real(beta, "beta"))


def check_increment_size(nu: float, total: int, k: int, increment: str) -> None:
    if increment == "2mdav" and nu > 0 and math.ceil(nu * total - 1e-9) < k:
        raise ParameterError(f"nu = {nu:.4g} leaves fewer than k = {k} of the {total} records to the 2mdav increment; raise nu or use increment='nn-split-end'")


def worker_settings(memory_limit, spill_directory, own_cluster: bool) -> dict:
    """The checked ``memory_limit`` / ``spill_directory`` of the run's own LocalCluster."""
    from .config import FIELDS

    if memory_limit is None and spill_directory is None:
        return {}
    if not own_cluster:
        raise given_client_refusal()
    return {"memory_limit": None if memory_limit is None else FIELDS["memory_limit"]("memory_limit", memory_limit),
            "spill_directory": None if spill_directory is None else
            FIELDS["spill_directory"]("spill_directory", spill_directory)}
