"""What every sub-command of ``daskmicro`` shares: the parser class whose errors are one line,
argument types, the stage printer, cluster options and TLS, the output check."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ParameterError

__all__ = ["PROG", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "Parser", "int_at_least", "positive_int",
           "non_negative_int", "stage_printer", "StageProgress", "user_step", "add_output_options", "error", "check_target", "add_cluster_options", "security_from_args"]

PROG = "daskmicro"
EXIT_USAGE = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line, like every other error of the CLI."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


def int_at_least(minimum: int):
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


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def stage_printer(stage: str, seconds: float) -> None:
    """``progress(stage, seconds)`` of the planner: one line per stage as it ends, on stderr."""
    print(f"  {stage:<17} {seconds:7.2f} s", file=sys.stderr, flush=True)


def add_output_options(p) -> None:
    """``--quiet`` and ``--verbose`` of the commands that run a release."""
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (step lines, live line on a terminal, "
                   "notices); the summary and errors still print")
    p.add_argument("--verbose", action="store_true", help="also how Dask ran it: each stage of the pipeline with its "
                   "time, the dashboard's address, and in the summary the microaggregation time, kernel load or "
                   "compile and the pipeline's layout (top cells, partitions, macrocells, workers)")


#: The steps a user sees, in the order they come: the planner's stages (Dask's) fold into them.
_STEPS = (("checking the input", ("pre-scan", "scan")),
          ("reading", ("ingest", "read")),
          ("preparing", ("kernel",)),
          ("writing + checking", ("write", "collect", "publish", "verify")),
          ("committing", ("commit",)),
          ("comparing with exact MDAV", ("reference",)),
          ("measuring the disclosure risk", ("risk",)))


def user_step(stage: str) -> str:
    """The user-level step of a planner stage: checking the input, preparing, reading, grouping (every stage that forms
    or improves the groups: the pipeline's top level, fan-out, improvement, gather …), writing +
    checking, committing, comparing with exact MDAV, measuring the disclosure risk."""
    name = stage.strip().lower()
    for step, starts in _STEPS:
        if any(name.startswith(start) for start in starts):
            return step
    return "grouping"


class StageProgress:
    """The CLI's progress: ``progress(stage, seconds)`` of the planner, and ``say(line)``.

    On a terminal a live line shows that work is going on and for how long (refreshed every
    0.2 s once a stage has run for a second) — during a first run's kernel compile, how many of its
    units are done (:meth:`status`) — replaced by each step's final line when it ends,
    so there is no silent gap; elsewhere (a pipe, a log file) only the final lines; with
    ``quiet`` nothing at all — no log line of Dask and no warning either
    (:func:`daskmicro.runtime.cluster.quiet_run`).  Use as a context manager around the run.

    The final lines name the user's steps (:func:`user_step`: reading, grouping, writing +
    checking, committing), each with the time of the stages it folds together; with ``verbose``
    the planner's own stages instead (``top_level``, ``fan_out``, ``gather`` …) and the notices of
    Dask (the dashboard's address).
    """

    FRAMES = "|/-\\"
    #: Notices shown only with ``verbose``: how Dask runs, not what the run does.
    DASK_NOTICES = ("dask dashboard",)

    def __init__(self, quiet: bool = False, stream=None, live: bool | None = None, after: float = 1.0,
                 verbose: bool = False):
        import threading

        self.stream = sys.stderr if stream is None else stream
        self.quiet = bool(quiet)
        self.verbose = bool(verbose) and not self.quiet
        self._step: list | None = None    # [name, seconds] of the step under way (plain lines)
        self.live = (not self.quiet) and (self.stream.isatty() if live is None else bool(live))
        self.after = after
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._since = 0.0
        self._shown = False
        self._status = None   # text(seconds) of the live line while set (status)
        self._frame = 0

    def __enter__(self):
        import contextlib
        import threading
        import time

        from ..runtime.cluster import quiet_run

        self._quiet = contextlib.ExitStack()
        self._quiet.enter_context(quiet_run(self.quiet))  # no log line or warning either
        self._since = time.perf_counter()
        if self.live:
            self._thread = threading.Thread(target=self._tick, name="daskmicro-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        with self._lock:
            self._clear()
            self._end_step()
        self._quiet.close()
        return False

    def _line(self, name: str, seconds: float) -> None:
        print(f"  {name:<18} {seconds:7.2f} s", file=self.stream, flush=True)

    def _end_step(self) -> None:
        if self._step is not None:
            self._line(*self._step)
            self._step = None

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False

    def _draw(self, elapsed: float) -> None:
        """One frame of the live line (the lock held)."""
        text = self._status(elapsed) if self._status is not None else None
        self.stream.write(f"\r\033[K  {self.FRAMES[self._frame % 4]} {text or f'working … {elapsed:6.1f} s'}")
        self.stream.flush()
        self._shown = True
        self._frame += 1

    def _tick(self) -> None:
        import time

        while not self._stop.wait(0.2):
            elapsed = time.perf_counter() - self._since
            if elapsed < self.after:
                continue
            with self._lock:
                self._draw(elapsed)

    def status(self, text=None) -> None:
        """While ``text`` is set, the live line shows ``text(seconds)`` — the seconds of the step
        under way — whenever it gives a line, instead of ``working … N s``; ``None`` ends it, drawing
        its last line once more so that where it got to is seen (the kernel compile's units done)."""
        import time

        with self._lock:
            if text is None and self._status is not None and self.live and not self._stop.is_set():
                if self._status(time.perf_counter() - self._since):
                    self._draw(time.perf_counter() - self._since)
            self._status = text

    def __call__(self, stage: str, seconds: float) -> None:
        import time

        if self.quiet:
            return
        with self._lock:
            self._clear()
            if self.verbose:
                self._line(stage, seconds)
            else:   # the step's line when the next step begins (or at the end)
                step = user_step(stage)
                if self._step is not None and self._step[0] != step:
                    self._end_step()
                if self._step is None:
                    self._step = [step, 0.0]
                self._step[1] += float(seconds)
            self._since = time.perf_counter()

    def say(self, line: str) -> None:
        """A notice of the run (swept staging folders, the private run record), unless quiet;
        Dask's (the dashboard's address) only with ``verbose``."""
        if self.quiet or (not self.verbose and line.startswith(self.DASK_NOTICES)):
            return
        with self._lock:
            self._clear()
            self._end_step()
            print(f"{PROG}: {line}", file=self.stream, flush=True)


def error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def check_target(path: Path, overwrite: bool, what: str, inputs=()) -> None:
    """One output of a command checked by the rule every command shares (:mod:`daskmicro.io.paths`)."""
    from ..io.paths import Output, check_outputs

    check_outputs(inputs, [Output(path, what)], overwrite)


def add_cluster_options(p) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask cluster at ADDRESS (tcp://host:8786 or tls://…); default: a LocalCluster for this run")
    g.add_argument("--workers", type=positive_int, metavar="N", help="LocalCluster: number of worker processes (default: cores, at most 8)")
    g.add_argument("--memory-limit", metavar="SIZE", help="LocalCluster: memory limit of each worker (e.g. 3GiB); "
                   "past 60%% of it Dask spills held results to disk (default: from the task size, see README)")
    g.add_argument("--spill-dir", metavar="DIR", help="LocalCluster: directory where the workers spill (default: "
                   "Dask's temporary directory)")
    g.add_argument("--tls-ca-file", metavar="PEM", help="TLS: CA certificate to trust")
    g.add_argument("--tls-cert", metavar="PEM", help="TLS: client certificate")
    g.add_argument("--tls-key", metavar="PEM", help="TLS: client private key")


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
    from ..runtime.cluster import tls_security

    return tls_security(args.tls_ca_file, args.tls_cert, args.tls_key)
