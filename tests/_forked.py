"""Run a Python script in a fresh child process without paying for its imports each time.

The children are forked by multiprocessing's fork server: a clean process started once (not a fork
of pytest's, with its threads and captured streams) that imports ``preload`` and then forks one
single-threaded child per run.  Each child is a real process of its own: it sets its environment
and ``sys.argv``, runs the script as ``python -c`` would (``__name__ == "__main__"``) and ends with
its own exit status (an ``os._exit(137)`` inside the script is the child's status 137, with no
clean-up in between).  Used where a test kills a process at many points (the commit's crash points):
one interpreter start and one import of daskmicro per module instead of one per point."""

from __future__ import annotations

import multiprocessing
import os
import sys

_context = None


def _main(script: str, argv: list, env: dict) -> None:
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["-c", *argv]
    exec(compile(script, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})


def run_script(script: str, argv, env: dict, preload=(), timeout: float = 120) -> int:
    """Run ``script`` with ``argv`` and ``env`` in a forked child; its exit status (0 when it ends,
    1 on an uncaught exception, what it passes to ``os._exit`` otherwise)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["_forked", *preload])
    proc = _context.Process(target=_main, args=(script, [str(a) for a in argv], dict(env)))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise TimeoutError(f"the child did not end within {timeout} s")
    return proc.exitcode
