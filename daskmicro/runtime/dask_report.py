"""The Dask performance report of a cluster run, kept next to the run's own report.

:class:`DaskPerformanceReport` wraps :class:`distributed.performance_report` (task stream,
worker profile, bandwidth, scheduler statistics; needs ``bokeh``) around the cluster work and
holds the page in memory; the caller then writes it with the rest of the outputs, so that a
failed run leaves no stray file.  The page embeds BokehJS (``mode="inline"``), so it opens
without network access, like the run report that links to it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ..errors import describe

__all__ = ["DaskPerformanceReport", "performance_report_path", "relative_link"]

#: Name of the performance report inside a directory output (lake or demo run directory).
LAKE_NAME = "_dask-report.html"


def performance_report_path(report_path) -> Path:
    """Where the performance report of a file output goes: ``<report stem>.dask.html`` beside it."""
    report_path = Path(report_path)
    return report_path.with_name(report_path.stem + ".dask.html")


def relative_link(target, report_path) -> str:
    """``target`` relative to the directory of ``report_path`` (the link the HTML report holds)."""
    return Path(os.path.relpath(Path(target).resolve(), Path(report_path).resolve().parent)).as_posix()


class DaskPerformanceReport:
    """Record a Dask performance report around a block; the page ends up in :attr:`html`.

    Examples
    --------
    >>> perf = DaskPerformanceReport(enabled=True)            # doctest: +SKIP
    >>> with perf.record():
    ...     release, report = anonymize(ddf, qi, k, client=client)
    >>> perf.write("run/report.dask.html")
    """

    def __init__(self, enabled: bool = False):
        self.enabled = bool(enabled)
        self.html: str | None = None
        self.error: str | None = None

    @contextlib.contextmanager
    def record(self):
        """Context manager: the work inside is profiled when enabled; nothing is written."""
        if not self.enabled:
            yield self
            return
        from distributed import performance_report

        with tempfile.TemporaryDirectory(prefix="daskmicro-perf-") as tmp:
            path = Path(tmp) / "dask-report.html"
            recorder = performance_report(filename=str(path), mode="inline")
            recorder.__enter__()
            try:
                yield self
            except BaseException:
                with contextlib.suppress(Exception):
                    recorder.__exit__(None, None, None)
                raise
            try:
                recorder.__exit__(None, None, None)
                self.html = path.read_text(encoding="utf-8")
            except Exception as exc:  # e.g. bokeh missing on the scheduler: the run itself is fine
                self.error = f"Dask performance report not written: {describe(exc)}"

    @property
    def available(self) -> bool:
        return self.html is not None

    def page(self) -> bytes | None:
        """The page's bytes (UTF-8), for an object of a store; None when there is none."""
        return None if self.html is None else self.html.encode("utf-8")

    def stage(self, batch, target) -> Path | None:
        """Stage the page for ``target`` in an :class:`~daskmicro.io.tables.AtomicBatch`."""
        if self.html is None:
            return None
        html = self.html
        return batch.text(html, Path(target))

    def write(self, target) -> Path | None:
        """Write the page to ``target`` (temporary file, then rename)."""
        if self.html is None:
            return None
        target = Path(target)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(self.html, encoding="utf-8")
        os.replace(tmp, target)
        return target
