"""``daskmicro warmup``: compile every numba kernel ahead of the runs, into the shared cache dir."""

from __future__ import annotations

import argparse
import os

from .common import positive_int

_DESCRIPTION = """\
Compile every numba kernel a run can need (mdav, pca-mdav, partitioned, pcl, incremental) on tiny inputs,
into numba's cache dir, so that the first run — and every new worker process on this machine or volume —
loads compiled code instead of compiling. The cache dir is NUMBA_CACHE_DIR if set, else DASKMICRO_CACHE_DIR,
else the user cache dir (~/.cache/daskmicro/numba, $XDG_CACHE_HOME/daskmicro/numba, ~/Library/Caches/...).
"""

_EPILOG = """\
examples:
  daskmicro warmup                                     # into the user cache dir
  DASKMICRO_CACHE_DIR=/shared/daskmicro-cache daskmicro warmup   # a cache shared by a cluster's workers
  RUN daskmicro warmup                                 # in a Dockerfile, after the pip install
  daskmicro warmup --jobs 8                            # 8 processes share the compile
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``warmup`` sub-command on ``subparsers`` (of :func:`daskmicro.cli.build_parser`)."""
    p = subparsers.add_parser(
        "warmup",
        help="compile every numba kernel ahead of the runs (cache dir printed)",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quiet", action="store_true", help="print only the final line")
    p.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                   help="processes sharing the compile, at most one per compiled unit (default: the CPUs this "
                        "process may use, at most 4)")
    p.set_defaults(handler=run)
    return p


def run(args) -> int:
    from ..runtime.warmup import warm_up

    def progress(name: str, seconds: float) -> None:
        if not args.quiet:
            print(f"  {name:<14} {seconds:7.2f} s", flush=True)

    jobs = args.jobs or min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    cache, seconds = warm_up(progress, jobs=jobs)
    print(f"numba cache dir: {cache or '(numba default, next to the package)'}")
    print(f"warm-up: {seconds:.2f} s")
    return 0
