"""A float column of an extension dtype (Arrow's ``double``/``float``, pandas' ``Float64``) can hold
a NaN beside its nulls; ``isna()`` sees only the nulls.  Both are one missing value to the pre-scan,
to the groups (strata × missingness patterns), to a re-release's frozen cells and as published
(written as null): a QI or stratum column mixing them runs like one holding only nulls, and the
file as written is k-anonymous."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskmicro
from daskmicro.errors import InputError, ParameterError
from daskmicro.release.publish import missing_values

DTYPES = ["double[pyarrow]", "float[pyarrow]", "Float64", "Float32", "float64", "object"]


def _column(values: np.ndarray, null: np.ndarray, dtype: str) -> pd.Series:
    """``values`` (NaN where a NaN is meant) with nulls at ``null``, in ``dtype``, the NaNs kept
    apart from the nulls where the dtype can hold both."""
    if dtype.endswith("[pyarrow]"):
        typ = pa.float64() if dtype.startswith("double") else pa.float32()
        arr = pa.array(values, type=typ, mask=null, from_pandas=False)
        return pd.Series(pd.arrays.ArrowExtensionArray(arr))
    if dtype in ("Float64", "Float32"):
        return pd.Series(pd.arrays.FloatingArray(values.astype(dtype.lower()), null.copy()))
    if dtype == "object":
        return pd.Series([None if m else float(v) for v, m in zip(values, null)], dtype=object)
    return pd.Series(np.where(null, np.nan, values), dtype=dtype)


def test_missing_values_sees_nan_beside_null():
    values = np.array([1.0, np.nan, 2.0, 3.0])
    null = np.array([False, False, True, False])
    for dtype in DTYPES:
        col = _column(values, null, dtype)
        assert missing_values(col).tolist() == [False, True, True, False], dtype
    text = pd.Series(["a", None, "nan", pd.NA], dtype=object)
    assert missing_values(text).tolist() == [False, True, False, True]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999), where=st.sampled_from(["qi", "stratum"]))
def test_nan_beside_null_runs_as_one_missing_value(tmp_path_factory, dtype, seed, where):
    if dtype == "object" and where == "qi":
        where = "stratum"                                    # a QI of Python objects is refused as not numeric
    rng = np.random.default_rng(seed)
    n, k = 60, 3
    values = rng.normal(size=n).round(2) if where == "qi" else rng.integers(0, 2, n).astype(float)
    nan, null = rng.random(n) < 0.15, rng.random(n) < 0.15
    values[nan] = np.nan
    null &= ~nan
    df = pd.DataFrame({"x": _column(values, null, dtype), "y": rng.normal(size=n), "z": rng.normal(size=n)})
    n_missing = int((nan | null).sum())
    folder = tmp_path_factory.mktemp("nan")
    src, out = folder / "in.parquet", folder / "release.parquet"
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table, src)
    kept_apart = dtype not in ("float64", "object")          # NumPy's NaN is written as a null
    assert pq.read_table(src).column("x").null_count == int(null.sum()) + (0 if kept_apart else int(nan.sum()))
    if where == "qi":
        kw = dict(qi=["x", "y", "z"], missing="separate")
        keys = ["x", "y", "z"]
    else:
        kw = dict(qi=["y", "z"], strata=["x"], merge_small_strata=True)
        keys = ["x", "y", "z"]
    if 0 < n_missing < k and where == "qi":
        with pytest.raises((InputError, ParameterError)):
            daskmicro.anonymize_file(str(src), str(out), k=k, ledger="off", **kw)
        assert not out.exists()
        return
    daskmicro.anonymize_file(str(src), str(out), k=k, ledger="off", **kw)
    release, _ = daskmicro.anonymize(df, k=k, ledger="off", **kw)        # the frame path
    assert len(release) == n and int(missing_values(release["x"]).sum()) == n_missing
    written = pq.read_table(out)
    assert written.num_rows == n
    # every missing value of x is written as a null, none as a NaN
    x = written.column("x").to_numpy(zero_copy_only=False)
    assert int(written.column("x").null_count) == n_missing and not np.isnan(x[~np.isnan(x)]).any()
    as_written = written.to_pandas(types_mapper=pd.ArrowDtype)     # nulls and NaNs kept apart
    assert daskmicro.verify_k_anonymity(as_written, keys, k)
    assert as_written.groupby(keys, dropna=False).size().min() >= k
