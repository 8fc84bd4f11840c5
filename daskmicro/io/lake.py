"""Parquet directories (lakes) in and out on the cluster.

Input: a directory of Parquet files (optionally hive-partitioned) becomes a Dask DataFrame whose
partitions the workers read themselves; nothing is loaded on the client.

Output: :func:`write_parts` has the workers write and read back the release partitions in a
staging directory (:func:`daskmicro.io.commit.open_staging`), which the one commit
(:func:`daskmicro.io.commit.commit`) renames into place with its ``_SUCCESS`` manifest.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
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


def _write_part(df, path: str, columns: list):
    """Write one release part, read it back: (rows, counts of its published tuples as written)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..privacy.verify import tuple_counts
    from .tables import arrow_to_pandas

    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    table = pq.read_table(path)
    return table.num_rows, tuple_counts(arrow_to_pandas(table.select(list(columns))), list(columns))


def write_parts(client, parts, staging: Path, columns: list, k: int):
    """Workers build, write and read back each release partition in ``staging`` (made by
    :func:`daskmicro.io.commit.open_staging`); returns (rows read back, k-anonymity check of the
    written files over ``columns`` — stratum columns + QIs).

    ``parts`` are the release's partitions as dask Delayed objects (``release.to_delayed()``),
    futures, or one pandas DataFrame.  Each partition is built by the task that writes it and
    dropped after, so the release is never held whole in memory.
    """
    import dask

    from ..privacy.verify import check_tuple_counts, merge_tuple_counts

    if hasattr(parts, "iloc"):  # a pandas release: one part
        parts = [dask.delayed(parts)]
    width = max(5, len(str(len(parts))))
    paths = [str(staging / f"part.{i:0{width}d}.parquet") for i in range(len(parts))]
    write = dask.delayed(_write_part, pure=True)
    results = client.gather(client.compute([write(p, path, list(columns)) for p, path in zip(parts, paths)]))
    rows = int(sum(r[0] for r in results))
    return rows, check_tuple_counts(merge_tuple_counts(*[r[1] for r in results]), int(k))
