"""``daskmicro plan``: schedule an incremental run (ν*, ν₋, Δτ*, ν_end and the timeline).

Implements the command-line face of :mod:`daskmicro.schedule` (the scheduling analysis of
``000_614e2e2317b23170.txt`` §III-B, §IV-B, §IV-C and the worked example of §VI-B).
Registered in :mod:`daskmicro.cli` through :func:`add_parser`; :func:`run` is the handler.
"""

from __future__ import annotations

import argparse
import json
import math
import re

from .errors import ParameterError

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

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_LONE = re.compile(rf"\s*({_NUMBER})\s*")
_PARTS = re.compile(rf"(?:\s*{_NUMBER}\s*(?:min|d|h|m|s))+\s*")
_PART = re.compile(rf"({_NUMBER})\s*(min|d|h|m|s)")


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90``, ``45s``, ``2h``, ``1h30m``, ``2.5h`` or ``1d 2h``."""
    s = str(text).lower()
    lone = _LONE.fullmatch(s)
    if lone:
        return float(lone.group(1))
    if not _PARTS.fullmatch(s):
        raise ParameterError(f"cannot read duration {text!r}: use e.g. 90, 45s, 2h, 1h30m")
    return sum(float(num) * _UNITS[unit] for num, unit in _PART.findall(s))


def format_duration(seconds: float) -> str:
    """``seconds`` as ``2 h 27 min 30 s`` / ``2 min 33 s`` / ``4.2 s``."""
    if seconds < 60:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    total = int(round(seconds))
    d, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    mnt, sec = divmod(rest, 60)
    parts = [f"{d} d" if d else "", f"{h} h" if h else "", f"{mnt} min" if mnt else "", f"{sec} s" if sec else ""]
    return " ".join(p for p in parts if p)


def _duration_arg(text: str) -> float:
    try:
        value = parse_duration(text)
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {value}")
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
            raise argparse.ArgumentTypeError(f"expected N:SECONDS pairs separated by commas, got {item!r}") from None
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
    arrivals.add_argument("--zeta", type=_non_negative_float, metavar="Z", help="arrivals coefficient ζ = survey duration / one-pass running time (≥ 0)")
    arrivals.add_argument("--survey", type=_duration_arg, metavar="DURATION", help="survey duration (needs the one-pass time: --t-ref, or --n with a time model)")
    p.add_argument("--t-ref", type=_duration_arg, metavar="DURATION", help="one-pass running time on all the data, e.g. 2h")
    p.add_argument("--deadline", type=_duration_arg, metavar="DURATION", help="time allowed from the survey's close to the release; prints ν_end")
    p.add_argument("--beta", type=_positive_float, metavar="B", help="running-time exponent, t ∝ n^B (default 2: MDAV, closed forms)")
    p.add_argument("--calibrate", type=_measurements, metavar="N:SEC,...", help="measured one-pass runs (records:duration pairs) to fit t = a·n^β; sets β")
    p.add_argument("--n", type=_positive_int, metavar="N", help="number of records of the survey; with --calibrate gives t_ref = a·N^β")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(handler=run)
    return p


def run(args) -> int:
    """Handler of ``daskmicro plan``: compute the schedule and print it; returns 0."""
    from .schedule import calibrate, plan

    model = None
    beta = args.beta
    t_ref = args.t_ref
    if args.calibrate is not None:
        if beta is not None:
            raise ParameterError("give either --beta or --calibrate, not both")
        n_runs, seconds = zip(*args.calibrate)
        model = calibrate(n_runs, seconds)
        beta = model.beta
        if args.n is not None:
            if t_ref is not None:
                raise ParameterError("give either --t-ref or --n with --calibrate, not both")
            t_ref = model(args.n)
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
                f"{format_duration(earliest)} after the close (ν* = {plan(zeta, beta=beta).nu_star:.4f})"
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


def _render(p, model, n) -> str:
    absolute = p.t_ref is not None
    when = format_duration if absolute else (lambda t: f"{t:.4f} t_ref")
    lines = []
    survey = f" (survey {format_duration(p.zeta * p.t_ref)}, one-pass run {format_duration(p.t_ref)})" if absolute else ""
    lines.append(f"arrivals coefficient  ζ     = {p.zeta:.4g}{survey}")
    if model is not None:
        extra = f"; {n:,} records → t_ref = {format_duration(p.t_ref)}" if n is not None else ""
        lines.append(f"time model            t(n)  = {model.a:.3g}·n^{model.beta:.3f} s (calibrated{extra})")
    how = "closed forms of §IV-B/§IV-C" if p.closed_form else "numerical optimum"
    lines.append(f"running time          t ∝ n^{p.beta:.3g} ({how})")
    lines.append(f"critical data ratio   ν₋    = {p.nu_critical:.4f}")
    lines.append(f"optimal data ratio    ν*    = {p.nu_star:.4f}  ({100 * p.nu_star:.1f} % of the records in the increment stage)")
    fastest = f" → release {format_duration(p.tau_end_min * p.t_ref)} after the close" if absolute else ""
    lines.append(f"optimal time gain     Δτ*   = {p.gain_star:.4f}{fastest}")
    lines.append(f"earliest deadline     τ_end,min = {p.tau_end_min:.4f}")
    if p.nu_end is not None:
        note = "" if p.nu_end > 0 else "  (one pass meets the deadline)"
        lines.append(f"deadline data ratio   ν_end = {p.nu_end:.4f}  for τ_end = {p.tau_end:.4g}{note}")
    label = "ν_end (deadline)" if p.nu_end is not None else "ν* (fastest)"
    lines.append("")
    lines.append(f"timeline with {label} = {p.nu:.4f}, uniform arrivals:")
    for name, t in p.timeline:
        lines.append(f"  {when(t) if t > 0 or not absolute else '0 s':>18}  {name}")
    after = p.finish_after_close
    lines.append(f"release {when(after)} after the close, vs {when(p.t_ref) if absolute else '1 t_ref'} for one pass (Δτ = {p.gain:.4f})")
    return "\n".join(lines)
