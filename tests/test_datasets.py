"""Shipped and generated data sets: content, structure, determinism."""

import hashlib
from importlib import resources

import numpy as np
import pytest

from daskmicro.datasets import (CENSUS_COLUMNS, EIA_COLUMNS, REGIONS, census_like, correlated_gaussian, load_census,
                                load_eia)

CENSUS_SHA256 = "40fb91564d4379274610e941161fd38729adb471bddb9c71d7c01ef142fd0f5b"
EIA_SHA256 = "0ec10458281f83b81e4ccc468889c622cdeac8bf7a6a3316cbea88173c937c65"


def test_census_is_the_reference_file():
    data = resources.files("daskmicro").joinpath("data", "census.csv").read_bytes()
    assert hashlib.sha256(data).hexdigest() == CENSUS_SHA256
    assert resources.files("daskmicro").joinpath("data", "SOURCES.md").is_file()


def test_eia_is_the_reference_file():
    data = resources.files("daskmicro").joinpath("data", "eia.csv").read_bytes()
    assert hashlib.sha256(data).hexdigest() == EIA_SHA256
    assert "## eia.csv" in resources.files("daskmicro").joinpath("data", "SOURCES.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("load, shape, columns", [(load_census, (1080, 13), CENSUS_COLUMNS),
                                                   (load_eia, (4092, 11), EIA_COLUMNS)])
def test_load_reference_sets(load, shape, columns):
    data = load()
    assert data.shape == shape
    assert tuple(data.columns) == columns
    assert all(dtype == np.int64 for dtype in data.dtypes)
    assert not data.isna().any().any()
    data.iloc[0, 1] = -1  # a fresh copy each time
    assert load().iloc[0, 1] != -1


def test_census_like_structure():
    census = load_census()
    data = census_like(5000, seed=3)
    assert data.shape == (5000, 13)
    assert tuple(data.columns) == CENSUS_COLUMNS
    assert all(dtype == np.int64 for dtype in data.dtypes)
    assert (data.to_numpy() >= 0).all()
    # skew, spread and correlations close to Census's
    assert np.allclose(data.skew(), census.skew(), atol=0.6)
    assert np.allclose(data.std() / census.std(), 1.0, atol=0.15)  # heavy tails: sampling noise
    assert np.abs(data.corr().to_numpy() - census.corr().to_numpy()).max() < 0.1
    # the heavy right tails are kept: POTHVAL and INTVAL stay strongly skewed
    assert data["POTHVAL"].skew() > 2 and data["INTVAL"].skew() > 3
    # a continuum, not copies of Census rows
    assert not data.duplicated().any()


def test_census_like_is_deterministic():
    a = census_like(300, seed=7, with_extra_columns=True)
    b = census_like(300, seed=7, with_extra_columns=True)
    assert a.equals(b)
    assert not a.equals(census_like(300, seed=8, with_extra_columns=True))
    # the census columns do not depend on the extra columns
    assert a[list(CENSUS_COLUMNS)].equals(census_like(300, seed=7))


def test_census_like_extra_columns():
    data = census_like(1200, seed=0, with_extra_columns=True)
    assert list(data.columns) == [*CENSUS_COLUMNS, "record_id", "region"]
    assert data["record_id"].iloc[0] == "R000001" and data["record_id"].iloc[-1] == "R001200"
    assert data["record_id"].is_unique
    assert set(data["region"]) == set(REGIONS)


def test_correlated_gaussian():
    X = correlated_gaussian(4000, m=6, seed=1)
    assert X.shape == (4000, 6) and X.dtype == np.float64
    np.testing.assert_array_equal(X, correlated_gaussian(4000, m=6, seed=1))
    assert not np.array_equal(X, correlated_gaussian(4000, m=6, seed=2))
    corr = np.corrcoef(X, rowvar=False)
    assert np.abs(corr[np.triu_indices(6, 1)]).max() > 0.3  # correlated, not independent
    assert correlated_gaussian(10).shape == (10, 13)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_generators_reject_bad_sizes(bad):
    with pytest.raises(ValueError, match="n"):
        census_like(bad)
    with pytest.raises(ValueError, match="n"):
        correlated_gaussian(bad)
