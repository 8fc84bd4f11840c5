"""Delta Lake tables on an object store (``s3://BUCKET/PREFIX``): a release committed as a version
of the table there (``table_format="delta"``), and a table there read as its current version.

A Delta table commits a version by one object of its log (``_delta_log/NNN….json``), PUT only if
no object of that name exists (``If-None-Match: *``, ``deltalake``'s ``conditional_put``): two
writers of one version cannot both succeed, so no rename and no lock are needed.  A release to a
table on the store (:class:`DeltaTableTarget`):

* its files are written and verified by the workers under a run prefix of the table
  (``.run-<16 hex>/``, :mod:`daskmicro.io.objectcommit`), which no Delta reader reads;
* :func:`daskmicro.io.delta.commit_delta` streams them into one Delta transaction, the next
  version after the one the run found before any work (a table changed meanwhile is refused in one
  line), reads that version back from the store and checks it again;
* the run prefix is deleted, whatever the outcome, and ``_report.json`` is PUT beside the log.

Nothing is written outside the table's prefix, and nothing there is deleted but run prefixes (this
run's, and those interrupted runs left, as for a Parquet release) and what a version that failed
its read-back check wrote; ``_report.json`` is replaced by each version's.  A table on the store as input (:func:`delta_listing`)
is read as the files its log names for the current version, never those of earlier versions.
"""

from __future__ import annotations

from urllib.parse import unquote

from ..errors import InputError, ParameterError, describe
from .delta import DELTA_LOG, MISSING_WRITE, check_versions, current_files, is_commit_file, load_deltalake
from .objectcommit import RemoteTarget, run_prefix_of

__all__ = ["DeltaTableTarget", "is_delta_target", "is_delta_prefix", "delta_listing", "REPORT"]

#: The release's report, beside the table's log.
REPORT = "_report.json"


def is_delta_target(obj) -> bool:
    return isinstance(obj, DeltaTableTarget)


def is_delta_prefix(names) -> bool:
    """Whether the names under a prefix of a store are those of a Delta table (a ``_delta_log/``)."""
    return any(str(n).startswith(DELTA_LOG + "/") for n in names)


class DeltaTableTarget(RemoteTarget):
    """A Delta table on an object store that a release is committed to as its next version: what
    :func:`daskmicro.io.delta.commit_delta` asks of a table (``uri``, ``options``, ``url``,
    :meth:`expected_version`, :meth:`relative`, :meth:`remove_table`, :meth:`remove_files`,
    :meth:`scrub`), and the run prefix its files are staged under (:meth:`open_run`)."""

    def __init__(self, url: str, storage_options=None, recorded: bool = False):
        super().__init__(url, storage_options)
        self.recorded = recorded   # this run's release is recorded in the release ledger (else a trial)
        self.options = self.store.table_options("a Delta table on an object store")
        self.uri = f"{self.store.protocol}://{self.root}"
        self._expected = None   # the version check() found (None: no table)
        self._checked = False

    def check(self, overwrite: bool, hint: str = "a Delta table: use --overwrite to make its next version") -> None:
        """Refuse a prefix holding objects but no Delta table, a log that is no readable table, and a
        table without ``overwrite``; record the version found (the one the release follows)."""
        names = self.listing()
        others = sorted(n for n in names if run_prefix_of(n) is None and not n.startswith(DELTA_LOG + "/"))
        if not is_delta_prefix(names):
            if others:
                raise ParameterError(f"output {self.url} holds objects and is not a Delta table (e.g. {others[0]}); "
                                     "write a Delta table (table_format 'delta') to an empty prefix or to a table")
            self._expected, self._checked = None, True
            return
        version = self._version()
        if not overwrite:
            raise ParameterError(f"output already exists: {self.url} ({hint})")
        check_versions(self._log_commits(), self.url, self.recorded)
        self._expected, self._checked = version, True

    def _version(self) -> int:
        deltalake = load_deltalake(MISSING_WRITE)
        try:
            return int(deltalake.DeltaTable(self.uri, storage_options=self.options).version())
        except Exception as exc:  # a damaged log, the store's own errors
            raise ParameterError(f"output {self.url} holds a {DELTA_LOG}/ that is not a readable Delta table: "
                                 f"{self.scrub(describe(exc))}") from None

    def _log_commits(self) -> list:
        """``(name, text)`` of the commit files of the table's log (read here, not by deltalake)."""
        fs = self._filesystem()
        try:
            names = sorted(n for n in (k.rsplit("/", 1)[-1] for k in fs.find(f"{self.root}/{DELTA_LOG}"))
                           if is_commit_file(n))
            return [(n, fs.cat_file(f"{self.root}/{DELTA_LOG}/{n}").decode("utf-8", "replace")) for n in names]
        except Exception as exc:
            raise self._failed("read the log of", exc) from None

    def expected_version(self, deltalake=None):
        """The version this run's release follows, as :meth:`check` found it (None: a new table)."""
        if not self._checked:
            self.check(True)
        return self._expected

    def relative(self, uri: str) -> str:
        """A file URI of the table as a name below it."""
        prefix = self.uri + "/"
        return unquote(uri[len(prefix):]) if uri.startswith(prefix) else uri

    def remove_table(self) -> None:
        """Delete the table this run created (every object under the target but run prefixes)."""
        keys = [f"{self.root}/{n}" for n in self.listing() if run_prefix_of(n) is None]
        if keys:
            self._filesystem().rm(keys)

    def remove_files(self, names) -> None:
        keys = [f"{self.root}/{n}" for n in names]
        if keys:
            self._filesystem().rm(keys)

    def scrub(self, text: str) -> str:
        return self.store.scrub(text)

    @property
    def report_url(self) -> str:
        return f"{self.url}/{REPORT}"

    def put_report(self, data: bytes) -> None:
        """The release's report beside the table's log (replacing the previous version's)."""
        self.put_beside(REPORT, data, "the report")

    def put_beside(self, name: str, data: bytes, what: str) -> None:
        """The object ``name`` beside the table's log (the report, the Dask performance report),
        replacing the previous version's."""
        try:
            self._filesystem().pipe_file(f"{self.root}/{name}", data)
        except Exception as exc:
            raise self._failed(f"write {what} of", exc) from None


def delta_listing(store, root: str, url: str, listing: list) -> list:
    """The ``(key, bytes, etag)`` of the Parquet objects of the current version of the Delta table
    at ``url`` (``root`` its key on ``store``; ``listing`` every Parquet object below it), as its log
    names them: never those of earlier versions.  Refused in one line: an unreadable log, a table
    whose files are not its rows, a file missing or outside the prefix."""
    uri = f"{store.protocol}://{root}"
    found = {key: (key, size, etag) for key, size, etag in listing}
    out = []
    for u in current_files(uri, store.table_options("a Delta table input"), url, store.scrub):
        if not u.startswith(uri + "/"):
            raise InputError(f"the Delta table {url} names a file outside its prefix (daskmicro reads only the "
                             "files under it)")
        rel = u[len(uri) + 1:]
        entry = found.get(f"{root}/{rel}") or found.get(f"{root}/{unquote(rel)}")
        if entry is None:
            raise InputError(f"the Delta table {url} is incomplete: {unquote(rel)} is missing")
        out.append(entry)
    return sorted(out)
