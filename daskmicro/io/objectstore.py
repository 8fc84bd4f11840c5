"""Inputs on an object store: ``s3://bucket/key`` (and ``file://``) URLs, read through fsspec.

A URL names one Parquet or CSV object, or a prefix of Parquet objects (a lake, hive
``key=value/`` prefixes included).  :func:`open_remote` lists it on the client (names, sizes,
ETags: no data is read there but the Parquet footers and a CSV's first block, as for a local
file); the workers then read one object each through the same file system, built on the worker
from a :class:`Store` (:func:`Store.filesystem`).

Credentials and endpoints come from the standard chains of the workers and of the client
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``,
``AWS_PROFILE`` and the shared config files, an instance role) and from ``storage_options``
(s3fs's own keyword arguments: ``key``, ``secret``, ``token``, ``endpoint_url``, ``profile``,
``client_kwargs``, …).  None of them is ever written: a :class:`Store` prints as its protocol
alone, fingerprints and reports name only the URL, and every message of another library is
scrubbed of the option values and of the credential variables of the environment
(:meth:`Store.scrub`).  A URL holding credentials (``s3://KEY:SECRET@bucket``) is refused.

A directory release (a lake) may be written to an object store: the workers write it under a run
prefix of the target and one ``_SUCCESS`` object commits it (:mod:`daskmicro.io.objectcommit`).  A
prefix holding such a release is read through its ``_SUCCESS`` manifest only: the objects it lists,
nothing else; run prefixes without a manifest are refused.  A single-file release, a report and a
report page are single objects (:mod:`daskmicro.io.objectfile`).  An incremental survey may land
under a prefix (:mod:`daskmicro.io.objectsurvey`).  A release ledger and a Dask performance report
on an object store are refused (:func:`refuse_remote_output`).
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from ..errors import InputError, ParameterError, describe

__all__ = ["is_url", "is_remote", "local_path", "Store", "RemoteFile", "open_remote", "refuse_remote_output",
           "check_url", "shown_url", "SCHEMES", "EXTRA_HINT"]

#: The schemes read through an object store's file system (``file://`` becomes a local path).
SCHEMES = ("s3", "s3a")
#: How to get the file system of an object store.
EXTRA_HINT = "pip install 'daskmicro[s3]'"
#: Environment variables whose values never appear in a message.
_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_url(path) -> bool:
    """Whether ``path`` is written as a URL (``scheme://…``), local or not."""
    return isinstance(path, str) and _SCHEME.match(path) is not None


def is_remote(path) -> bool:
    """Whether ``path`` is a URL read through an object store (anything but ``file://``)."""
    return is_url(path) and _SCHEME.match(path)[1].lower() != "file"


def local_path(path):
    """``file:///abs/path`` as the local path it names; any other value unchanged."""
    if is_url(path) and not is_remote(path):
        parts = urlsplit(path)
        if parts.netloc not in ("", "localhost"):
            raise ParameterError(f"a file:// URL names a path on this machine (file:///PATH), not on a host: "
                                 f"{shown_url(path)}")
        return unquote(parts.path)
    return path


def shown_url(url: str) -> str:
    """The URL as messages give it: scheme, bucket and key, never a user or password part."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}{parts.path}"


def check_url(url: str) -> tuple:
    """(scheme, bucket/key without the scheme) of an object-store URL, or a one-line refusal."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ParameterError(f"unsupported URL scheme {scheme}:// (daskmicro reads s3:// and file:// URLs): "
                             f"{shown_url(url)}")
    if "@" in parts.netloc:
        raise ParameterError(f"credentials in a URL are refused (they would be recorded with the input's path): "
                             f"{shown_url(url)}; give them through the environment, a profile or storage_options")
    if not parts.netloc:
        raise ParameterError(f"no bucket in {shown_url(url)} (expected s3://BUCKET/KEY)")
    if parts.query or parts.fragment:
        raise ParameterError(f"a URL with a query or fragment is not an object name: {shown_url(url)}")
    return scheme, (parts.netloc + parts.path).rstrip("/")


class Store:
    """An object store's file system as the workers build it: protocol and ``storage_options``.

    Picklable (it travels with the tasks); its ``repr`` and its Dask token never show the
    options' values."""

    __slots__ = ("protocol", "_options")

    def __init__(self, protocol: str, storage_options=None):
        if storage_options is not None and not isinstance(storage_options, dict):
            raise ParameterError(f"storage_options: expected a mapping of s3fs options, got "
                                 f"{type(storage_options).__name__}")
        self.protocol = "s3" if protocol == "s3a" else protocol
        self._options = dict(storage_options or {})

    def __repr__(self) -> str:
        return f"Store({self.protocol!r}, options=<{len(self._options)} withheld>)"

    def __getstate__(self):
        return (self.protocol, self._options)

    def __setstate__(self, state):
        self.protocol, self._options = state

    def __dask_tokenize__(self):
        import hashlib
        import json

        return ("daskmicro-store", self.protocol,
                hashlib.sha256(json.dumps(self._options, sort_keys=True, default=str).encode()).hexdigest())

    def filesystem(self, fresh: bool = False):
        """The fsspec file system (s3fs); ``fresh`` skips fsspec's instance and listing caches."""
        import importlib.util

        try:
            found = importlib.util.find_spec("s3fs") is not None
        except (ImportError, ValueError):  # a module set to None (uninstalled in this process)
            found = False
        if not found:  # the extra: its absence is told in one line
            raise InputError(f"reading {self.protocol}://… needs the s3 extra: {EXTRA_HINT}")
        import fsspec

        options = dict(self._options)
        if fresh:
            options["skip_instance_cache"] = True
        try:
            return fsspec.filesystem(self.protocol, **options)
        except TypeError as exc:
            raise ParameterError(f"storage_options: not understood by the {self.protocol} file system "
                                 f"({self.scrub(describe(exc))})") from None

    def scrub(self, text: str) -> str:
        """``text`` with every option value and credential of the environment replaced by ``…``."""
        secrets = [os.environ.get(v) for v in _SECRET_ENV]
        secrets += [str(v) for v in _leaves(self._options)]
        for s in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
            text = text.replace(s, "…")
        return text


def _leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    elif isinstance(obj, (str, bytes)):
        yield obj.decode(errors="replace") if isinstance(obj, bytes) else obj


class RemoteFile:
    """One object a worker reads: its store and its key (``bucket/key``).  ``str()`` is its URL."""

    __slots__ = ("store", "key")

    def __init__(self, store: Store, key: str):
        self.store, self.key = store, key

    def __str__(self) -> str:
        return f"{self.store.protocol}://{self.key}"

    __repr__ = __str__

    def __getstate__(self):
        return (self.store, self.key)

    def __setstate__(self, state):
        self.store, self.key = state

    def __dask_tokenize__(self):
        return ("daskmicro-object", self.store.__dask_tokenize__(), self.key)


def _skipped(rel: str) -> bool:
    """Objects a lake reader leaves out: a name or prefix starting with ``.`` or ``_``."""
    return any(p.startswith((".", "_")) for p in rel.split("/") if p)


def open_remote(url: str, storage_options=None, suffixes=(".parquet", ".pq")) -> tuple:
    """List an object-store input: (store, root key, [(key, bytes, etag)], is a prefix, the
    names below the prefix — ``_SUCCESS``, ``_report.json`` … — to tell a release from a lake).

    Refused in one line naming the URL: an unsupported scheme, credentials in the URL, a missing
    bucket, key or prefix, a prefix with no Parquet object, an unreadable listing."""
    scheme, root = check_url(url)
    store = Store(scheme, storage_options)
    fs = store.filesystem(fresh=True)
    shown = shown_url(url)
    try:
        info = fs.info(root)
        if info.get("type") == "directory":
            found = fs.find(root, detail=True)
            listing = [(k, int(v.get("size") or 0), str(v.get("ETag") or v.get("etag") or ""))
                       for k, v in sorted(found.items())
                       if v.get("type", "file") == "file" and k.lower().endswith(suffixes)
                       and not _skipped(k[len(root):])]
            control = {k[len(root):].lstrip("/") for k in found}
            return store, root, listing, True, control
    except FileNotFoundError:
        raise InputError(f"input not found: {shown} (no such bucket, object or prefix)") from None
    except (OSError, ValueError, PermissionError) as exc:
        raise InputError(f"cannot list {shown}: {store.scrub(describe(exc))}") from None
    except Exception as exc:  # botocore's own errors (no credentials, endpoint unreachable, ...)
        raise InputError(f"cannot list {shown}: {store.scrub(describe(exc))}") from None
    entry = (root, int(info.get("size") or 0), str(info.get("ETag") or info.get("etag") or ""))
    return store, root, [entry], False, set()


def refuse_remote_output(path, what: str = "output") -> None:
    """Refuse, in one line, to write ``what`` to an object store (where this version writes it
    only on a local or mounted file system)."""
    if path is not None and is_remote(str(path)):
        raise ParameterError(f"writing the {what} to an object store is not supported yet: {shown_url(str(path))} "
                             "(write it to a local or mounted path; s3:// works for inputs, releases and their reports)")
