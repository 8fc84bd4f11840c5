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


#: A stratum column of a CSV whose later rows (past the block its type is inferred from) hold
#: values of another kind: (first rows, later rows).
CSV_CHANGES = {
    "integers, then text": ("1", "x"),
    "integers, then decimals": ("2", "2.5"),
    "empty, then text": ("", "A"),
    "empty, then integers": ("", "7"),
    "booleans, then text": ("true", "maybe"),
}


@pytest.mark.parametrize("change", sorted(CSV_CHANGES))
def test_a_csv_stratum_column_changing_type_after_its_first_rows_is_refused(tmp_path, change):
    """A CSV column's type is inferred from the file's first block (1 MiB): a stratum column whose
    later values are of another kind is refused in one line naming the column (never a value),
    before anything is written — never published with its strata read as other values."""
    first, later = CSV_CHANGES[change]
    n = 30_000   # rows of about 45 bytes: the later values are past the first block
    rng = np.random.default_rng(0)
    s = np.array([first] * n, dtype=object)
    s[n - 40:] = later
    df = pd.DataFrame({"a": rng.normal(size=n).round(3), "s": s, "b": rng.normal(size=n).round(3),
                       "note": "x" * 24})
    path = tmp_path / "in.csv"
    df.to_csv(path, index=False)
    assert path.stat().st_size > 1 << 20
    out = tmp_path / "out.parquet"
    with pytest.raises(InputError) as err:
        daskmicro.anonymize_file(path, out, ["a", "b"], K, strata=["s"], ledger="off", method="mdav")
    text = str(err.value)
    assert "\n" not in text and "column 's'" in text and "first rows" in text and repr(later) not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
