"""Lake output that is committed whole or not at all, with a ``_SUCCESS`` manifest.

Layout.  The release rows are ordered by seeded keys of their global row ids
(:func:`daskmicro.publish.shuffle_keys`) and cut into buckets by key range, so the content and
the bytes of every file depend only on the input rows, the configuration and the seed — not on
the number of workers or of input files.  With partition columns the files go under hive
directories ``col=value/``; each partition holds ``ceil(rows / rows_per_file)`` files
``part-NNNNN.parquet``.

Commit protocol (:func:`commit`).  The workers write into a hidden sibling of the target
(``.NAME.tmp-XXXXXXXX``); the files are re-read and verified (rows in = rows out, each row once,
the promised schema, every QI tuple at least k times); the staging directory is renamed into
place (an existing target moved aside first, deleted last) and only then is ``_SUCCESS`` written
atomically.  A directory without ``_SUCCESS`` is not a committed release.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import VerificationError
from ..publish import ROW_ID, key_bucket, shuffle_keys
from .source import RID, arrow_to_pandas
from .tables import _dump_json, write_json_atomic

__all__ = ["SUCCESS", "plan_files", "split_piece", "write_bucket", "verify_file", "commit",
           "read_manifest", "fingerprint", "row_checksum", "staging_dir"]

SUCCESS = "_SUCCESS"
_KEY = "__daskmicro_key__"
_MASK = (1 << 64) - 1


def staging_dir(target: Path) -> Path:
    return target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"


def fingerprint(obj) -> str:
    """SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def row_checksum(rids: np.ndarray) -> int:
    """Order-free checksum of a multiset of row ids (sum of mixed ids mod 2^64)."""
    with np.errstate(over="ignore"):
        return int(shuffle_keys(0x2545F4914F6CDD1D, np.asarray(rids, dtype=np.int64)).sum(dtype=np.uint64))


def _dir_value(v) -> str:
    return "__HIVE_DEFAULT_PARTITION__" if v is None else str(v)


def plan_files(partition_by: list, partition_counts: dict, rows_per_file: int) -> dict:
    """``{partition value tuple: (relative directory, number of files)}``."""
    out = {}
    for key, n in partition_counts.items():
        rel = os.path.join(*[f"{c}={_dir_value(v)}" for c, v in zip(partition_by, key)]) if partition_by else ""
        out[key] = (rel, max(1, math.ceil(n / rows_per_file)))
    return out


def split_piece(df: pd.DataFrame, seed: int, partition_by: list, files: dict) -> dict:
    """Cut one release piece by (partition value tuple, bucket); rows carry their shuffle key."""
    keys = shuffle_keys(seed, df[RID].to_numpy(dtype=np.int64))
    df = df.assign(**{_KEY: keys})
    out = {}
    if partition_by:
        grouped = df.groupby(partition_by, dropna=False, sort=False)
        items = [((k if isinstance(k, tuple) else (k,)), g) for k, g in grouped]
    else:
        items = [((), df)]
    for key, g in items:
        key = tuple(None if (v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))) else
                    (v.item() if isinstance(v, np.generic) else v) for v in key)
        nb = files[key][1]
        b = key_bucket(g[_KEY].to_numpy(), nb)
        for i in np.unique(b):
            out[(key, int(i))] = g[b == i]
    return out


def pick(split: dict, key):
    return split.get(key)


def write_bucket(path: str, schema, keep_row_id: bool, *pieces) -> dict:
    """Write one output file from its pieces, rows in key order; returns rows and row checksum."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pieces = [p for p in pieces if p is not None and len(p)]
    df = pd.concat(pieces, ignore_index=True) if pieces else None
    if df is None:
        return {"rows": 0, "checksum": 0}
    df = df.sort_values(_KEY, kind="stable").reset_index(drop=True)
    rids = df[RID].to_numpy(dtype=np.int64)
    if keep_row_id:
        df[ROW_ID] = rids
    table = pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(None), path)
    return {"rows": len(df), "checksum": row_checksum(rids)}


def verify_file(path: str, schema, columns: list, constants: dict | None = None):
    """Re-read a written file: (rows, schema as promised, counts of the published tuples over
    ``columns`` — stratum columns and QIs — in the dtypes as written).

    ``constants`` are the hive partition values of the file's directory (``col=value/``): they
    are published by the path, not in the file, and join each of its tuples.
    """
    import pyarrow.parquet as pq

    from ..privacy.verify import tuple_counts

    constants = constants or {}
    table = pq.read_table(path)
    same = table.schema.remove_metadata().equals(schema)
    df = arrow_to_pandas(table.select([c for c in columns if c not in constants]))
    for c, v in constants.items():
        if c in columns:
            df[c] = pd.array([v] * len(df), dtype=object)
    return table.num_rows, same, tuple_counts(df, list(columns))


def read_manifest(target: Path):
    """The ``_SUCCESS`` manifest of a committed release, or None."""
    path = Path(target) / SUCCESS
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def commit(staging: Path, target: Path, manifest: dict) -> None:
    """Rename the verified ``staging`` directory to ``target`` and then write ``_SUCCESS``.

    An existing ``target`` is moved aside first and deleted only after the new one is committed.
    """
    _dump_json(manifest)  # serialisable before anything moves
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    write_json_atomic(manifest, target / SUCCESS)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def check_written(results: list, n: int, expected_checksum: int, schema_ok: list, k_check, rows_read: int):
    """Raise VerificationError unless the written files hold each input row once and pass k."""
    rows = sum(r["rows"] for r in results)
    checksum = 0
    for r in results:
        checksum = (checksum + r["checksum"]) & _MASK
    if rows != n or rows_read != n:
        raise VerificationError(f"rows in = {n}, rows written = {rows}, rows read back = {rows_read}")
    if checksum != expected_checksum:
        raise VerificationError("the written files do not hold each input row exactly once")
    if not all(schema_ok):
        raise VerificationError("a written file does not have the promised schema")
    k_check.raise_if_failed()
