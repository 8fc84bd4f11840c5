"""``daskmicro report RUN_DIR``: regenerate RUN_DIR/report.html from RUN_DIR/report.json."""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]

_DESCRIPTION = """\
Regenerate the HTML report of a run from its JSON report.

Reads RUN_DIR/report.json (as written by 'daskmicro demo' or a pipeline run) and writes
RUN_DIR/report.html: one self-contained page (inline CSS and SVG plots, no external links)
with parameters, timings, information loss, cell sizes, PCA energy spectrum, macrocell SSE,
verification, and the utility and disclosure-risk measures the run recorded.  The page is
written to a temporary file and moved into place; on error nothing is written.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``report`` sub-command on ``subparsers`` (of :func:`daskmicro.cli.build_parser`)."""
    p = subparsers.add_parser(
        "report",
        help="regenerate RUN_DIR/report.html from RUN_DIR/report.json",
        description=_DESCRIPTION,
        epilog="example:\n  daskmicro report demo-output\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="directory holding report.json")
    p.set_defaults(handler=run)
    return p


def run(args) -> int:
    """Render the page; errors propagate as InputError/ParameterError for the CLI to print."""
    from ..report.html import write_report

    target = write_report(args.run_dir)
    print(f"report: {target}")
    return 0
