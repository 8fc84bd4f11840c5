"""How far a first run's kernel compile has got, for the CLI's live progress line.

The compile runs where the run's kernels run — in the calling process, or in every worker process
of a LocalCluster (:func:`daskmicro.runtime.warmup.warm_workers`) — while the calling process
waits.  So the processes that compile say how far they are through a folder every process of the
machine sees (:func:`watch` makes it, and removes it afterwards): :class:`Marks` leaves an empty
file ``<unit>.done`` there as each unit of :mod:`daskmicro.runtime.warmup` is compiled or loaded,
and ``_compiling`` once numba starts compiling anything (a run that only loads the cache never
leaves it).  The caller counts the files: ``compiling the kernels once: 3 of 7 units (12 s)``.

Workers on other machines do not see the folder: their marks are silently not written, and the
line stays the plain one.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["Marks", "watch", "status_text", "COMPILING"]

#: The mark left once numba compiles anything (a unit's ``.done`` mark alone may be a cache load).
COMPILING = "_compiling"


def _touch(path: Path) -> None:
    try:
        path.touch()
    except OSError:   # the folder is not on this machine, or gone: no progress to show, nothing wrong
        pass


class Marks:
    """The marks of one process in the folder ``where`` (a path from :func:`watch`)."""

    def __init__(self, where: str):
        self.where = Path(where)
        self._compiling = False

    def done(self, unit: str, compiled: bool = False) -> None:
        """Unit ``unit`` is compiled (or loaded from the cache) in this process."""
        _touch(self.where / f"{unit}.done")

    def listener(self):
        """A numba event listener (for ``numba:compile``) that leaves :data:`COMPILING` at the first compile."""
        from numba.core import event

        marks = self

        class _Started(event.Listener):
            def on_start(self, _event):
                if not marks._compiling:
                    marks._compiling = True
                    _touch(marks.where / COMPILING)

            def on_end(self, _event):
                pass

        return _Started()


def status_text(where: str | Path, total: int, seconds: float) -> str | None:
    """The live line while units are compiled into ``where``'s processes, or None while nothing is
    being compiled (a cache load shows the plain line)."""
    where = Path(where)
    try:
        if not (where / COMPILING).exists():
            return None
        done = sum(1 for p in where.iterdir() if p.name.endswith(".done"))
    except OSError:
        return None
    return f"compiling the kernels once: {min(done, total)} of {total} units ({seconds:.0f} s)"


@contextlib.contextmanager
def watch(progress, total: Callable[[], int]) -> Iterator[str | None]:
    """A fresh marks folder for a compile of ``total()`` units, shown on ``progress``'s live line while
    the block runs (``progress.status``, :class:`daskmicro.cli.common.StageProgress`); yields None —
    no marks — when ``progress`` has no live line to show them on."""
    status: Callable | None = getattr(progress, "status", None)
    if status is None or not getattr(progress, "live", False):
        yield None
        return
    units = int(total())
    where = tempfile.mkdtemp(prefix="daskmicro-compile-")
    status(lambda seconds: status_text(where, units, seconds))
    try:
        yield where
    finally:
        status(None)
        shutil.rmtree(where, ignore_errors=True)
