"""``daskmicro report PATH``: render the HTML page of any release a run wrote."""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]

_DESCRIPTION = """\
Render the HTML report of a run from its JSON report.

PATH is any of:
  a release file          OUTPUT.parquet    reads OUTPUT.report.json beside it,
                                            writes OUTPUT.report.html beside it
  a directory release     OUTPUT/           reads OUTPUT/_report.json,
                                            writes OUTPUT.report.html beside the directory
                                            (the committed release is not changed)
  a Delta table           TABLE/            reads TABLE/_report.json (its current version's),
                                            writes TABLE.report.html beside the table
  a demo directory        demo-output/      reads demo-output/report.json,
                                            writes demo-output/report.html
  a JSON report           X.json            writes X.html beside it
  a private run record    RECORD.json       the page of its exact report, RECORD.html beside it
Any of the first five may be an s3://, abfs:// (az://) or gs:// URL (credentials from the
environment's chain): the page is
then written beside it on the store, one object, unless --output names another place.
--output PATH.html writes the page elsewhere.  An existing page is refused unless --overwrite.

The page is self-contained (inline CSS and SVG plots, no external links) and shows what its JSON
holds.  A release's report gives the release's distributions and correlations, the information
loss rounded, parameters, timings, cell sizes, layout and verification — no figure of the original
values.  A run record's page adds the exact figures the run recorded (information loss, exact-MDAV
reference, PCA spectrum, macrocell SSE, utility and disclosure-risk measures): it is private, like
the record.  The page is written to a temporary file and moved into place; on error nothing is
written.
"""

_EPILOG = """\
examples:
  daskmicro report demo-output
  daskmicro report release.parquet                 # release.report.json -> release.report.html
  daskmicro report release/ --output page.html     # a directory release, page written elsewhere
  daskmicro report s3://bucket/releases/2026.parquet --output page.html
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``report`` sub-command on ``subparsers`` (of :func:`daskmicro.cli.build_parser`)."""
    p = subparsers.add_parser(
        "report",
        help="render the HTML report of a release file, a directory release or a demo directory",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="PATH",
                   help="release file, directory release, demo directory, or a report JSON")
    p.add_argument("--output", metavar="PATH.html", help="where to write the page (default: see above)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing page")
    p.set_defaults(handler=run)
    return p


def run(args) -> int:
    """Render the page; errors propagate as InputError/ParameterError for the CLI to print."""
    from ..report.files import write_report

    target = write_report(args.path, args.output, overwrite=args.overwrite)
    print(f"report: {target}")
    return 0
