"""The data ratio ν of an incremental run: given, or ν* of §IV-B of *Incremental k-Anonymous
Microaggregation in Large-Scale Electronic Surveys With Optimized Scheduling* from the arrivals
coefficient ζ, a time model and the survey's duration; the time model given or calibrated on the
cluster on the base method actually used."""

from __future__ import annotations

from ..incremental.options import FIXED_INCREMENTS
from ..schedule import calibrate, critical_ratio_numeric, optimize_ratio, plan as schedule_plan
from ..schedule_model import calibrate_near_linear
from .incremental import calibrate_on
from .incremental_fixed import calibrate_fixed
from .incremental_pipeline import calibrate_pipeline

__all__ = ["choose_nu", "calibrate_base", "plan_fields"]


def choose_nu(nu, zeta, model, src, client, base) -> dict:
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
            out.update(plan_fields(zeta, beta))
        return out
    tau_inc, source = ("fixed" if increment in FIXED_INCREMENTS else None), "given"
    if model is None and client is not None:
        model, tau_inc, out["calibration"] = calibrate_base(client, kernel, name, options, increment, m, k, src.total_rows)
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
        out.update(plan_fields(zeta, beta))
    out["nu"] = out["nu_star"]
    return out


def calibrate_base(client, kernel, name, options, increment, m, k, total):
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


def plan_fields(zeta: float, beta: float) -> dict:
    p = schedule_plan(zeta, beta=beta)
    return {"zeta": p.zeta, "nu_star": p.nu_star, "nu_critical": p.nu_critical, "gain_star": p.gain_star}
