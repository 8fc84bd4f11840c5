"""Command-line interface: ``daskmicro anonymize | demo | demo-data``.

Every sub-command either succeeds completely or writes nothing: outputs are staged in temporary
files and moved into place only after the release has passed its checks.  Bad input ends the
command with one line ``daskmicro: error: <message>`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from .errors import InputError, ParameterError, VerificationError, describe
from .io import interrupt

__all__ = ["main", "build_parser", "run_anonymize"]

PROG = "daskmicro"
EXIT_USAGE = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130

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
  daskmicro anonymize survey.csv out.parquet --qi age,income --k 10 --participation 0.75 --max-cell-failure 1e-6

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
    p.add_argument("output", metavar="OUTPUT", help="release to write: a .parquet file, or a directory (no extension) for a partitioned release written by the workers")
    p.add_argument("--qi", required=True, metavar="COLS", help="comma-separated quasi-identifier columns (numeric)")
    p.add_argument("--k", required=True, type=int, metavar="K", help="anonymity parameter: each published QI tuple is shared by ≥ K records (2 ≤ K ≤ rows)")
    p.add_argument("--method", default="auto", choices=["auto", "mdav", "pca-mdav", "partitioned", "proximal-distal", "pcl"], help="microaggregation method (default: %(default)s: exact MDAV up to 100,000 rows of a single file, partitioned otherwise; pcl: PCL from MDAV, lower distortion, much slower, one task)")
    p.add_argument("--energy-loss", type=float, metavar="EPS2", help="pca-mdav and proximal records: largest fraction of eigenvalue energy the discarded components may hold, in [0, 1)")
    p.add_argument("--n-components", type=_positive_int, metavar="M", help="pca-mdav and proximal records: number of principal components to keep (instead of --energy-loss)")
    p.add_argument("--K", dest="K", type=int, metavar="K", help="partitioned, proximal-distal: macrocell size, > k (default 1000)")
    p.add_argument("--nu", type=float, metavar="NU", help="partitioned, proximal-distal: fraction of macrocells (highest SSE) microaggregated without PCA, in [0, 1]")
    p.add_argument("--partition-size", type=int, metavar="N", help="partitioned: records per partition, ≥ K (default 50000)")
    p.add_argument("--task-rows", type=int, metavar="N", help="partitioned: records per top-level task (default 250000)")
    p.add_argument("--max-task-rows", type=int, metavar="N", help="largest input the one-task methods accept (default 1000000)")
    p.add_argument("--refine", choices=["pcl"], help="refinement stage on the cluster: improve every partition's cells by noiseless PCL (never worse)")
    p.add_argument("--refine-iter", type=_positive_int, metavar="N", help="--refine pcl: PCL iterations per partition (default 2)")
    p.add_argument("--macro", choices=["mdav", "pcl"], help="macroaggregation inside each top-level task: nested MDAV (default) or MDAV refined by PCL")
    p.add_argument("--macro-iter", type=_positive_int, metavar="N", help="--macro pcl: PCL iterations per level (default 2)")
    p.add_argument("--seed", type=_non_negative_int, metavar="S", help="seed of the row shuffle (default: drawn at random and recorded in the report)")
    p.add_argument("--participation", metavar="P|COLUMN", help="p-probabilistic k-anonymity: probability in (0, 1] that each record takes part, or a column of per-record probabilities (single-file input, mdav and pca-mdav only); needs --max-cell-failure")
    p.add_argument("--max-cell-failure", type=float, metavar="PBAR", help="with --participation: acceptable probability, in (0, 1), that a cell ends with 1 to K-1 participants")
    p.add_argument("--report", metavar="PATH", help="JSON report to write (default: OUTPUT with suffix .report.json)")
    p.add_argument("--keep-row-id", action="store_true", help="add a row_id column with each record's position in the input")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT and the report if they exist")
    p.add_argument("--reference", default="auto", choices=["auto", "exact", "sample", "none"], help="IL of exact MDAV for the report's relative increment: exact on all records, estimated on a 20,000-record sample, auto (exact up to 20,000 records), none; runs split into strata get the record-weighted mean over the groups (default: %(default)s)")
    p.add_argument("--no-dask-report", action="store_true", help="cluster runs: do not write the Dask performance report (REPORT.dask.html, or _dask-report.html in a directory output)")
    _add_cluster_options(p)
    _add_lake_options(p)
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
    p.add_argument("--partition-size", type=_positive_int, default=5000, help="records per partition of the partitioned pipeline (default: %(default)s)")
    p.add_argument("--workers", type=_positive_int, default=2, help="LocalCluster worker processes (default: %(default)s)")
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

    from . import cli_plan, cli_report
    from .cli_privacy import add_parsers as _add_privacy_parsers  # spec, assign, audit

    cli_report.add_parser(sub)
    _add_privacy_parsers(sub)
    cli_plan.add_parser(sub)
    from . import cli_sweep

    cli_sweep.add_parser(sub)

    from .cli_workflow import add_parsers as _add_workflow_parsers  # run, submit, status, cancel

    _add_workflow_parsers(sub)
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
    interrupt.install()  # Ctrl-C / SIGTERM: recorded, so that no commit happens even if Dask swallows it
    try:
        return args.handler(args)
    except (InputError, ParameterError, VerificationError) as exc:
        _error(" ".join(str(exc).split()) or type(exc).__name__)  # our messages: names and counts only
        return EXIT_USAGE
    except (ValueError, OSError) as exc:  # another library's words: redacted, they may quote a value
        _error(describe(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted; no release was committed by this run")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a defect: say so in one line, without the values a traceback may show
        if os.environ.get("DASKMICRO_DEBUG"):
            raise
        _error(f"internal error ({describe(exc)}); nothing was committed; set DASKMICRO_DEBUG=1 for the traceback")
        return EXIT_INTERNAL


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- commands


def _check_target(path: Path, overwrite: bool, what: str, inputs=()) -> None:
    """One output of a command checked by the rule every command shares (:mod:`daskmicro.io.paths`)."""
    from .io.paths import Output, check_outputs

    check_outputs(inputs, [Output(path, what)], overwrite)


def _add_cluster_options(p) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask cluster at ADDRESS (tcp://host:8786 or tls://…); default: a LocalCluster for this run")
    g.add_argument("--workers", type=_positive_int, metavar="N", help="LocalCluster: number of worker processes (default: cores, at most 8)")
    g.add_argument("--tls-ca-file", metavar="PEM", help="TLS: CA certificate to trust")
    g.add_argument("--tls-cert", metavar="PEM", help="TLS: client certificate")
    g.add_argument("--tls-key", metavar="PEM", help="TLS: client private key")


def _add_lake_options(p) -> None:
    from .config import DEFAULT_ROWS_PER_FILE

    g = p.add_argument_group("lake (Parquet datasets, strata, missing values, atomic commit)")
    g.add_argument("--filter", action="append", default=[], metavar="EXPR", help="row filter, e.g. 'year>=2020' or 'region in (north,south)'; repeat to AND")
    g.add_argument("--columns", metavar="COLS", help="read only these columns (projection)")
    g.add_argument("--drop", metavar="COLS", help="leave out these columns (direct identifiers)")
    g.add_argument("--strata", metavar="COLS", help="microaggregate independently inside each stratum of these columns")
    g.add_argument("--merge-small-strata", action="store_true", help="merge a stratum with fewer than K records into its neighbour (in key order) instead of refusing")
    g.add_argument("--missing", choices=["refuse", "separate"], default=None, help="missing QI values: refuse (default) or microaggregate each missingness pattern on its observed columns")
    g.add_argument("--partition-by", metavar="COLS", help="hive-partition the output by these columns (default: the input's hive keys)")
    g.add_argument("--rows-per-file", type=int, metavar="N", help=f"rows per output file (default {DEFAULT_ROWS_PER_FILE:,})")
    g.add_argument("--force", action="store_true", help="run even when OUTPUT holds a committed run of the same input and configuration")


def security_from_args(args):
    """A distributed Security object from --tls-* options, or None; missing files are refused."""
    files = {"--tls-ca-file": args.tls_ca_file, "--tls-cert": args.tls_cert, "--tls-key": args.tls_key}
    given = {k: v for k, v in files.items() if v}
    if not given:
        return None
    if len(given) != 3:
        missing = ", ".join(k for k, v in files.items() if not v)
        raise ParameterError(f"TLS needs --tls-ca-file, --tls-cert and --tls-key; missing {missing}")
    for flag, path in given.items():
        if not Path(path).is_file():
            raise ParameterError(f"{flag}: file not found: {path}")
    from distributed.security import Security

    return Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert, tls_client_key=args.tls_key,
                    require_encryption=True)


def _stage_printer(stage: str, seconds: float) -> None:
    print(f"  {stage:<17} {seconds:7.2f} s", file=sys.stderr, flush=True)


def _cmd_anonymize(args) -> int:
    return run_anonymize(args)


def run_anonymize(args, client=None) -> int:
    """``daskmicro anonymize`` from parsed arguments: they become a RunConfig, the planner does
    the rest (on ``client`` when given)."""
    from .config import RunConfig
    from .io.qi import column_list
    from .plan import echo_stderr, run

    qi = tuple(column_list(args.qi, "--qi"))
    participation = _participation_arg(args)
    cfg = RunConfig.from_args(args, qi, participation)
    outcome = run(cfg, input=args.input, output=args.output, report_path=args.report, progress=_stage_printer,
                  say=echo_stderr, client=client)
    if outcome.nothing_to_do:
        print(f"nothing to do: {args.output} holds a committed run of the same input and configuration "
              f"(committed {outcome.previous.get('committed', '?')}); use --force to run again")
        return 0
    report = outcome.report
    print(report.summary())
    if outcome.output is not None and outcome.output.is_dir():
        print(f"release: {outcome.output}/ ({len(report.lake['files'])} file(s), committed with _SUCCESS)")
    else:
        print(f"release: {outcome.output}\nreport:  {outcome.report_path}")
    if outcome.performance_report is not None:
        print(f"dask:    {outcome.performance_report}")
    return 0


def _participation_arg(args):
    """``--participation P|COLUMN``: a column of the input if one has that name, else a number."""
    text = args.participation
    if text is None:
        return None
    from .io.source import open_source

    try:
        columns = open_source(args.input).columns
    except (InputError, ParameterError):
        columns = []
    if text in columns:
        return text
    import math

    try:
        value = float(text)
    except ValueError:
        raise ParameterError(f"--participation: {text!r} is neither a number in (0, 1] nor a column of the input") from None
    if not math.isfinite(value):
        raise ParameterError(f"--participation must be in (0, 1], got {text!r}")
    return value


def _cmd_demo(args) -> int:
    import numpy as np

    from .anonymize import anonymize
    from .cluster import cluster_client
    from .datasets import CENSUS_COLUMNS, census_like
    from .io.tables import AtomicBatch
    from .kernels.utility import utility_measures
    from .privacy.risk import disclosure_risk
    from .publish import ROW_ID
    from .report import write_report
    from .report.dask_report import DaskPerformanceReport

    out_dir = Path(args.output)
    if out_dir.exists() and not out_dir.is_dir():
        raise ParameterError(f"--output is not a directory: {out_dir}")
    started = time.perf_counter()
    data = census_like(args.n, seed=args.seed, with_extra_columns=True)
    qi = list(CENSUS_COLUMNS)
    print(f"generated {args.n:,} census-like records (13 QI columns + record_id, region), seed {args.seed}")
    with cluster_client(n_workers=args.workers) as client:
        print(f"LocalCluster with {len(client.scheduler_info()['workers'])} worker processes; dashboard: {client.dashboard_link}",
              file=sys.stderr, flush=True)
        perf = DaskPerformanceReport()
        with perf.record():
            release, report = anonymize(data, qi=qi, k=args.k, seed=args.seed, method="partitioned",
                                        partition_size=args.partition_size, keep_row_id=True, client=client,
                                        progress=_stage_printer, reference="auto")
    # utility and risk need each published row next to its original: align by row id, then drop it
    original = data[qi].to_numpy(np.float64)
    published = release.sort_values(ROW_ID)[qi].to_numpy(np.float64)
    report.utility = utility_measures(original, published, columns=qi)
    report.risk = disclosure_risk(original, published)
    release = release.drop(columns=[ROW_ID])
    report.keep_row_id = False
    paths = {name: out_dir / f"{name}.{ext}" for name, ext in (("input", "parquet"), ("release", "parquet"), ("report", "json"))}
    report.paths = {name: str(path) for name, path in paths.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    with AtomicBatch() as batch:
        batch.parquet(data, paths["input"])
        report.k_anonymity = batch.release(release, paths["release"], report.published_columns(), report.k_anonymity.k)
        if perf.stage(batch, out_dir / "dask-report.html"):
            report.performance_report = "dask-report.html"
        batch.json(report.to_dict(), paths["report"])
    html = write_report(out_dir)
    print(report.summary())
    print(f"input:   {paths['input']}\nrelease: {paths['release']}\nreport:  {paths['report']}\nhtml:    {html}")
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
