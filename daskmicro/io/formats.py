"""Plain conversions shared by the readers, the writers and the commit: Arrow tables to pandas
with nullable integers, categorical columns and dictionary-encoded Arrow columns cut to the values
their rows hold, and JSON text of run documents (numpy values, paths; NaN refused)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["arrow_to_pandas", "dump_json", "used_categories", "used_dictionaries", "take_rows", "filter_rows"]


def arrow_to_pandas(table) -> pd.DataFrame:
    """A pyarrow table as pandas, integer columns as pandas nullable integers."""
    import pyarrow as pa

    # integers as pandas nullable integers, whatever the nulls of this file: every piece gets the
    # same dtypes, and a missing integer stays missing (never a float sentinel)
    mapping = {t: pd.api.types.pandas_dtype(str(t).replace("int", "Int").replace("uInt", "UInt"))
               for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(),
                         pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())}
    return table.to_pandas(types_mapper=mapping.get)


def _plain_schema(schema):
    """``schema`` with each view type (string_view, binary_view, list views) as its plain large
    type, or None when it has none: Arrow's take and filter have no kernels for the views."""
    import pyarrow as pa

    def plain(t):
        if pa.types.is_string_view(t):
            return pa.large_string()
        if pa.types.is_binary_view(t):
            return pa.large_binary()
        if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
            return pa.large_list(t.value_field)
        return None

    fields = [(f, plain(f.type)) for f in schema]
    if all(p is None for _, p in fields):
        return None
    return pa.schema([f if p is None else f.with_type(p) for f, p in fields], metadata=schema.metadata)


def _in_schema(table, schema):
    """``table`` with its columns in ``schema``'s types (view types and their plain types, both
    ways): Arrow casts text and bytes; a list view is rebuilt from its values, both ways (Arrow
    has no cast to a list view, and its cast from one loses values)."""
    import pyarrow as pa

    columns = []
    for f, column in zip(schema, table.columns):
        if column.type == f.type:
            columns.append(column)
        elif any(pa.types.is_list_view(t) or pa.types.is_large_list_view(t) for t in (f.type, column.type)):
            columns.append(pa.array(column.to_pylist(), type=f.type))
        else:
            columns.append(column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def take_rows(table, indices):
    """``table.take(indices)`` for a table of any column types (a view column is taken in its plain
    type and turned back: the rows and the published type are the input's)."""
    plain = _plain_schema(table.schema)
    return table.take(indices) if plain is None else _in_schema(_in_schema(table, plain).take(indices), table.schema)


def filter_rows(table, expr):
    """``table.filter(expr)`` for a table of any column types (as :func:`take_rows`)."""
    plain = _plain_schema(table.schema)
    return table.filter(expr) if plain is None else _in_schema(_in_schema(table, plain).filter(expr), table.schema)


def used_categories(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every categorical column cut to the categories its rows hold (order and
    ``ordered`` kept).

    A categorical column carries its categories whether or not a row holds them, and a Parquet
    file stores them all in the column's dictionary: categories of records a filter left out (or
    of a population the input was cut from) would be published beside the release's rows.
    """
    out = None
    for c in df.columns[[isinstance(t, pd.CategoricalDtype) for t in df.dtypes]]:
        values = df[c]
        codes = values.cat.codes.to_numpy()
        held = np.bincount(codes[codes >= 0].astype(np.int64), minlength=len(values.cat.categories))
        if not held.all():
            out = df.copy() if out is None else out
            out[c] = values.cat.remove_unused_categories()
    return df if out is None else out


def _used_dictionary(array):
    """One dictionary-encoded Arrow array with only the dictionary entries its indices use, in
    their dictionary order."""
    import pyarrow as pa

    indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False)
    valid = ~np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    codes = indices[valid].astype(np.int64)
    used = np.flatnonzero(np.bincount(codes, minlength=len(array.dictionary)))
    if used.size == len(array.dictionary):
        return array
    remap = np.zeros(len(array.dictionary), dtype=np.int64)
    remap[used] = np.arange(used.size)
    new = np.zeros(len(indices), dtype=np.int64)
    new[valid] = remap[codes]
    idx = pa.array(new, mask=~valid, type=array.type.index_type)
    return pa.DictionaryArray.from_arrays(idx, array.dictionary.take(pa.array(used)), ordered=array.type.ordered)


def used_dictionaries(table):
    """A pyarrow table with every dictionary-encoded column cut to the entries its rows use (see
    :func:`used_categories`): the dictionary is written to the file whole."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            column = table.column(i)
            chunks = [_used_dictionary(ch) for ch in column.chunks]
            table = table.set_column(i, field, pa.chunked_array(chunks, type=field.type))
    return table


def _json_default(obj: Any):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def dump_json(obj: Any) -> str:
    """``obj`` as indented JSON text (numpy scalars and arrays, paths; NaN/inf refused), newline-terminated."""
    return json.dumps(obj, indent=2, default=_json_default, allow_nan=False) + "\n"
