"""``daskmicro demo`` and ``daskmicro demo-data``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..errors import ParameterError, describe
from .common import StageProgress, check_target, int_at_least, non_negative_int, positive_int

__all__ = ["add_parsers"]

_DEMO_DESCRIPTION = """\
Generate a census-like data set (resampled and jittered rows of the CASC Census reference data,
plus pass-through columns record_id and region), anonymize its 13 numerical columns, and write
DIR/input.parquet, DIR/release.parquet, DIR/report.json and DIR/report.html (and, with
--dask-report, DIR/dask-report.html).  Files from an earlier demo in DIR are replaced; a file of
one of those names that no demo wrote is refused before any work.  The
disclosure-risk rates (record linkage, interval disclosure) go to the report rounded to whole
percentage points; the utility measures, the exact risk counts and the exact information loss go
to the private run record, whose path the demo prints; ``daskmicro report RECORD.json`` renders
its page.  The demo is a trial run: it is not recorded in the release ledger.
"""

_DEMO_DATA_DESCRIPTION = """\
Write a generated data set to OUTPUT (.parquet or .csv, by extension), or, when OUTPUT is a
directory (ends with / or has no extension), to OUTPUT/part-00000.parquet ... : the same records
split in --files N consecutive Parquet files, staged and renamed into place whole.
census-like: the 13 Census columns (resampled and jittered Census rows; skew, outliers and
correlations kept) plus record_id and region.  gaussian: correlated normal columns x01, x02, ...
Missing directories on the way to OUTPUT are created (and removed again when the command fails).
"""

_DEMO_DATA_EPILOG = """\
examples:
  daskmicro demo-data census_like.parquet --n 75000 --seed 1
  daskmicro demo-data gaussian.csv --n 50000 --kind gaussian --m 13
  daskmicro demo-data census/ --n 200000 --files 8      # a directory of 8 Parquet files
"""



def add_parsers(sub, fmt) -> None:
    p = sub.add_parser(
        "demo",
        help="generate census-like data and anonymize it",
        description=_DEMO_DESCRIPTION,
        epilog="example:\n  daskmicro demo --output /tmp/demo --n 50000 --k 10\n",
        formatter_class=fmt,
    )
    p.add_argument("--output", default="demo-output", metavar="DIR", help="directory to write to (default: %(default)s)")
    p.add_argument("--n", type=positive_int, default=20000, help="number of records (default: %(default)s)")
    p.add_argument("--k", type=int_at_least(2), default=5, help="anonymity parameter (default: %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the data and of the shuffle (default: %(default)s)")
    p.add_argument("--partition-size", type=int_at_least(2), default=5000, help="records per partition of the partitioned pipeline (default: %(default)s)")
    p.add_argument("--workers", type=positive_int, default=2, help="LocalCluster worker processes (default: %(default)s)")
    p.add_argument("--dask-report", action="store_true", help="also write DIR/dask-report.html, the Dask performance report (several MB)")
    p.add_argument("--verbose", action="store_true", help="also how Dask ran it: the cluster and its dashboard, each stage of the pipeline with its time, and in the summary the layout and kernel times")
    p.set_defaults(handler=_cmd_demo)

    p = sub.add_parser(
        "demo-data",
        help="write a generated data set (census-like or correlated Gaussian)",
        description=_DEMO_DATA_DESCRIPTION,
        epilog=_DEMO_DATA_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("output", metavar="OUTPUT", help="file to write (.parquet or .csv), or a directory (ends with / or has no extension) of Parquet files")
    p.add_argument("--files", type=positive_int, metavar="N", help="directory OUTPUT: number of Parquet files (default: 1)")
    p.add_argument("--n", type=positive_int, default=10000, help="number of records (default: %(default)s)")
    p.add_argument("--m", type=positive_int, default=13, help="gaussian: number of columns (default: %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--kind", default="census-like", choices=["census-like", "gaussian"], help="generator (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.set_defaults(handler=_cmd_demo_data)


#: The files a demo writes into its directory: those of an earlier demo there are replaced.
_DEMO_FILES = ("input.parquet", "release.parquet", "report.json", "report.html", "dask-report.html")


def _earlier_demo(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds an earlier demo's files: its ``report.json`` is a demo's — the
    release and report it names are the demo's, and it ran with a row id that it then dropped (the
    demo's alone: a run's report keeps the row id it was asked for)."""
    import json

    try:
        doc = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
        paths, options = doc.get("paths"), doc.get("options")
    except (OSError, ValueError, AttributeError):
        return False
    if not (isinstance(paths, dict) and isinstance(options, dict)):
        return False
    return (Path(str(paths.get("release", ""))).name == "release.parquet"
            and Path(str(paths.get("report", ""))).name == "report.json"
            and options.get("keep_row_id") is True and doc.get("keep_row_id") is False)


def _check_demo_dir(out_dir: Path) -> None:
    """Refuse, before any work, a directory holding a file of one of the demo's names that no
    demo wrote (a page or table of the user's): the demo would replace it; and a directory that is
    or lies in a committed release (:func:`daskmicro.io.paths.release_around`), never added to."""
    from ..io.paths import release_around

    release = release_around(out_dir / _DEMO_FILES[0])
    if release is not None:
        raise ParameterError(f"--output {out_dir} lies inside the committed release {release} (a release is never "
                             "added to); choose another directory")
    found = [name for name in _DEMO_FILES if (out_dir / name).exists() or (out_dir / name).is_symlink()]
    if found and not _earlier_demo(out_dir):
        raise ParameterError(f"--output {out_dir} holds {', '.join(found)}, which the demo did not write and would "
                             "replace; choose another directory")


def _cmd_demo(args) -> int:
    import numpy as np

    from ..anonymize import anonymize
    from ..runtime.cluster import cluster_client
    from ..datasets import CENSUS_COLUMNS, census_like
    from ..io.tables import AtomicBatch
    from ..kernels.utility import utility_measures
    from ..privacy.risk import disclosure_risk
    from ..release.publish import ROW_ID
    from ..report import write_report
    from ..runtime.dask_report import DaskPerformanceReport

    from ..io.recovery import recover

    out_dir = Path(args.output)
    if out_dir.exists() and not out_dir.is_dir():
        raise ParameterError(f"--output is not a directory: {out_dir}")
    _check_demo_dir(out_dir)
    if args.k > args.n:  # refused before any record is generated
        raise ParameterError(f"--k = {args.k} exceeds the number of records to generate, --n = {args.n}")
    # first: an interrupted commit of the run's files completed or undone, leftovers swept
    for line in recover(*(out_dir / name for name in _DEMO_FILES)):
        print(f"daskmicro: {line}", file=sys.stderr)
    started = time.perf_counter()
    data = census_like(args.n, seed=args.seed, with_extra_columns=True)
    qi = list(CENSUS_COLUMNS)
    print(f"generated {args.n:,} census-like records (13 QI columns + record_id, region), seed {args.seed}")
    with cluster_client(n_workers=args.workers) as client:
        if args.verbose:
            print(f"LocalCluster with {len(client.scheduler_info()['workers'])} worker processes; dashboard: "
                  f"{client.dashboard_link}", file=sys.stderr, flush=True)
        perf = DaskPerformanceReport(enabled=args.dask_report)
        with perf.record(), StageProgress(verbose=args.verbose) as progress:
            # record_id is an identifier: kept here only to show that pass-through columns are untouched.
            # A trial run: generated data published beside its input is nobody's release, and it stays
            # out of the user's release ledger (where it would be a series of the 13 census columns).
            release, report = anonymize(data, qi=qi, k=args.k, seed=args.seed, method="partitioned",
                                        partition_size=args.partition_size, keep_row_id=True, client=client,
                                        progress=progress, reference="auto", keep=["record_id"], ledger="off")
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
    # utility compares each release row with its original: the private run record's (exact) report
    # holds it; the published one gives the risk rates rounded
    from ..io.runrecord import record_text, write_run_record

    try:
        record = write_run_record(report.run_record())
        print(f"daskmicro: {record_text(record)}", file=sys.stderr)
    except OSError as exc:
        print(f"daskmicro: {record_text(None, describe(exc))}", file=sys.stderr)
    from ..report.terminal import where_lines

    print(report.summary(verbose=args.verbose))
    print(f"input:   {paths['input']}")
    print("\n".join(where_lines(paths["release"], paths["report"], page=html)))
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _cmd_demo_data(args) -> int:
    from ..io.tables import table_format

    from ..io.recovery import recover

    output = Path(args.output)
    directory = str(args.output).endswith(("/", "\\")) or (output.suffix == "" and table_format(output) is None)
    for line in recover(output):  # first: an interrupted commit of OUTPUT completed or undone
        print(f"daskmicro: {line}", file=sys.stderr)
    if not directory:
        if table_format(output) is None:
            raise ParameterError(f"OUTPUT must end in .parquet or .csv, or be a directory: {output}")
        if args.files is not None:
            raise ParameterError(f"--files needs a directory OUTPUT (ends with / or has no extension): {output}")
    files = args.files or 1
    if directory and files > args.n:
        raise ParameterError(f"--files {files} is more than --n {args.n} records")
    made = _make_parents(output)   # the missing directories of OUTPUT's path, removed again on error
    try:
        _write_demo_data(args, output, directory, files)
    except BaseException:
        _remove_made(made)
        raise
    return 0


def _make_parents(output: Path) -> list:
    """Create the missing parent directories of ``output`` (part of the output's path: nothing
    else is written); returns those created, deepest last."""
    missing = []
    parent = Path(os.path.abspath(output)).parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    if not missing:
        return []
    if not parent.is_dir():
        raise ParameterError(f"directory of the output cannot be created (not a directory: {parent}): {output}")
    made = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except OSError as exc:
            _remove_made(made)
            raise ParameterError(f"cannot create the directory of the output {d}: {describe(exc)}") from None
        made.append(d)
    return made


def _remove_made(made: list) -> None:
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            break


def _write_demo_data(args, output: Path, directory: bool, files: int) -> None:
    import pandas as pd

    from ..datasets import census_like, correlated_gaussian
    from ..io.tables import write_table_atomic

    if directory:
        from ..io.paths import Output, check_outputs

        check_outputs([], [Output(output, "output", directory=True)], args.overwrite)
        _check_parts_dir(output)
    else:
        check_target(output, args.overwrite, "output")
    if args.kind == "gaussian":
        X = correlated_gaussian(args.n, m=args.m, seed=args.seed)
        width = len(str(args.m))
        data = pd.DataFrame(X, columns=[f"x{j:0{max(2, width)}d}" for j in range(1, args.m + 1)])
    else:
        data = census_like(args.n, seed=args.seed, with_extra_columns=True)
    if directory:
        _write_parts(data, output, files)
        print(f"wrote {len(data):,} {args.kind} records × {data.shape[1]} columns to {output}/ "
              f"({files} Parquet file(s))")
        return
    write_table_atomic(data, output)
    print(f"wrote {len(data):,} {args.kind} records × {data.shape[1]} columns to {output}")


def _check_parts_dir(output: Path) -> None:
    """Refuse to replace (``--overwrite``) an existing directory holding anything but the
    ``part-NNNNN.parquet`` files demo-data writes: the commit deletes the whole directory it
    replaces, so a folder of the user's files (or a release) is never it."""
    import re

    if not output.is_dir() or output.is_symlink():
        return
    other = sorted(p.name for p in output.iterdir()
                   if not (re.fullmatch(r"part-\d{5}\.parquet", p.name) and p.is_file() and not p.is_symlink()))
    if other:
        raise ParameterError(f"output {output} holds {len(other)} file(s) or folder(s) that demo-data did not write "
                             f"(e.g. {other[0]}); it would replace the whole directory: choose another one")


def _write_parts(data, output: Path, files: int) -> None:
    """``data`` in ``files`` consecutive Parquet files ``part-00000.parquet`` … in the directory
    ``output``: written in a hidden staging sibling, then committed as a release is
    (:func:`daskmicro.io.commit.commit`, without ``_SUCCESS``: it is plain input data): an
    existing directory, allowed by --overwrite, is moved aside first and deleted last; on error
    nothing is left."""
    import numpy as np

    from ..io import commit as cm

    staging = cm.open_staging(output)
    try:
        bounds = np.linspace(0, len(data), files + 1).round().astype(int)
        for i in range(files):
            part = data.iloc[bounds[i]:bounds[i + 1]]
            part.to_parquet(staging / f"part-{i:05d}.parquet", index=False)
        cm.commit(staging, output, None)
    except BaseException:
        cm.discard_staging(staging)
        raise
