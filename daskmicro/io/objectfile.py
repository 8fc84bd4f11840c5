"""One object on an object store written whole: a single-file release (``s3://b/key.parquet``,
``abfs://container/key.parquet``, ``gs://b/key.parquet``), its report, a report copy.

An object store has no rename, but a PUT — and the completion of a multipart upload, the commit of
an Azure block list, a GCS upload — is atomic: readers see the old object or the new one, never a part.  So a single-file release is built and
verified in memory (the bytes that will be published, read back as a reader reads them: rows
in = rows out, every published tuple at least k times in its written dtype), PUT once, then
read back from the store and compared byte for byte with what was verified.

Every write is conditional on what the run saw when it checked its outputs, before any work
(:meth:`ObjectTarget.check`): the key held nothing, or the object ``--overwrite`` replaces is still
the version seen.  Each store says it in its own words (:data:`STRATEGIES`): S3 ``If-None-Match: *``
/ ``If-Match: <ETag>`` (on the PUT, or on the completion of a multipart upload); Azure the same
headers on the blob upload (adlfs's ``pipe_file`` → ``upload_blob(overwrite=False)`` /
``etag=…, match_condition=IfNotModified``); GCS ``ifGenerationMatch=0`` / ``ifGenerationMatch=<generation>``
on one multipart upload.  Another writer in between makes the write fail in one line and leaves
that writer's object as it is.  A store that does not take conditional writes gets the same write
without the condition.  :func:`conditional_put` is the one conditional write of the package: the
``_SUCCESS`` manifest of a directory release (:mod:`daskmicro.io.objectcommit`) goes through it too.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

from ..errors import ParameterError, VerificationError, describe
from .objectstore import Store, check_url, shown_url, store_for, store_kind

__all__ = ["ObjectTarget", "OnStore", "is_object_target", "conditional_put", "put_whole", "part_size", "Conflict",
           "MIN_PART", "STRATEGIES"]

#: The smallest part of a multipart upload S3 takes (but the last).
MIN_PART = 5 * 2**20


class Conflict(Exception):
    """The object is no longer what the run saw: another writer put or replaced it meanwhile."""


def is_object_target(obj) -> bool:
    return isinstance(obj, ObjectTarget)


def part_size(fs) -> int:
    """The part size of a multipart upload: the file system's block size (s3fs: 50 MiB unless
    ``default_block_size`` is given in ``storage_options``), at least :data:`MIN_PART`."""
    return max(int(getattr(fs, "default_block_size", 0) or 0), MIN_PART)


def put_whole(fs, path: str, data) -> None:
    """Write ``data`` at ``path`` with no condition (a file under a run prefix of its own): on S3 a
    multipart upload from twice the :func:`part_size` on, its parts sent at once; elsewhere the
    file system's own upload (Azure: blocks committed at once; GCS: one upload)."""
    if store_kind(fs) == "s3":
        fs.pipe_file(path, data, chunksize=part_size(fs))
    else:
        fs.pipe_file(path, data)


def precondition_failed(exc) -> bool:
    """Whether ``exc`` is a store's refusal of a conditional write: 412 (the condition does not
    hold; gcsfs and adlfs raise ``FileExistsError`` for it, azure-core ``ResourceModifiedError``) or
    409 (another conditional write to the key under way; an Azure blob that exists)."""
    text = str(exc)
    return isinstance(exc, FileExistsError) or type(exc).__name__ in ("ResourceModifiedError", "ResourceExistsError") \
        or any(words in text for words in ("PreconditionFailed", "pre-conditions", "ConditionalRequestConflict",
                                           "conflicting conditional operation", "ConditionNotMet",
                                           "BlobAlreadyExists"))


def not_implemented(exc) -> bool:
    """Whether ``exc`` says the store does not take conditional writes."""
    text = str(exc)
    return isinstance(exc, NotImplementedError) or "NotImplemented" in text or "not implemented" in text.lower()


#: The condition of a write that has none (the fallback of a store without conditional writes).
PLAIN = object()


def _multipart(fs, bucket: str, key: str, data, size: int, condition: dict) -> None:
    """Upload ``data`` in parts sent at once; the completion (conditional) makes it visible."""
    upload = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
    view = memoryview(data)
    starts = list(range(0, len(data), size))

    def one(i):
        out = fs.call_s3("upload_part", Bucket=bucket, Key=key, UploadId=upload, PartNumber=i + 1,
                         Body=bytes(view[starts[i]:starts[i] + size]))
        return {"PartNumber": i + 1, "ETag": out["ETag"]}

    try:
        with ThreadPoolExecutor(max_workers=min(8, len(starts))) as pool:
            parts = list(pool.map(one, range(len(starts))))
        fs.call_s3("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=upload,
                   MultipartUpload={"Parts": parts}, **condition)
    except BaseException:
        try:
            fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload)
        except Exception:  # the parts expire by the bucket's own rules
            pass
        raise


def _put_s3(fs, path: str, data, expected) -> None:
    """S3: ``If-None-Match: *`` / ``If-Match: <ETag>`` on one PUT; from twice the :func:`part_size`
    on, a multipart upload completed on the condition."""
    bucket, _, key = path.partition("/")
    condition = {} if expected is PLAIN else {"IfMatch": expected} if expected is not None else {"IfNoneMatch": "*"}
    size = part_size(fs)
    if len(data) >= 2 * size:
        _multipart(fs, bucket, key, data, size, condition)
    else:
        fs.call_s3("put_object", Bucket=bucket, Key=key, Body=bytes(data), **condition)


def _put_azure(fs, path: str, data, expected) -> None:
    """Azure: one ``upload_blob`` (blocks staged, then their list committed on the condition when the
    blob is large): ``If-None-Match: *`` (``overwrite=False``) / ``If-Match: <ETag>``."""
    options = {"overwrite": expected is not None}
    if expected is not None and expected is not PLAIN:
        from azure.core import MatchConditions

        options.update(etag=expected, match_condition=MatchConditions.IfNotModified)
    fs.pipe_file(path, bytes(data), **options)


def _put_gcs(fs, path: str, data, expected) -> None:
    """GCS: one multipart upload (the object's name and its bytes in one request) on the
    precondition ``ifGenerationMatch=0`` (no live object) / ``ifGenerationMatch=<generation>``."""
    bucket, _, key = path.partition("/")
    condition = {} if expected is PLAIN else {"ifGenerationMatch": "0" if expected is None else str(expected)}
    boundary = f"daskmicro-{uuid.uuid4().hex}"
    body = b"".join([f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                     json.dumps({"name": key}).encode(),
                     f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                     bytes(data), f"\r\n--{boundary}--\r\n".encode()])
    upload = fs.base.replace("/storage/v1/", "/upload/storage/v1/") + "b/{}/o"
    fs.call("POST", upload, bucket, uploadType="multipart", data=body, json_out=True,
            headers={"Content-Type": f'multipart/related; boundary="{boundary}"'}, **condition)


#: Per store (:func:`~daskmicro.io.objectstore.store_kind`), its conditional write
#: ``(fs, bucket/key, data, expected)``: ``expected`` None (create only), a version, or :data:`PLAIN`.
STRATEGIES = {"s3": _put_s3, "azure": _put_azure, "gcs": _put_gcs}


def conditional_put(fs, path: str, data, expected) -> None:
    """Write ``data`` at ``path`` (``bucket/key``) only if the key still holds what the caller saw:
    nothing (``expected`` None) or the object of version ``expected`` (its ETag; on GCS its
    generation), in the store's own words (:data:`STRATEGIES`).  Raises :class:`Conflict`
    otherwise.  A store that does not take conditional writes gets the same write without the
    condition."""
    put = STRATEGIES[store_kind(fs)]
    try:
        try:
            put(fs, path, data, expected)
        except Exception as exc:
            if precondition_failed(exc):
                raise Conflict(path) from None
            if not not_implemented(exc):
                raise
            put(fs, path, data, PLAIN)
    finally:
        fs.invalidate_cache(path)


class OnStore:
    """What every output on an object store has: its URL (``url``), :class:`Store` (``store``),
    what it is (``what``), a file system made on first use, and its one-line failures."""

    url: str
    store: Store
    what: str
    _fs = None

    def _filesystem(self):
        if self._fs is None:
            self._fs = self.store.filesystem(fresh=True)
        return self._fs

    def _failed(self, doing: str, exc) -> ParameterError:
        return ParameterError(f"{self.what}: cannot {doing} {self.url}: {self.store.scrub(describe(exc))}")


class ObjectTarget(OnStore):
    """One object the run writes whole on an object store (``what``: "output", "report", …).

    :meth:`check` before any work (refuses a prefix, an existing object without ``overwrite``, a
    missing bucket; records what is there), :meth:`write` at the commit (conditional on what
    :meth:`check` saw), :meth:`read` to read it back.  ``str()`` is its URL (never an option)."""

    def __init__(self, url: str, storage_options=None, what: str = "output"):
        self.store, self.key = store_for(url, storage_options)
        if "/" not in self.key:
            raise ParameterError(f"{what}: {shown_url(url)} names a {self.store.place}, not an object "
                                 f"({self.store.form})")
        self.url = shown_url(url).rstrip("/")
        self.what = what
        self._fs = None
        self._seen = None   # (ETag of the object check() saw, or None for none)

    def __str__(self) -> str:
        return self.url

    __repr__ = __str__

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def sibling(self, name: str, what: str) -> "ObjectTarget":
        """The object ``name`` beside this one, on the same store and with the same options."""
        out = ObjectTarget.__new__(ObjectTarget)
        out.key = f"{self.key.rsplit('/', 1)[0]}/{name}"
        out.url = f"{self.url.rsplit('/', 1)[0]}/{name}"
        out.store, out.what, out._fs, out._seen = self.store, what, None, None
        return out

    def with_suffix(self, suffix: str, what: str) -> "ObjectTarget":
        """The object beside this one named as ``Path.with_suffix`` names it (``x.parquet`` → ``x.report.json``)."""
        stem, dot, _ = self.name.rpartition(".")
        return self.sibling((stem if dot else self.name) + suffix, what)

    def check(self, overwrite: bool, hint: str = "use --overwrite to replace it") -> None:
        """Refuse a missing bucket, a key that is a prefix of other objects, an existing object
        unless ``overwrite``; remember the object's version (or its absence) for :meth:`write`."""
        fs = self._filesystem()
        bucket = self.key.split("/", 1)[0]
        try:
            fs.invalidate_cache()
            if not fs.exists(bucket):
                raise ParameterError(f"{self.what}: {self.store.place} not found: {self.url}")
            try:
                info = fs.info(self.key, refresh=True)
            except FileNotFoundError:
                info = None
        except ParameterError:
            raise
        except Exception as exc:  # the store library's own errors (no credentials, access denied, ...)
            raise self._failed("look at", exc) from None
        if info is not None and info.get("type") == "directory":
            raise ParameterError(f"{self.what} {self.url} is a prefix of other objects; name an object of its own")
        if info is not None and not overwrite:
            raise ParameterError(f"{self.what} already exists: {self.url} ({hint})")
        self._seen = (self.store.version(info) or None,) if info is not None else (None,)

    @property
    def replaces(self) -> bool:
        """Whether :meth:`check` found an object that :meth:`write` replaces."""
        return self._seen is not None and self._seen[0] is not None

    def against(self, url, what: str = "the input") -> None:
        """Refuse an object that is ``url`` or lies inside it (``url`` a prefix)."""
        try:
            _, root = check_url(str(url))
        except ParameterError:
            return
        if self.key == root or self.key.startswith(root + "/"):
            raise ParameterError(f"{self.what} {self.url} is {what} or lies inside it")

    def write(self, data) -> None:
        """PUT ``data``, conditional on what :meth:`check` saw (:func:`conditional_put`)."""
        if self._seen is None:
            raise RuntimeError(f"{self.url}: write() before check()")
        try:
            conditional_put(self._filesystem(), self.key, data, self._seen[0])
        except Conflict:
            raise ParameterError(f"{self.what} {self.url}: another run wrote it while this one ran; this run's "
                                 f"{self.what} is not written; run it again to replace that one (--overwrite)") from None
        except Exception as exc:
            raise self._failed("write", exc) from None
        self._seen = None   # written: a second write must check again

    def read(self) -> bytes:
        try:
            return self._filesystem().cat_file(self.key)
        except Exception as exc:
            raise self._failed("read back", exc) from None

    def fetch(self) -> bytes:
        """The object's bytes, as an input: a missing or unreadable object refused in one line."""
        from ..errors import InputError

        try:
            return self._filesystem().cat_file(self.key)
        except FileNotFoundError:
            raise InputError(f"{self.what} does not exist: {self.url}") from None
        except Exception as exc:
            raise InputError(f"cannot read {self.url}: {self.store.scrub(describe(exc))}") from None

    def read_back(self, data) -> None:
        """Read the object back and compare it with ``data`` (what :meth:`write` wrote) byte for byte."""
        if self.read() != bytes(data):
            raise VerificationError(f"{self.what} {self.url}: the object read back differs from the bytes "
                                    "verified and written (another writer?)")

    def delete(self) -> None:
        """Delete the object (a release whose report could not follow it); errors ignored."""
        try:
            self._filesystem().rm(self.key)
        except Exception:
            pass
