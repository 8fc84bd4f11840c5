"""``daskmicro plan``: schedule an incremental run (ν*, ν₋, Δτ*, ν_end and the timeline).

Implements the command-line face of :mod:`daskmicro.schedule` (the scheduling analysis of
*Incremental k-Anonymous Microaggregation … With Optimized Scheduling*, §III-B, §IV-B, §IV-C and the worked example of §VI-B).
Registered in :mod:`daskmicro.cli` through :func:`add_parser`; :func:`run` is the handler.
"""

from __future__ import annotations

import argparse
import json
import math

from ..errors import ParameterError
from ..workflow.durations import DURATION_RANGE, format_duration, parse_duration
from ..schedule import BETA_RANGE

__all__ = ["add_parser", "run", "parse_duration", "format_duration"]

_DESCRIPTION = """\
Plan an incremental anonymization: the base stage runs on the first 1−ν of the records while the
survey is still open, the increment stage on the last ν once it closes.  Prints the critical
ratio ν₋ (the base stage just uses up its head start), the optimal ratio ν* and time gain Δτ*
(earliest release), and with --deadline the smallest ratio ν_end that still meets the deadline
(less distortion), with the timeline of the run.

Arrivals are taken as uniform over the survey.  ζ is the survey's duration relative to the
one-pass running time t_ref (a 10-hour survey and a 2-hour one-pass run: ζ = 5).  With the
default quadratic running time (MDAV) the paper's closed forms are used; --beta or --calibrate
switch to a numerical optimum for a running time a·n^β.
"""

_EPILOG = """\
examples:
  daskmicro plan --zeta 5                              # relative figures only
  daskmicro plan --zeta 5 --t-ref 2h --deadline 1h     # the paper's example: ν* 14.6 %, ν_end 7.3 %
  daskmicro plan --survey 10h --t-ref 2h
  daskmicro plan --survey 8h --n 1000000 --calibrate 20000:0.4,50000:2.1,100000:8.0
  daskmicro plan --zeta 5 --beta 1.1 --t-ref 20m --json

Durations: a number of seconds, or numbers with units d, h, m (or min), s, e.g. 90, 1h30m, 2.5h.
"""

#: Durations accepted (seconds): from a millisecond to about 31,700 years.
#: Arrivals coefficients accepted by --zeta (the ratio of two durations in DURATION_RANGE at most).
ZETA_MAX = 1e15
#: Largest number of records accepted by --n.
N_MAX = 10**15

def _duration_arg(text: str) -> float:
    try:
        value = parse_duration(text)
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    lo, hi = DURATION_RANGE
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"expected a duration between {lo:g}s and {hi:.0f}s, got {_short(text)}")
    return value


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def _number_in(lo: float, hi: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {_short(text)}") from None
        if not lo <= value <= hi:  # NaN fails too
            raise argparse.ArgumentTypeError(f"expected a number in [{lo:g}, {hi:g}], got {_short(text)}")
        return value

    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {_short(text)}") from None
    if not 1 <= value <= N_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, {N_MAX:.0e}], got {_short(text)}")
    return value


def _measurements(text: str) -> list[tuple[float, float]]:
    pairs = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        n, sep, sec = item.partition(":")
        try:
            if not sep:
                raise ValueError
            pairs.append((float(n), parse_duration(sec)))
        except (ValueError, ParameterError):
            raise argparse.ArgumentTypeError(f"expected N:SECONDS pairs separated by commas, got {_short(item)}") from None
    if len(pairs) < 2:
        raise argparse.ArgumentTypeError("give at least two N:SECONDS measurements")
    return pairs


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``plan`` sub-command to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "plan",
        help="schedule an incremental run: ν*, ν₋, Δτ*, ν_end and the timeline",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arrivals = p.add_mutually_exclusive_group(required=True)
    arrivals.add_argument("--zeta", type=_number_in(0.0, ZETA_MAX), metavar="Z", help=f"arrivals coefficient ζ = survey duration / one-pass running time, in [0, {ZETA_MAX:g}]")
    arrivals.add_argument("--survey", type=_duration_arg, metavar="DURATION", help="survey duration (needs the one-pass time: --t-ref, or --n with a time model)")
    p.add_argument("--t-ref", type=_duration_arg, metavar="DURATION", help="one-pass running time on all the data, e.g. 2h")
    p.add_argument("--deadline", type=_duration_arg, metavar="DURATION", help="time allowed from the survey's close to the release; prints ν_end")
    p.add_argument("--beta", type=_number_in(*BETA_RANGE), metavar="B", help=f"running-time exponent, t ∝ n^B, in [{BETA_RANGE[0]:g}, {BETA_RANGE[1]:g}] (default 2: MDAV, closed forms)")
    p.add_argument("--calibrate", type=_measurements, metavar="N:SEC,...", help="measured one-pass runs (records:duration pairs) to fit t = a·n^β; sets β")
    p.add_argument("--n", type=_positive_int, metavar="N", help="number of records of the survey; with --calibrate gives t_ref = a·N^β")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(handler=run)
    return p


def run(args) -> int:
    """Handler of ``daskmicro plan``: compute the schedule and print it; returns 0."""
    from ..schedule import calibrate, plan

    model = None
    beta = args.beta
    t_ref = args.t_ref
    if args.calibrate is not None:
        if beta is not None:
            raise ParameterError("give either --beta or --calibrate, not both")
        n_runs, seconds = zip(*args.calibrate)
        try:
            model = calibrate(n_runs, seconds)
        except ParameterError as exc:
            raise ParameterError(f"--calibrate: {exc}") from None
        beta = model.beta
        if args.n is not None:
            if t_ref is not None:
                raise ParameterError("give either --t-ref or --n with --calibrate, not both")
            t_ref = _predicted(model, args.n)
    elif args.n is not None:
        raise ParameterError("--n needs --calibrate (a measured time model) to predict the one-pass time")
    beta = 2.0 if beta is None else beta
    if args.survey is not None:
        if t_ref is None:
            raise ParameterError("--survey needs the one-pass running time: --t-ref, or --n with --calibrate")
        zeta = args.survey / t_ref
    else:
        zeta = args.zeta
    if args.deadline is not None and t_ref is None:
        raise ParameterError("--deadline needs the one-pass running time: --t-ref, or --n with --calibrate")
    if args.deadline is not None:
        earliest = plan(zeta, beta=beta, t_ref=t_ref).finish_after_close
        if args.deadline < earliest * (1 - 1e-9):
            raise ParameterError(
                f"--deadline {format_duration(args.deadline)} cannot be met: the earliest release is "
                f"{format_duration(earliest)} after the close (ν* = {_fixed(plan(zeta, beta=beta).nu_star)})"
            )
    result = plan(zeta, beta=beta, t_ref=t_ref, deadline=args.deadline)
    if args.json:
        out = result.to_dict()
        if model is not None:
            out["time_model"] = {"a": model.a, "beta": model.beta, "n": args.n}
        print(json.dumps(out, indent=2))
        return 0
    print(_render(result, model, args.n))
    return 0


def _predicted(model, n: int) -> float:
    """One-pass seconds the calibrated model predicts for ``n`` records, within DURATION_RANGE."""
    lo, hi = DURATION_RANGE
    try:
        t = model(n)
    except ParameterError:
        t = math.inf
    if not lo <= t <= hi:
        raise ParameterError(f"--n: the calibrated model predicts a one-pass time outside {lo:g}s … {hi:.0f}s "
                             f"for {n:,} records: give --n within the model's range")
    return t


def _fixed(v: float) -> str:
    """A ratio or relative time: 4 decimals, or 4 significant digits where those would show 0 or too many."""
    return f"{v:.4f}" if v == 0 or 1e-3 <= abs(v) < 1e6 else f"{v:.4g}"


def _render(p, model, n) -> str:
    absolute = p.t_ref is not None
    when = format_duration if absolute else (lambda t: f"{_fixed(t)} t_ref")
    lines = []
    survey = f" (survey {format_duration(p.zeta * p.t_ref)}, one-pass run {format_duration(p.t_ref)})" if absolute else ""
    lines.append(f"arrivals coefficient  ζ     = {p.zeta:.4g}{survey}")
    if model is not None:
        extra = f"; {n:,} records → t_ref = {format_duration(p.t_ref)}" if n is not None else ""
        lines.append(f"time model            t(n)  = {model.a:.3g}·n^{model.beta:.3f} s (calibrated{extra})")
    how = "closed forms of §IV-B/§IV-C" if p.closed_form else "numerical optimum"
    lines.append(f"running time          t ∝ n^{p.beta:.3g} ({how})")
    lines.append(f"critical data ratio   ν₋    = {_fixed(p.nu_critical)}")
    lines.append(f"optimal data ratio    ν*    = {_fixed(p.nu_star)}  ({100 * p.nu_star:.1f} % of the records in the increment stage)")
    fastest = f" → release {format_duration(p.tau_end_min * p.t_ref)} after the close" if absolute else ""
    lines.append(f"optimal time gain     Δτ*   = {_fixed(p.gain_star)}{fastest}")
    lines.append(f"earliest deadline     τ_end,min = {_fixed(p.tau_end_min)}")
    if p.nu_end is not None:
        note = "" if p.nu_end > 0 else "  (one pass meets the deadline)"
        lines.append(f"deadline data ratio   ν_end = {_fixed(p.nu_end)}  for τ_end = {p.tau_end:.4g}{note}")
    label = "ν_end (deadline)" if p.nu_end is not None else "ν* (fastest)"
    lines.append("")
    lines.append(f"timeline with {label} = {_fixed(p.nu)}, uniform arrivals:")
    for name, t in p.timeline:
        lines.append(f"  {when(t) if t > 0 or not absolute else '0 s':>18}  {name}")
    after = p.finish_after_close
    lines.append(f"release {when(after)} after the close, vs {when(p.t_ref) if absolute else '1 t_ref'} for one pass (Δτ = {_fixed(p.gain)})")
    return "\n".join(lines)
