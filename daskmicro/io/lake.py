"""Parquet directories (lakes) in and out on the cluster.

Input: a directory of Parquet files (optionally hive-partitioned) becomes a Dask DataFrame whose
partitions the workers read themselves; nothing is loaded on the client.

Output: :func:`write_parts` has the workers write and read back the release partitions in a
staging directory (:func:`daskmicro.io.commit.open_staging`), which the one commit
(:func:`daskmicro.io.commit.commit`) renames into place with its ``_SUCCESS`` manifest — or under
a run prefix of an object store, committed there by its ``_SUCCESS`` object
(:mod:`daskmicro.io.objectcommit`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from .formats import used_dictionaries
from .tables import PARQUET_SUFFIXES, one_line

__all__ = ["read_lake", "write_parts", "is_lake_target"]


def is_lake_target(path) -> bool:
    """An output path names a directory when it has no table extension or ends with a separator."""
    p = str(path)
    return p.endswith(("/", os.sep)) or Path(p).suffix == "" or Path(p).is_dir()


def read_lake(path):
    """A Dask DataFrame over the Parquet files of a directory (or one Parquet file)."""
    import dask.dataframe as dd

    path = Path(path)
    if not path.exists():
        raise InputError(f"input not found: {path}")
    if path.is_dir():
        from .recovery import refuse_uncommitted

        refuse_uncommitted(path)  # a daskmicro release is read only once committed
        files = [p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(PARQUET_SUFFIXES)]
        if not files:
            raise InputError(f"directory holds no Parquet files: {path}")
    try:
        return dd.read_parquet(str(path))
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise InputError(f"cannot read {path}: {one_line(exc)}") from exc


def _write_part(df, path: str, columns: list, store=None, counted: bool = False, sketch: tuple = ()) -> tuple:
    """Write one release part and read it back: ({rows, bytes[, sha256]}, the counts of its
    published tuples as written — or, with ``counted``, their fingerprint
    (:func:`~daskmicro.privacy.verify.tuple_fingerprint`) —, the identifier sketch of the ``sketch``
    columns or None).  On an object store (``store``: ``path`` a key of it) the part is made in
    memory, PUT whole (:func:`daskmicro.io.objectfile.part_size` parts when large) and read back
    from the store; the SHA-256 of the bytes read back must be that of the bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..privacy import identifiers
    from ..privacy.verify import tuple_counts, tuple_fingerprint
    from .tables import arrow_to_pandas

    marks = identifiers.sketch(df, list(sketch)) if sketch else None
    table = used_dictionaries(pa.Table.from_pandas(df, preserve_index=False))   # no unheld category
    del df
    out = {}
    if store is None:
        pq.write_table(table, path)
        table, out["bytes"] = pq.read_table(path, columns=list(columns)), os.path.getsize(path)
    else:
        import hashlib

        from ..errors import VerificationError
        from .objectcommit import put_in_run

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
        fs = store.filesystem()
        put_in_run(store, {path: data})
        fs.invalidate_cache(path)
        back = fs.cat_file(path)
        out["bytes"], out["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        if hashlib.sha256(back).hexdigest() != out["sha256"]:
            raise VerificationError(f"the object read back differs from the bytes written: {store.protocol}://{path}")
        table = pq.read_table(pa.BufferReader(back), columns=list(columns))
    out["rows"] = table.num_rows
    published = arrow_to_pandas(table)
    check = tuple_fingerprint if counted else tuple_counts
    return out, check(published, list(columns)), marks


def write_parts(client, parts, staging, columns: list, counted: bool = False, sketch: tuple = ()):
    """Workers build, write and read back each release partition in ``staging`` (made by
    :func:`daskmicro.io.commit.open_staging`: a local directory, or a run prefix of an object store,
    :class:`daskmicro.io.objectcommit.RemoteRun`); returns (the files written — path in the
    release, rows, bytes, and on a store the SHA-256 of the object —, futures of each file's
    check as read back over ``columns`` — stratum columns + QIs —, left on the workers for the
    caller's verdict: its tuple counts, or with ``counted`` (the tuples were counted before they
    were written) its tuple fingerprint, the merged identifier sketch of the ``sketch`` columns
    (:mod:`daskmicro.privacy.identifiers`) or None).

    ``parts`` are the release's partitions as dask Delayed objects (``release.to_delayed()``),
    futures, or one pandas DataFrame.  Each partition is built by the task that writes it and
    dropped after, so the release is never held whole in memory.
    """
    import operator

    import dask

    from ..privacy import identifiers

    if hasattr(parts, "iloc"):  # a pandas release: one part
        parts = [dask.delayed(parts)]
    width = max(5, len(str(len(parts))))
    names = [f"part.{i:0{width}d}.parquet" for i in range(len(parts))]
    store = None if isinstance(staging, (str, os.PathLike)) else staging.store
    paths = [str(Path(staging) / n) if store is None else staging.key(n) for n in names]
    write = dask.delayed(_write_part, pure=True)
    tasks = client.compute([write(p, path, list(columns), store, counted, tuple(sketch))
                            for p, path in zip(parts, paths)])
    written = client.gather([client.submit(operator.getitem, t, 0) for t in tasks])
    checks = [client.submit(operator.getitem, t, 1) for t in tasks]
    marks = None
    if sketch:
        marks = client.submit(identifiers.merge, *[client.submit(operator.getitem, t, 2) for t in tasks]).result()
    return [dict(path=name, **w) for name, w in zip(names, written)], checks, marks
