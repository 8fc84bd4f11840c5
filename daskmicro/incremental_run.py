"""Incremental k-anonymous microaggregation of a survey while its records arrive.

:func:`anonymize_incremental` implements the two-stage scheme of Rebollo-Monedero et al.,
*Incremental k-Anonymous Microaggregation in Large-Scale Electronic Surveys With Optimized
Scheduling* (IEEE Access 2018): a base stage microaggregates the
first fraction 1 − ν of the records while the rest are still arriving (§III-B), and a small
increment stage adds the last ν when the survey closes (2MDAV, §IV-A, or nearest-neighbour
assignment with cell splitting, §IV-D).  ν comes from the scheduling formulas of §IV-B
(:mod:`daskmicro.schedule`).  Both stages are Dask work on the same cluster, submitted at those
two moments (:mod:`daskmicro.graph.incremental`); the release joins both partitions and is
verified before it is returned.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .schedule import calibrate, check_ratio, check_zeta, critical_ratio_numeric, optimize_ratio, plan as schedule_plan
from .schedule_model import calibrate_near_linear
from .config import check_seed
from .io.frames import is_dask_frame
from .runtime.cluster import cluster_client
from .errors import InputError, ParameterError
from .incremental_checks import (BASE_METHODS, check_base_method, check_base_options, check_increment_size, check_k,
                                 check_qi_names, check_time_model, positive_seconds, worker_settings)
from .graph.incremental import IncrementalGraph, calibrate_on, default_kernel, warm_up
from .graph.incremental_fixed import FIXED_INCREMENTS, PROBE_FRACTION, FixedIncrementalGraph, calibrate_fixed
from .graph.incremental_pipeline import PipelineIncrementalGraph, calibrate_pipeline
from .io.survey import SurveyTimeoutError, open_survey
from .kernels.increment import METHODS as INCREMENT_METHODS
from .report.run import Report

__all__ = ["anonymize_incremental", "BASE_METHODS", "INCREMENT_METHODS", "SurveyTimeoutError"]


def anonymize_incremental(
    source,
    qi,
    k: int,
    *,
    nu: float | None = None,
    zeta: float | None = None,
    close_at=None,
    base_method="mdav",
    increment: str = "2mdav",
    seed: int | None = None,
    client=None,
    reference: bool = False,
    timeout: float | None = None,
    progress: Callable | None = None,
    time_column=None,
    time_model=None,
    expected_rows: int | None = None,
    base_options: dict | None = None,
    memory_limit=None,
    spill_directory=None,
):
    """Anonymize a survey in two time-delayed stages: a base stage while it runs, an increment at the close.

    The base stage's Dask work is submitted as soon as the fraction 1 − ν of the records has
    arrived; the increment stage is submitted when the survey closes; both run on the same
    cluster (§III-B of *Incremental k-Anonymous Microaggregation … With Optimized Scheduling*).  The release combines both micropartitions,
    is verified (k-anonymity, rows in = rows out) and only then returned.

    Parameters
    ----------
    source : path or pandas.DataFrame
        A Parquet lake directory being filled (by :class:`~daskmicro.io.arrivals.ArrivalSimulator`
        or a collector): a file counts once it is in the directory (for a simulated lake, once the
        survey clock passes its arrival time), and the survey closes with the ``_closed.json``
        marker or at ``close_at``.  Or a DataFrame with an arrival-time column ``time_column``
        (POSIX seconds or datetimes): a record has arrived once the clock passes its time.
    qi : list of column labels
        Numeric quasi-identifier columns (no missing or infinite values).
    k : int
        Anonymity parameter, 2 ≤ k ≤ number of records.
    nu : float in [0, 1), optional
        Data ratio ν: the fraction of the records left to the increment stage.  Default: ν* of
        §IV-B from ``zeta``, else from the time model (``time_model`` or, when absent, a short
        calibration run on a worker) and the survey's duration.
    zeta : float, optional
        Arrivals coefficient ζ (survey duration / one-pass running time) for ν* (closed form for
        quadratic stages, §IV-B, or the numerical optimum for the time model's exponent β).
    close_at : float or datetime, optional
        When the survey closes (POSIX seconds or a datetime), whatever the lake's marker says.
        For a DataFrame source the default is its last arrival time.
    base_method : {"mdav", "pca-mdav", "partitioned"} or callable, default "mdav"
        Base microaggregation: exact MDAV or PCA-MDAV in one task, or ``f(Z, k) -> labels`` on
        z-scored records (also used for 2MDAV's increment run; a callable must be importable by
        the workers); or "partitioned": the partitioned pipeline across the cluster, the
        increment then adjoined per base partition (:mod:`daskmicro.graph.incremental_pipeline`),
        and the release a Dask DataFrame on the given ``client`` (pandas when the run starts its
        own cluster), verified before it is returned.
    increment : {"2mdav", "nn", "nn-split-mid", "nn-split-end", "nn-fixed"}, default "2mdav"
        Increment algorithm (:func:`daskmicro.kernels.incremental.increment`).  2MDAV needs at
        least k increment records; with fewer, "nn" is used and the report says so.  "nn-fixed"
        (partitioned base only): late records join their nearest base cell, whose centroid is
        left as it is, so the release is published and counted before the close
        (:mod:`daskmicro.graph.incremental_fixed`).
    seed : int, optional
        Seed of the row shuffle of the release (drawn and recorded when None).
    client : distributed.Client, optional
        Cluster to run on; default the current client, else a LocalCluster for the run.
    reference : bool, default False
        After the release, also run one-pass microaggregation of all the records, to report
        its time t_ref, the relative times τ₀, τ₊, τ₋, Δτ and the distortion loss δ (§III-B.4).
    timeout : float, optional
        Seconds (from the call) to wait for the base fraction and for the close.  When passed,
        the stages are cancelled and :class:`~daskmicro.io.survey.SurveyTimeoutError` is raised;
        nothing is released.
    progress : callable, optional
        Called as ``progress(event, seconds since the call)`` at each step.
    time_column : column label, optional
        DataFrame source: the arrival-time column (read to schedule the stages, never published).
    time_model : schedule.TimeModel or (a, beta), optional
        Running time ``t(n) = a·nᵝ`` seconds of the base method, for ν* when neither ``nu``
        nor ``zeta`` is given, and as the predicted t_ref of the report.
    expected_rows : int, optional
        Lake without a simulator manifest: the total number of records of the survey.
    base_options : dict, optional
        ``base_method="partitioned"`` only: options of the pipeline (K, partition_size, task_rows,
        nu — the distal fraction of the macrocells, not the data ratio —, energy_loss, n_components).
        Without ``nu`` (data ratio) its time model is calibrated by timing the pipeline itself.
    memory_limit, spill_directory : optional
        The workers of the LocalCluster the run starts: memory limit (bytes or a size such as
        ``"4GiB"``) and where they spill, as for :func:`daskmicro.anonymize`; refused with a
        ``client`` (its workers keep their own).

    Returns
    -------
    release : pandas.DataFrame
        All records, shuffled, QI values replaced by their cell's centroid (original units).
    report : Report
        ``report.incremental`` holds ν, ζ, the measured times (POSIX seconds: base submitted,
        started, ended, close, increment ended, release) and, relative to t_ref, τ₀, τ₊, τ₋, Δτ,
        and δ when ``reference`` is set.

    Raises
    ------
    SurveyTimeoutError
        The base fraction or the close was not reached within ``timeout`` (no release).
    InputError, ParameterError, VerificationError
        Bad source or parameters; a failed release check.
    """
    t_call = time.time()
    deadline = None if timeout is None else t_call + positive_seconds(timeout, "timeout")

    def step(event: str) -> None:
        if progress is not None:
            progress(event, time.time() - t_call)

    if is_dask_frame(source):
        raise InputError("source must be a Parquet lake directory or a pandas DataFrame, not a Dask DataFrame")
    src = open_survey(source, time_column=time_column, close_at=close_at, expected_rows=expected_rows)
    qi = check_qi_names(qi, src.columns())
    k = check_k(k, src.total_rows)
    if nu is not None:
        nu = check_ratio(nu, "nu")
        if nu >= 1.0:
            raise ParameterError("nu must be < 1: the base stage needs some records")
    if zeta is not None:
        zeta = check_zeta(zeta)
    kernel, base_name = check_base_method(base_method)
    options = check_base_options(base_options, base_name)
    if increment not in INCREMENT_METHODS + FIXED_INCREMENTS:
        raise ParameterError(f"increment must be one of {', '.join(INCREMENT_METHODS + FIXED_INCREMENTS)}; got {increment!r}")
    if increment in FIXED_INCREMENTS and options is None:
        raise ParameterError(f"increment={increment!r} needs base_method='partitioned' (its release is made before the close)")
    seed = check_seed(seed)
    model = check_time_model(time_model)
    if not isinstance(reference, (bool, np.bool_)):
        raise ParameterError(f"reference must be True or False, got {reference!r}")

    if src.total_rows is None:
        raise ParameterError(f"the lake {source} has no _arrivals.json manifest: give expected_rows (total records of the survey)")
    if nu is None and zeta is None and src.survey_seconds() is None:
        raise ParameterError("give nu or zeta: the survey's duration is unknown for a lake without a simulator manifest")
    base = (kernel, base_name, options, increment, len(qi), k)
    needs_cluster = nu is None and model is None and (zeta is None or options is not None)
    sched = None if needs_cluster else _choose_nu(nu, zeta, model, src, None, base)
    if sched is not None:
        check_increment_size(sched["nu"], src.total_rows, k, increment)

    own_cluster = client is None and _default_client() is None
    workers = worker_settings(memory_limit, spill_directory, own_cluster)
    if workers.get("spill_directory") is not None:
        from .io.paths import check_spill

        check_spill(workers["spill_directory"], [src.path])
    with cluster_client(client or _default_client(), **workers) as c:
        warm_up(c, "nn" if increment in FIXED_INCREMENTS else increment, kernel or default_kernel)
        step("workers ready")
        if sched is None:  # calibrate the time model on the cluster
            sched = _choose_nu(nu, zeta, model, src, c, base)
            check_increment_size(sched["nu"], src.total_rows, k, increment)
        step("schedule")
        graph = (IncrementalGraph(c, qi, k, increment, kernel, seed) if options is None else
                 (FixedIncrementalGraph if increment in FIXED_INCREMENTS else PipelineIncrementalGraph)(
                     c, qi, k, increment, options, seed))
        release, outcome = _stages(src, graph, sched, increment, k, deadline, reference, step)
        if own_cluster and is_dask_frame(release):
            release = c.compute(release).result()  # the run's own cluster closes with it

    report = _report(src, graph, sched, outcome["results"], outcome["counts"], (base_name, increment, outcome["method"]),
                     outcome["ref"], model, qi, k, seed, outcome["checks"], outcome["t_release"])
    return release, report


def _stages(src, graph, sched, increment, k, deadline, reference, step):
    """Base stage at the base trigger, increment at the close, verified release (§III-B)."""
    try:
        if sched["nu"] is None:  # a fixed increment's late path, timed on the survey's first records
            sched.update(graph.plan_nu(src.wait_base(PROBE_FRACTION, deadline, on_new=graph.ingest), sched,
                                       src.total_rows))
        nu_used = sched["nu"]
        base_chunk = src.wait_base(1.0 - nu_used, deadline, on_new=graph.ingest)
        graph.submit_base(base_chunk)
        step("base stage submitted")
        inc_chunk = src.wait_close(base_chunk, deadline, on_new=graph.ingest, on_poll=graph.collect)
        n_base, n_inc = src.rows(base_chunk), src.rows(inc_chunk)
        method = increment
        if increment == "2mdav" and 0 < n_inc < k:
            method = "nn"  # too few late records for their own cells
        graph.submit_increment(inc_chunk, method)
        step("increment stage submitted")
        release, changes, k_check = graph.results()
        n = n_base + n_inc
        k_check.raise_if_failed()
        row_check = graph.check_rows(n, release).raise_if_failed()
        t_release = time.time()
        step("release verified")
        results = graph.stage_results()
        ref = graph.reference() if reference else None
        if ref is not None:
            step("reference done")
    except BaseException:
        graph.cancel()
        raise
    return release, {"results": results, "counts": (n_base, n_inc), "method": method, "ref": ref,
                     "checks": (changes, k_check, row_check), "t_release": t_release}


def _report(src, graph, sched, results, counts, methods, ref, model, qi, k, seed, checks, t_release) -> Report:
    """The incremental run's report: both stages' timings on the survey's clock (§III-B) and δ."""
    base_res, inc_res, metrics = results
    n_base, n_inc = counts
    base_name, increment, method = methods
    changes, k_check, row_check = checks
    n = n_base + n_inc
    closed = float(src.closed_at)
    timing = {
        "opened": src.opened_at(),
        "base_submitted": graph.base_submitted,
        "base_start": base_res.start,
        "base_end": base_res.end,
        "close": closed,
        "increment_submitted": graph.increment_submitted,
        "increment_start": inc_res.start,
        "increment_end": inc_res.end,
        "release": t_release,
    }
    inc = _incremental_dict(sched, timing, base_res.seconds, inc_res.seconds, n_base, n_inc, base_name, increment, method, ref,
                            metrics["information_loss"], model, n)
    inc.update(base_info=dict(base_res.info), increment_info=dict(inc_res.info))
    report = Report(
        n=n, m=len(qi), m_used=metrics["m_used"], k=k, method="incremental", qi=list(qi), cells=metrics["cells"],
        min_cell_size=metrics["min_cell_size"], max_cell_size=metrics["max_cell_size"],
        information_loss=metrics["information_loss"], seconds=base_res.seconds + inc_res.seconds, seed=seed,
        constant_columns=metrics["constant_columns"], dtype_changes=changes, k_anonymity=k_check, rows=row_check,
        cell_size_counts=metrics["cell_size_counts"], nu=None,
        reference_information_loss=None if ref is None else ref["information_loss"],
        timings={"base stage": base_res.seconds, "increment stage": inc_res.seconds,
                 "close to release": t_release - closed},
        incremental=inc,
    )
    if src.kind == "lake":
        report.paths = {"source": str(src.path)}
    return report


# --------------------------------------------------------------------------- scheduling


def _choose_nu(nu, zeta, model, src, client, base) -> dict:
    """ν given, or ν* from ζ, or ν* from a time model and the survey's duration (§IV-B).

    ``base`` is (kernel, name, pipeline options, increment, m, k).  The time model is the one
    given, else calibrated on the cluster on the base method actually used: the one-task kernel
    timed on a worker, or the partitioned pipeline timed as a run times its base stage (with the
    nearest-neighbour increment timed too, τ₊ = c·ν, since it is not the base's algorithm).
    """
    kernel, name, options, increment, m, k = base
    beta = 2.0 if model is None else model.beta
    out = {"nu_source": None, "zeta": zeta, "beta": beta, "nu_star": None, "nu_critical": None, "calibration": None,
           "nu_from": None}
    if nu is not None:
        out.update(nu=nu, nu_source="given", nu_from="given by the caller")
        if zeta is not None:
            out.update(_plan_fields(zeta, beta))
        return out
    tau_inc, source = ("fixed" if increment in FIXED_INCREMENTS else None), "given"
    if model is None and client is not None:
        model, tau_inc, out["calibration"] = _calibrate(client, kernel, name, options, increment, m, k, src.total_rows)
        out["beta"] = beta = model.beta
        source = "calibrated"
    if zeta is None:
        t_ref = model(src.total_rows)
        zeta = src.survey_seconds() / t_ref
        out.update(zeta=zeta, t_ref_predicted=t_ref, nu_source="time model")
        out["nu_from"] = (f"ν* (§IV-B) of the {source} time model t(n) = {model.a:.3g}·n^{model.beta:.3f} of the "
                          f"{name} base stage and the survey's duration (ζ = {zeta:.3g})")
    else:
        out["nu_source"] = "zeta"
        out["nu_from"] = f"ν* (§IV-B) of the given ζ = {zeta:g}" + (
            f" and the calibrated exponent β = {beta:.3f} of the {name} base stage" if model is not None else
            " for quadratic stages")
    if tau_inc == "fixed":  # ν once the late path is timed on the survey's first records (FixedIncrementalGraph.plan_nu)
        out.update(zeta=zeta, nu_star=None, nu=None, t_ref_predicted=model(src.total_rows))
        return out
    if tau_inc == "critical":  # τ₊ ≪ τ₀: Δτ grows up to ν₋ and is flat beyond, ν* = ν₋ (§IV-B)
        out["nu_star"] = out["nu_critical"] = critical_ratio_numeric(zeta, beta)
        out["zeta"], out["gain_star"] = zeta, 1.0
        out["nu_from"] += f"; τ₊ ≪ τ₀ for the {increment} increment, so ν* = ν₋, the base stage ending at the close"
    elif tau_inc is not None:
        out["nu_star"], out["gain_star"] = optimize_ratio(zeta, beta, tau_inc)
        out["nu_critical"] = critical_ratio_numeric(zeta, beta)
        out["zeta"] = zeta
    else:
        out.update(_plan_fields(zeta, beta))
    out["nu"] = out["nu_star"]
    return out


def _calibrate(client, kernel, name, options, increment, m, k, total):
    """(TimeModel, τ₊ model or None, calibration record) of the base method actually used.

    A one-task base is timed on a worker (its kernel); a partitioned base by running the pipeline
    itself (:func:`~daskmicro.graph.incremental_pipeline.calibrate_pipeline`).  The increment: 2MDAV
    runs the base's own algorithm (τ₊ = νᵝ); a nearest-neighbour increment adjoins records to
    cells that exist (τ₊ ≪ τ₀), so ν* is the critical ratio ν₋ where the base stage ends at the
    close (§IV-B), and τ₊ is taken as 0 in the optimum.
    """
    fixed = increment in FIXED_INCREMENTS
    if options is None:
        ns, secs = calibrate_on(client, m, k, kernel)
    else:  # a fixed increment's base stage also publishes and counts the base release: timed with it
        cal = (calibrate_fixed if fixed else calibrate_pipeline)(client, m, k, options, total)
        ns, secs = cal["n"], cal["seconds"]
    model = calibrate_near_linear(ns, secs) if fixed else calibrate(ns, secs)
    record = {"method": name, "n": ns, "seconds": secs, "a": model.a, "beta": model.beta}
    if fixed:
        return model, "fixed", record
    if increment == "2mdav" or options is None:
        return model, None, record
    return model, "critical", record


def _plan_fields(zeta: float, beta: float) -> dict:
    p = schedule_plan(zeta, beta=beta)
    return {"zeta": p.zeta, "nu_star": p.nu_star, "nu_critical": p.nu_critical, "gain_star": p.gain_star}


def _incremental_dict(sched, t, base_s, inc_s, n_base, n_inc, base_name, increment, method, ref, il, model, n) -> dict:
    """Report entries: schedule, measured times, and relative times τ when a t_ref is known (§III-B)."""
    out = {
        "nu": sched["nu"], "nu_source": sched["nu_source"], "nu_actual": n_inc / (n_base + n_inc),
        "zeta": sched["zeta"], "beta": sched["beta"], "nu_star": sched["nu_star"], "nu_critical": sched["nu_critical"],
        "n_base": n_base, "n_increment": n_inc, "base_method": base_name, "increment": increment,
        "increment_used": method,
        "times": {key: value for key, value in t.items() if value is not None},
        "base_seconds": base_s, "increment_seconds": inc_s,
        "head_start_seconds": t["close"] - t["base_start"],
        "close_to_release_seconds": t["release"] - t["close"],
        "base_started_before_close": t["base_start"] < t["close"],
    }
    if sched.get("calibration"):
        out["calibration"] = sched["calibration"]
    out["nu_from"] = sched.get("nu_from")
    t_ref, source = None, None
    if ref is not None:
        t_ref, source = ref["seconds"], "measured"
        if ref.get("run_seconds") is not None:  # the one-pass run with its release verified
            out["reference_run_seconds"] = ref["run_seconds"]
            out["close_to_release_share_of_run"] = out["close_to_release_seconds"] / ref["run_seconds"]
        out["delta"] = il / ref["information_loss"] - 1.0 if ref["information_loss"] > 0 else None
        out["reference_information_loss"] = ref["information_loss"]
    elif sched.get("t_ref_predicted") is not None:
        t_ref, source = sched["t_ref_predicted"], "predicted"
    elif model is not None:
        t_ref, source = model(n), "predicted"
    out["t_ref"], out["t_ref_source"] = t_ref, source
    if t_ref:
        tau0, tau_plus, tau_minus = base_s / t_ref, inc_s / t_ref, out["head_start_seconds"] / t_ref
        out.update(
            tau_0=tau0, tau_plus=tau_plus, tau_minus=tau_minus,
            delta_tau=min(tau_minus + 1.0 - tau0, 1.0) - tau_plus,
            close_to_release_ratio=out["close_to_release_seconds"] / t_ref,
        )
    return out


def _default_client():
    try:
        from distributed import default_client

        return default_client()
    except ValueError:
        return None
