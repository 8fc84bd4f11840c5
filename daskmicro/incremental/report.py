"""The ``incremental`` section of a survey run's report: the schedule (ν, ζ, β, ν*, ν₋), the
measured times on the survey's clock and, relative to the one-pass time t_ref, τ₀, τ₊, τ₋, Δτ and
the distortion loss δ (§III-B.4 of *Incremental k-Anonymous Microaggregation in Large-Scale
Electronic Surveys With Optimized Scheduling*).  Figures and times only, never a data value."""

from __future__ import annotations

__all__ = ["incremental_section"]


def incremental_section(done, options, information_loss) -> dict:
    """The report section of a finished incremental run (``done``: what its stages came to,
    :class:`daskmicro.graph.incremental_run.StagesDone`)."""
    src, graph, sched = done.src, done.graph, done.sched
    base_res, inc_res, _ = done.results
    n_base, n_inc = done.counts
    timing = {
        "opened": src.opened_at(),
        "base_submitted": graph.base_submitted,
        "base_start": base_res.start,
        "base_end": base_res.end,
        "close": float(src.closed_at),
        "increment_submitted": graph.increment_submitted,
        "increment_start": inc_res.start,
        "increment_end": inc_res.end,
        "release": done.t_release,
    }
    out = _schedule_and_times(sched, timing, (base_res.seconds, inc_res.seconds), (n_base, n_inc))
    out.update(base_method=options.base_name, increment=options.increment, increment_used=done.method)
    times = getattr(src, "times", None)   # a DataFrame survey's arrival times
    out["close_on_arrival"] = bool(times is not None and len(times) and float(src.closed_at) == float(times[-1]))
    if sched.get("calibration"):
        out["calibration"] = sched["calibration"]
    out["nu_from"] = sched.get("nu_from")
    _relative_times(out, sched, done.ref, information_loss, options.time_model, n_base + n_inc)
    out.update(base_info=dict(base_res.info), increment_info=dict(inc_res.info))
    return out


def _schedule_and_times(sched, t, seconds, counts) -> dict:
    """The schedule and the measured times of the stages (§III-B)."""
    (base_s, inc_s), (n_base, n_inc) = seconds, counts
    out = {
        "nu": sched["nu"], "nu_source": sched["nu_source"], "nu_actual": n_inc / (n_base + n_inc),
        "zeta": sched["zeta"], "beta": sched["beta"], "nu_star": sched["nu_star"], "nu_critical": sched["nu_critical"],
        "n_base": n_base, "n_increment": n_inc,
        "times": {key: value for key, value in t.items() if value is not None},
        "base_seconds": base_s, "increment_seconds": inc_s,
        "head_start_seconds": t["close"] - t["base_start"],
        "close_to_release_seconds": t["release"] - t["close"],
        "base_started_before_close": t["base_start"] < t["close"],
    }
    return out


def _relative_times(out, sched, ref, il, model, n) -> None:
    """τ₀, τ₊, τ₋, Δτ relative to t_ref (measured by the one-pass reference, else predicted) and δ."""
    base_s, inc_s = out["base_seconds"], out["increment_seconds"]
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
