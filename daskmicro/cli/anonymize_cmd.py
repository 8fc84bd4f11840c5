"""``daskmicro anonymize``: the arguments become a :class:`~daskmicro.config.RunConfig` and the
one planner (:mod:`daskmicro.plan`) runs it."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import QUALITIES
from ..errors import InputError, ParameterError
from .common import StageProgress, add_cluster_options, add_output_options, non_negative_int, positive_int

__all__ = ["add_parser", "run_anonymize"]

_ANONYMIZE_DESCRIPTION = """\
Publish a k-anonymous release of a CSV or Parquet table.

The quasi-identifier (QI) columns named by --qi are z-scored, grouped into cells of at least k
similar records (between k and 2k-1 with MDAV), and each record's QI values are replaced by its
cell's centroid in the original units.  Every other column passes through unchanged; the rows
are shuffled with a seed kept in a private run record.  Before anything is written the release is verified (every
published QI tuple occurs at least k times, rows in = rows out).  The release is written as
Parquet and a JSON report (parameters, cell sizes, information loss, timing, checks)
beside it; both appear atomically, or nothing is written at all.
"""

_ANONYMIZE_EPILOG = """\
examples:
  daskmicro anonymize census.csv release.parquet --qi AGI,FEDTAX,FICA --k 5
  daskmicro anonymize data.parquet out.parquet --qi x1,x2,x3 --k 10 --method pca-mdav --energy-loss 0.1
  daskmicro anonymize data.parquet out.parquet --qi x1,x2 --k 3 --seed 42 --report run.json --overwrite
  daskmicro anonymize survey.csv out.parquet --qi age,income --k 10 --participation 0.75 --max-cell-failure 1e-6
  daskmicro anonymize survey.parquet out.parquet --qi all-numeric --qi-except record_id --keep record_id --k 5 --risk

Information loss is in percent of the QIs' variance (100*SSE/SST on the z-scored QI columns), printed
rounded with a word for its size; --verbose adds how Dask ran it.  Integer QI columns become float64
(centroids are not integers in general).  The shuffle seed, which undoes the shuffle, and the input's
paths are never published: they go to a private run record under $XDG_STATE_HOME/daskmicro/runs/
(~/.local/state/daskmicro/runs/), whose path the run prints.
"""


def add_parser(sub, fmt) -> None:
    p = sub.add_parser(
        "anonymize",
        help="publish a k-anonymous release of a CSV or Parquet table",
        description=_ANONYMIZE_DESCRIPTION,
        epilog=_ANONYMIZE_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("input", metavar="INPUT", help="input table: .csv, .parquet, or a directory of Parquet files; also s3://BUCKET/KEY, abfs://CONTAINER/KEY (az://) or gs://BUCKET/KEY (an object or a prefix of Parquet objects; needs daskmicro[s3], [azure] or [gcs]) or file:///PATH")
    p.add_argument("output", metavar="OUTPUT", help="release to write: a .parquet file, or a directory (no extension) for a partitioned release written by the workers; also a prefix on an object store (s3://BUCKET/PREFIX, abfs://CONTAINER/PREFIX, gs://BUCKET/PREFIX) for a directory release committed there by its _SUCCESS object, or an object there (…/NAME.parquet)")
    p.add_argument("--qi", required=True, metavar="COLS", help="comma-separated quasi-identifier columns (numeric), or all-numeric: every integer or float column but those of --qi-except and the columns with another role (--strata, --drop, --keep, --id-column, --participation COLUMN)")
    p.add_argument("--qi-except", metavar="COLS", help="with --qi all-numeric: the numeric columns that are not QIs (a numeric column named like an identifier, such as record_id, must be named here)")
    p.add_argument("--k", required=True, type=int, metavar="K", help="anonymity parameter: each published QI tuple is shared by ≥ K records (2 ≤ K ≤ rows)")
    p.add_argument("--method", default="auto", choices=["auto", "mdav", "pca-mdav", "partitioned", "proximal-distal", "pcl", "incremental"], help="microaggregation method (default: %(default)s: exact MDAV up to 100,000 rows of a single file, partitioned otherwise; pcl: PCL from MDAV, lower distortion, much slower, one task; incremental: a survey lake followed while it fills, see the incremental options)")
    p.add_argument("--energy-loss", type=float, metavar="EPS2", help="pca-mdav and proximal records: largest fraction of eigenvalue energy the discarded components may hold, in [0, 1)")
    p.add_argument("--n-components", type=positive_int, metavar="M", help="pca-mdav and proximal records: number of principal components to keep (instead of --energy-loss)")
    p.add_argument("--K", dest="K", type=int, metavar="K", help="partitioned, proximal-distal: macrocell size, > k (default 1000)")
    p.add_argument("--nu", type=float, metavar="NU", help="partitioned, proximal-distal: fraction of macrocells (highest SSE) microaggregated without PCA, in [0, 1]")
    p.add_argument("--partition-size", type=int, metavar="N", help="partitioned: records per partition, ≥ K (default 25000)")
    p.add_argument("--task-rows", type=int, metavar="N", help="partitioned: records per top-level task (default 250000 with --quality balanced, 500000 with high)")
    p.add_argument("--max-task-rows", type=int, metavar="N", help="largest input the one-task methods accept (default 1000000)")
    p.add_argument("--quality", choices=list(QUALITIES), help="balanced (default): the partitioned pipeline improves its cells to exact MDAV's distortion; high: moves, PCL iterations and moves again, also after one-task methods (10-15 %% below exact MDAV, about twice the time)")
    p.add_argument("--refine", choices=["pcl"], help="refinement stage on the cluster: improve every partition's cells by noiseless PCL (never worse)")
    p.add_argument("--refine-iter", type=positive_int, metavar="N", help="--refine pcl: PCL iterations per partition (default 2)")
    p.add_argument("--macro", choices=["mdav", "pcl"], help="macroaggregation inside each top-level task: nested MDAV (default) or MDAV refined by PCL")
    p.add_argument("--macro-iter", type=positive_int, metavar="N", help="--macro pcl: PCL iterations per level (default 2)")
    p.add_argument("--seed", type=non_negative_int, metavar="S", help="seed of the row shuffle (default: drawn at random; kept in the private run record)")
    p.add_argument("--participation", metavar="P|COLUMN", help="p-probabilistic k-anonymity: probability in (0, 1] that each record takes part, or a column of per-record probabilities (methods mdav, pca-mdav, partitioned); needs --max-cell-failure")
    p.add_argument("--max-cell-failure", type=float, metavar="PBAR", help="with --participation: acceptable probability, in (0, 1), that a cell ends with 1 to K-1 participants")
    p.add_argument("--report", metavar="PATH", help="JSON report to write (default: OUTPUT with suffix .report.json)")
    p.add_argument("--keep-row-id", action="store_true", help="add a row_id column with each record's position in the input")
    add_output_options(p)
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT and the report if they exist")
    p.add_argument("--reference", default="auto", choices=["auto", "exact", "sample", "none"], help="IL of exact MDAV for the report's relative increment: exact on all records, estimated on a 20,000-record sample, auto (exact up to 20,000 records), none; runs split into strata get the record-weighted mean over the groups (default: %(default)s)")
    p.add_argument("--risk", action="store_true", help="also measure the disclosure risk of the release against the input (record linkage, interval disclosure) on a uniform sample of at most 10,000 records; the report and the summary give the rates rounded, in plain sentences (not with --method incremental)")
    p.add_argument("--dask-report", action="store_true", help="cluster runs: also write the Dask performance report (REPORT.dask.html, or _dask-report.html in a directory output; several MB)")
    p.add_argument("--no-dask-report", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    add_cluster_options(p)
    _add_lake_options(p)
    add_series_options(p)
    _add_incremental_options(p)
    p.set_defaults(handler=run_anonymize)


def _add_incremental_options(p) -> None:
    g = p.add_argument_group("incremental survey (--method incremental: INPUT is a lake being filled, a directory or an "
                              "s3://BUCKET/PREFIX where its objects land)")
    g.add_argument("--close-at", metavar="TIME", help="when the survey closes: an ISO 8601 time or POSIX seconds "
                   "(default: the lake's _closed.json marker)")
    g.add_argument("--zeta", type=float, metavar="Z", help="arrivals coefficient ζ (survey duration / one-pass time) "
                   "for the optimal data ratio ν*")
    g.add_argument("--data-ratio", type=float, metavar="NU", help="fraction of the records left to the increment "
                   "stage, in [0, 1) (default: ν* from --zeta, else from a time model calibrated on the cluster)")
    g.add_argument("--base-method", choices=["mdav", "pca-mdav", "partitioned"], help="base stage: exact MDAV or "
                   "PCA-MDAV in one task, or the partitioned pipeline (its layout from --K, --nu, --partition-size, "
                   "--task-rows) (default mdav)")
    g.add_argument("--increment", choices=["2mdav", "nn", "nn-split-mid", "nn-split-end", "nn-fixed"],
                   help="increment stage: 2MDAV, or nearest-neighbour assignment with cell splitting; nn-fixed "
                   "(partitioned base): late records join fixed base cells (default 2mdav)")
    g.add_argument("--expected-rows", type=positive_int, metavar="N", help="records of the survey when the lake has "
                   "no _arrivals.json manifest")
    g.add_argument("--survey-timeout", type=float, metavar="SECONDS", help="give up (nothing released) when the base "
                   "fraction or the close is not reached within this many seconds")
    g.add_argument("--one-pass-reference", action="store_true", help="after the release, also time one-pass "
                   "microaggregation of all the records (τ and δ in the report)")


def incremental_args(args) -> dict | None:
    """The incremental options given on the command line (None: none given)."""
    def opt(name):
        return getattr(args, name, None)

    close = opt("close_at")
    if close is not None:
        try:
            close = float(close)
        except ValueError:
            import datetime as dt

            try:
                close = dt.datetime.fromisoformat(close)
            except ValueError:
                raise ParameterError(f"--close-at: expected an ISO 8601 time or POSIX seconds, got {close!r}") from None
    given = {"close_at": close, "zeta": opt("zeta"), "nu": opt("data_ratio"), "base_method": opt("base_method"),
             "increment": opt("increment"), "expected_rows": opt("expected_rows"), "timeout": opt("survey_timeout"),
             "reference": True if opt("one_pass_reference") else None}
    given = {key: v for key, v in given.items() if v is not None}
    return given or ({} if args.method == "incremental" else None)


def add_series_options(p) -> None:
    g = p.add_argument_group("series of releases (the release ledger)")
    g.add_argument("--ledger", metavar="DIR|off", help="private ledger of what each release published (default: "
                   "$DASKMICRO_LEDGER, else $XDG_STATE_HOME/daskmicro/ledger); records published before are "
                   "republished with their frozen values; 'off': a trial run, not recorded, never to be published")
    g.add_argument("--new-series", action="store_true", help="aggregate records published before afresh (this "
                   "release and earlier ones together can give their values back)")
    g.add_argument("--id-column", metavar="COL", help="column that identifies a record across releases (read, never "
                   "published; default: its strata and QI values)")


def _add_lake_options(p) -> None:
    from ..config import DEFAULT_ROWS_PER_FILE

    g = p.add_argument_group("lake (Parquet datasets, strata, missing values, atomic commit)")
    g.add_argument("--filter", action="append", default=[], metavar="EXPR", help="row filter, e.g. 'year>=2020' or 'region in (north,south)'; repeat to AND")
    g.add_argument("--columns", metavar="COLS", help="read only these columns (projection)")
    g.add_argument("--drop", metavar="COLS", help="leave out these columns (direct identifiers)")
    g.add_argument("--keep", metavar="COLS", help="publish these columns as they are although they look like identifiers (named like one, or text, integers, dates or whole-number floats with a distinct value for nearly every record); such columns are refused otherwise")
    g.add_argument("--strata", metavar="COLS", help="microaggregate independently inside each stratum of these columns")
    g.add_argument("--merge-small-strata", action="store_true", help="merge a stratum with fewer than K records into its neighbour (in key order) instead of refusing")
    g.add_argument("--missing", choices=["refuse", "separate"], default=None, help="missing QI values: refuse (default) or microaggregate each missingness pattern on its observed columns")
    g.add_argument("--partition-by", metavar="COLS", help="hive-partition the output by these columns (default: the input's hive keys)")
    g.add_argument("--rows-per-file", type=int, metavar="N", help=f"rows per output file (default {DEFAULT_ROWS_PER_FILE:,})")
    g.add_argument("--table-format", choices=["parquet", "delta"], default=None, help="a directory OUTPUT as a "
                   "Parquet lake committed by _SUCCESS (parquet, default) or as a new version of a Delta table (delta; "
                   "needs the delta extra; a local directory or an s3:// prefix)")
    g.add_argument("--force", action="store_true", help="run even when OUTPUT holds a committed run of the same input and configuration")


def run_anonymize(args, client=None) -> int:
    """``daskmicro anonymize`` from parsed arguments: they become a RunConfig, the planner does
    the rest (on ``client`` when given)."""
    from ..config import ALL_NUMERIC, RunConfig
    from ..io.qi import column_list
    from ..plan import RunPaths, run

    qi = ALL_NUMERIC if args.qi.strip().lower() == ALL_NUMERIC else tuple(column_list(args.qi, "--qi"))
    participation = _participation_arg(args)
    cfg = RunConfig.from_args(args, qi, participation, incremental_args(args))
    verbose = getattr(args, "verbose", False)
    with StageProgress(quiet=getattr(args, "quiet", False), verbose=verbose) as progress:
        outcome = run(cfg, paths=RunPaths(input=args.input, output=args.output, report_path=args.report),
                      progress=progress, say=progress.say, client=client)
    if outcome.nothing_to_do:
        print(f"nothing to do: {args.output} holds a committed run of the same input and configuration "
              f"(committed {outcome.previous.get('committed', '?')}); use --force to run again")
        return 0
    from ..report.terminal import where_lines

    report = outcome.report
    print(report.summary(verbose=verbose))
    if outcome.output is not None and report.lake is not None:   # a directory release, local or on a store
        remote = not isinstance(outcome.output, Path)
        print("\n".join(where_lines(outcome.output, outcome.report_path if remote else None,
                                     files=len(report.lake["files"]), version=outcome.table_version)))
    else:
        print("\n".join(where_lines(outcome.output, outcome.report_path)))
    if outcome.performance_report is not None:
        print(f"dask:    {outcome.performance_report}")
    return 0


def _participation_arg(args):
    """``--participation P|COLUMN``: a column of the input if one has that name, else a number."""
    text = args.participation
    if text is None:
        return None
    from ..io.source import open_source

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
