"""An executor with the part of :class:`distributed.Client`'s interface the planner uses, running
every task at once in the calling process.

The planner (:mod:`daskmicro.plan`) describes a run as tasks submitted to a client.  A small run
with no cluster asked for (a pandas DataFrame or one file, one-task groups) gives those same tasks
to :class:`InProcess` instead of starting a LocalCluster: the same plan, minus the start-up of
worker processes.  Delayed objects are computed with Dask's synchronous scheduler.
"""

from __future__ import annotations

__all__ = ["InProcess", "Done", "Finished"]


class Done:
    """A finished task: ``result()`` returns its value (the part of a Future the planner uses)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class Finished:
    """The in-process stand-in of :class:`distributed.as_completed`: tasks submitted here are done
    already, so they come out in the order they were added (also those added while iterating)."""

    def __init__(self):
        self._queue: list = []

    def add(self, future) -> None:
        self._queue.append(future)

    def __iter__(self):
        while self._queue:
            yield self._queue.pop(0)


def _resolve(x):
    if isinstance(x, Done):
        return x.value
    if isinstance(x, (list, tuple)):
        return type(x)(_resolve(v) for v in x)
    return x


class InProcess:
    """Run tasks immediately, in this process (see the module docstring)."""

    dashboard_link = None

    def submit(self, fn, *args, pure=None, key=None, **kwargs):
        return Done(fn(*[_resolve(a) for a in args], **{k: _resolve(v) for k, v in kwargs.items()}))

    def compute(self, x, **_):
        import dask

        if isinstance(x, (list, tuple)):
            values = dask.compute(*[_resolve(v) for v in x], scheduler="sync")
            return [Done(v) for v in values]
        return Done(dask.compute(_resolve(x), scheduler="sync")[0])

    def gather(self, x):
        if isinstance(x, (list, tuple)):
            return [_resolve(v) for v in x]
        return _resolve(x)

    def as_completed(self) -> Finished:
        """The submitted tasks in the order they finish (:class:`Finished`)."""
        return Finished()

    def scatter(self, data, **_):
        return data  # already here

    def cancel(self, futures, **_):
        return None

    def scheduler_info(self) -> dict:
        return {"workers": {}}

    def run(self, fn, *args, on_error: str = "raise", **kwargs) -> dict:
        """``fn`` on every worker, as ``distributed.Client.run``: here, the one process."""
        try:
            return {"in-process": fn(*args, **kwargs)}
        except Exception as e:
            if on_error == "raise":
                raise
            return {"in-process": e}


