"""Every published column is accounted for: identifiers are refused unless kept knowingly.

The class under test: a column published as it is (not a QI, a stratum, a partition column, the
participation column, nor dropped) is refused before any work, in one line naming it and both
fixes and never a value, when

* its name looks like an identifier — whatever its dtype, in any case or spelling; or
* it is text, bytes, integer (any width, signed or not, nullable or not), categorical, date/time,
  or float holding whole numbers only (an id stored as float), and its values are distinct for
  at least 90 % of the records that have one — whatever their magnitude, nulls left aside.

``keep`` publishes it untouched, ``drop`` leaves it out.  Boolean columns and float columns with a
fractional value (incomes, survey weights: confidential attributes, not identifiers) and columns
with fewer distinct values pass through untouched.
"""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro import anonymize, anonymize_file
from daskmicro.errors import InputError, ParameterError
from daskmicro.privacy import identifiers as ids

N = 120
K = 3


def _frame(extra: dict, n=N, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n)})
    for name, values in extra.items():
        df[name] = values
    return df


def _same_values(release: pd.Series, original: pd.Series) -> None:
    assert release.dtype == original.dtype
    assert release.isna().sum() == original.isna().sum()
    assert sorted(map(repr, release.dropna())) == sorted(map(repr, original.dropna()))


def _assert_refusal_line(text: str, column: str, values=()) -> None:
    assert "\n" not in text and f"column {column!r}" in text
    for fix in (f"--drop {column}", f"--keep {column}", "drop=", "keep=", "input.drop", "input.keep"):
        assert fix in text, (fix, text)
    for v in values:      # no value of the column (counts of records are at most 3 digits here)
        if len(str(v)) >= 4:
            assert str(v) not in text, (v, text)


# --------------------------------------------------------------------------- the value rule, by dtype

_INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "Int64", "UInt32"]
_WHOLE_FLOATS = {"float32": 2 ** 24, "float64": 2 ** 53, "Float64": 2 ** 53}   # exact whole numbers up to here
_OTHER = ["object-str", "string", "category", "datetime", "datetime-tz", "timedelta", "bytes"]
_NULLABLE = {"Int64", "UInt32", *_WHOLE_FLOATS, *_OTHER}


def _codes_to_values(draw, kind: str, codes: np.ndarray) -> pd.Series:
    """Distinct codes → distinct values of ``kind`` at a drawn magnitude (same code, same value)."""
    if kind in _INTS:
        info = np.iinfo(np.dtype(kind.lower()))
        lo, hi = int(info.min), int(info.max)
        step = draw(st.integers(1, max(1, (hi - lo) // (N + 1))))
        base = draw(st.integers(lo, hi - step * N))
        return pd.Series([base + int(c) * step for c in codes], dtype=kind)
    if kind in _WHOLE_FLOATS:
        top = _WHOLE_FLOATS[kind]
        step = draw(st.integers(1, top // (N + 1)))
        base = draw(st.integers(-top, top - step * N))
        return pd.Series([float(base + int(c) * step) for c in codes], dtype=kind)
    if kind in ("object-str", "string", "category", "bytes"):
        prefix = draw(st.sampled_from(["K", "émp-", "user ", "0"]))
        step = draw(st.sampled_from([1, 7, 10 ** 9]))
        text = [f"{prefix}{int(c) * step}" for c in codes]
        if kind == "bytes":
            return pd.Series([t.encode() for t in text], dtype=object)
        return pd.Series(text, dtype={"object-str": object, "string": "string", "category": "category"}[kind])
    step = draw(st.sampled_from([1, 1000, 10 ** 9, 86_400 * 10 ** 9]))       # ns, µs, s, days
    if kind == "timedelta":
        return pd.Series(pd.to_timedelta(codes.astype(np.int64) * step, unit="ns"))
    base = draw(st.integers(0, 2 ** 60))
    stamps = pd.Series(pd.to_datetime(base + codes.astype(np.int64) * step, unit="ns"))
    return stamps.dt.tz_localize("UTC") if kind == "datetime-tz" else stamps


@st.composite
def judged_columns(draw):
    """``(kind, column, refused)``: a column whose distinct share of its non-null records is the
    smallest that is refused, or one record fewer (just below the threshold)."""
    kind = draw(st.sampled_from(_INTS + sorted(_WHOLE_FLOATS) + _OTHER))
    nulls = draw(st.integers(0, 30)) if kind in _NULLABLE else 0
    m = N - nulls
    smallest = next(d for d in range(m + 1) if d >= ids.UNIQUE_SHARE * m)
    refused = draw(st.booleans())
    d = smallest if refused else smallest - 1
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    codes = rng.permutation(np.r_[np.arange(d), rng.integers(0, d, m - d)])
    values = _codes_to_values(draw, kind, codes)
    if nulls:
        values.index = np.sort(rng.choice(N, m, replace=False))
        values = values.reindex(range(N))
    assert values.notna().sum() == m and values.nunique() == d
    return kind, values, refused


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=judged_columns(), seed=st.integers(0, 999))
def test_nearly_unique_columns_are_refused_whatever_their_dtype_and_magnitude(case, seed):
    kind, values, refused = case
    df = _frame({"tag": values}, seed=seed)
    if not refused:   # one distinct value fewer: published untouched
        release, _ = anonymize(df, qi=["x", "y"], k=K, seed=0)
        _same_values(release["tag"], df["tag"])
        return
    with pytest.raises(InputError) as info:
        anonymize(df, qi=["x", "y"], k=K, seed=0)
    _assert_refusal_line(str(info.value), "tag", values.dropna())
    assert "distinct value" in str(info.value)
    release, _ = anonymize(df, qi=["x", "y"], k=K, seed=0, keep=["tag"])
    _same_values(release["tag"], df["tag"])
    release, _ = anonymize(df, qi=["x", "y"], k=K, seed=0, drop=["tag"])
    assert list(release.columns) == ["x", "y"]


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(["float32", "float64", "Float64"]), exponent=st.integers(-3, 6),
       nulls=st.integers(0, 40), seed=st.integers(0, 2 ** 32 - 1))
def test_continuous_float_columns_pass_through(dtype, exponent, nulls, seed):
    """Incomes, weights, measurements: distinct for every record, yet attributes, not identifiers."""
    if dtype == "float32":
        exponent = min(exponent, 4)        # float32 still holds fractions at this magnitude
    rng = np.random.default_rng(seed)
    values = rng.lognormal(size=N) * 10.0 ** exponent
    values[0] = 10.0 ** exponent + 0.5     # at least one fraction, however the draws round
    column = pd.Series(values, dtype=dtype)
    column[rng.choice(N, nulls, replace=False)] = None
    df = _frame({"weight": column}, seed=seed)
    release, _ = anonymize(df, qi=["x", "y"], k=K, seed=0)
    _same_values(release["weight"], df["weight"])


def test_census_like_weights_and_amounts_with_fractions_pass_through():
    rng = np.random.default_rng(5)
    extra = {c: np.round(rng.lognormal(10, 1, N), 2) for c in ("AFNLWGT", "EMCONTRB", "PTOTVAL", "TAXINC")}
    df = _frame(extra)
    release, _ = anonymize(df, qi=["x", "y"], k=K, seed=0)
    for c in extra:
        _same_values(release[c], df[c])


def test_whole_number_floats_with_missing_values_are_ids():
    ids_read_from_csv = pd.Series(np.arange(N, dtype=np.float64) + 10_000)
    ids_read_from_csv[::9] = np.nan
    df = _frame({"code": ids_read_from_csv})
    with pytest.raises(InputError, match="'code' holds a distinct value for 100% of the 106 records"):
        anonymize(df, qi=["x", "y"], k=K, seed=0)


@pytest.mark.parametrize("values, judged", [
    (pd.Series([True, False, None], dtype="boolean"), False),
    (pd.Series([True, False]), False),
    (pd.Series([True, False], dtype="category"), False),
    (pd.Series([1.5, 2.0, np.nan]), False),
    (pd.Series([1.0, 2.0, np.nan, np.inf]), True),
    (pd.Series([1.0, 2.0], dtype="float32"), True),
    (pd.Series([0.25], dtype="Float64"), False),
    (pd.Series([1.5, 2.0], dtype="category"), True),      # categories are labels
    (pd.Series([1, 2], dtype="int8"), True),
    (pd.Series(["a", "b"]), True),
    (pd.Series(pd.to_datetime(["2020-01-01", "2021-01-01"])), True),
    (pd.Series([b"a", b"b"], dtype=object), True),
])
def test_which_columns_the_value_rule_judges(values, judged):
    assert ids.judged_by_values(values) is judged


def test_a_fraction_in_any_piece_makes_the_whole_column_continuous(tmp_path, client):
    lake = tmp_path / "lake"
    lake.mkdir()
    df = _frame({"amount": np.arange(N, dtype=np.float64)})
    df.loc[N - 1, "amount"] = 0.5
    df.iloc[:60].to_parquet(lake / "a.parquet", index=False)        # whole numbers only
    df.iloc[60:].to_parquet(lake / "b.parquet", index=False)        # one fraction
    anonymize_file(lake, tmp_path / "r.parquet", qi=["x", "y"], k=K, seed=0, client=client)
    _same_values(pd.read_parquet(tmp_path / "r.parquet")["amount"], df["amount"])
    parts = [ids.sketch(df.iloc[:60], ["amount"]), ids.sketch(df.iloc[60:], ["amount"])]
    assert parts[0]["amount"] is not None and parts[1]["amount"] is None
    assert ids.merge(*parts)["amount"] is None


@pytest.mark.parametrize("name, values", [
    ("region", np.array(["n", "s", "e", "w"])[np.arange(N) % 4]),
    ("valid", np.arange(N) % 2 == 0),
    ("flag", np.ones(N, dtype=bool)),
    ("score", np.round(np.linspace(0, 1, N), 1)),           # 11 distinct values
    ("idea", np.arange(N) % 5),                              # "id" inside a word is not the word
])
def test_ordinary_columns_pass_through(name, values):
    df = _frame({name: values})
    release, _ = anonymize(df, qi=["x", "y"], k=K, seed=0)
    _same_values(release[name], df[name])


# --------------------------------------------------------------------------- the name rule

_SEPARATORS = ["_", "-", " ", ".", ""]


@st.composite
def identifier_names(draw):
    """An identifier word in some case, maybe between other words, joined by a separator or, glued,
    told apart by case or digits only (``empId``, ``SSNHash``, ``phone2``)."""
    word = draw(st.sampled_from(sorted(ids.ID_WORDS)))
    sep = draw(st.sampled_from(_SEPARATORS))
    before = draw(st.sampled_from(["", "emp", "customer", "Home", "PRIMARY"]))
    after = draw(st.sampled_from(["", "number", "Number", "HASH", "2"]))
    if sep:
        word = draw(st.sampled_from([word, word.upper(), word.title()]))
    else:
        word = draw(st.sampled_from([word.upper(), word.title()] + ([word] if not before else [])))
        before, after = before.lower(), {"number": "Number", "HASH": "Hash"}.get(after, after)
    return sep.join(w for w in (before, word, after) if w)


@settings(max_examples=80, deadline=None)
@given(name=identifier_names(), dtype=st.sampled_from(["bool", "int8", "float64-fractional", "category", "str"]))
def test_columns_named_like_identifiers_are_refused_whatever_their_dtype(name, dtype):
    assert ids.looks_like_identifier(name), name
    few = np.arange(N) % 2                               # two distinct values: refused by the name alone
    values = {"bool": few == 0, "int8": few.astype(np.int8), "float64-fractional": few + 0.25,
              "category": pd.Categorical(np.array(["a", "b"])[few]), "str": np.array(["a", "b"])[few]}[dtype]
    df = _frame({name: values})
    with pytest.raises(InputError, match="named like an identifier") as info:
        anonymize(df, qi=["x", "y"], k=K, seed=0)
    _assert_refusal_line(str(info.value), name)
    release, _ = anonymize(df, qi=["x", "y"], k=K, seed=0, keep=[name])
    _same_values(release[name], df[name])


@pytest.mark.parametrize("name", ["ssn", "SSN", "emp_id", "EMP_ID", "userEmail", "phone_number", "Last Name",
                                  "record-id", "RecordID", "SSNNumber", "IDNumber", "passport", "IBAN", "user.name",
                                  "UUIDs", "IDs", "SSNs", "emails", "phone2"])
def test_identifier_names(name):
    assert ids.looks_like_identifier(name)


@pytest.mark.parametrize("name", ["idea", "valid", "width", "paid", "grid", "video", "hidden", "Identity", "amount",
                                  "region", "AFNLWGT", "weight", "income", "timestamp"])
def test_ordinary_names(name):
    assert not ids.looks_like_identifier(name)


# --------------------------------------------------------------------------- columns never judged


def test_qi_strata_partition_and_participation_columns_are_never_judged(tmp_path):
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"emp_id": rng.normal(size=N), "y": rng.normal(size=N),   # a QI named like an id
                       "id_band": np.arange(N) % 3,                              # a stratum
                       "site_id": np.array(["a", "b"])[np.arange(N) % 2],        # a partition column
                       "resp_id": rng.uniform(0.7, 1.0, N)})                    # the participation column
    release, _ = anonymize(df, qi=["emp_id", "y"], k=K, seed=0, strata=["id_band"], participation="resp_id",
                           max_cell_failure=0.05, drop=["site_id"])
    assert len(release) == N and "resp_id" not in release.columns
    src = tmp_path / "in.parquet"
    df.drop(columns="resp_id").to_parquet(src, index=False)
    anonymize_file(src, tmp_path / "lake", qi=["emp_id", "y"], k=K, seed=0, strata=["id_band"],
                   partition_by=["site_id"])
    assert sorted(p.name for p in (tmp_path / "lake").iterdir() if p.is_dir()) == ["site_id=a", "site_id=b"]


def test_keep_and_drop_rules():
    df = _frame({"ssn": np.arange(N)})
    with pytest.raises(ParameterError, match="keep"):
        anonymize(df, qi=["x", "y"], k=K, keep=["x"])
    with pytest.raises(ParameterError, match="keep and drop"):
        anonymize(df, qi=["x", "y"], k=K, keep=["ssn"], drop=["ssn"])


# --------------------------------------------------------------------------- counting distinct values


def test_sketch_counts_beyond_its_size():
    rng = np.random.default_rng(3)
    for d in (100, ids.SKETCH - 1, 20_000, 200_000):
        values = pd.Series(rng.permutation(10 ** 7)[:d]).repeat(2)
        pieces = np.array_split(np.arange(len(values)), 7)
        parts = [ids.sketch(pd.DataFrame({"c": values.iloc[p].to_numpy()}), ["c"]) for p in pieces]
        n, hashes = ids.merge(*parts)["c"]
        assert n == 2 * d
        got = ids.distinct(hashes)
        assert abs(got - d) <= 0.08 * d, (d, got)


def test_nulls_are_left_out_of_the_count():
    s = pd.Series([1.0, 2.0, np.nan, np.nan, 3.0])
    n, hashes = ids.sketch(pd.DataFrame({"c": s}), ["c"])["c"]
    assert (n, ids.distinct(hashes)) == (3, 3.0)


# --------------------------------------------------------------------------- CLI and workflow specs



def test_lake_and_cli_refuse_and_keep(tmp_path, client, cli):
    lake = tmp_path / "lake"
    lake.mkdir()
    df = _frame({"code": [f"K{i:05d}" for i in range(N)], "region": np.arange(N) % 3})
    df.iloc[:60].to_parquet(lake / "a.parquet", index=False)
    df.iloc[60:].to_parquet(lake / "b.parquet", index=False)
    with pytest.raises(InputError, match="'code'"):
        anonymize_file(lake, tmp_path / "r1.parquet", qi=["x", "y"], k=K, client=client)
    assert not (tmp_path / "r1.parquet").exists()
    before = sorted(p.name for p in tmp_path.iterdir())
    on_cluster = ("--scheduler", client.scheduler.address)
    done = cli("anonymize", lake, tmp_path / "r2", "--qi", "x,y", "--k", K, "--quiet", *on_cluster)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("daskmicro: error: ")
    _assert_refusal_line(done.stderr.rstrip("\n"), "code", df["code"])
    assert sorted(p.name for p in tmp_path.iterdir()) == before          # nothing written
    done = cli("anonymize", lake, tmp_path / "r3", "--qi", "x,y", "--k", K, "--keep", "code", *on_cluster)
    assert done.returncode == 0, done.stderr
    assert sorted(pd.read_parquet(tmp_path / "r3").code) == sorted(df.code)


def test_spec_input_drop_and_keep(tmp_path, client, cli):
    import yaml

    df = _frame({"code": [f"K{i:05d}" for i in range(N)], "amount": np.arange(N) + 0.5})
    df.to_parquet(tmp_path / "in.parquet", index=False)

    def spec(name, **inp):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"version": 1, "name": name, "input": {"path": "in.parquet", **inp},
                                        "qi": ["x", "y"], "k": K, "method": "mdav",
                                        "output": {"path": f"{name}.parquet"}}))
        return path

    on_cluster = ("--scheduler", client.scheduler.address)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = cli("run", spec("plain"), "--quiet", *on_cluster)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    _assert_refusal_line(done.stderr.rstrip("\n"), "code", df["code"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "plain.yaml"])
    done = cli("run", spec("dropped", drop=["code"]), "--quiet", *on_cluster)
    assert done.returncode == 0, done.stderr
    assert list(pd.read_parquet(tmp_path / "dropped.parquet").columns) == ["x", "y", "amount"]
    done = cli("run", spec("kept", keep=["code"]), "--quiet", *on_cluster)
    assert done.returncode == 0, done.stderr
    assert sorted(pd.read_parquet(tmp_path / "kept.parquet").code) == sorted(df.code)
