"""Scheduling formulas of the incremental paper (§III-B, §IV-B, §IV-C, §VI-B) and the general optimiser."""

import math

import numpy as np
import pytest

from daskmicro.errors import ParameterError
from daskmicro.schedule import (
    ZETA_CRITICAL,
    TimeModel,
    calibrate,
    critical_ratio,
    critical_ratio_numeric,
    deadline_min,
    deadline_ratio,
    deadline_ratio_numeric,
    optimal_gain,
    optimal_ratio,
    optimize_ratio,
    plan,
    time_gain,
)

TWO_HOURS = 7200.0


def test_worked_example_zeta_5():
    # §VI-B: 10-hour survey, 2-hour one-pass MDAV → ζ = 5, ν* ≈ 14.6 %, release 2 min 33 s after close.
    nu = optimal_ratio(5)
    assert nu == pytest.approx(0.146, abs=5e-4)
    assert nu == pytest.approx((7 - math.sqrt(45)) / 2, rel=1e-12)
    assert nu == critical_ratio(5)  # slow arrivals: ν* = ν₋
    finish = (1 - optimal_gain(5)) * TWO_HOURS
    assert finish == pytest.approx(153, abs=1.0)  # 2 min 33 s
    # The base stage uses exactly its head start (1 h 27 min) and ends when the survey closes.
    p = plan(5, t_ref=TWO_HOURS)
    assert p.tau_base == pytest.approx(p.tau_head)
    assert p.tau_head * TWO_HOURS / 60 == pytest.approx(87.5, abs=0.1)
    events = dict(p.timeline)
    assert events["base stage ends"] == pytest.approx(events["survey closes"])
    assert events["release ready"] - events["survey closes"] == pytest.approx(finish)
    assert p.finish_after_close == pytest.approx(finish)


def test_worked_example_one_hour_deadline():
    # §VI-B, Fig. 25: a 1-hour deadline (τ_end = 1/2) at ζ = 5 gives ν_end ≈ 7.2 %.
    # The formula gives 0.07295; the paper prints 7.2 % (truncated), hence the 1e-3 tolerance.
    nu_end = deadline_ratio(5, 0.5)
    assert nu_end == pytest.approx(0.072, abs=1e-3)
    assert nu_end == pytest.approx((7 - math.sqrt(45)) / 4, rel=1e-12)
    # It meets the deadline exactly: (1 − ν)² + ν² = τ_end + ζν.
    assert (1 - nu_end) ** 2 + nu_end**2 == pytest.approx(0.5 + 5 * nu_end)
    p = plan(5, t_ref=TWO_HOURS, deadline=3600)
    assert p.nu == pytest.approx(nu_end) and p.nu_end == pytest.approx(nu_end)
    assert p.finish_after_close == pytest.approx(3600)
    assert nu_end < p.nu_star


def test_critical_zeta():
    assert ZETA_CRITICAL == pytest.approx(2 * (2 / math.sqrt(3) - 1))
    assert ZETA_CRITICAL == pytest.approx(0.309, abs=5e-4)
    assert optimal_ratio(ZETA_CRITICAL) == pytest.approx(1 / math.sqrt(3))
    assert critical_ratio(ZETA_CRITICAL) == pytest.approx(1 / math.sqrt(3))
    assert optimal_gain(ZETA_CRITICAL) == pytest.approx(2 / 3)
    # The two branches of ν* and Δτ* meet continuously there.
    eps = 1e-9
    assert optimal_ratio(ZETA_CRITICAL - eps) == pytest.approx(optimal_ratio(ZETA_CRITICAL + eps), abs=1e-6)
    assert optimal_gain(ZETA_CRITICAL - eps) == pytest.approx(optimal_gain(ZETA_CRITICAL + eps), abs=1e-6)


def test_fast_arrivals_limit():
    assert optimal_ratio(0) == 0.5
    assert optimal_gain(0) == 0.5
    assert critical_ratio(0) == 1.0
    assert optimal_ratio(1e-9) == pytest.approx(0.5)
    assert optimal_gain(1e-9) == pytest.approx(0.5)
    # Fast arrivals: ν* = (2 + ζ)/4 < ν₋ and Δτ* = (2 + ζ)²/8.
    assert optimal_ratio(0.2) == pytest.approx(0.55) and optimal_ratio(0.2) < critical_ratio(0.2)
    assert optimal_gain(0.2) == pytest.approx(2.2**2 / 8)


def test_slow_arrivals_limits_and_monotonicity():
    zetas = np.linspace(0, 200, 401)
    gains = [optimal_gain(z) for z in zetas]
    assert np.all(np.diff(gains) >= -1e-12) and min(gains) >= 0.5
    assert optimal_gain(1e4) == pytest.approx(1, abs=1e-3)
    # Strong approximation ν₋ ≈ 1/(2 + ζ) for slow arrivals.
    assert critical_ratio(100) == pytest.approx(1 / 102, rel=1e-3)
    assert deadline_ratio(100, 0.5) == pytest.approx(0.5 / 102, rel=1e-2)


@pytest.mark.parametrize("zeta", [0.0, 0.1, ZETA_CRITICAL, 0.5, 1.0, 5.0, 20.0])
def test_optimum_is_the_argmax_of_the_gain(zeta):
    grid = np.linspace(0, 1, 20001)
    gains = np.array([time_gain(v, zeta) for v in grid])
    # No grid point beats the closed form; the grid comes within its resolution of it (a kink at ν₋).
    assert gains.max() <= optimal_gain(zeta) + 1e-12
    assert optimal_gain(zeta) == pytest.approx(gains.max(), abs=1e-4)
    assert optimal_ratio(zeta) == pytest.approx(grid[gains.argmax()], abs=2e-4)
    assert time_gain(optimal_ratio(zeta), zeta) == pytest.approx(optimal_gain(zeta))
    assert deadline_min(zeta) == pytest.approx(1 - optimal_gain(zeta))


@pytest.mark.parametrize("zeta", [0.0, 0.2, ZETA_CRITICAL, 1.0, 5.0])
def test_general_optimiser_agrees_with_closed_form_at_beta_2(zeta):
    nu, gain = optimize_ratio(zeta, beta=2.0)
    assert nu == pytest.approx(optimal_ratio(zeta), abs=1e-6)
    assert gain == pytest.approx(optimal_gain(zeta), abs=1e-9)
    assert critical_ratio_numeric(zeta, 2.0) == pytest.approx(critical_ratio(zeta), abs=1e-10)
    for tau_end in (deadline_min(zeta) + 0.01, 0.5, 0.9):
        if tau_end >= deadline_min(zeta):
            assert deadline_ratio_numeric(zeta, tau_end, 2.0) == pytest.approx(deadline_ratio(zeta, tau_end), abs=1e-9)


def test_general_optimiser_linear_model():
    # β = 1: no superadditivity, the gain is the head start alone, maximal at ν₋ = 1/(1 + ζ).
    nu, gain = optimize_ratio(5, beta=1.0)
    assert nu == pytest.approx(1 / 6, abs=1e-6)
    assert gain == pytest.approx(5 / 6, abs=1e-6)
    # β between 1 and 2: the optimum lies between the linear and quadratic ones.
    nu_b, _ = optimize_ratio(5, beta=1.5)
    assert optimal_ratio(5) < nu_b < 1 / 6


def test_general_optimiser_custom_increment_model():
    # A cheap increment stage (τ₊ = 0.1·ν, nearest-neighbour-like) makes a larger ν worthwhile.
    nu, gain = optimize_ratio(0.1, beta=2.0, tau_inc=lambda v: 0.1 * v)
    assert nu > optimal_ratio(0.1)
    grid = np.linspace(0, critical_ratio(0.1), 5001)
    best = max(1 - (1 - v) ** 2 + 0.1 * v - 0.1 * v for v in grid)
    assert gain == pytest.approx(best, abs=1e-6)


def test_calibration_recovers_a_and_beta():
    rng = np.random.default_rng(0)
    n = np.array([2_000, 5_000, 10_000, 20_000, 50_000])
    exact = TimeModel(a=3e-9, beta=1.85)
    seconds = np.array([exact(x) for x in n]) * np.exp(rng.normal(scale=0.01, size=n.size))
    fit = calibrate(n, seconds)
    assert fit.beta == pytest.approx(1.85, abs=0.02)
    assert fit.a == pytest.approx(3e-9, rel=0.25)
    noiseless = calibrate(n, [exact(x) for x in n])
    assert noiseless.beta == pytest.approx(1.85, rel=1e-9) and noiseless.a == pytest.approx(3e-9, rel=1e-6)
    assert noiseless(1e5) == pytest.approx(exact(1e5), rel=1e-6)


def test_plan_with_other_beta_uses_the_optimiser():
    p = plan(5, beta=1.2, t_ref=600)
    assert not p.closed_form
    nu, gain = optimize_ratio(5, 1.2)
    assert p.nu_star == pytest.approx(nu) and p.gain == pytest.approx(gain)
    assert p.finish_after_close == pytest.approx((1 - gain) * 600)
    d = p.to_dict()
    assert d["timeline"][0] == {"event": "survey opens", "time": 0.0}


def test_deadline_edge_cases():
    assert deadline_ratio(5, 1.0) == 0.0 and deadline_ratio(5, 3.0) == 0.0
    assert deadline_ratio(5, deadline_min(5)) == pytest.approx(optimal_ratio(5), abs=1e-6)
    assert deadline_ratio(0.1, deadline_min(0.1)) == pytest.approx(optimal_ratio(0.1), abs=1e-6)
    with pytest.raises(ParameterError, match="below the earliest possible finish"):
        deadline_ratio(5, 0.01)
    with pytest.raises(ParameterError, match="below the earliest possible finish"):
        deadline_ratio_numeric(5, 0.01, beta=1.5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: optimal_ratio(-1), "zeta .* must be ≥ 0"),
        (lambda: critical_ratio(float("nan")), "zeta must be finite"),
        (lambda: optimal_gain("fast"), "zeta must be a real number"),
        (lambda: time_gain(1.5, 5), r"nu must lie in \[0, 1\]"),
        (lambda: time_gain(-0.1, 5), r"nu must lie in \[0, 1\]"),
        (lambda: deadline_ratio(5, -0.5), "tau_end .* must be ≥ 0"),
        (lambda: optimize_ratio(5, beta=0), "beta .* must lie in \\[0.1, 10\\]"),
        (lambda: optimize_ratio(5, tau_inc=3), "tau_inc must be a callable"),
        (lambda: TimeModel(a=-1, beta=2), "a .* must be > 0"),
        (lambda: calibrate([1000], [1.0]), "two or more distinct n"),
        (lambda: calibrate([1000, 2000], [1.0]), "same length"),
        (lambda: calibrate([1000, 2000], [1.0, 0.0]), "must be > 0"),
        (lambda: calibrate([1000, 2000], [2.0, 1.0]), "do not grow with n"),
        (lambda: plan(5, deadline=3600), "needs t_ref"),
        (lambda: plan(5, t_ref=0), "t_ref must be > 0"),
        (lambda: plan(5, t_ref=10, deadline=5, tau_end=0.5), "not both"),
        (lambda: plan(5, t_ref=7200, deadline=60), "below the earliest possible finish"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ParameterError, match=match):
        call()
