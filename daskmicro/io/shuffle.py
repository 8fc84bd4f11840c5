"""The release cut into its output files through the staging directory, in two passes of
bounded memory.

Every output file takes rows from every input chunk (its rows are a key range of the seeded
shuffle, :mod:`daskmicro.io.layout`), so cutting the release is an all-to-all exchange.  Held
in the workers' memory it costs the whole release at once (every chunk's pieces kept until the
last file has taken its share) and input chunks × files tasks.  Here it goes through the disk,
as Dask's own P2P shuffle does, with Arrow files that pyarrow's datasets read back:

1. :func:`scatter_piece` — one task per release chunk: its rows are converted once to the
   promised Arrow schema (plus the row id and the shuffle key), grouped by output file, and each
   group written as one Arrow IPC fragment ``FILE-CHUNK.arrow`` in the staging directory's
   ``_shuffle`` folder.  It returns only the rows per file.
2. :func:`write_file` — one task per output file: its fragments are read as one dataset, sorted
   by key and written as the Parquet file.

The written files are then verified through the disk in the same way (:func:`scatter_counts`,
:func:`bucket_verdict_of`): each file is read back and its published tuples counted, the counts
cut into hash buckets and each bucket written as one ``.npy`` fragment in ``_counts``; one task
per bucket merges its fragments and returns only its verdict.  Held by Dask instead, the counts
of every file (about one distinct tuple per row, so about as large as the QIs) were spilled and
read back several times over.

A task holds one chunk or one file, never the release; the scheduler sees chunks + files tasks.
Fragments are written under a temporary name and renamed, so a task that is run again (a worker
lost) rewrites the same bytes and a reader never sees half a fragment.  Writers never create
directories (:func:`daskmicro.io.commit.open_staging`): after the staging directory has been
discarded a late write fails.  The ``_shuffle`` folder is removed before the release is verified
and committed; its fragments hold published rows only (centroids, never input QI values).

On an object store (a run prefix, :mod:`daskmicro.io.objectcommit`) the same functions take the
store (``store``, a :class:`daskmicro.io.objectstore.Store`) and keys instead of paths: every
object is one atomic PUT (no temporary name), and a file is written whole from memory, its size
and SHA-256 returned, then read back from the store to be verified.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..release.publish import ROW_ID
from .commit import row_checksum
from .formats import take_rows, used_dictionaries
from .layout import KEY_COLUMN, file_index
from .source import RID

__all__ = ["SHUFFLE_DIR", "COUNTS_DIR", "FragmentTarget", "CountsTarget", "store_of", "location", "fragment_schema",
           "scatter_piece", "fragment_path", "write_file", "open_scratch", "remove_fragments", "counts_path", "scatter_counts",
           "bucket_verdict_of", "remove_counts"]

#: Folder of the staging directory that holds the fragments while the release is cut.
SHUFFLE_DIR = "_shuffle"
#: Folder of the staging directory that holds the written files' tuple counts while they are checked.
COUNTS_DIR = "_counts"


@dataclass(frozen=True)
class FragmentTarget:
    """Where :func:`scatter_piece` sends a release chunk's rows: the run's output files — the
    shuffle ``seed``, the ``partition_by`` columns, the plan ``files`` of
    :func:`daskmicro.io.layout.plan_files` and the number of each partition's first file in the
    run's file order (``first``) — and the fragments' ``schema`` (:func:`fragment_schema`),
    folder (``directory``) and object store (``store``; None for a local folder)."""

    seed: int
    partition_by: list
    files: dict
    first: dict
    schema: object
    directory: object
    store: object = None


@dataclass(frozen=True)
class CountsTarget:
    """Where :func:`scatter_counts` writes a checked file's tuple counts: ``n_buckets`` hash
    buckets, one fragment each in ``directory`` (keys of ``store``; None for a local folder)."""

    directory: object
    n_buckets: int
    store: object = None


def fragment_schema(schema, keep_row_id: bool):
    """The Arrow schema of a fragment: the promised ``schema`` (without ``row_id``, which is made
    from the row id when the file is written) plus the row id and the shuffle key."""
    import pyarrow as pa

    fields = [f for f in schema if not (keep_row_id and f.name == ROW_ID)]
    return pa.schema(fields + [pa.field(RID, pa.int64()), pa.field(KEY_COLUMN, pa.uint64())])


def store_of(staging):
    """The object store of a run prefix (:class:`daskmicro.io.objectcommit.RemoteRun`); None for a
    local staging directory."""
    return getattr(staging, "store", None) if not isinstance(staging, Path) else None


def location(staging, *parts) -> str:
    """``staging/parts…`` as the writers name it: a local path, or a key of the store."""
    if store_of(staging) is not None:
        return staging.key(*parts)
    return str(Path(staging, *[p for p in parts if p]))


def _under(directory, name: str, store=None):
    return f"{directory}/{name}" if store is not None else Path(directory) / name


def fragment_path(directory, file_no: int, piece_no: int, store=None):
    return _under(directory, f"{file_no:06d}-{piece_no:06d}.arrow", store)


def counts_path(directory, bucket: int, file_no: int, store=None):
    """A written file's tuple counts in one hash bucket (:func:`scatter_counts`)."""
    return _under(directory, f"{bucket:06d}-{file_no:06d}.npy", store)


def _temporary(path: Path) -> Path:
    """A hidden name beside ``path`` to write under and then rename to ``path``."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")


def scatter_piece(df: pd.DataFrame, piece_no: int, target: FragmentTarget) -> dict:
    """Write the rows of one release chunk as one fragment per output file of ``target``;
    ``{file: rows}``."""
    import pyarrow as pa
    import pyarrow.feather as feather

    if df is None or not len(df):
        return {}
    schema, directory, store = target.schema, target.directory, target.store
    keys, fno = file_index(df, target.seed, target.partition_by, target.files, target.first)
    df = df.assign(**{KEY_COLUMN: keys})
    table = pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    order = np.argsort(fno, kind="stable")
    table = take_rows(table, order)
    numbers, starts, counts = np.unique(fno[order], return_index=True, return_counts=True)
    out, puts = {}, {}
    for j, start, count in zip(numbers.tolist(), starts.tolist(), counts.tolist()):
        path = fragment_path(directory, j, piece_no, store)
        piece = table.slice(start, count).replace_schema_metadata(None)
        if store is not None:   # one PUT each, all of the piece's fragments at once
            sink = pa.BufferOutputStream()
            feather.write_feather(piece, sink, compression="lz4")
            puts[path] = sink.getvalue().to_pybytes()
        else:
            tmp = _temporary(path)
            feather.write_feather(piece, str(tmp), compression="lz4")
            os.replace(tmp, path)
        out[j] = count
    if puts:
        from .objectcommit import put_in_run

        put_in_run(store, puts, scratch=directory)
    return out


def _fetch(store, paths: list) -> list:
    """The objects ``paths`` of ``store``, read whole and at once (concurrent GETs), in order."""
    got = store.filesystem().cat([str(p) for p in paths], on_error="raise")
    return [got[str(p)] for p in paths]


def write_file(path: str, schema, keep_row_id: bool, fragments: list, store=None) -> dict:
    """One output file from its fragments, rows in key order; returns rows and row checksum (and,
    on an object store, the bytes and SHA-256 of the object written)."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    if not fragments:
        return {"rows": 0, "checksum": 0}
    fs = store.filesystem() if store is not None else None
    if fs is not None:
        import pyarrow as pa

        table = pa.concat_tables([pa.ipc.open_file(pa.BufferReader(b)).read_all() for b in _fetch(store, fragments)])
    else:
        table = ds.dataset([str(f) for f in fragments], format="ipc").to_table()
    table = take_rows(table, np.argsort(table.column(KEY_COLUMN).to_numpy(), kind="stable"))
    rids = table.column(RID).to_numpy()
    if keep_row_id:
        table = table.append_column(ROW_ID, table.column(RID))
    # a dictionary column keeps only the values its rows hold: the file stores the dictionary whole
    table = used_dictionaries(table.select(schema.names).unify_dictionaries().combine_chunks())
    out = {"rows": table.num_rows, "checksum": row_checksum(rids)}
    if fs is not None:   # one PUT, or a multipart upload (parts sent at once) that appears whole when completed
        import hashlib

        import pyarrow as pa

        sink = pa.BufferOutputStream()
        pq.write_table(table.replace_schema_metadata(None), sink)
        del table
        data = sink.getvalue().to_pybytes()
        del sink
        from .objectcommit import put_in_run

        put_in_run(store, {path: data})
        return dict(out, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    # no mkdir: the directories were made by open_staging; after discard_staging this write fails
    pq.write_table(table.replace_schema_metadata(None), path)
    return out


def _remove(staging, sub: str) -> None:
    if store_of(staging) is not None:
        staging.remove(sub)
    else:
        shutil.rmtree(Path(staging) / sub, ignore_errors=True)


def open_scratch(staging, sub: str) -> None:
    """Open a scratch folder of a run prefix on an object store (its marker, which its writers check:
    :func:`daskmicro.io.objectcommit.put_in_run`); a local folder was made by ``open_staging``."""
    if store_of(staging) is not None:
        staging.open_scratch(sub)


def remove_fragments(staging) -> None:
    _remove(staging, SHUFFLE_DIR)


def _atomic_save(path, array: np.ndarray) -> None:
    tmp = _temporary(path)
    with open(tmp, "wb") as fh:
        np.save(fh, array, allow_pickle=False)
    os.replace(tmp, path)


def scatter_counts(path: str, schema, columns: list, constants: dict, target: CountsTarget, file_no: int,
                   rows: tuple | None = None, figures=None):
    """Verify one written file, or its rows ``rows`` = (start, stop)
    (:func:`daskmicro.io.commit.verify_file`), and write its tuple counts as one fragment per
    hash bucket of ``target``, ``BUCKET-FILE.npy`` (hash, count, per-column hashes in one uint64 array;
    ``file_no`` numbers the checked pieces); returns (rows, schema as promised, [buckets written],
    summary of the report's release figures or None).  ``figures`` = (QI columns,
    :class:`~daskmicro.kernels.figures.Bins`): the values read are summarised for the report's
    release figures (:func:`daskmicro.release.run_figures.piece_figures`).  On an object store
    (``target.store``) the object is read back from the store whole and a fifth item is the SHA-256 of
    the bytes read (None for a local file)."""
    from ..privacy.verify import check_no_collision, split_tuple_counts
    from .commit import verify_file

    n_buckets, directory, store = target.n_buckets, target.directory, target.store
    digest = None
    if store is not None:
        import hashlib

        import pyarrow as pa

        data = store.filesystem().cat_file(path)
        digest = hashlib.sha256(data).hexdigest()
        path = pa.BufferReader(data)
    rows, same, counts, values = verify_file(path, schema, columns, constants, rows, with_values=True)
    summary = None
    if figures is not None:
        from ..release.run_figures import piece_figures

        summary = piece_figures(values, figures[0], figures[1], rows)
    del values
    check_no_collision(counts)   # the fragments do not carry the flag: a collision inside the file stops here
    written, puts = [], {}
    for b, piece in enumerate(split_tuple_counts(counts, n_buckets)):
        if piece.hashes.size:
            packed = np.empty((piece.hashes.size, 2 + piece.tuples.shape[1]), dtype=np.uint64)
            packed[:, 0], packed[:, 1], packed[:, 2:] = piece.hashes, piece.counts.view(np.uint64), piece.tuples
            if store is not None:   # one PUT each, every bucket's at once
                import io

                buf = io.BytesIO()
                np.save(buf, packed, allow_pickle=False)
                puts[counts_path(directory, b, file_no, store)] = buf.getvalue()
            else:
                _atomic_save(counts_path(directory, b, file_no), packed)
            written.append(b)
    if puts:
        from .objectcommit import put_in_run

        put_in_run(store, puts, scratch=directory)
    return rows, same, written, summary, digest


def bucket_verdict_of(directory, bucket: int, file_nos: list, k: int, store=None):
    """The verdict of one hash bucket (:func:`daskmicro.privacy.verify.bucket_verdict`) from the
    fragments its files wrote (:func:`scatter_counts`)."""
    from ..privacy.verify import TupleCounts, bucket_verdict, merge_tuple_counts

    parts = []
    paths = [counts_path(directory, bucket, f, store) for f in file_nos]
    if store is not None:
        import io

        sources = [io.BytesIO(b) for b in _fetch(store, paths)]
    else:
        sources = paths
    for source in sources:
        a = np.load(source, allow_pickle=False)
        parts.append(TupleCounts(a[:, 0].copy(), a[:, 1].view(np.int64).copy(), np.ascontiguousarray(a[:, 2:])))
        del a
    del sources
    return bucket_verdict(merge_tuple_counts(*parts), k)


def remove_counts(staging) -> None:
    _remove(staging, COUNTS_DIR)
