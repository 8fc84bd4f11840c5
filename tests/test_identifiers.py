"""Every published column is accounted for: identifiers are refused unless kept knowingly.

The class under test: a column published as it is (not a QI, a stratum or a dropped column) that
is named like an identifier, or whose values are distinct for nearly every record — whatever its
dtype (text, integers, floats, timestamps, categories) and magnitude — is refused before any work,
in one line naming it and both fixes, never a value; ``keep`` publishes it, ``drop`` leaves it out.
Columns with few distinct values pass through untouched.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize, anonymize_file
from daskmicro.errors import InputError, ParameterError
from daskmicro.privacy import identifiers as ids

N = 120


def _frame(extra: dict, n=N, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n)})
    for name, values in extra.items():
        df[name] = values
    return df


_UNIQUE = {
    "text": lambda rng, n, scale: [f"T{int(v)}" for v in rng.permutation(n) * scale],
    "int64": lambda rng, n, scale: (rng.permutation(n).astype(np.int64) + 1) * scale,
    "float64": lambda rng, n, scale: rng.normal(size=n) * scale,
    "float32": lambda rng, n, scale: (rng.normal(size=n) * scale).astype(np.float32),
    "time": lambda rng, n, scale: pd.Timestamp("2021-01-01") + pd.to_timedelta(rng.permutation(n) * scale, unit="s"),
    "category": lambda rng, n, scale: pd.Categorical([f"c{int(v)}" for v in rng.permutation(n)]),
}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(_UNIQUE)), scale=st.sampled_from([1, 7, 10 ** 6]), seed=st.integers(0, 999),
       share=st.sampled_from([1.0, 0.95]))
def test_nearly_unique_columns_are_refused_whatever_their_dtype(kind, scale, seed, share):
    rng = np.random.default_rng(seed)
    values = pd.Series(_UNIQUE[kind](rng, N, scale))
    dup = int(round((1 - share) * N))
    if dup:  # a few repeated values: still nearly unique
        values.iloc[:dup] = values.iloc[dup]
    df = _frame({"tag": values}, seed=seed)
    with pytest.raises(InputError) as info:
        anonymize(df, qi=["x", "y"], k=3, seed=0)
    text = str(info.value)
    assert "'tag'" in text and "--drop tag" in text and "--keep tag" in text and "\n" not in text
    assert "T1" not in text and "2021" not in text
    release, _ = anonymize(df, qi=["x", "y"], k=3, seed=0, keep=["tag"])
    assert sorted(map(str, release["tag"])) == sorted(map(str, df["tag"]))
    release, _ = anonymize(df, qi=["x", "y"], k=3, seed=0, drop=["tag"])
    assert "tag" not in release.columns


@pytest.mark.parametrize("name", ["ssn", "SSN", "emp_id", "userEmail", "phone_number", "Last Name", "record-id",
                                  "passport", "iban"])
def test_columns_named_like_identifiers_are_refused(name):
    df = _frame({name: np.arange(N) % 4})   # few distinct values: refused by its name alone
    with pytest.raises(InputError, match="named like an identifier"):
        anonymize(df, qi=["x", "y"], k=3, seed=0)
    release, _ = anonymize(df, qi=["x", "y"], k=3, seed=0, keep=[name])
    assert name in release.columns


@pytest.mark.parametrize("name, values", [
    ("region", np.array(["n", "s", "e", "w"])[np.arange(N) % 4]),
    ("valid", np.arange(N) % 2 == 0),
    ("score", np.round(np.linspace(0, 1, N), 1)),           # 11 distinct values
    ("idea", np.arange(N) % 5),                              # "id" inside a word is not the word
])
def test_ordinary_columns_pass_through(name, values):
    df = _frame({name: values})
    release, _ = anonymize(df, qi=["x", "y"], k=3, seed=0)
    assert sorted(map(str, release[name])) == sorted(map(str, df[name]))


def test_strata_and_qi_columns_are_not_judged_as_published_as_is():
    df = _frame({"id_band": np.arange(N) % 3})
    release, _ = anonymize(df, qi=["x", "y"], k=3, seed=0, strata=["id_band"])
    assert len(release) == N


def test_keep_and_drop_rules():
    df = _frame({"ssn": np.arange(N)})
    with pytest.raises(ParameterError, match="keep"):
        anonymize(df, qi=["x", "y"], k=3, keep=["x"])
    with pytest.raises(ParameterError, match="keep and drop"):
        anonymize(df, qi=["x", "y"], k=3, keep=["ssn"], drop=["ssn"])


def test_sketch_counts_beyond_its_size():
    rng = np.random.default_rng(3)
    for d in (100, ids.SKETCH - 1, 20_000, 200_000):
        values = pd.Series(rng.permutation(10 ** 7)[:d]).repeat(2)
        pieces = np.array_split(np.arange(len(values)), 7)
        parts = [ids.sketch(pd.DataFrame({"c": values.iloc[p].to_numpy()}), ["c"]) for p in pieces]
        got = ids.distinct(ids.merge(*parts)["c"])
        assert abs(got - d) <= 0.08 * d, (d, got)


def test_lake_and_cli_refuse_and_keep(tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    df = _frame({"code": [f"K{i}" for i in range(N)], "region": np.arange(N) % 3})
    df.iloc[:60].to_parquet(lake / "a.parquet", index=False)
    df.iloc[60:].to_parquet(lake / "b.parquet", index=False)
    with pytest.raises(InputError, match="'code'"):
        anonymize_file(lake, tmp_path / "r1.parquet", qi=["x", "y"], k=3)
    assert not (tmp_path / "r1.parquet").exists()
    done = subprocess.run([sys.executable, "-m", "daskmicro", "anonymize", str(lake), str(tmp_path / "r2"),
                           "--qi", "x,y", "--k", "3", "--quiet"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--keep code" in done.stderr
    assert "K1" not in done.stderr and not (tmp_path / "r2").exists()
    done = subprocess.run([sys.executable, "-m", "daskmicro", "anonymize", str(lake), str(tmp_path / "r3"),
                           "--qi", "x,y", "--k", "3", "--keep", "code"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(pd.read_parquet(tmp_path / "r3").code) == sorted(df.code)
