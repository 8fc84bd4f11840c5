"""An interrupt (Ctrl-C, SIGINT, SIGTERM) stops a run before it commits, whatever swallowed it.

Python turns SIGINT into a ``KeyboardInterrupt`` at whatever the main thread is executing; while
a run waits on Dask that may be a callback of the client's event loop, which logs and swallows
it, and the run would go on to commit as if nothing had happened.  :func:`install` records the
request as well as raising, and every commit point calls :func:`check` just before it renames
anything into place (:func:`daskmicro.io.commit.commit`,
:meth:`daskmicro.io.tables.AtomicBatch.commit`): a run that was asked to stop never commits.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["install", "request", "requested", "check", "reset"]

_REQUESTED = threading.Event()


def request() -> None:
    """Record that the run must stop."""
    _REQUESTED.set()


def requested() -> bool:
    return _REQUESTED.is_set()


def reset() -> None:
    _REQUESTED.clear()


def check() -> None:
    """Raise ``KeyboardInterrupt`` if the run was asked to stop."""
    if _REQUESTED.is_set():
        raise KeyboardInterrupt("interrupted before the commit")


def _handler(signum, frame):
    request()
    raise KeyboardInterrupt


def install() -> None:
    """Handle SIGINT and SIGTERM by recording the request and raising ``KeyboardInterrupt``
    (main thread only; elsewhere nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        return
    reset()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, _handler)
        except (ValueError, OSError):  # pragma: no cover - not allowed here
            pass
