"""Plain conversions shared by the readers, the writers and the commit: Arrow tables to pandas
with nullable integers, and JSON text of run documents (numpy values, paths; NaN refused)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["arrow_to_pandas", "dump_json"]


def arrow_to_pandas(table) -> pd.DataFrame:
    """A pyarrow table as pandas, integer columns as pandas nullable integers."""
    import pyarrow as pa

    # integers as pandas nullable integers, whatever the nulls of this file: every piece gets the
    # same dtypes, and a missing integer stays missing (never a float sentinel)
    mapping = {t: pd.api.types.pandas_dtype(str(t).replace("int", "Int").replace("uInt", "UInt"))
               for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(),
                         pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())}
    return table.to_pandas(types_mapper=mapping.get)


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
