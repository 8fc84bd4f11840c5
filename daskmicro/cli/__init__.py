"""Command-line interface: ``daskmicro COMMAND`` (see ``daskmicro --help``).

One module per group of sub-commands, named ``<command>_cmd`` — :mod:`.anonymize_cmd`,
:mod:`.demo_cmd` (demo, demo-data), :mod:`.privacy_cmd` (spec, assign, audit), :mod:`.plan_cmd`,
:mod:`.report_cmd`, :mod:`.sweep_cmd`, :mod:`.warmup_cmd`, :mod:`.workflow_cmd` (run, submit,
status, cancel) — and :mod:`.common` for what they share.  Every sub-command either succeeds
completely or writes nothing; bad input ends it with one line ``daskmicro: error: <message>`` on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from ..errors import InputError, ParameterError, VerificationError, describe
from ..io import interrupt
from .anonymize_cmd import run_anonymize
from .common import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, PROG, Parser, error, security_from_args

__all__ = ["main", "build_parser", "run_anonymize", "security_from_args"]

_MAIN_EPILOG = """\
examples:
  daskmicro demo                                   # census-like demo into ./demo-output
  daskmicro anonymize survey.csv release.parquet --qi age,income,savings --k 5
  daskmicro demo-data big.parquet --n 150000 --kind gaussian

Run 'daskmicro COMMAND --help' for the options of a command.
"""

def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``daskmicro`` command."""
    from .._version import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    parser = Parser(
        prog=PROG,
        description="k-anonymous microaggregation (MDAV, PCA-MDAV) of numerical microdata.",
        epilog=_MAIN_EPILOG,
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    from . import anonymize_cmd, demo_cmd

    anonymize_cmd.add_parser(sub, fmt)
    demo_cmd.add_parsers(sub, fmt)

    from . import plan_cmd, privacy_cmd, report_cmd, sweep_cmd, warmup_cmd, workflow_cmd

    report_cmd.add_parser(sub)
    privacy_cmd.add_parsers(sub)    # spec, assign, audit
    plan_cmd.add_parser(sub)
    sweep_cmd.add_parser(sub)
    workflow_cmd.add_parsers(sub)   # run, submit, status, cancel
    warmup_cmd.add_parser(sub)      # compile every kernel ahead
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
        error(" ".join(str(exc).split()) or type(exc).__name__)  # our messages: names and counts only
        return EXIT_USAGE
    except (ValueError, OSError) as exc:  # another library's words: described, never quoted (they may quote a value)
        error(describe(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted; no release was committed by this run")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a defect: say so in one line, without the values a traceback may show
        if os.environ.get("DASKMICRO_DEBUG"):
            raise
        error(f"internal error ({describe(exc)}); nothing was committed; set DASKMICRO_DEBUG=1 for the traceback")
        return EXIT_INTERNAL
