"""Stratum and partition columns of Python objects: one kind of value (numbers of one kind, text,
booleans) is grouped, written and read back as counted; a column mixing kinds (1 beside 1.0, True
beside 1, numbers beside text) would be read back as other values than it was grouped by, so it is
refused before any work, in one line naming the column.  Only a pandas or Dask frame can hold such
a column: a CSV column is read as one type and a Parquet column cannot mix them.  A float16 key
column is grouped and counted like any float column; a nested one (Arrow list, struct, map) names
no stratum and is refused, and published as it is it meets the identifier rule like any other."""

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


HALF = st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0, 65504.0, -65504.0, 6e-8, float("nan")])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(HALF, min_size=1, max_size=3, unique_by=lambda v: repr(v) if v == v else "nan"),
       role=st.sampled_from(["strata", "partition_by"]), seed=st.integers(0, 99))
def test_a_float16_key_column_is_grouped_written_and_counted(tmp_path_factory, values, role, seed):
    """pandas cannot group on float16: a float16 stratum or partition column is grouped on its
    exact float32 values, published in its own dtype, and every published tuple counted ≥ k."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = tmp_path_factory.mktemp("half")
    rng = np.random.default_rng(seed)
    n = 12 * len(values)
    s = np.array([values[i % len(values)] for i in range(n)], dtype=np.float16)
    pq.write_table(pa.table({"a": rng.normal(size=n), "b": rng.normal(size=n), "s": s}), tmp / "in.parquet")
    out = tmp / "rel"
    daskmicro.anonymize_file(tmp / "in.parquet", out, ["a", "b"], K, ledger="off", **{role: ["s"]})
    files = sorted(out.rglob("*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in files) == n
    if role == "strata":
        table = pq.read_table(files[0])
        assert table.schema.field("s").type == pa.float16()
        got = table.to_pandas().astype({"s": np.float32})
        assert got.groupby(["s", "a", "b"], dropna=False).size().min() >= K
    else:
        for f in files:
            assert pq.read_table(f).to_pandas().groupby(["a", "b"]).size().min() >= K


NESTED = {
    "list": lambda i: pa_array([[i % 2, 7] for i in range(i)]),
    "struct": lambda i: pa_array([{"v": i % 2} for i in range(i)]),
    "map": lambda i: pa_array([[("v", i % 2)] for i in range(i)], "map"),
}


def pa_array(values, kind=None):
    import pyarrow as pa

    return pa.array(values, pa.map_(pa.string(), pa.int64())) if kind == "map" else pa.array(values)


def _nested_input(tmp_path, kind, n=30, unique=False):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    distinct = {"list": lambda i: [i], "struct": lambda i: {"v": i}, "map": lambda i: [("v", i)]}[kind]
    nested = pa_array([distinct(i) for i in range(n)], kind) if unique else NESTED[kind](n)
    pq.write_table(pa.table({"a": rng.normal(size=n), "b": rng.normal(size=n), "p": nested}), tmp_path / "in.parquet")
    return tmp_path / "in.parquet"


@pytest.mark.parametrize("kind", sorted(NESTED))
@pytest.mark.parametrize("role", ["strata", "partition_by"])
def test_a_nested_key_column_is_refused_in_one_line(tmp_path, kind, role):
    path = _nested_input(tmp_path, kind)
    with pytest.raises(InputError) as err:
        daskmicro.anonymize_file(path, tmp_path / "rel", ["a", "b"], K, ledger="off", **{role: ["p"]})
    text = str(err.value)
    assert "\n" not in text and "column 'p'" in text and "lists, structs or maps" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


@pytest.mark.parametrize("kind", ["list", "struct"])
def test_a_nested_column_published_as_it_is_is_judged_by_its_values(tmp_path, kind):
    """A list or struct column published as it is goes through the identifier rule as any other
    column: one of repeated values is published, one of a distinct list per record is refused."""
    import pyarrow.parquet as pq

    path = _nested_input(tmp_path, kind)
    daskmicro.anonymize_file(path, tmp_path / "rel", ["a", "b"], K, ledger="off")
    assert pq.read_table(tmp_path / "rel").column("p").to_pylist() != []
    (tmp_path / "u").mkdir()
    path = _nested_input(tmp_path / "u", kind, unique=True)
    with pytest.raises(InputError, match="column 'p' holds a distinct value"):
        daskmicro.anonymize_file(path, tmp_path / "u" / "rel", ["a", "b"], K, ledger="off")
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == ["in.parquet"]
