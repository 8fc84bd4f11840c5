"""Stratum and partition columns of Python objects: one kind of value (numbers of one kind, text,
booleans) is grouped, written and read back as counted; a column mixing kinds (1 beside 1.0, True
beside 1, numbers beside text) would be read back as other values than it was grouped by, so it is
refused before any work, in one line naming the column.  Only a pandas or Dask frame can hold such
a column: a CSV column is read as one type and a Parquet column cannot mix them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskmicro
from daskmicro.errors import InputError

K = 3
KINDS = {
    "int": [1, 2],
    "numpy int": [np.int64(1), np.int64(2)],
    "float": [1.0, 2.5],
    "bool": [True, False],
    "str": ["a", "b"],
}
SAME = {"int": "int", "numpy int": "int", "float": "float", "bool": "bool", "str": "str"}


def _frame(first, second, n=30, seed=0):
    rng = np.random.default_rng(seed)
    values = [KINDS[first][i % 2] if i % 3 else KINDS[second][i % 2] for i in range(n)]
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "s": pd.Series(values, dtype=object)})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.sampled_from(sorted(KINDS)), second=st.sampled_from(sorted(KINDS)), seed=st.integers(0, 99))
def test_a_key_column_of_one_kind_runs_and_of_several_is_refused(tmp_path_factory, first, second, seed):
    df = _frame(first, second, seed=seed)
    if SAME[first] != SAME[second]:
        with pytest.raises(InputError, match="column 's' \\(a stratum or partition column\\) mixes values"):
            daskmicro.anonymize(df, qi=["a", "b"], k=K, strata=["s"], ledger=False, merge_small_strata=True)
        return
    release, _ = daskmicro.anonymize(df, qi=["a", "b"], k=K, strata=["s"], ledger=False, merge_small_strata=True)
    assert len(release) == len(df) and release.groupby(["s", "a", "b"]).size().min() >= K
