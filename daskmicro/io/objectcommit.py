"""A directory release on an object store (``s3://BUCKET/PREFIX``, ``abfs://CONTAINER/PREFIX``,
``gs://BUCKET/PREFIX``), committed without a rename.

An object store has no rename and no directories, but one PUT of an object is atomic: the
``_SUCCESS`` manifest, written last, is the commit.  Layout of a target ``s3://b/out``::

    s3://b/out/_SUCCESS                                  the manifest (written last: the commit)
    s3://b/out/.run-<16 hex>/[col=value/]part-NNNNN.parquet   the release's files
    s3://b/out/.run-<16 hex>/_report.json                the release's report
    s3://b/out/.run-<16 hex>/_daskmicro_owner.json       while the run writes (process, machine)
    s3://b/out/.run-<16 hex>/_shuffle/, _counts/         while the run writes (removed before the commit)

Every run writes under a run prefix of its own (:meth:`RemoteTarget.open_run`), so the objects
of the committed release are never overwritten.  The written files are read back from the store
and verified (:func:`daskmicro.graph.release.write_and_verify`: rows in = rows out, each row once,
the promised schema, every published tuple at least k times, and the bytes read back the bytes
written); only then is ``_SUCCESS`` PUT at the target root (:meth:`RemoteTarget.commit`), naming
the run prefix and every file with its rows, size and SHA-256.  After that the objects of the
release it replaces are deleted.  Readers (:func:`release_listing`) read only the files a
manifest lists; a target with run prefixes and no manifest is refused.

A run that fails deletes its run prefix (its owner object first, then every object listed after
that); a write a worker still had under way then (it cannot be stopped) checks, once its object is
PUT, that the owner object is still there, and deletes its object if not (:func:`put_in_run`), so
nothing of the failed run outlives it.  A run that is killed leaves its prefix, and the next run to
the target deletes every run prefix no manifest names whose owner process is gone (or that has no
owner object) (:meth:`RemoteTarget.sweep`).  Nothing but ``_SUCCESS`` and ``.run-<16 hex>/…``
objects under the target is ever deleted, and a target holding any other object is refused.
Two runs into one target: the ``_SUCCESS`` PUT is conditional on the state the run checked
before any work (no manifest there, or the version of the manifest it replaces: its ETag, on GCS
its generation; :func:`~daskmicro.io.objectfile.conditional_put`), so the first run to commit wins and the other fails in one line, deleting its own run
prefix; a store that does not take conditional writes gets a plain PUT (the last manifest wins, and
the other run's objects are swept later).  Multipart uploads a run left unfinished under a run
prefix it deletes are aborted with it (on S3; Azure drops uncommitted blocks and GCS unfinished
uploads by themselves after a week).
"""

from __future__ import annotations

import atexit
import json
import re
import uuid

from ..errors import InputError, ParameterError, describe, masked_path
from .journal import fault
from .objectfile import Conflict, OnStore, conditional_put
from .objectstore import Store, check_url, shown_url, store_for
from .recovery import MANIFEST_FORMAT, OWNER, SUCCESS, owner_alive, owner_record

__all__ = ["RUN_PREFIX", "LIVE", "RemoteTarget", "RemoteRun", "put_in_run", "is_release_prefix", "release_listing", "is_remote_target",
           "run_prefix_of", "MANIFEST_FORMAT"]

#: The name of a run prefix: ``.run-`` and 16 hex digits.
RUN_PREFIX = ".run-"
_RUN = re.compile(r"^\.run-[0-9a-f]{16}$")


def is_remote_target(obj) -> bool:
    return isinstance(obj, RemoteTarget)


def _run_of(rel: str):
    """The run prefix an object (``rel``, relative to the target) lies under, or None."""
    head, sep, _ = rel.partition("/")
    return head if sep and _RUN.match(head) else None


def run_prefix_of(rel: str):
    """The run prefix (``.run-<16 hex>``) an object ``rel`` (relative to a target) lies under, or None."""
    return _run_of(rel)


def is_release_prefix(names) -> bool:
    """Whether the names under a prefix are those of a release written to the store here."""
    return any(_run_of(n) for n in names)


def _manifest_of(text) -> dict | None:
    """A manifest this module wrote (its run prefix named), else None."""
    try:
        doc = json.loads(text)
    except (ValueError, TypeError):
        return None
    ok = isinstance(doc, dict) and doc.get("format") == MANIFEST_FORMAT and _RUN.match(str(doc.get("run", "")))
    return doc if ok else None


def release_listing(store: Store, root: str, shown: str) -> tuple:
    """The input of a release on the store (a prefix whose names :func:`is_release_prefix`):
    (run prefix, [(key, bytes, etag)] of the files its manifest lists, names under the run prefix).
    Refused in one line: no manifest naming a run (an interrupted run), a listed file missing or
    of another size."""
    fs = store.filesystem(fresh=True)
    try:
        manifest = _manifest_of(fs.cat_file(f"{root}/{SUCCESS}"))
    except FileNotFoundError:
        manifest = None
    except Exception as exc:
        raise InputError(f"cannot read {shown}/{SUCCESS}: {store.scrub(describe(exc))}") from None
    if manifest is None:
        raise InputError(f"not a committed release (no {SUCCESS} naming its run; an interrupted run?): {shown}")
    base = f"{root}/{manifest['run']}"
    try:
        found = fs.find(base, detail=True)
    except Exception as exc:
        raise InputError(f"cannot list {shown}: {store.scrub(describe(exc))}") from None
    listing = []
    for entry in manifest.get("files", []):
        if not isinstance(entry.get("path"), str) or any(seg in ("", ".", "..") for seg in entry["path"].split("/")):
            raise InputError(f"release {shown}: its {SUCCESS} lists a file outside its run prefix")
        key = f"{base}/{entry['path']}"
        info = found.get(key)
        if info is None or int(info.get("size") or 0) != int(entry.get("bytes", -1)):
            raise InputError(f"release {shown} is incomplete: {entry['path']} is missing or changed")
        listing.append((key, int(info.get("size") or 0), store.version(info)))
    return base, listing, {k[len(base) + 1:] for k in found} | {SUCCESS}


class RemoteTarget(OnStore):
    """The target of a directory release on an object store: its URL (as shown), store and key."""

    def __init__(self, url: str, storage_options=None):
        self.store, self.root = store_for(url, storage_options)
        self.url = shown_url(url).rstrip("/")
        self._fs = None
        self._seen = None   # (ETag of the _SUCCESS seen by check(), or None for none): what commit replaces
        self.what = "output"

    def __str__(self) -> str:
        return self.url

    __repr__ = __str__

    def listing(self) -> dict:
        """``{name below the target: size}``; refuses a missing bucket or an unreadable listing."""
        fs = self._filesystem()
        bucket = self.root.split("/", 1)[0]
        try:
            fs.invalidate_cache()
            if not fs.exists(bucket):
                raise ParameterError(f"output: {self.store.place} not found: {self.url}")
            found = fs.find(self.root, detail=True) if "/" in self.root else fs.find(bucket, detail=True)
        except ParameterError:
            raise
        except Exception as exc:  # the store library's own errors (no credentials, access denied, ...)
            raise self._failed("list", exc) from None
        return {k[len(self.root) + 1:]: int(v.get("size") or 0) for k, v in found.items()
                if k.startswith(self.root + "/")}

    def read_manifest(self) -> dict | None:
        """The manifest of the release committed here, or None."""
        try:
            text = self._filesystem().cat_file(f"{self.root}/{SUCCESS}")
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._failed("read the manifest of", exc) from None
        return _manifest_of(text)

    def holds(self, name: str) -> bool:
        """Whether an object or a prefix ``name`` lies below the target."""
        try:
            return bool(self._filesystem().exists(f"{self.root}/{name}"))
        except Exception as exc:
            raise self._failed("read", exc) from None

    def check(self, overwrite: bool, hint: str = "use --overwrite to replace it") -> None:
        """Refuse a target holding objects that are not daskmicro's, or a committed release
        (unless ``overwrite``)."""
        names = self.listing()
        foreign = sorted(n for n in names if n != SUCCESS and _run_of(n) is None)
        if foreign:
            raise ParameterError(f"output {self.url} holds objects that daskmicro did not write (e.g. {foreign[0]}); "
                                 "write the release to an empty prefix or to one of its own")
        if SUCCESS in names and self.read_manifest() is None:
            raise ParameterError(f"output {self.url} holds a {SUCCESS} that daskmicro did not write there")
        if SUCCESS in names and not overwrite:
            raise ParameterError(f"output already exists: {self.url} ({hint})")
        self._seen = (self._manifest_etag() if SUCCESS in names else None,)

    def _manifest_etag(self) -> str | None:
        try:
            info = self._filesystem().info(f"{self.root}/{SUCCESS}", refresh=True)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._failed("read the manifest of", exc) from None
        return self.store.version(info) or None

    def against(self, url, what: str = "the input") -> None:
        """Refuse a target that is ``url``, lies inside it or around it."""
        try:
            _, root = check_url(str(url))
        except ParameterError:
            return
        if root == self.root or root.startswith(self.root + "/") or self.root.startswith(root + "/"):
            raise ParameterError(f"output {self.url} is {what} or lies inside or around it")

    def _delete_run(self, name: str) -> None:
        """Delete every object under the run prefix ``name`` (nothing else): its owner object first,
        then whatever a listing made after that finds.  A write still under way on a worker
        (:func:`put_in_run`) that lands after the listing finds no owner and deletes its own object."""
        if not _RUN.match(name):
            raise ValueError(f"not a run prefix: {name}")
        fs = self._filesystem()
        try:
            fs.rm(f"{self.root}/{name}/{OWNER}")
        except Exception:  # none (a committed run's), or not deletable: the rest goes all the same
            pass
        fs.invalidate_cache()
        keys = [f"{self.root}/{n}" for n in self.listing() if _run_of(n) == name]
        self._abort_uploads(name)
        if keys:
            fs.rm(keys)

    def _abort_uploads(self, name: str) -> None:
        """Abort the multipart uploads left unfinished under the run prefix ``name`` (a writer killed
        mid-upload): their parts are invisible but kept, and billed, until aborted.  S3 only: the
        other stores drop what an unfinished upload left by themselves."""
        if self.store.kind != "s3":
            return
        fs = self._filesystem()
        bucket, _, root = self.root.partition("/")
        prefix = f"{root}/{name}/" if root else f"{name}/"
        try:
            found = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
            for upload in found.get("Uploads", []):
                if upload["Key"].startswith(prefix):
                    fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        except Exception:  # a store without the call: the parts expire by the bucket's own rules
            pass

    def sweep(self) -> list:
        """Delete the run prefixes that no manifest names and whose writer is gone; the notices."""
        names = self.listing()
        manifest = self.read_manifest() if SUCCESS in names else None
        keep = manifest["run"] if manifest else None
        runs = sorted({r for r in map(_run_of, names) if r is not None and r != keep})
        removed = []
        for run in runs:
            owner = None
            if f"{run}/{OWNER}" in names:
                try:
                    owner = json.loads(self._filesystem().cat_file(f"{self.root}/{run}/{OWNER}"))
                except Exception:
                    owner = None
            if owner_alive(owner):
                continue
            self._delete_run(run)
            removed.append(run)
        if not removed:
            return []
        return [f"removed {len(removed)} run prefix(es) of {self.url} left by an interrupted run: {', '.join(removed)}"]

    def open_run(self) -> "RemoteRun":
        """A fresh run prefix, its owner object written first."""
        run = RemoteRun(self, f"{RUN_PREFIX}{uuid.uuid4().hex[:16]}")
        run.put(OWNER, json.dumps(owner_record()).encode())
        _remember(run)
        return run

    def commit(self, run: "RemoteRun", manifest: dict) -> None:
        """PUT ``_SUCCESS`` (``manifest`` with the run prefix): the commit; then delete the release
        it replaces.  :func:`~daskmicro.io.journal.fault` points ``s3.staged``, ``s3.published``."""
        from .formats import dump_json
        from .interrupt import check as check_interrupt

        text = dump_json(dict(manifest, run=run.name))
        check_interrupt()     # a run asked to stop never commits
        expected = self._seen[0] if self._seen is not None else self._manifest_etag()
        previous = self.read_manifest() if expected is not None else None
        fault("s3.staged")
        self._put_manifest(text.encode("utf-8"), expected)
        run.done = True
        fault("s3.published")
        try:
            self._filesystem().rm(run.key(OWNER))
            if previous is not None and previous["run"] != run.name:
                self._delete_run(previous["run"])
        except Exception:  # committed: what is left is swept by the next run
            pass

    def _put_manifest(self, data: bytes, expected: str | None) -> None:
        """PUT ``_SUCCESS`` if it is still as :meth:`check` saw it (absent, or of ETag ``expected``;
        :func:`~daskmicro.io.objectfile.conditional_put`); another run's commit in between is refused
        in one line."""
        try:
            conditional_put(self._filesystem(), f"{self.root}/{SUCCESS}", data, expected)
        except Conflict:
            raise ParameterError(
                f"output {self.url}: another run committed a release there while this one ran; this run's "
                "release is not committed (its objects are deleted); run it again to replace that one "
                "(--overwrite)") from None
        except Exception as exc:
            raise self._failed("write the manifest of", exc) from None


def _owner_of(key: str) -> str:
    """The owner object of the run prefix a key of the store lies under (``…/.run-<16 hex>/…``)."""
    parts = str(key).split("/")
    for i, part in enumerate(parts[:-1]):
        if _RUN.match(part):
            return "/".join([*parts[:i + 1], OWNER])
    raise ValueError(f"not a key under a run prefix: {key}")


def _live(fs, owner: str) -> bool:
    """Whether the owner object ``owner`` is on the store, as it is now (no cached listing)."""
    fs.invalidate_cache(owner)
    try:
        fs.info(owner)
    except FileNotFoundError:
        return False
    return True


#: The marker object of an open scratch folder of a run prefix (:meth:`RemoteRun.open_scratch`).
LIVE = ".live"


def put_in_run(store: Store, puts: dict, scratch: str | None = None) -> None:
    """PUT the objects ``puts`` (``{key under a run prefix: bytes}``; one object whole,
    :func:`~daskmicro.io.objectfile.put_whole`, several at once), then make sure their run prefix is
    still live: its owner object is there.  A run discarded meanwhile (:meth:`RemoteRun.discard`,
    :meth:`RemoteTarget.sweep`: the owner object deleted first, then every object listed) may have
    listed before this write landed: the write then deletes what it wrote and fails, so that no
    object of a run that does not commit outlives it, whatever the workers were still writing (one
    the store no longer lets it delete has no owner object: the next run's sweep deletes it).
    Objects of the scratch folder ``scratch`` (a key) are kept only while its marker is there
    (:meth:`RemoteRun.remove` deletes it first): a late write into a folder already removed, in a
    run that goes on, deletes itself.  Every failure is one line naming the object (hive values
    masked)."""
    from .objectfile import put_whole

    if not puts:
        return
    fs = store.filesystem()
    first = next(iter(puts))
    try:
        if len(puts) == 1:
            put_whole(fs, first, puts[first])
        else:
            fs.pipe(puts)
        live = all(_live(fs, owner) for owner in sorted({_owner_of(k) for k in puts}))
        live = live and (scratch is None or _live(fs, f"{scratch}/{LIVE}"))
    except Exception as exc:   # the store's own errors (access denied, ...)
        _remove_quietly(fs, puts)
        raise ParameterError(f"output: cannot write {store.protocol}://{masked_path(first)}: "
                             f"{store.scrub(describe(exc))}") from None
    if not live:
        _remove_quietly(fs, puts)
        raise ParameterError(f"output: the run prefix of {store.protocol}://{masked_path(first)}, or its scratch "
                             "folder, was removed while it was written; nothing written there is kept")


def _remove_quietly(fs, keys) -> None:
    try:
        fs.rm(list(keys))
    except Exception:   # not written, or no longer there
        pass


class RemoteRun:
    """The run prefix a run writes under (:class:`RemoteTarget`): picklable, for the workers."""

    __slots__ = ("target", "name", "done")

    def __init__(self, target: RemoteTarget, name: str):
        self.target, self.name, self.done = target, name, False

    @property
    def store(self) -> Store:
        return self.target.store

    @property
    def prefix(self) -> str:
        return f"{self.target.root}/{self.name}"

    def key(self, *parts) -> str:
        """``bucket/target/.run-…/parts…`` (empty parts left out)."""
        return "/".join([self.prefix, *(str(p).strip("/") for p in parts if p)])

    def relative(self, key: str) -> str:
        return str(key)[len(self.prefix) + 1:]

    def url(self, *parts) -> str:
        return f"{self.store.protocol}://{self.key(*parts)}"

    def put(self, name: str, data: bytes) -> None:
        try:
            self.target._filesystem().pipe_file(self.key(name), data)
        except Exception as exc:
            raise self.target._failed("write to", exc) from None

    def open_scratch(self, sub: str) -> None:
        """Open the scratch folder ``sub`` of the run prefix: its marker object (:data:`LIVE`) is
        written, and its writers (:func:`put_in_run` with ``scratch``) keep an object only while it
        is there."""
        self.put(f"{sub}/{LIVE}", b"")

    def remove(self, sub: str) -> None:
        """Delete the objects under ``sub`` of the run prefix (a scratch folder): its marker first,
        then whatever a listing made after that finds — a write still under way on a worker that a
        scheduler gave up on lands after the listing, finds no marker and deletes its own object."""
        fs = self.target._filesystem()
        try:
            fs.rm(self.key(sub, LIVE))
        except FileNotFoundError:
            pass
        fs.invalidate_cache()
        keys = [k for k in fs.find(self.key(sub)) if k.startswith(self.key(sub) + "/")]
        if keys:
            fs.rm(keys)

    def discard(self, client=None, futures=()) -> None:
        """Delete the run prefix of a run that does not commit (its writes cancelled first)."""
        if client is not None and futures:
            try:
                client.cancel(list(futures), force=True)
            except Exception:  # the cluster may be gone already
                pass
        if self.done:
            return
        try:
            self.target._delete_run(self.name)
        except Exception:  # swept by the next run
            pass
        self.done = True   # nothing more to do for it


#: Run prefixes this process opened: what is left of them at exit (never committed) is deleted.
_OPENED: list = []


def _remember(run: RemoteRun) -> None:
    if not _OPENED:
        atexit.register(_discard_opened)
    _OPENED.append(run)


def _discard_opened() -> None:
    for run in _OPENED:
        run.discard()
