"""An incremental survey whose files land on an object store: ``s3://BUCKET/PREFIX``.

As in a survey directory (:class:`daskmicro.io.survey.LocalArrivals`), the records are the Parquet
objects directly under the prefix (names starting with ``.`` or ``_`` left out, deeper prefixes
not read); ``_arrivals.json`` (written first, by :class:`~daskmicro.io.arrivals.ArrivalSimulator`'s
format or a collector) gives the survey's size, duration and clock, an object named
``part-<index>-t<offset in ms>.parquet`` lands by that clock, and ``_closed.json`` closes the
survey.  An object is visible only once it is complete (a PUT, or the completion of a multipart
upload, is atomic), so an object listed has landed whole: a collector needs no temporary name.

Each look is one fresh listing of the prefix (fsspec's listing cache invalidated first), which also
says whether the close marker is there; the Parquet footer of each new object is read once, on the
client.  The workers read each object whole, as listed: one that changed after it landed (another
ETag or size) or was deleted is refused in one line, as the listing refuses it on the client — its
records may have been read already.  Credentials and endpoints as for every input on a store
(:class:`~daskmicro.io.objectstore.Store`: the environment's chain or ``storage_options``; never
written, and scrubbed from every message).

Refused in one line before any work: a missing bucket; a URL naming one object, not a prefix; a
prefix holding no object.  On a store a prefix exists only through its objects, so a survey that
has not started cannot be told from a mistyped URL: its ``_arrivals.json`` (or a first file) must be
there when the run starts.
"""

from __future__ import annotations

import json
import time

from ..errors import InputError, describe
from .arrivals import CLOSED, MANIFEST
from .objectstore import RemoteFile, Store, shown_url, store_for

__all__ = ["StoreArrivals", "LandedObject", "STORE_POLL"]

#: Seconds between two looks at a survey prefix (each is one LIST request of the store).
STORE_POLL = 0.2


def _etag(store: Store, info: dict) -> str:
    return store.version(info)   # the ETag; on GCS the generation


class LandedObject(RemoteFile):
    """One landed object of a survey, as listed (its ETag and size): what a worker reads."""

    __slots__ = ("etag", "size")

    def __init__(self, store: Store, key: str, etag: str, size: int):
        super().__init__(store, key)
        self.etag, self.size = etag, size

    def __getstate__(self):
        return (self.store, self.key, self.etag, self.size)

    def __setstate__(self, state):
        self.store, self.key, self.etag, self.size = state

    def __dask_tokenize__(self):
        return ("daskmicro-landed", self.store.__dask_tokenize__(), self.key, self.etag)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def _changed(self) -> InputError:
        return InputError(f"{self} of the survey changed after it landed (a survey's files are written once; its "
                          "records may have been read already); no release made")

    def read(self):
        """The object as a pyarrow Table, read whole on the ETag it was listed with."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        fs = self.store.filesystem()
        try:
            fs.invalidate_cache(self.key)
            with fs.open(self.key, "rb") as fh:   # s3fs reads on the ETag it opened (If-Match)
                if self.etag and _etag(self.store, fh.details) not in ("", self.etag):
                    raise self._changed()
                data = fh.read()
        except InputError:
            raise
        except FileNotFoundError:
            raise InputError(f"{self} of the survey was deleted after it landed; no release made") from None
        except Exception as exc:  # botocore's and s3fs's own errors (FileExpired: changed while read)
            if type(exc).__name__ == "FileExpired":
                raise self._changed() from None
            raise InputError(f"cannot read {self}: {self.store.scrub(describe(exc))}") from None
        if len(data) != self.size:
            raise self._changed()
        try:
            return pq.read_table(pa.BufferReader(data))
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise InputError(f"unreadable Parquet object {self}: {describe(exc)}") from None

    def num_rows(self) -> int:
        """The records of the object, from its footer."""
        return _footer(self.store.filesystem(), self, self.store).num_rows


def _footer(fs, obj: LandedObject, store: Store):
    """The Parquet metadata of ``obj`` (``.num_rows``, ``.schema``), or a one-line refusal."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with fs.open(obj.key, "rb") as fh:
            return pq.ParquetFile(fh).metadata
    except FileNotFoundError:
        raise InputError(f"{obj} of the survey was deleted after it landed; no release made") from None
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InputError(f"unreadable Parquet object in the survey: {obj}: {store.scrub(describe(exc))}") from None
    except Exception as exc:  # botocore's own errors
        raise InputError(f"cannot read {obj}: {store.scrub(describe(exc))}") from None


class StoreArrivals:
    """Where a :class:`~daskmicro.io.survey.SurveyLake`'s files land: a prefix of an object store."""

    poll = STORE_POLL

    def __init__(self, url: str, storage_options=None):
        self.store, self.root = store_for(url, storage_options)
        self.shown = shown_url(url).rstrip("/")
        self._fs = self.store.filesystem(fresh=True)
        self._marker: bool | None = None   # whether the last listing held the close marker
        self._check()

    def __str__(self) -> str:
        return self.shown

    def _failed(self, doing: str, exc) -> InputError:
        return InputError(f"cannot {doing} {self.shown}: {self.store.scrub(describe(exc))}")

    def _check(self) -> None:
        """Refuse a missing bucket, one object named instead of a prefix, a prefix with no object."""
        fs, bucket = self._fs, self.root.split("/", 1)[0]
        try:
            if not fs.exists(bucket):
                raise InputError(f"input not found: {self.shown} (no such bucket)")
            info = None
            if "/" in self.root:
                try:
                    info = fs.info(self.root, refresh=True)
                except FileNotFoundError:
                    pass
        except InputError:
            raise
        except Exception as exc:  # botocore's own errors (no credentials, endpoint unreachable, ...)
            raise self._failed("list", exc) from None
        if info is not None and info.get("type") != "directory":
            raise InputError(f"an incremental survey is read from a prefix whose objects land over time, not from "
                             f"one object: {self.shown}")
        if not self._entries():
            raise InputError(f"input not found: {self.shown} (no object under this prefix: on an object store a "
                             f"survey's prefix exists only once its first object is there; write its {MANIFEST} first)")

    def _entries(self) -> list:
        """The objects and prefixes directly under the survey prefix, listed afresh."""
        try:
            self._fs.invalidate_cache(self.root)
            return self._fs.ls(self.root, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise self._failed("list", exc) from None

    # -- what a SurveyLake asks of where its files land --------------------------------------

    def manifest(self) -> dict | None:
        """The survey's ``_arrivals.json``, or None when there is none."""
        try:
            text = self._fs.cat_file(f"{self.root}/{MANIFEST}")
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._failed("read the manifest of", exc) from None
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise InputError(f"unreadable lake manifest {self.shown}/{MANIFEST}: not a JSON object")
        return doc

    def look(self) -> list:
        """``[(name, LandedObject, ETag)]`` of the Parquet objects under the prefix; notes whether
        the close marker is there (:meth:`closed`), from the same listing."""
        entries = self._entries()
        files = [e for e in entries if e.get("type", "file") == "file"]
        self._marker = any(e["name"].rsplit("/", 1)[-1] == CLOSED for e in files)
        out = []
        for e in files:
            name = e["name"].rsplit("/", 1)[-1]
            if not name.endswith(".parquet") or name.startswith((".", "_")):
                continue
            obj = LandedObject(self.store, e["name"], _etag(self.store, e), int(e.get("size") or 0))
            out.append((name, obj, (obj.etag, obj.size)))
        return out

    def rows(self, obj: LandedObject) -> int:
        return self.footer(obj).num_rows

    def footer(self, obj: LandedObject):
        """The object's Parquet metadata (``num_rows``, ``schema``), or a one-line refusal."""
        return _footer(self._fs, obj, self.store)

    def columns(self, obj: LandedObject) -> list:
        return list(_footer(self._fs, obj, self.store).schema.to_arrow_schema().names)

    def closed(self) -> bool:
        """Whether the close marker was in the last listing (one listing now if none was made)."""
        if self._marker is None:
            self.look()
        return bool(self._marker)

    def marker_time(self) -> float:
        """When the survey closed: the marker's ``closed_at``, else the time the store gives it."""
        key = f"{self.root}/{CLOSED}"
        try:
            return float(json.loads(self._fs.cat_file(key))["closed_at"])
        except Exception:  # not JSON, no closed_at, unreadable: the object's own time
            pass
        try:
            return float(self._fs.info(key, refresh=True)["LastModified"].timestamp())
        except Exception:
            return time.time()
