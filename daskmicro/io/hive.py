"""Hive partition directories (``column=value``) written and read the way hive readers do.

A partition directory's name is made from data (a column name and one of its values), so it is
encoded, never used as it is: every character outside ``A–Z a–z 0–9 _ . - ~`` is written as
``%XX`` (UTF-8 bytes), which pyarrow's datasets, Dask, DuckDB and Spark decode back to the same
text.  A value can therefore never hold a ``/`` or make ``..`` a path step of its own: each
partition is exactly one directory below the release.  A null is hive's null partition
``__HIVE_DEFAULT_PARTITION__``.

What hive readers cannot give back is refused before any work (:func:`check_values`,
:func:`check_names`): a column name that readers skip (one starting with ``.`` or ``_``), an
empty text value (pyarrow reads it as an empty text, Spark as a null, Dask fails on it), the
text ``__HIVE_DEFAULT_PARTITION__`` itself (read back as a null) and a value whose encoded name
is longer than a file system allows.
"""

from __future__ import annotations

import math
from urllib.parse import quote, unquote

from ..errors import InputError, ParameterError

__all__ = ["NULL", "segment", "relative_dir", "parse_segment", "check_names", "check_value", "value_text"]

#: Hive's directory name for a null partition value.
NULL = "__HIVE_DEFAULT_PARTITION__"
#: Longest directory name most file systems take (bytes).
MAX_NAME_BYTES = 255


def value_text(v) -> str | None:
    """The text of a partition value (None for a null or NaN), before encoding."""
    if v is None:
        return None
    try:
        if v != v or (isinstance(v, float) and math.isnan(v)):  # NaN, pandas NA raises
            return None
    except (TypeError, ValueError):
        return None
    if isinstance(v, bytes):
        raise InputError("a partition column holds bytes; partition by a text, number or date column")
    return str(v)


def segment(column: str, value) -> str:
    """The directory name ``column=value`` of one partition, both parts percent-encoded."""
    text = value_text(value)
    return f"{quote(str(column), safe='')}={NULL if text is None else quote(text, safe='')}"


def relative_dir(columns, values) -> str:
    """The partition's directory below the release: one encoded segment per partition column."""
    return "/".join(segment(c, v) for c, v in zip(columns, values))


def parse_segment(part: str):
    """``(column, value)`` of a directory name as hive readers decode it (value None: null), or
    None when the name is not ``column=value``."""
    if "=" not in part:
        return None
    key, val = part.split("=", 1)
    return unquote(key), (None if val == NULL else unquote(val))


def check_names(columns) -> None:
    """Refuse partition columns that hive readers would skip or cannot name."""
    for c in columns:
        name = str(c)
        if not name or name.startswith((".", "_")):
            raise ParameterError(f"partition_by (--partition-by): column {name!r} cannot name a hive directory "
                                 "(readers skip directories whose names start with '.' or '_'); rename it")


def check_value(column: str, value, count: int) -> None:
    """Refuse a partition value that hive readers would read back as another value (named by its
    column and the number of records holding it, never by the value)."""
    text = value_text(value)
    if text == "":
        raise InputError(f"partition column {column!r}: {count} record(s) hold an empty text, which hive readers "
                         "read back differently (as an empty text, a null or an error); fill or drop them first")
    if len(segment(column, value).encode()) > MAX_NAME_BYTES:
        raise InputError(f"partition column {column!r}: {count} record(s) hold a value whose encoded directory name "
                         f"exceeds {MAX_NAME_BYTES} bytes, the file system's limit; partition by a shorter column")
    if text == NULL:
        raise InputError(f"partition column {column!r}: {count} record(s) hold the text hive reserves for a null "
                         "partition, which readers would read back as a null; recode it first")
