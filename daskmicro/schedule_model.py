"""The running-time side of incremental scheduling: argument checks, the general model
t(n) = a·nᵝ and the numerical optima of Rebollo-Monedero et al., *Incremental k-Anonymous
Microaggregation in Large-Scale Electronic Surveys With Optimized Scheduling*
(IEEE Access 2018), §IV-B/§IV-C for a running time that is not quadratic (the
partitioned pipeline is close to linear).  The paper's closed forms for quadratic stages and the
complete plan are in :mod:`daskmicro.schedule`, which re-exports everything here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import optimize

from .errors import ParameterError

__all__ = ["BETA_RANGE", "TimeModel", "calibrate", "calibrate_near_linear", "critical_ratio_numeric",
           "optimize_ratio", "deadline_ratio_numeric", "check_real", "check_zeta", "check_ratio", "check_beta",
           "check_tau_end"]

#: Running-time exponents β accepted (t ∝ nᵝ): sub-linear to far beyond quadratic; outside it the
#: optimum sits on a flat plateau of Δτ and the root finders lose their meaning.
BETA_RANGE = (0.1, 10.0)


# --------------------------------------------------------------------------- validation


_FLOAT_MAX = float(np.finfo(np.float64).max)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_real(value, name: str) -> float:
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be a real number, got {value!r}")
    try:
        x = float(value)
    except OverflowError:  # an int beyond the float range
        raise ParameterError(f"{name} must be finite (at most {_FLOAT_MAX:.3g}), got an integer of {len(str(value))} digits") from None
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a real number, got {_short(value)}") from None
    if not math.isfinite(x):
        raise ParameterError(f"{name} must be finite, got {_short(value)}")
    return x


def check_zeta(zeta) -> float:
    z = check_real(zeta, "zeta")
    if z < 0:
        raise ParameterError(f"zeta (arrivals coefficient) must be ≥ 0, got {z}")
    return z


def check_ratio(nu, name: str = "nu") -> float:
    x = check_real(nu, name)
    if not 0.0 <= x <= 1.0:
        raise ParameterError(f"{name} must lie in [0, 1], got {x}")
    return x


def check_beta(beta) -> float:
    b = check_real(beta, "beta")
    lo, hi = BETA_RANGE
    if not lo <= b <= hi:
        raise ParameterError(f"beta (running-time exponent) must lie in [{lo:g}, {hi:g}], got {b:.6g}")
    return b


def check_tau_end(tau_end) -> float:
    t = check_real(tau_end, "tau_end")
    if t < 0:
        raise ParameterError(f"tau_end (relative deadline) must be ≥ 0, got {t}")
    return t


# --------------------------------------------------------------------------- general running-time model


@dataclass(frozen=True)
class TimeModel:
    """Running-time model ``t(n) = a·nᵝ`` seconds for n records.

    MDAV is close to β = 2 (§IV-A: ≈ n²/k); partitioned methods are close to β = 1.  Relative
    times (τ₀ = ν̄ᵝ, τ₊ = νᵝ) depend on β only; ``a`` converts them to seconds.
    """

    a: float
    beta: float

    def __post_init__(self):
        if not (check_real(self.a, "a") > 0):
            raise ParameterError(f"a (running-time scale) must be > 0, got {self.a}")
        check_beta(self.beta)

    def __call__(self, n) -> float:
        """Predicted seconds for ``n`` records."""
        n = check_real(n, "n")
        if n < 0:
            raise ParameterError(f"n must be ≥ 0, got {n}")
        try:
            t = self.a * n**self.beta
        except OverflowError:
            t = math.inf
        if not math.isfinite(t):
            raise ParameterError(f"n = {n:.3g} records: the predicted running time a·n^beta overflows")
        return t


def calibrate(n, seconds) -> TimeModel:
    """Fit ``t(n) = a·nᵝ`` to measured running times by least squares in log–log scale.

    Parameters
    ----------
    n : array_like
        Numbers of records of the measured runs (> 0; at least two distinct values).
    seconds : array_like
        Measured running times in seconds (> 0), one per entry of ``n``.

    Returns
    -------
    TimeModel
        ``log t = log a + β·log n`` fitted by ordinary least squares.
    """
    try:
        x = np.asarray(n, dtype=np.float64).ravel()
        y = np.asarray(seconds, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise ParameterError("n and seconds must be sequences of numbers") from None
    if x.shape != y.shape:
        raise ParameterError(f"n and seconds must have the same length, got {x.size} and {y.size}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ParameterError("n and seconds must be finite")
    if (x <= 0).any():
        raise ParameterError("every n must be > 0")
    if (y <= 0).any():
        raise ParameterError("every measured time (seconds) must be > 0")
    if np.unique(x).size < 2:
        raise ParameterError("calibration needs runs at two or more distinct n")
    beta, log_a = np.polyfit(np.log(x), np.log(y), 1)
    if not beta > 0:
        raise ParameterError(f"measured times do not grow with n (fitted beta = {beta:.3g}); time larger runs")
    lo, hi = BETA_RANGE
    if not lo <= beta <= hi:
        raise ParameterError(f"the measured times give beta = {beta:.3g}, outside [{lo:g}, {hi:g}]: check the runs")
    a = float(np.exp(log_a))
    if not 0 < a < math.inf:
        raise ParameterError("the measured times give a running-time scale a beyond the float range: check the runs")
    return TimeModel(a=a, beta=float(beta))


def calibrate_near_linear(n, seconds, beta_max: float = 1.2) -> TimeModel:
    """A time model for a method close to linear in n (the partitioned pipeline: O(n log n) at most).

    The exponent fitted by :func:`calibrate` is kept within [1, ``beta_max``] (the overheads of small
    timed runs flatten the curve below 1; a busy machine's noise can steepen it far above what the
    method does, and a steep exponent extrapolated to many more records predicts several times too
    much), and ``a`` is set through the largest run, the one least weighed down by overheads.
    """
    try:
        beta = calibrate(n, seconds).beta
    except ParameterError:
        beta = 1.0
    beta = min(max(beta, 1.0), float(beta_max))
    x, y = np.asarray(n, dtype=np.float64).ravel(), np.asarray(seconds, dtype=np.float64).ravel()
    return TimeModel(a=float(y[-1] / x[-1] ** beta), beta=beta)


def _power(beta: float) -> Callable[[float], float]:
    return lambda v: v**beta


def critical_ratio_numeric(zeta, beta=2.0) -> float:
    """ν₋ for a base stage with τ₀ = (1 − ν)ᵝ: the root of (1 − ν)ᵝ = ζν (1 when ζ = 0)."""
    z = check_zeta(zeta)
    b = check_beta(beta)
    if z == 0.0:
        return 1.0
    # relative tolerance only: for slow arrivals the root is ≈ 1/ζ, far below an absolute 1e-14
    return float(optimize.brentq(lambda v: (1.0 - v) ** b - z * v, 0.0, 1.0, xtol=5e-324, rtol=1e-14))


def _gain_fn(z: float, b: float, tau_inc: Callable[[float], float]):
    return lambda v: min(1.0 - (1.0 - v) ** b + z * v, 1.0) - tau_inc(v)


def optimize_ratio(zeta, beta=2.0, tau_inc: Callable[[float], float] | None = None) -> tuple[float, float]:
    """Numerical optimal data ratio for a base stage with τ₀ = (1 − ν)ᵝ (§III-B.2 generalized).

    Maximizes ``Δτ(ν) = min(1 − τ₀ + ζν, 1) − τ₊(ν)`` over ν ∈ [0, ν₋] (Δτ cannot grow past ν₋,
    where the head start is no longer used up), with a bounded scalar search started from the
    best point of a fine grid, so non-concave τ₊ models are handled too.

    Parameters
    ----------
    zeta : float
        Arrivals coefficient ζ ≥ 0.
    beta : float
        Exponent of the running-time model of the base stage (and of the one-pass reference).
    tau_inc : callable, optional
        Relative running time of the increment stage as a function of ν; default ``νᵝ`` (the
        increment stage runs the same algorithm, as in 2MDAV).

    Returns
    -------
    (nu_star, gain) : tuple of float
        ν* and Δτ* = Δτ(ν*).  At β = 2 these agree with :func:`optimal_ratio` and
        :func:`optimal_gain`.
    """
    z = check_zeta(zeta)
    b = check_beta(beta)
    tau_inc = _power(b) if tau_inc is None else tau_inc
    if not callable(tau_inc):
        raise ParameterError("tau_inc must be a callable ν → relative increment time")
    hi = critical_ratio_numeric(z, b)
    gain = _gain_fn(z, b, tau_inc)
    grid = np.linspace(0.0, hi, 2001)
    values = np.array([gain(v) for v in grid])
    j = int(np.argmax(values))
    lo_b, hi_b = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    best_v, best_g = float(grid[j]), float(values[j])
    if hi_b > lo_b:
        res = optimize.minimize_scalar(lambda v: -gain(v), bounds=(lo_b, hi_b), method="bounded", options={"xatol": 1e-12})
        if res.success and -res.fun >= best_g:
            best_v, best_g = float(res.x), float(-res.fun)
    return best_v, best_g


def deadline_ratio_numeric(zeta, tau_end, beta=2.0, tau_inc: Callable[[float], float] | None = None) -> float:
    """Smallest ν meeting a relative deadline, for τ₀ = (1 − ν)ᵝ and a given τ₊ (§III-B.3 generalized).

    Finds the first root in [0, ν*] of ``τ₀(ν) + τ₊(ν) − ζν = τ_end``.  Returns 0 when τ_end ≥ 1;
    raises :class:`~daskmicro.errors.ParameterError` when τ_end < 1 − Δτ*.
    """
    z = check_zeta(zeta)
    t = check_tau_end(tau_end)
    b = check_beta(beta)
    tau_inc = _power(b) if tau_inc is None else tau_inc
    if t >= 1.0:
        return 0.0
    v_star, g_star = optimize_ratio(z, b, tau_inc)
    if t < 1.0 - g_star - 1e-9:
        raise ParameterError(f"tau_end = {t:.6g} is below the earliest possible finish tau_end,min = {1.0 - g_star:.6g} for zeta = {z:g}, beta = {b:g}")
    f = lambda v: (1.0 - v) ** b + tau_inc(v) - z * v - t  # noqa: E731
    if f(v_star) >= 0.0:
        return v_star
    # The excess time f is positive at ν = 0 (τ_end < 1); take the first sign change on a grid.
    grid = np.linspace(0.0, v_star, 1001)
    values = np.array([f(v) for v in grid])
    j = int(np.argmax(values <= 0.0))
    return float(optimize.brentq(f, grid[j - 1], grid[j], xtol=1e-14, rtol=1e-14))
