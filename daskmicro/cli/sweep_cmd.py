"""``daskmicro sweep``: relative time vs distortion increment of Algorithm C settings, on a sample.

The command-line face of :func:`daskmicro.tuning.tradeoff.sweep` (*Efficient k-Anonymous Microaggregation … via PCA*, §V,
Figs. 11–12, 14 and 21).  Registered in :mod:`daskmicro.cli` through :func:`add_parser`;
:func:`run` is the handler.
"""

from __future__ import annotations

import argparse
import math
import sys

from ..errors import ParameterError
from ..io.paths import Output, check_against_inputs
from ..io.qi import column_list
from ..report.coarse import IL_UNIT

__all__ = ["add_parser", "run", "parse_list"]

_DESCRIPTION = """\
Try settings of the proximal/distal method (Algorithm C) on a seeded sample of INPUT and show
what each one costs: its running time relative to exact MDAV on the same sample (τ) and its
distortion increment over exact MDAV (δ = (D′ − D)/D; the absolute ΔD = D′ − D is in the CSV).

The settings are every combination of --nu (fraction of distal macrocells), --K (macrocell
size) and --n-components or --energy-loss (principal components kept for the proximal records).
ν = 1 is exact MDAV (the reference, δ = 0); ν = 0 is MDAV with PCA on every record.  With
--budget the fastest setting whose δ stays within the budget is recommended.

Writes DIR/sweep.json, DIR/sweep.csv, DIR/sweep.png (the τ-vs-δ plot) and DIR/sweep.html (plot,
recommendation and table, one self-contained page).  All four appear, or none.
"""

_EPILOG = """\
examples:
  daskmicro sweep census_like.parquet --qi AGI,FEDTAX,FICA --k 10 --budget 1 --out sweep-out
  daskmicro sweep lake/ --qi x01,x02,x03 --k 10 --nu 0,0.2,0.4,0.6,0.8,1 --K 500,1000 --out s
  daskmicro sweep data.csv --qi x1,x2,x3,x4 --k 5 --nu 0 --n-components 1,2,3,4 --out m-scan

Timings run in this process on one thread, each setting after the other; --repeat takes the
best of several runs for steadier figures on small samples.
"""


def parse_list(text: str, name: str, kind=float) -> list:
    """A comma-separated list of numbers; empty or unreadable lists are refused."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise ParameterError(f"{name} is empty: give comma-separated values, e.g. {name} 0,0.5,1")
    out = []
    for t in items:
        if not t:
            raise ParameterError(f"{name} has an empty entry: {text!r}")
        try:
            value = kind(t)
        except ValueError:
            what = "integers" if kind is int else "numbers"
            raise ParameterError(f"{name} must hold {what}, got {t!r}") from None
        if kind is float and not math.isfinite(value):
            raise ParameterError(f"{name} must hold finite numbers, got {t!r}")
        out.append(value)
    return out


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``sweep`` sub-command on ``subparsers`` (of :func:`daskmicro.cli.build_parser`)."""
    from .common import non_negative_int as _non_negative_int, positive_int as _positive_int

    p = subparsers.add_parser(
        "sweep",
        help="relative time vs distortion increment of ν, K and m̃ settings, on a sample",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", metavar="INPUT", help="input table: .csv, .parquet, or a directory of Parquet files")
    p.add_argument("--qi", required=True, metavar="COLS", help="comma-separated quasi-identifier columns (numeric)")
    p.add_argument("--k", required=True, type=int, metavar="K", help="anonymity parameter (2 ≤ k ≤ sample size)")
    p.add_argument("--nu", metavar="LIST", help="fractions of distal macrocells in [0, 1] (default 0,0.1,…,1)")
    p.add_argument("--K", dest="K", metavar="LIST", help="macrocell sizes, each > k (default 1000, or sample/10 below 10,000 records)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--n-components", metavar="LIST", help="numbers m̃ of principal components for the proximal records")
    g.add_argument("--energy-loss", metavar="LIST", help="energy-loss bounds ε² in [0, 1) choosing m̃ (default 0.1)")
    p.add_argument("--sample", type=_positive_int, default=20_000, metavar="N", help="rows of the seeded sample (default: %(default)s; the whole table if smaller)")
    p.add_argument("--seed", type=_non_negative_int, default=0, metavar="S", help="seed of the sample (default: %(default)s)")
    p.add_argument("--budget", type=float, metavar="PCT", help="distortion budget: largest acceptable δ in percent (e.g. 1 for 1 %%)")
    p.add_argument("--increment", choices=["relative", "absolute"], default="relative", help="what --budget bounds and the plot shows: relative δ = (D′ − D)/D, or absolute ΔD = D′ − D (the paper's axis) (default: %(default)s)")
    p.add_argument("--repeat", type=_positive_int, default=1, metavar="R", help="time each setting R times and keep the best (default: %(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for sweep.json, sweep.csv, sweep.png and sweep.html")
    p.add_argument("--overwrite", action="store_true", help="replace sweep files already in DIR")
    p.set_defaults(handler=run)
    return p


def run(args) -> int:
    """Run the sweep and write its files; errors propagate for the CLI to print (exit 2)."""
    from pathlib import Path

    from ..io import lake
    from ..io.tables import read_table
    from ..report.sweep_page import check_sweep_target, write_sweep
    from ..tuning.tradeoff import sweep

    nu = parse_list(args.nu, "--nu") if args.nu is not None else None
    K = parse_list(args.K, "--K", int) if args.K is not None else None
    n_components = parse_list(args.n_components, "--n-components", int) if args.n_components is not None else None
    energy_loss = parse_list(args.energy_loss, "--energy-loss") if args.energy_loss is not None else None
    if nu is not None and any(not 0.0 <= v <= 1.0 for v in nu):
        raise ParameterError(f"--nu values must lie in [0, 1], got {args.nu}")
    if K is not None and any(v <= args.k for v in K):
        raise ParameterError(f"--K values must be larger than k = {args.k}, got {args.K}")
    if args.k < 2:
        raise ParameterError(f"--k must be an integer ≥ 2, got {args.k}")
    if args.sample < args.k:
        raise ParameterError(f"--sample {args.sample} is smaller than k = {args.k}")
    budget = None
    if args.budget is not None:
        if not math.isfinite(args.budget) or args.budget < 0:
            raise ParameterError(f"--budget must be a percentage ≥ 0, got {args.budget}")
        budget = args.budget / 100.0
    paths = check_sweep_target(Path(args.out), args.overwrite)
    check_against_inputs([args.input], [Output(p, f"sweep file {p.name}") for p in paths.values()])
    qi = column_list(args.qi, "--qi")  # names exactly as written, the rule of every command
    data = lake.read_lake(args.input) if Path(args.input).is_dir() else read_table(args.input)

    def show(row):
        print(f"  {row['setting']:<24} τ = {100 * row['relative_time']:6.1f} %   "
              f"δ = {100 * row['relative_distortion']:+7.2f} %   ΔD = {100 * row['delta_D']:+6.3f} %",
              file=sys.stderr, flush=True)

    result = sweep(data, qi, args.k, nu=nu, K=K, n_components=n_components, energy_loss=energy_loss,
                   sample=args.sample, seed=args.seed, budget=budget, repeat=args.repeat,
                   increment=args.increment, progress=show)
    paths = write_sweep(result, args.out, input_path=args.input, overwrite=args.overwrite)
    ref = result.attrs["reference"]
    print(f"sweep of {len(result)} settings on {result.attrs['sample_size']:,} sampled records "
          f"(of {result.attrs['n_input']:,}); exact MDAV: information loss {ref['information_loss']:.3g} {IL_UNIT} "
          f"on the sample, in {ref['seconds']:.2f} s")
    if budget is not None:
        best = result.attrs["recommended"]
        sym = "ΔD" if args.increment == "absolute" else "δ"
        print(f"recommended for {sym} ≤ {args.budget:g} %: {best}" if best else
              f"no setting keeps {sym} ≤ {args.budget:g} %: use exact MDAV")
        if best:
            opts = result.attrs["recommended_options"]
            flags = " ".join(f"--{key.replace('_', '-') if key != 'K' else 'K'} {value}" for key, value in opts.items())
            print(f"run it on all the records: daskmicro anonymize INPUT OUTPUT --qi {args.qi} --k {args.k} {flags}")
    for kind, path in paths.items():
        print(f"{kind + ':':<6}{path}")
    return 0
