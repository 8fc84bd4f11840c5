"""Command-line interface: ``daskmicro anonymize | demo | demo-data``.

Every sub-command either succeeds completely or writes nothing: outputs are staged in temporary
files and moved into place only after the release has passed its checks.  Bad input ends the
command with one line ``daskmicro: error: <message>`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from .errors import InputError, ParameterError, VerificationError

__all__ = ["main", "build_parser"]

PROG = "daskmicro"
EXIT_USAGE = 2

_MAIN_EPILOG = """\
examples:
  daskmicro demo                                   # census-like demo into ./demo-output
  daskmicro anonymize survey.csv release.parquet --qi age,income,savings --k 5
  daskmicro demo-data big.parquet --n 150000 --kind gaussian

Run 'daskmicro COMMAND --help' for the options of a command.
"""

_ANONYMIZE_DESCRIPTION = """\
Publish a k-anonymous release of a CSV or Parquet table.

The quasi-identifier (QI) columns named by --qi are z-scored, grouped into cells of at least k
similar records (between k and 2k-1 with MDAV), and each record's QI values are replaced by its
cell's centroid in the original units.  Every other column passes through unchanged; the rows
are shuffled with a recorded seed.  Before anything is written the release is verified (every
published QI tuple occurs at least k times, rows in = rows out).  The release is written as
Parquet and a JSON report (parameters, cell sizes, information loss, timing, seed, checks)
beside it; both appear atomically, or nothing is written at all.
"""

_ANONYMIZE_EPILOG = """\
examples:
  daskmicro anonymize census.csv release.parquet --qi AGI,FEDTAX,FICA --k 5
  daskmicro anonymize data.parquet out.parquet --qi x1,x2,x3 --k 10 --method pca-mdav --energy-loss 0.1
  daskmicro anonymize data.parquet out.parquet --qi x1,x2 --k 3 --seed 42 --report run.json --overwrite

Information loss is 100*SSE/SST on the z-scored QI columns.  Integer QI columns become float64
(centroids are not integers in general).  The report holds the shuffle seed, which undoes the
shuffle: keep it private if the input row order means something.
"""

_DEMO_DESCRIPTION = """\
Generate a census-like data set (resampled and jittered rows of the CASC Census reference data,
plus pass-through columns record_id and region), anonymize its 13 numerical columns, and write
DIR/input.parquet, DIR/release.parquet and DIR/report.json.  Files from an earlier demo in DIR
are replaced.
"""

_DEMO_DATA_DESCRIPTION = """\
Write a generated data set to OUTPUT (.parquet or .csv, by extension).
census-like: the 13 Census columns (resampled and jittered Census rows; skew, outliers and
correlations kept) plus record_id and region.  gaussian: correlated normal columns x01, x02, ...
"""

_DEMO_DATA_EPILOG = """\
examples:
  daskmicro demo-data census_like.parquet --n 75000 --seed 1
  daskmicro demo-data gaussian.csv --n 50000 --kind gaussian --m 13
"""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line, like every other error of the CLI."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


def _int_at_least(minimum: int):
    """argparse type: an integer ≥ ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer ≥ {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``daskmicro`` command."""
    from . import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog=PROG,
        description="k-anonymous microaggregation (MDAV, PCA-MDAV) of numerical microdata.",
        epilog=_MAIN_EPILOG,
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "anonymize",
        help="publish a k-anonymous release of a CSV or Parquet table",
        description=_ANONYMIZE_DESCRIPTION,
        epilog=_ANONYMIZE_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("input", metavar="INPUT", help="input table: .csv, .parquet, or a directory of Parquet files")
    p.add_argument("output", metavar="OUTPUT", help="release to write (.parquet)")
    p.add_argument("--qi", required=True, metavar="COLS", help="comma-separated quasi-identifier columns (numeric)")
    p.add_argument("--k", required=True, type=int, metavar="K", help="anonymity parameter: each published QI tuple is shared by ≥ K records (2 ≤ K ≤ rows)")
    p.add_argument("--method", default="mdav", choices=["mdav", "pca-mdav"], help="microaggregation method (default: %(default)s)")
    p.add_argument("--energy-loss", type=float, metavar="EPS2", help="pca-mdav: largest fraction of eigenvalue energy the discarded components may hold, in [0, 1)")
    p.add_argument("--n-components", type=_positive_int, metavar="M", help="pca-mdav: number of principal components to keep (instead of --energy-loss)")
    p.add_argument("--seed", type=_non_negative_int, metavar="S", help="seed of the row shuffle (default: drawn at random and recorded in the report)")
    p.add_argument("--report", metavar="PATH", help="JSON report to write (default: OUTPUT with suffix .report.json)")
    p.add_argument("--keep-row-id", action="store_true", help="add a row_id column with each record's position in the input")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT and the report if they exist")
    p.set_defaults(handler=_cmd_anonymize)

    p = sub.add_parser(
        "demo",
        help="generate census-like data and anonymize it",
        description=_DEMO_DESCRIPTION,
        epilog="example:\n  daskmicro demo --output /tmp/demo --n 50000 --k 10\n",
        formatter_class=fmt,
    )
    p.add_argument("--output", default="demo-output", metavar="DIR", help="directory to write to (default: %(default)s)")
    p.add_argument("--n", type=_positive_int, default=20000, help="number of records (default: %(default)s)")
    p.add_argument("--k", type=int, default=5, help="anonymity parameter (default: %(default)s)")
    p.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the data and of the shuffle (default: %(default)s)")
    p.set_defaults(handler=_cmd_demo)

    p = sub.add_parser(
        "demo-data",
        help="write a generated data set (census-like or correlated Gaussian)",
        description=_DEMO_DATA_DESCRIPTION,
        epilog=_DEMO_DATA_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("output", metavar="OUTPUT", help="file to write: .parquet or .csv")
    p.add_argument("--n", type=_positive_int, default=10000, help="number of records (default: %(default)s)")
    p.add_argument("--m", type=_positive_int, default=13, help="gaussian: number of columns (default: %(default)s)")
    p.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--kind", default="census-like", choices=["census-like", "gaussian"], help="generator (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.set_defaults(handler=_cmd_demo_data)

    from . import cli_plan

    cli_plan.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``daskmicro`` command line; returns the exit status (0 success, 2 bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.handler(args)
    except (InputError, ParameterError, VerificationError, ValueError, OSError) as exc:
        _error(exc)
        return EXIT_USAGE


def _error(exc: BaseException) -> None:
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"{PROG}: error: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- commands


def _check_target(path: Path, overwrite: bool, what: str) -> None:
    if path.exists() and not overwrite:
        raise ParameterError(f"{what} already exists: {path} (use --overwrite to replace it)")
    if path.is_dir():
        raise ParameterError(f"{what} is a directory: {path}")
    if not path.parent.is_dir():
        raise ParameterError(f"directory of the {what} does not exist: {path.parent}")


def _cmd_anonymize(args) -> int:
    from .anonymize import anonymize
    from .io.tables import AtomicBatch, read_table, table_format

    output = Path(args.output)
    report_path = Path(args.report) if args.report else output.with_suffix(".report.json")
    if table_format(output) != "parquet":
        raise ParameterError(f"OUTPUT must be a .parquet file: {output}")
    if report_path.resolve() == output.resolve():
        raise ParameterError("the report path must differ from OUTPUT")
    _check_target(output, args.overwrite, "output")
    _check_target(report_path, args.overwrite, "report")
    qi = [c.strip() for c in args.qi.split(",") if c.strip()]

    df = read_table(args.input)
    release, report = anonymize(
        df,
        qi=qi,
        k=args.k,
        method=args.method,
        energy_loss=args.energy_loss,
        n_components=args.n_components,
        seed=args.seed,
        keep_row_id=args.keep_row_id,
    )
    report.paths = {"input": str(args.input), "output": str(output), "report": str(report_path)}
    with AtomicBatch() as batch:
        batch.parquet(release, output)
        batch.json(report.to_dict(), report_path)
    print(report.summary())
    print(f"release: {output}\nreport:  {report_path}")
    return 0


def _cmd_demo(args) -> int:
    from .anonymize import anonymize
    from .datasets import CENSUS_COLUMNS, census_like
    from .io.tables import AtomicBatch

    out_dir = Path(args.output)
    if out_dir.exists() and not out_dir.is_dir():
        raise ParameterError(f"--output is not a directory: {out_dir}")
    started = time.perf_counter()
    data = census_like(args.n, seed=args.seed, with_extra_columns=True)
    release, report = anonymize(data, qi=list(CENSUS_COLUMNS), k=args.k, seed=args.seed)
    paths = {name: out_dir / f"{name}.{ext}" for name, ext in (("input", "parquet"), ("release", "parquet"), ("report", "json"))}
    report.paths = {name: str(path) for name, path in paths.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    with AtomicBatch() as batch:
        batch.parquet(data, paths["input"])
        batch.parquet(release, paths["release"])
        batch.json(report.to_dict(), paths["report"])
    print(f"generated {args.n:,} census-like records (13 QI columns + record_id, region), seed {args.seed}")
    print(report.summary())
    print(f"input:   {paths['input']}\nrelease: {paths['release']}\nreport:  {paths['report']}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _cmd_demo_data(args) -> int:
    import pandas as pd

    from .datasets import census_like, correlated_gaussian
    from .io.tables import table_format, write_table_atomic

    output = Path(args.output)
    if table_format(output) is None:
        raise ParameterError(f"OUTPUT must end in .parquet or .csv: {output}")
    _check_target(output, args.overwrite, "output")
    if args.kind == "gaussian":
        X = correlated_gaussian(args.n, m=args.m, seed=args.seed)
        width = len(str(args.m))
        data = pd.DataFrame(X, columns=[f"x{j:0{max(2, width)}d}" for j in range(1, args.m + 1)])
    else:
        data = census_like(args.n, seed=args.seed, with_extra_columns=True)
    write_table_atomic(data, output)
    print(f"wrote {len(data):,} {args.kind} records × {data.shape[1]} columns to {output}")
    return 0
