"""What the published files hold beyond their rows' values, checked on real runs and the files as written.

* a categorical column's categories are written whole into a Parquet file's dictionary, whether a
  row holds them or not: a category held only by records a filter left out (or by a population the
  input was cut from) must not be published;
* a published tuple (stratum columns + QIs) is counted by value, where −0.0 equals 0.0: a sign bit
  that only some records carry singles them out in the file, whatever the column's float dtype
  (NumPy, pandas' nullable ``Float64``, Arrow's ``double``);
* stratum values grouped apart by their bits (Arrow's −0.0 and 0.0) are one stratum when counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize, anonymize_file

SECRET = "surgeon-of-village-x"


def _with_filtered_category(n=36, seed=0):
    rng = np.random.default_rng(seed)
    occupation = ["clerk", "farmer"] * (n // 2)
    occupation[3] = SECRET
    df = pd.DataFrame({"age": rng.integers(20, 80, n).astype(float), "income": rng.normal(size=n),
                       "occupation": pd.Categorical(occupation),
                       "region": pd.Categorical(["north", "south", "east"] * (n // 3),
                                                categories=["east", "north", "south", "west"])})
    df.loc[3, "age"] = 5.0   # the one record a filter on age leaves out
    return df


def _parquet_files(path):
    return sorted(path.rglob("*.parquet")) if path.is_dir() else [path]


def _dictionaries_held(path):
    """Every dictionary column of every Parquet file under ``path``: (entries, values its rows hold)."""
    for f in _parquet_files(path):
        table = pq.read_table(f)
        for i, field in enumerate(table.schema):
            if pa.types.is_dictionary(field.type):
                column = table.column(i).combine_chunks()
                yield f, field.name, set(column.dictionary.to_pylist()), set(column.drop_null().to_pylist())


@pytest.mark.parametrize("out, options", [
    ("rel.parquet", {}),
    ("rel", {}),
    ("rel", {"rows_per_file": 10}),
    ("rel", {"partition_by": ["region"]}),
    ("rel.parquet", {"strata": ["region"]}),
])
def test_no_category_without_a_published_row(tmp_path, out, options):
    df = _with_filtered_category()
    df.to_parquet(tmp_path / "in.parquet", index=False)
    anonymize_file(tmp_path / "in.parquet", tmp_path / out, qi=["age", "income"], k=3, filters=["age >= 18"],
                   **options)
    seen = 0
    for f, name, entries, held in _dictionaries_held(tmp_path / out):
        assert entries == held, (f.name, name)
        seen += 1
    assert seen
    written = b"".join(p.read_bytes() for p in ([tmp_path / out] if out.endswith(".parquet") else [])
                       + sorted(q for q in (tmp_path / out).rglob("*") if q.is_file()) + sorted(tmp_path.glob("*.json")))
    assert SECRET.encode() not in written
    assert b"west" not in written


def test_in_memory_release_holds_only_its_categories():
    df = _with_filtered_category()
    release, _ = anonymize(df[df.age >= 18], qi=["age", "income"], k=3)
    assert SECRET not in release.occupation.cat.categories
    assert set(release.region.cat.categories) == set(release.region)
    release.to_parquet(buf := __import__("io").BytesIO(), index=False)
    assert SECRET.encode() not in buf.getvalue()


def test_ordered_categories_keep_their_order(tmp_path):
    df = _with_filtered_category()
    df["grade"] = pd.Categorical(["low", "mid", "high"] * 12, categories=["low", "mid", "high", "top"], ordered=True)
    df.to_parquet(tmp_path / "in.parquet", index=False)
    anonymize_file(tmp_path / "in.parquet", tmp_path / "rel.parquet", qi=["age", "income"], k=3)
    grade = pd.read_parquet(tmp_path / "rel.parquet").grade
    assert grade.cat.ordered and list(grade.cat.categories) == ["low", "mid", "high"]


FLOATS = ["float64", "float32", "Float64", "Float32", "double[pyarrow]"]


def _signed_zeros(dtype, flips, n=12, seed=0):
    rng = np.random.default_rng(seed)
    z, s = np.zeros(n), np.zeros(n)
    for i in flips["z"]:
        z[i] = -0.0
    for i in flips["s"]:
        s[i] = -0.0
    return pd.DataFrame({"a": rng.normal(size=n), "z": pd.Series(z).astype(dtype),
                         "s": pd.Series(s).astype(dtype)})


def _sign_bits(values) -> int:
    return int(np.signbit(np.asarray(pd.Series(values).to_numpy(dtype=np.float64, na_value=np.nan))).sum())


_flips = st.fixed_dictionaries({"z": st.sets(st.integers(0, 11), max_size=3),
                                "s": st.sets(st.integers(0, 11), min_size=1, max_size=3)})


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(FLOATS), flips=_flips)
def test_no_sign_bit_of_one_record_in_memory(dtype, flips):
    # z is constant by value (published unchanged), s one stratum by value: the bits must follow
    df = _signed_zeros(dtype, flips)
    release, report = anonymize(df, qi=["a", "z"], k=3, strata=["s"])
    assert len(release) == len(df)
    assert _sign_bits(release.z) == 0 and _sign_bits(release.s) == 0
    assert str(release.s.dtype) == str(df.s.dtype)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(FLOATS), flips=_flips)
def test_no_sign_bit_of_one_record_in_the_file(tmp_path_factory, dtype, flips):
    tmp = tmp_path_factory.mktemp("signs")
    _signed_zeros(dtype, flips).to_parquet(tmp / "in.parquet", index=False)
    anonymize_file(tmp / "in.parquet", tmp / "rel.parquet", qi=["a", "z"], k=3, strata=["s"])
    table = pq.read_table(tmp / "rel.parquet")
    assert table.num_rows == 12
    for c in ("z", "s"):
        assert not np.signbit(table.column(c).to_numpy()).any()


def test_arrow_stratum_zero_of_either_sign_is_one_stratum():
    # Arrow groups −0.0 apart from 0.0; both are 0.0 once written and counted: one stratum of 12
    df = _signed_zeros("double[pyarrow]", {"z": set(), "s": {7}})
    release, report = anonymize(df, qi=["a"], k=3, strata=["s"])
    assert len(release) == 12
    assert [g["n"] for g in report.to_dict()["strata"]["groups"]] == [12]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_merged_strata_text_has_no_signed_zero(dtype):
    # merged strata publish their column as text: −0.0 must read "0.0" like every other zero
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=14), "s": pd.Series([0.0] * 10 + [1.0] * 2 + [2.0] * 2).astype(dtype)})
    df.loc[4, "s"] = -0.0
    release, _ = anonymize(df, qi=["a"], k=3, strata=["s"], merge_small_strata=True)
    assert release.s.value_counts().to_dict() == {"0.0": 10, "1.0|2.0": 4}


def test_arrow_dictionaries_keep_nulls_order_and_values():
    from daskmicro.io.formats import used_dictionaries

    dictionary = pa.array(["low", "mid", "high", "gone"])
    chunks = [pa.DictionaryArray.from_arrays(pa.array([2, None, 0, 2], type=pa.int8()), dictionary, ordered=True),
              pa.DictionaryArray.from_arrays(pa.array([None, None], type=pa.int8()), dictionary, ordered=True)]
    table = pa.table({"g": pa.chunked_array(chunks)})
    got = used_dictionaries(table)
    assert got.column("g").to_pylist() == table.column("g").to_pylist()
    assert [c.dictionary.to_pylist() for c in got.column("g").chunks] == [["low", "high"], []]
    assert got.schema.field("g").type.ordered
