"""Scheduling of two-stage (base + increment) microaggregation while the data arrive.

Implements the timing analysis of Rebollo-Monedero et al., *Incremental k-Anonymous
Microaggregation in Large-Scale Electronic Surveys With Optimized Scheduling* (IEEE Access 2018):
§III-B (formulation), §IV-A (2MDAV running times), §IV-B (optimal
data ratio), §IV-C (data ratio for a deadline) and the worked example of §VI-B.

Notation (all times relative to the one-pass running time ``t_ref`` on all the data):

* ν — incremental data ratio, the fraction of records left to the increment stage; ν̄ = 1 − ν;
* ζ — arrivals coefficient: duration of the whole survey relative to ``t_ref``;
  with uniform arrivals the head start of the base stage is τ₋ = ζ·ν;
* τ₀, τ₊ — relative running times of the base and increment stages;
* Δτ = min(τ̄₀ + τ₋, 1) − τ₊ — relative time gain; the release comes ``(1 − Δτ)·t_ref`` after
  the survey closes.

For quadratic stages (MDAV: τ₀ = ν̄², τ₊ = ν²) the paper derives closed forms, implemented here
exactly (:func:`critical_ratio`, :func:`optimal_ratio`, :func:`optimal_gain`,
:func:`deadline_ratio`, :func:`deadline_min`, :data:`ZETA_CRITICAL`).  For a general running
time ``t(n) = a·nᵝ`` — the partitioned pipeline is close to linear, where the optimum differs —
:func:`optimize_ratio` and :func:`deadline_ratio_numeric` solve the same problems numerically, and
:func:`calibrate` fits ``a`` and ``β`` to measured ``(n, seconds)`` pairs.  :func:`plan` bundles
everything with absolute times and the timeline of a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import ParameterError
from .schedule_model import (BETA_RANGE, TimeModel, calibrate, check_beta, check_ratio, check_real,  # noqa: F401
                             check_tau_end, check_zeta, critical_ratio_numeric, deadline_ratio_numeric,
                             optimize_ratio)

__all__ = [  # the model side lives in daskmicro.schedule_model and is re-exported here
    "ZETA_CRITICAL",
    "BETA_RANGE",
    "TimeModel",
    "Plan",
    "critical_ratio",
    "optimal_ratio",
    "optimal_gain",
    "time_gain",
    "deadline_min",
    "deadline_ratio",
    "critical_ratio_numeric",
    "optimize_ratio",
    "deadline_ratio_numeric",
    "calibrate",
    "plan",
]

#: Critical arrivals coefficient ζ₋ = 2(2/√3 − 1) ≈ 0.309 (§IV-B): below it the optimal ratio is
#: (2 + ζ)/4 and the base stage overruns its head start; above it ν* = ν₋.
ZETA_CRITICAL = 2.0 * (2.0 / math.sqrt(3.0) - 1.0)

# --------------------------------------------------------------------------- closed forms (quadratic)


def critical_ratio(zeta) -> float:
    """Critical data ratio ν₋, where the base stage just uses up its head start (τ₀ = τ₋).

    Quadratic base stage and uniform arrivals (§IV-B): solving (1 − ν)² = ζν gives
    ``ν₋ = (2 + ζ − √(ζ(4 + ζ)))/2``; ν₋ = 1 at ζ = 0 and ν₋ ≈ 1/(2 + ζ) for slow arrivals.

    Parameters
    ----------
    zeta : float
        Arrivals coefficient ζ ≥ 0 (survey duration relative to the one-pass running time).
    """
    z = check_zeta(zeta)
    # The smaller root of ν² − (2 + ζ)ν + 1 = 0 is the reciprocal of the larger one: no
    # cancellation for large ζ (the difference form loses every digit from ζ ≈ 1e8 on) and, with
    # √ζ·√(4 + ζ) halved, no overflow up to the largest float.
    return 1.0 / (1.0 + 0.5 * z + 0.5 * math.sqrt(z) * math.sqrt(4.0 + z))


def optimal_ratio(zeta) -> float:
    """Optimal data ratio ν* = argmax Δτ for quadratic stages and uniform arrivals (§IV-B).

    ``ν* = (2 + ζ)/4`` for ζ ≤ ζ₋ (fast arrivals; the base stage overruns its head start) and
    ``ν* = ν₋`` for ζ ≥ ζ₋.  ν* = 1/2 at ζ = 0, 1/√3 at ζ = ζ₋, ≈ 0.146 at ζ = 5 (§VI-B).
    """
    z = check_zeta(zeta)
    if z <= ZETA_CRITICAL:
        return (2.0 + z) / 4.0
    return critical_ratio(z)


def time_gain(nu, zeta) -> float:
    """Relative time gain Δτ(ν) = min(τ̄₀ + τ₋, 1) − τ₊ for quadratic stages (§III-B.1, §IV-B).

    With τ₀ = (1 − ν)², τ₊ = ν², τ₋ = ζν.  The release comes ``(1 − Δτ)·t_ref`` after the close.
    """
    v = check_ratio(nu)
    z = check_zeta(zeta)
    return min(1.0 - (1.0 - v) ** 2 + z * v, 1.0) - v * v


def optimal_gain(zeta) -> float:
    """Optimal relative time gain Δτ* = (2 + ζ − 2ν*)·ν* (§IV-B).

    Equals ``(2 + ζ)²/8`` for ζ ≤ ζ₋ (1/2 at ζ = 0, 2/3 at ζ₋) and ``1 − ν₋²`` beyond, tending to
    1 for slow arrivals.  The release comes ``(1 − Δτ*)·t_ref`` after the survey closes.
    """
    z = check_zeta(zeta)
    if z <= ZETA_CRITICAL:
        return (2.0 + z) ** 2 / 8.0
    v = critical_ratio(z)
    return 1.0 - v * v


def deadline_min(zeta) -> float:
    """Tightest feasible relative deadline τ_end,min = 1 − Δτ* (§IV-C).

    ``1 − (2 + ζ)²/8`` for ζ ≤ ζ₋, ``ν₋²`` (the increment stage alone) beyond.
    """
    z = check_zeta(zeta)
    if z <= ZETA_CRITICAL:
        return 1.0 - (2.0 + z) ** 2 / 8.0
    v = critical_ratio(z)
    return v * v  # not 1 − (1 − ν₋²), which rounds to 0 for slow arrivals


def deadline_ratio(zeta, tau_end) -> float:
    """Smallest data ratio ν_end that finishes exactly at a relative deadline τ_end (§IV-C).

    Solves ``(1 − ν)² + ν² = τ_end + ζν`` (the stages fill the head start plus the time allowed
    after the close) on the branch with the smaller root::

        ν_end = (2 + ζ − √((2 + ζ)² − 8(1 − τ_end))) / 4

    Parameters
    ----------
    zeta : float
        Arrivals coefficient ζ ≥ 0.
    tau_end : float
        Time allowed after the survey closes, relative to the one-pass running time
        (``deadline / t_ref``).  From τ_end ≥ 1 on, one pass meets the deadline and 0 is returned.

    Raises
    ------
    ParameterError
        If τ_end is below :func:`deadline_min` (no data ratio can meet it).
    """
    z = check_zeta(zeta)
    t = check_tau_end(tau_end)
    if t >= 1.0:
        return 0.0
    t_min = deadline_min(z)
    if t < t_min - 1e-12:
        raise ParameterError(f"tau_end = {t:.6g} is below the earliest possible finish tau_end,min = {t_min:.6g} for zeta = {z:g}")
    # Smaller root of 2ν² − (2 + ζ)ν + (1 − τ_end) = 0 as (product of the roots) / (larger root):
    # ν_end = 2(1 − τ_end) / (w(1 + r)), w = 2 + ζ, r = √(1 − 8(1 − τ_end)/w²); no cancellation, no w².
    w = 2.0 + z
    r = math.sqrt(max(1.0 - 8.0 * (1.0 - t) / w / w, 0.0))
    return 2.0 * (1.0 - t) / w / (1.0 + r)


# --------------------------------------------------------------------------- a complete plan


@dataclass
class Plan:
    """A schedule for one incremental run: data ratios, relative times and (if ``t_ref`` is known) seconds.

    Times of the ``timeline`` are seconds (or units of ``t_ref`` when it is unknown) from the
    survey opening, with uniform arrivals over ``[0, survey]``.
    """

    zeta: float
    beta: float
    nu: float
    nu_star: float
    nu_critical: float
    gain_star: float
    tau_end_min: float
    nu_end: float | None
    tau_end: float | None
    t_ref: float | None
    closed_form: bool
    tau_base: float = field(init=False)
    tau_inc: float = field(init=False)
    tau_head: float = field(init=False)
    gain: float = field(init=False)
    timeline: list[tuple[str, float]] = field(init=False)
    _after: float = field(init=False, repr=False)

    def __post_init__(self):
        v, b, z = self.nu, self.beta, self.zeta
        self.tau_base = (1.0 - v) ** b
        self.tau_inc = v**b
        self.tau_head = z * v
        # How far the base stage runs past the close (relative).  At ν₋ it is 0 in exact arithmetic;
        # differences within rounding are taken as 0, so that for slow arrivals the time from the
        # close to the release, ν₋²·t_ref, is not drowned by the rounding of two numbers near 1.
        over = self.tau_base - self.tau_head
        if abs(over) <= 4 * np.finfo(np.float64).eps * max(self.tau_base, self.tau_head):
            over = 0.0
        self._after = max(over, 0.0) + self.tau_inc  # close → release, relative: 1 − Δτ
        self.gain = 1.0 - self._after  # = min(τ̄₀ + τ₋, 1) − τ₊
        unit = 1.0 if self.t_ref is None else self.t_ref
        survey = z * unit
        base_start = (1.0 - v) * survey
        base_end = base_start + self.tau_base * unit
        inc_start = survey + max(over, 0.0) * unit
        release = inc_start + self.tau_inc * unit
        self.timeline = [
            ("survey opens", 0.0),
            (f"base stage starts ({100 * (1 - v):.1f} % of the data in)", base_start),
            ("base stage ends", base_end),
            ("survey closes", survey),
            (f"increment stage starts ({100 * v:.1f} % of the data)", inc_start),
            ("release ready", release),
        ]
        self.timeline.sort(key=lambda e: e[1])

    @property
    def finish_after_close(self) -> float:
        """Time from the close to the release: ``(1 − Δτ)·t_ref`` (in units of t_ref if unknown)."""
        return self._after * (1.0 if self.t_ref is None else self.t_ref)

    def to_dict(self) -> dict:
        keys = ("zeta", "beta", "nu", "nu_star", "nu_critical", "gain_star", "tau_end_min", "nu_end", "tau_end", "t_ref", "closed_form", "tau_base", "tau_inc", "tau_head", "gain")
        out = {key: getattr(self, key) for key in keys}
        out["finish_after_close"] = self.finish_after_close
        out["timeline"] = [{"event": name, "time": t} for name, t in self.timeline]
        return out


def plan(zeta, *, beta=2.0, t_ref=None, deadline=None, tau_end=None) -> Plan:
    """Schedule an incremental run: ν*, ν₋, Δτ*, and ν_end when a deadline is given (§IV-B, §IV-C).

    Parameters
    ----------
    zeta : float
        Arrivals coefficient ζ ≥ 0 (survey duration / one-pass running time).
    beta : float, default 2
        Running-time exponent of the stages; 2 (MDAV) uses the paper's closed forms, any other
        value the numerical optimiser.
    t_ref : float, optional
        One-pass running time in seconds; makes the timeline absolute.
    deadline : float, optional
        Seconds allowed after the survey closes (needs ``t_ref``); sets τ_end = deadline / t_ref.
    tau_end : float, optional
        Relative deadline, instead of ``deadline``.

    Returns
    -------
    Plan
        With ``nu`` = ν_end when a deadline is given, ν* otherwise.
    """
    z = check_zeta(zeta)
    b = check_beta(beta)
    if t_ref is not None:
        t_ref = check_real(t_ref, "t_ref")
        if t_ref <= 0:
            raise ParameterError(f"t_ref must be > 0 seconds, got {t_ref}")
    if deadline is not None and tau_end is not None:
        raise ParameterError("give either deadline (seconds) or tau_end (relative), not both")
    if deadline is not None:
        if t_ref is None:
            raise ParameterError("a deadline in seconds needs t_ref (the one-pass running time)")
        d = check_real(deadline, "deadline")
        if d < 0:
            raise ParameterError(f"deadline must be ≥ 0 seconds, got {d}")
        tau_end = d / t_ref
    if not math.isfinite((z + 2.0) * (1.0 if t_ref is None else t_ref)):
        raise ParameterError("zeta × t_ref (the survey's duration in seconds) is beyond the float range: "
                             "give a smaller zeta or t_ref")
    if tau_end is not None and not math.isfinite(tau_end):
        raise ParameterError("deadline / t_ref (the relative deadline) is beyond the float range")
    closed = b == 2.0
    if closed:
        v_star, g_star, v_crit = optimal_ratio(z), optimal_gain(z), critical_ratio(z)
    else:
        v_star, g_star = optimize_ratio(z, b)
        v_crit = critical_ratio_numeric(z, b)
    nu_end = None
    if tau_end is not None:
        tau_end = check_tau_end(tau_end)
        nu_end = deadline_ratio(z, tau_end) if closed else deadline_ratio_numeric(z, tau_end, b)
    return Plan(
        zeta=z, beta=b, nu=v_star if nu_end is None else nu_end, nu_star=v_star, nu_critical=v_crit,
        gain_star=g_star, tau_end_min=deadline_min(z) if closed else 1.0 - g_star, nu_end=nu_end,
        tau_end=tau_end, t_ref=t_ref,
        closed_form=closed,
    )
