"""The HTML page of a release on disk: where its JSON report is, where the page goes, writing it.

:func:`write_report` renders the page of any release a run wrote (a release file with its
``NAME.report.json``, a directory release with ``_report.json``, a demo directory with
``report.json``, a Delta table with the ``_report.json`` of its current version beside its log,
or the JSON itself) through :func:`daskmicro.report.html.render_html`.  Any of
them may be on an object store (``s3://…``, ``abfs://…``, ``gs://…``: a release object, a directory release committed there,
a report object), and the page may be written there: one object PUT whole.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError, describe
from ..io.delta import DELTA_LOG
from ..io.deltastore import REPORT as DELTA_REPORT
from .html import render_html

__all__ = ["find_report", "write_report"]


def find_report(path) -> tuple[Path, Path]:
    """The JSON report of a release and where its page goes by default: ``(report_json, html)``.

    ``path`` may be a report JSON itself (``X.json`` → ``X.html`` beside it), a release file
    (``NAME.report.json`` beside it → ``NAME.report.html``), a directory release (``_report.json``
    inside → ``DIR.report.html`` *beside* the directory, so a committed release is left as it
    was) or a demo / run directory (``report.json`` inside → ``report.html`` inside).  Raises
    :class:`~daskmicro.errors.InputError` when there is nothing there or no report in it.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "_report.json").is_file():
            from ..io.recovery import refuse_uncommitted

            if not (path / DELTA_LOG).is_dir():   # a Delta table is committed by its log, not by _SUCCESS
                refuse_uncommitted(path)  # the report of a release that was never committed is not shown
            named = path if path.name not in ("", ".", "..") else path.resolve()
            return path / "_report.json", named.with_name(named.name + ".report.html")
        if (path / "report.json").is_file():
            return path / "report.json", path / "report.html"
        raise InputError(f"no report.json or _report.json in directory: {path}")
    if path.is_file():
        if path.suffix.lower() == ".json":
            return path, path.with_suffix(".html")
        source = path.with_name(path.stem + ".report.json")
        if source.is_file():
            return source, source.with_suffix(".html")
        raise InputError(f"no report beside release file (looked for {source.name}): {path}")
    if path.suffix.lower() == ".json":
        raise InputError(f"report does not exist: {path}")
    raise InputError(f"release or run directory does not exist: {path}")


def _relinked(report: dict, relink) -> dict:
    """``report`` with each link to the Dask performance report (top level and ``paths``) replaced by
    ``relink(link)``; a link for which it returns None is kept."""
    report = dict(report)
    for holder in (report, report.get("paths") if isinstance(report.get("paths"), dict) else None):
        if holder is None or not holder.get("performance_report"):
            continue
        new = relink(str(holder["performance_report"]))
        if new is None:
            continue
        if holder is not report:
            holder = report["paths"] = dict(holder)
        holder["performance_report"] = new
    return report


def _rebase_links(report: dict, source: Path, target: Path) -> dict:
    """Relative links in ``report`` (to the Dask performance report) made relative to ``target``."""
    import os

    if source.resolve().parent == target.resolve().parent:
        return report

    def relink(link: str):
        if Path(link).is_absolute():
            return None
        absolute = (source.resolve().parent / link).resolve()
        return Path(os.path.relpath(absolute, target.resolve().parent)).as_posix()
    return _relinked(report, relink)


def _on_store(path, output, storage_options):
    """(report JSON bytes, page target) of a report on an object store or a page written there:
    the JSON itself, beside a release object (``NAME.report.json``), or inside the run prefix a
    directory release's ``_SUCCESS`` names; the page beside it on the store, or ``output``."""
    from ..io.objectcommit import RemoteTarget
    from ..io.objectfile import ObjectTarget
    from ..io.objectstore import is_remote

    if not is_remote(str(path)):
        source, page = find_report(path)
        text = source.read_bytes()
    else:
        url = str(path).rstrip("/")
        if url.lower().endswith(".json"):
            source = ObjectTarget(url, storage_options, "report")
            page = source.with_suffix(".html", "page")
        elif url.lower().endswith((".parquet", ".pq")):
            source = ObjectTarget(url, storage_options, "release").with_suffix(".report.json", "report")
            page = source.with_suffix(".html", "page")
        else:
            target = RemoteTarget(url, storage_options)
            manifest = target.read_manifest()
            if manifest is not None:
                source = ObjectTarget(f"{url}/{manifest['run']}/_report.json", storage_options, "report")
            elif target.holds(DELTA_LOG):   # a Delta table: its log commits it, its report lies beside the log
                source = ObjectTarget(f"{url}/{DELTA_REPORT}", storage_options, "report")
            else:
                raise InputError(f"not a committed release (no _SUCCESS naming its run, no {DELTA_LOG}/ of a "
                                 f"Delta table): {url}")
            page = ObjectTarget(url + ".report.html", storage_options, "page")
        text = source.fetch()
    if output is not None:
        page = ObjectTarget(str(output), storage_options, "page") if is_remote(str(output)) else Path(output)
    return text, source, page


def _rebase_on_store(report: dict, source, page) -> dict:
    """:func:`_rebase_links` for a report read from an object store: a relative link made relative
    to the page when the page lies in the same bucket or container, else the link's full URL."""
    import posixpath

    where, page = str(source).rsplit("/", 1)[0], str(page)

    def relink(link: str):
        if "://" in link or link.startswith("/"):
            return None
        url = f"{where}/{link}"
        scheme, _, key = url.partition("://")
        if not page.startswith(f"{scheme}://{key.split('/', 1)[0]}/"):
            return url
        return posixpath.relpath(key, page.partition("://")[2].rsplit("/", 1)[0])
    return _relinked(report, relink)


def _page_on_store(path, output, overwrite: bool, storage_options) -> object:
    """:func:`write_report` where the report or the page is on an object store: the page written
    whole as one object (conditional on the check before it is rendered), or locally."""
    from ..io.objectfile import is_object_target

    text, source, page = _on_store(path, output, storage_options)
    if not str(page).lower().endswith(".html"):
        raise InputError(f"--output must end in .html: {page}")
    if str(page) in (str(path).rstrip("/"), str(source)):
        raise InputError(f"output would replace its own input: {page}")
    report, private = _loaded(text, source)
    if private and is_object_target(page):   # an object has no owner-only mode: whoever reads the bucket reads it
        raise InputError(f"the page of a private run record shows its exact report and stays on this machine "
                         f"(owner-only), never on an object store: {page}; give a local --output")
    if is_object_target(page):
        page.check(overwrite, "use --overwrite to replace it")
    elif page.exists() and not overwrite:
        raise InputError(f"output exists (use --overwrite to replace it): {page}")
    if is_object_target(source):   # its links are relative to where it lies on the store
        report = _rebase_on_store(report, source, page)
    html = render_html(report)
    if is_object_target(page):
        page.write(html.encode("utf-8"))
    else:
        _write_page(html, page, private)
    return page


def _loaded(text: bytes, source) -> tuple[dict, bool]:
    """The report a JSON text holds, and whether it is private: a private run record's exact report."""
    try:
        report = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read {source}: {describe(exc)}") from None
    if not isinstance(report, dict):
        raise InputError(f"{source} does not hold a report object")
    if str(report.get("format", "")).startswith("daskmicro-run-record") and isinstance(report.get("report"), dict):
        report, private = report["report"], True   # a private run record: the page of its exact report (private too)
    else:
        private = False
    if "daskmicro_version" not in report:  # every report daskmicro writes names the version that wrote it
        raise InputError(f"{source} is not a daskmicro report (it has no daskmicro_version field)")
    return report, private


def _write_page(page: str, target: Path, private: bool = False) -> None:
    """Write ``page`` through a temporary file moved into place; a private page (the exact report
    of a run record, owner-only like the record) is created owner-only (0600)."""
    import os

    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(page)
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {target}: {describe(exc)}") from None


def write_report(path, output=None, *, overwrite: bool = True, storage_options=None):
    """Render the HTML page of a run's JSON report; returns the HTML path.

    ``path`` is anything :func:`find_report` accepts (a release file, a directory release, a
    demo directory or a report JSON — a private run record's JSON gives the page of its exact
    report, private like the record: written owner-only on this machine, refused on an object
    store); the page goes to ``output`` when given, else where :func:`find_report` says.  With ``overwrite=False`` an existing page is refused.  The page
    is written to a temporary file and moved into place, so on error nothing is written and an
    earlier page is left untouched.  Raises :class:`~daskmicro.errors.InputError` naming the
    file when the report is missing or unreadable.
    """
    from ..io.objectstore import is_remote
    from ..io.paths import release_around

    if is_remote(str(path)) or (output is not None and is_remote(str(output))):
        return _page_on_store(path, output, overwrite, storage_options)
    source, target = find_report(path)
    if output is not None:
        target = Path(output)
        if target.is_dir() or str(output).endswith(("/", "\\")):
            raise InputError(f"--output must be a file path, not a directory: {output}")
        if target.suffix.lower() != ".html":
            raise InputError(f"--output must end in .html: {output}")
        if not target.parent.is_dir():
            raise InputError(f"directory of --output does not exist: {target.parent}")
    if target.resolve() == Path(path).resolve() or target.resolve() == source.resolve():
        raise InputError(f"output would replace its own input: {target}")
    release = release_around(target)
    if release is not None:   # the committed release is not changed
        raise InputError(f"the page would lie inside the committed release {release}: {target} (use --output elsewhere)")
    if target.exists() and not overwrite:
        raise InputError(f"output exists (use --overwrite to replace it): {target}")
    try:
        text = source.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {source}: {describe(exc)}") from None
    report, private = _loaded(text, source)
    _write_page(render_html(_rebase_links(report, source, target)), target, private)
    return target
