"""Inputs on an object store: ``s3://bucket/key``, ``abfs://container/key`` (``az://``, ``abfss://``),
``gs://bucket/key`` (and ``file://``) URLs, read through fsspec.

A URL names one Parquet or CSV object, or a prefix of Parquet objects (a lake, hive
``key=value/`` prefixes included).  :func:`open_remote` lists it on the client (names, sizes,
versions: no data is read there but the Parquet footers and a CSV's first block, as for a local
file); the workers then read one object each through the same file system, built on the worker
from a :class:`Store` (:func:`Store.filesystem`).  Each store has its file system package, an
extra of daskmicro (:data:`EXTRAS`): s3fs (``[s3]``), adlfs (``[azure]``: Azure Blob Storage and
ADLS Gen2 through its blob endpoint), gcsfs (``[gcs]``).

Credentials and endpoints come from the standard chains of the workers and of the client — S3:
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``,
``AWS_PROFILE`` and the shared config files, an instance role; Azure: ``AZURE_STORAGE_CONNECTION_STRING``,
``AZURE_STORAGE_ACCOUNT_NAME`` with ``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN``, a
service principal (``AZURE_STORAGE_CLIENT_ID`` / ``_SECRET`` / ``TENANT_ID``), a managed identity;
GCS: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's own login, the machine's service account,
``STORAGE_EMULATOR_HOST`` — and from ``storage_options`` (the file system's own keyword
arguments).  None of them is ever written: a :class:`Store` prints as its protocol alone,
fingerprints and reports name only the URL, and every message of another library is scrubbed of
the option values and of the credential variables of the environment (:meth:`Store.scrub`).  A URL
holding credentials (``s3://KEY:SECRET@bucket``) is refused; ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/KEY``
names a container of an account (the account given to the file system as ``account_name``).

A directory release (a lake) may be written to an object store: the workers write it under a run
prefix of the target and one ``_SUCCESS`` object commits it (:mod:`daskmicro.io.objectcommit`).  A
prefix holding such a release is read through its ``_SUCCESS`` manifest only: the objects it lists,
nothing else; run prefixes without a manifest are refused.  A single-file release, a report and a
report page are single objects (:mod:`daskmicro.io.objectfile`).  A Delta table on the store is
written as a release's next version and read as its current version (:mod:`daskmicro.io.deltastore`;
its store gets the options of :meth:`Store.table_options`).  An incremental survey may land under a
prefix (:mod:`daskmicro.io.objectsurvey`).  A release ledger and a Dask performance report on an
object store are refused (:func:`refuse_remote_output`).
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from ..errors import InputError, ParameterError, describe

__all__ = ["is_url", "is_remote", "local_path", "Store", "RemoteFile", "open_remote", "refuse_remote_output",
           "check_url", "shown_url", "store_for", "store_kind", "SCHEMES", "STORE_OF", "EXTRAS", "EXTRA_HINT"]

#: The schemes read through an object store's file system, and the store each names (``file://``
#: becomes a local path).
STORE_OF = {"s3": "s3", "s3a": "s3", "abfs": "azure", "abfss": "azure", "az": "azure", "gs": "gcs", "gcs": "gcs"}
SCHEMES = tuple(STORE_OF)
#: Per store: the fsspec package that reads and writes it, and the extra of daskmicro that installs it.
EXTRAS = {"s3": ("s3fs", "s3"), "azure": ("adlfs", "azure"), "gcs": ("gcsfs", "gcs")}
#: How to get the file system of each store.
EXTRA_HINT = {kind: f"pip install 'daskmicro[{extra}]'" for kind, (_, extra) in EXTRAS.items()}
#: Per store: the protocol its file system is built for, what it calls a bucket, its URL form.
_STORE = {"s3": ("s3", "bucket", "s3://BUCKET/KEY"), "azure": ("abfs", "container", "abfs://CONTAINER/KEY"),
          "gcs": ("gs", "bucket", "gs://BUCKET/KEY")}
#: Environment variables whose values never appear in a message.
_SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
               "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
               "AZURE_STORAGE_CLIENT_SECRET", "AZURE_CLIENT_SECRET", "GOOGLE_APPLICATION_CREDENTIALS")
#: The parts of a connection string or a SAS token that are secrets of their own.
_SECRET_PARTS = ("accountkey", "sharedaccesssignature", "sig")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: The host of an Azure storage account in ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/KEY``.
_AZURE_HOST = re.compile(r"^([a-z0-9]{3,24})\.(?:dfs|blob)\.core\.windows\.net$", re.IGNORECASE)

#: s3fs options and their counterparts among a Delta table's storage options (Store.table_options).
_TABLE_KEYS = {"key": "AWS_ACCESS_KEY_ID", "username": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY",
               "password": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN", "endpoint_url": "AWS_ENDPOINT_URL",
               "client_kwargs.endpoint_url": "AWS_ENDPOINT_URL", "client_kwargs.region_name": "AWS_REGION",
               "profile": "AWS_PROFILE"}
#: s3fs options about its own caches, buffers and connections: nothing to say to a Delta table's store.
_TABLE_IGNORED = {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
                  "default_block_size", "default_fill_cache", "default_cache_type", "cache_regions", "use_ssl",
                  "max_concurrency", "fixed_upload_size", "asynchronous"}


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


def _azure_account(netloc: str):
    """(container, account) of ``CONTAINER@ACCOUNT.dfs.core.windows.net``, else None."""
    user, at, host = netloc.rpartition("@")
    found = _AZURE_HOST.match(host) if at and user and ":" not in user else None
    return (user, found[1].lower()) if found else None


def shown_url(url: str) -> str:
    """The URL as messages give it: scheme, bucket and key, never a user or password part (an
    Azure container before its account's host is kept)."""
    parts = urlsplit(url)
    host = parts.netloc if _azure_account(parts.netloc) else parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}{parts.path}"


def check_url(url: str) -> tuple:
    """(scheme, bucket/key without the scheme) of an object-store URL, or a one-line refusal."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ParameterError(f"unsupported URL scheme {scheme}:// (daskmicro reads s3://, abfs:// (az://, abfss://), "
                             f"gs:// and file:// URLs): {shown_url(url)}")
    kind = STORE_OF[scheme]
    netloc = parts.netloc
    if "@" in netloc:
        account = _azure_account(netloc) if kind == "azure" else None
        if account is None:
            raise ParameterError(f"credentials in a URL are refused (they would be recorded with the input's path): "
                                 f"{shown_url(url)}; give them through the environment, a profile or storage_options")
        netloc = account[0]
    if not netloc:
        _, place, form = _STORE[kind]
        raise ParameterError(f"no {place} in {shown_url(url)} (expected {form})")
    if parts.query or parts.fragment:
        raise ParameterError(f"a URL with a query or fragment is not an object name: {shown_url(url)}")
    return scheme, (netloc + parts.path).rstrip("/")


def store_for(url: str, storage_options=None) -> tuple:
    """(:class:`Store`, bucket/key) of an object-store URL (:func:`check_url`); the account of an
    ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/…`` URL goes to its file system."""
    scheme, root = check_url(url)
    account = _azure_account(urlsplit(url).netloc)
    return Store(scheme, storage_options, account=account[1] if account else None), root


def store_kind(fs) -> str:
    """The store (``s3``, ``azure``, ``gcs``) a file system of fsspec speaks to."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return STORE_OF.get(protocol, protocol)


class Store:
    """An object store's file system as the workers build it: protocol, ``storage_options`` and,
    on Azure, the account a URL names.

    Picklable (it travels with the tasks); its ``repr`` and its Dask token never show the
    options' values."""

    __slots__ = ("protocol", "_options", "_account")

    def __init__(self, protocol: str, storage_options=None, account=None):
        if storage_options is not None and not isinstance(storage_options, dict):
            raise ParameterError(f"storage_options: expected a mapping of the store's file system options, got "
                                 f"{type(storage_options).__name__}")
        self.protocol = "s3" if protocol == "s3a" else protocol
        self._options = dict(storage_options or {})
        given = self._options.get("account_name")
        if account is not None and given is not None and str(given).lower() != account:
            raise ParameterError(f"storage_options: account_name names another account than the URL's ({account})")
        self._account = account

    @property
    def kind(self) -> str:
        """The store: ``s3``, ``azure`` or ``gcs``."""
        return STORE_OF.get(self.protocol, self.protocol)

    @property
    def place(self) -> str:
        """What the store calls the place of its objects: ``bucket`` or ``container``."""
        return _STORE.get(self.kind, _STORE["s3"])[1]

    @property
    def form(self) -> str:
        """The store's URL form (``s3://BUCKET/KEY``), for messages."""
        return _STORE.get(self.kind, _STORE["s3"])[2]

    def __repr__(self) -> str:
        return f"Store({self.protocol!r}, options=<{len(self._options)} withheld>)"

    def __getstate__(self):
        return (self.protocol, self._options, self._account)

    def __setstate__(self, state):
        self.protocol, self._options, self._account = state

    def __dask_tokenize__(self):
        import hashlib
        import json

        return ("daskmicro-store", self.protocol, self._account,
                hashlib.sha256(json.dumps(self._options, sort_keys=True, default=str).encode()).hexdigest())

    def filesystem(self, fresh: bool = False):
        """The fsspec file system (s3fs, adlfs, gcsfs); ``fresh`` skips fsspec's instance and listing
        caches.  GCS at an endpoint other than Google's (``endpoint_url``, ``STORAGE_EMULATOR_HOST``:
        an emulator, a gateway) is spoken to through its JSON API alone (gcsfs's ``GCSFileSystem``),
        without the gRPC look-up of a bucket's layout that only Google's endpoint answers."""
        package, extra = EXTRAS.get(self.kind, (self.kind, self.kind))
        if not _installed(package):  # the extra: its absence is told in one line
            raise InputError(f"reading {self.protocol}://… needs the {extra} extra: {EXTRA_HINT[self.kind]}")
        import fsspec

        options = dict(self._options)
        if self._account is not None:
            options["account_name"] = self._account
        if fresh:
            options["skip_instance_cache"] = True
        try:
            if self.kind == "gcs" and _other_gcs_endpoint(options):
                from gcsfs.core import GCSFileSystem

                return GCSFileSystem(**options)
            return fsspec.filesystem(_STORE[self.kind][0], **options)
        except TypeError as exc:
            raise ParameterError(f"storage_options: not understood by the {self.protocol} file system "
                                 f"({self.scrub(describe(exc))})") from None

    def version(self, info: dict) -> str:
        """The version of an object (its file system's ``info``) as the store's conditional writes
        name it: its generation on GCS, its ETag elsewhere; ``""`` when the store gives none."""
        if self.kind == "gcs":
            return str(info.get("generation") or "")
        return str(info.get("ETag") or info.get("etag") or "")

    def table_options(self, what: str) -> dict:
        """The options of a Delta table's object store (``deltalake``'s ``storage_options``) that say
        what this store's s3fs options say: credentials, endpoint (plain HTTP allowed for an
        ``http://`` endpoint, given or from ``AWS_ENDPOINT_URL``), region, profile, unsigned access;
        every commit is a conditional PUT (``conditional_put``: ETag).  An option with no
        counterpart there is refused in one line naming it and ``what`` needs it.  Delta tables are
        read and written on S3 (and in local directories) only: another store is refused in one line."""
        if self.kind != "s3":
            raise ParameterError(f"{what}: Delta tables are read and written in local directories and on s3:// "
                                 f"stores, not on {self.protocol}://")
        options = dict(self._options)
        client = options.pop("client_kwargs", None) or {}
        if not isinstance(client, dict):
            raise ParameterError("storage_options.client_kwargs: expected a mapping")
        out = {"conditional_put": "etag"}
        for name, value in list(options.items()) + [(f"client_kwargs.{k}", v) for k, v in client.items()]:
            if name in _TABLE_IGNORED:
                continue
            if name == "anon":
                if value:
                    out["AWS_SKIP_SIGNATURE"] = "true"
                continue
            target = _TABLE_KEYS.get(name)
            if target is None:
                raise ParameterError(f"storage_options.{name}: not an option {what} can take (credentials, "
                                     "endpoint_url, region_name, profile and anon are)")
            if value is not None:
                out[target] = str(value)
        endpoint = out.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3") or \
            os.environ.get("AWS_ENDPOINT_URL") or ""
        if endpoint.lower().startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
        return out

    def scrub(self, text: str) -> str:
        """``text`` with every option value and credential of the environment (each secret part of a
        connection string or SAS token too) replaced by ``…``."""
        secrets = [os.environ.get(v) for v in _SECRET_ENV]
        secrets += [str(v) for v in _leaves(self._options)]
        secrets += [part for s in secrets if s for part in _secret_parts(s)]
        for s in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
            text = text.replace(s, "…")
        return text


def _installed(package: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a module set to None (uninstalled in this process)
        return False


def _other_gcs_endpoint(options: dict) -> bool:
    endpoint = options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST") or ""
    return endpoint not in ("", "default") and "googleapis.com" not in str(endpoint)


def _secret_parts(text: str):
    """The values of ``AccountKey=…``, ``SharedAccessSignature=…`` and ``sig=…`` in ``text``."""
    for sep in (";", "&"):
        for part in text.split(sep):
            name, eq, value = part.partition("=")
            if eq and name.strip().lower() in _SECRET_PARTS:
                yield value.strip()


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
    store, root = store_for(url, storage_options)
    fs = store.filesystem(fresh=True)
    shown = shown_url(url)
    try:
        info = fs.info(root)
        if info.get("type") == "directory":
            found = fs.find(root, detail=True)
            listing = [(k, int(v.get("size") or 0), store.version(v))
                       for k, v in sorted(found.items())
                       if v.get("type", "file") == "file" and k.lower().endswith(suffixes)
                       and not _skipped(k[len(root):])]
            control = {k[len(root):].lstrip("/") for k in found}
            return store, root, listing, True, control
    except FileNotFoundError:
        raise InputError(f"input not found: {shown} (no such {store.place}, object or prefix)") from None
    except (OSError, ValueError, PermissionError) as exc:
        raise InputError(f"cannot list {shown}: {store.scrub(describe(exc))}") from None
    except Exception as exc:  # the store library's own errors (no credentials, endpoint unreachable, ...)
        raise InputError(f"cannot list {shown}: {store.scrub(describe(exc))}") from None
    entry = (root, int(info.get("size") or 0), store.version(info))
    return store, root, [entry], False, set()


def refuse_remote_output(path, what: str = "output") -> None:
    """Refuse, in one line, to write ``what`` to an object store (where this version writes it
    only on a local or mounted file system)."""
    if path is not None and is_remote(str(path)):
        raise ParameterError(f"writing the {what} to an object store is not supported yet: {shown_url(str(path))} "
                             "(write it to a local or mounted path; an object store takes inputs, releases and their reports)")
