"""anonymize(): reference information loss, release properties, input validation."""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.anonymize import anonymize
from daskmicro.datasets import CENSUS_COLUMNS
from daskmicro.errors import InputError, ParameterError
from daskmicro.privacy import verify_k_anonymity
from daskmicro.report import Report

# Widely cited exact-MDAV information loss on Census, all 13 columns (daskmicro/data/SOURCES.md).
CENSUS_IL = {3: 5.69, 4: 7.49, 5: 9.09, 10: 14.16}


@pytest.fixture
def mixed():
    """Small table with QI columns of several dtypes and pass-through columns."""
    rng = np.random.default_rng(5)
    n = 60
    return pd.DataFrame(
        {
            "id": [f"P{i:03d}" for i in range(n)],
            "age": rng.integers(18, 90, n),
            "income": rng.lognormal(10, 1, n),
            "score": rng.normal(0, 1, n).astype(np.float32),
            "flag": rng.random(n) < 0.5,
            "country": pd.Categorical(rng.choice(["FR", "DE", "ES"], n)),
            "weight": rng.integers(1, 5, n).astype(np.int16),
            "const": np.full(n, 7),
        },
        index=pd.Index(rng.permutation(1000)[:n], name="original_index"),
    )


QI = ["age", "income", "score", "const"]


@pytest.mark.parametrize("k", sorted(CENSUS_IL))
def test_census_information_loss(census, k):
    release, report = anonymize(census, qi=list(census.columns), k=k, seed=0)
    assert report.information_loss == pytest.approx(CENSUS_IL[k], abs=0.01)
    assert verify_k_anonymity(release, list(CENSUS_COLUMNS), k)
    assert report.min_cell_size >= k and report.max_cell_size <= 2 * k - 1
    assert (report.n, report.m, report.k, report.method) == (1080, 13, k, "mdav")
    assert report.cells == pytest.approx(1080 / k, rel=0.5)
    assert report.verified and report.k_anonymity.ok and report.rows.ok


def test_release_properties(mixed):
    release, report = anonymize(mixed, qi=QI, k=4, seed=11, keep_row_id=True, keep=["id"])
    assert list(release.columns) == [*mixed.columns, "row_id"]
    assert len(release) == len(mixed)
    assert isinstance(release.index, pd.RangeIndex)
    assert sorted(release["row_id"]) == list(range(len(mixed)))
    # non-QI columns: exactly the input values of the mapped-back row, same dtypes
    back = mixed.iloc[release["row_id"].to_numpy()].reset_index(drop=True)
    for col in ["id", "flag", "country", "weight"]:
        assert release[col].dtype == mixed[col].dtype
        pd.testing.assert_series_equal(release[col], back[col], check_names=True)
    # constant QI column unchanged (values and dtype) and reported
    assert release["const"].dtype == mixed["const"].dtype and (release["const"] == 7).all()
    assert report.constant_columns == ["const"] and report.m_used == 3
    # integer QI column becomes float64 and is reported; float columns keep their dtype
    assert release["age"].dtype == np.float64
    assert report.dtype_changes == {"age": {"from": "int64", "to": "float64"}}
    assert release["income"].dtype == np.float64 and release["score"].dtype == np.float32
    # QI values are cell centroids in original units: the mean of each cell's original values
    cells = release.groupby(QI, sort=False)["row_id"].apply(list)
    assert len(cells) == report.cells
    for (age, income, _score, _const), rows in cells.items():
        assert len(rows) >= 4
        assert age == pytest.approx(mixed["age"].iloc[rows].mean())
        assert income == pytest.approx(mixed["income"].iloc[rows].mean())
    assert verify_k_anonymity(release, QI, 4)


def test_input_is_not_modified(mixed):
    before = mixed.copy()
    anonymize(mixed, qi=QI, k=3, seed=0, keep=["id"])
    pd.testing.assert_frame_equal(mixed, before)


def test_shuffle_is_seeded_and_recorded(mixed):
    a, report_a = anonymize(mixed, qi=QI, k=3, seed=123, keep_row_id=True, keep=["id"])
    b, _ = anonymize(mixed, qi=QI, k=3, seed=123, keep_row_id=True, keep=["id"])
    c, _ = anonymize(mixed, qi=QI, k=3, seed=124, keep_row_id=True, keep=["id"])
    pd.testing.assert_frame_equal(a, b)
    assert report_a.seed == 123
    assert not np.array_equal(a["row_id"], c["row_id"])
    assert not np.array_equal(a["row_id"], np.arange(len(mixed)))  # rows are shuffled
    # without a seed one is drawn and recorded, and it reproduces the run
    d, report_d = anonymize(mixed, qi=QI, k=3, keep_row_id=True, keep=["id"])
    assert isinstance(report_d.seed, int) and report_d.seed >= 0
    e, _ = anonymize(mixed, qi=QI, k=3, seed=report_d.seed, keep_row_id=True, keep=["id"])
    pd.testing.assert_frame_equal(d, e)


def test_no_row_id_unless_asked(mixed):
    release, report = anonymize(mixed, qi=QI, k=3, seed=0, keep=["id"])
    assert list(release.columns) == list(mixed.columns) and not report.keep_row_id


def test_all_qi_constant():
    df = pd.DataFrame({"a": [1.0] * 7, "b": [3] * 7, "s": list("abcdefg")})
    release, report = anonymize(df, qi=["a", "b"], k=3, seed=0, keep=["s"])
    assert (release["a"] == 1.0).all() and (release["b"] == 3).all() and release["b"].dtype == np.int64
    assert report.constant_columns == ["a", "b"] and report.information_loss == 0.0
    assert report.min_cell_size >= 3 and sorted(release["s"]) == list("abcdefg")


def test_report_to_dict_and_json(mixed, tmp_path):
    _, report = anonymize(mixed, qi=QI, k=5, seed=9, keep=["id"])
    assert isinstance(report, Report)
    d = report.to_dict()
    for key in ("n", "m", "k", "method", "cells", "min_cell_size", "max_cell_size", "information_loss",
                "seconds", "qi", "constant_columns", "dtype_changes", "verification", "daskmicro_version"):
        assert key in d
    assert "seed" not in d and report.seed == 9 and report.run_record()["seed"] == 9   # the seed stays private
    assert d["verification"]["passed"] and d["verification"]["k_anonymity"]["min_count"] >= 5
    report.to_json(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(d))
    text = json.dumps(d)
    for value in mixed["id"]:  # no raw data values
        assert value not in text
    assert "summary" not in d and "information loss" in report.summary()


def _one_line(exc_info, *needles):
    message = str(exc_info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


@pytest.mark.parametrize(
    "change, needles",
    [
        (lambda df: df.assign(income=df["income"].where(df.index % 7 != 0)), ("'income'", "NaN")),
        (lambda df: df.assign(score=df["score"].where(df.index % 5 != 0, np.inf)), ("'score'", "infinite")),
        (lambda df: df.assign(age=df["age"].astype(str)), ("'age'", "not numeric")),
        (lambda df: df.iloc[:0], ("no rows",)),
    ],
    ids=["nan", "inf", "non-numeric", "empty"],
)
def test_bad_input(mixed, change, needles):
    df = change(mixed.reset_index(drop=True))
    with pytest.raises(InputError) as info:
        anonymize(df, qi=QI, k=3, seed=0, keep=["id"])
    _one_line(info, *needles)


def test_nan_message_gives_counts_not_values(mixed):
    df = mixed.reset_index(drop=True)
    df.loc[[1, 2, 3], "income"] = np.nan
    with pytest.raises(InputError) as info:
        anonymize(df, qi=QI, k=3, keep=["id"])
    assert "'income' (3)" in _one_line(info)


@pytest.mark.parametrize(
    "kwargs, needles",
    [
        (dict(qi=["age", "nope", "zip"]), ("'nope'", "'zip'", "unknown")),
        (dict(qi=["age", "age"]), ("'age'", "more than once")),
        (dict(qi=[]), ("qi",)),
        (dict(qi=["flag"]), ("'flag'", "not numeric")),
        (dict(qi=["country"]), ("'country'", "not numeric")),
        (dict(k=1), ("k",)),
        (dict(k=61), ("k = 61", "n = 60")),
        (dict(k=2.5), ("k",)),
        (dict(method="kmeans"), ("method", "kmeans")),
        (dict(energy_loss=0.1), ("energy_loss", "pca-mdav")),
        (dict(n_components=2), ("n_components", "pca-mdav")),
        (dict(method="pca-mdav", energy_loss=0.1, n_components=2), ("energy_loss", "n_components")),
        (dict(method="pca-mdav", energy_loss=1.0), ("energy_loss",)),
        (dict(method="pca-mdav", n_components=0), ("n_components",)),
        (dict(seed=-1), ("seed",)),
    ],
)
def test_bad_parameters(mixed, kwargs, needles):
    args = dict(qi=QI, k=3, seed=0) | kwargs
    with pytest.raises((ParameterError, InputError)) as info:
        anonymize(mixed, **args)
    _one_line(info, *needles)


def test_not_a_dataframe():
    with pytest.raises(InputError, match="DataFrame"):
        anonymize(np.zeros((5, 2)), qi=[0], k=2)


def test_row_id_clash(mixed):
    with pytest.raises(ParameterError, match="row_id"):
        anonymize(mixed.assign(row_id=1), qi=QI, k=3, keep_row_id=True)


def test_pca_mdav(census):
    release, report = anonymize(census, qi=list(census.columns), k=5, method="pca-mdav", energy_loss=0.1, seed=0)
    assert verify_k_anonymity(release, list(census.columns), 5)
    assert report.method == "pca-mdav" and 1 <= report.n_components <= 13
    assert report.pca_energy_loss <= 0.1 + 1e-12 and len(report.eigenvalues) == 13
    assert report.information_loss >= CENSUS_IL[5] - 0.5  # PCA trades distortion for speed
    d = report.to_dict()["pca"]
    assert d["energy_loss_bound"] == 0.1 and d["n_components"] == report.n_components
    _, report2 = anonymize(census, qi=list(census.columns), k=5, method="pca-mdav", n_components=13, seed=0)
    assert report2.n_components == 13
    with pytest.raises(ParameterError, match="n_components"):
        anonymize(census, qi=list(census.columns), k=5, method="pca-mdav", n_components=14)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 40),
    m=st.integers(1, 4),
    k=st.integers(2, 6),
    levels=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_any_small_table_gives_a_verified_release(n, m, k, levels, seed):
    """Any n ≥ k, any m, heavy duplicates and ties: cells of k … 2k−1, rows kept, k-anonymous."""
    k = min(k, n)
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(rng.integers(0, levels, (n, m)), columns=[f"q{j}" for j in range(m)])
    df["tag"] = np.arange(n)
    release, report = anonymize(df, qi=list(df.columns[:m]), k=k, seed=seed, keep_row_id=True, keep=["tag"])
    assert report.min_cell_size >= k and report.max_cell_size <= 2 * k - 1
    assert verify_k_anonymity(release, list(df.columns[:m]), k)
    np.testing.assert_array_equal(release["tag"], release["row_id"])
    assert sorted(release["tag"]) == list(range(n))
