"""kernels.moments: stable column moments for z-scoring, any offset, any chunking."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.kernels import standardize
from daskmicro.kernels.macro import dd_colsum, dd_combine
from daskmicro.kernels.moments import (
    centered_m2,
    centered_sums,
    chunk_moments,
    combine_moments,
    merge_moments,
    varying_columns,
)

EPS = np.finfo(np.float64).eps


def _exact(x: np.ndarray):
    """Exact mean and population variance of the float64 values (rational arithmetic)."""
    q = [Fraction(float(v)) for v in x]
    mean = sum(q) / len(q)
    return mean, sum((v - mean) ** 2 for v in q) / len(q)


def _column(offset, spread, n, seed):
    rng = np.random.default_rng(seed)
    return offset + spread * rng.uniform(-1.0, 1.0, n)


@st.composite
def _case(draw):
    sign = draw(st.sampled_from([1.0, -1.0]))
    offset = sign * draw(st.one_of(st.just(0.0), st.floats(1.0, 1e13)))
    spread = 10.0 ** draw(st.floats(-3.0, 6.0))
    n = draw(st.integers(2, 300))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return offset, spread, n, draw(st.integers(0, 2**31)), cuts


@settings(max_examples=150, deadline=None)
@given(_case())
def test_moments_are_exact_to_rounding_for_any_offset_spread_and_chunking(case):
    offset, spread, n, seed, cuts = case
    x = _column(offset, spread, n, seed)
    mean, var = _exact(x)
    big = float(np.abs(x).max())
    # error budget: a few ulps of the largest value in the mean; in the variance a relative
    # 1e-12 plus the square of the mean's error (what any float64 mean costs, numpy's included)
    tol_mean = 16 * EPS * big
    tol_var = 1e-12 * float(var) + tol_mean**2
    chunks = [c[:, None] for c in np.split(x, cuts)]

    # per-chunk two-pass moments merged by Chan–Golub–LeVeque
    mo = combine_moments([chunk_moments(c) for c in chunks])
    assert mo.count == n
    assert abs(Fraction(float(mo.mean[0])) - mean) <= tol_mean
    assert abs(Fraction(float(mo.variance()[0])) - var) <= tol_var

    # the ingest's route: global correctly rounded mean, centred double-double sums
    mu = dd_combine([dd_colsum(c) for c in chunks if len(c)]) / n
    m2 = centered_m2([centered_sums(c, mu) for c in chunks], n)
    assert abs(Fraction(float(m2[0] / n)) - var) <= tol_var
    assert m2[0] == centered_m2([centered_sums(x[:, None], mu)], n)[0]   # bit-identical, any chunking

    # against numpy's two-pass std: the same to a tiny relative error wherever float64 resolves
    # the spread at this offset (spread ≫ ulp of the offset)
    np_std = x.std()
    if np_std > 1e6 * EPS * big:
        assert mo.std()[0] == pytest.approx(np_std, rel=1e-10)
        assert np.sqrt(m2[0] / n) == pytest.approx(np_std, rel=1e-10)
        assert mo.mean[0] == pytest.approx(x.mean(), rel=1e-15, abs=tol_mean)
    if x.min() == x.max():
        assert mo.std()[0] == 0.0 and mo.constant[0] and m2[0] == 0.0


def test_epoch_milliseconds_keep_their_spread():
    # 1.7e12 ± 1000: E[x²] − E[x]² leaves nothing of the variance (x² ≈ 2.9e24, spaced ≈ 5e8)
    x = _column(1.7e12, 1000.0, 10_000, 1)
    naive = np.sqrt(max(np.mean(x * x) - np.mean(x) ** 2, 0.0))
    assert abs(naive - x.std()) > 0.5 * x.std()            # the trap this module avoids
    parts = np.array_split(x[:, None], 7)
    assert combine_moments([chunk_moments(p) for p in parts]).std()[0] == pytest.approx(x.std(), rel=1e-12)
    Z, params = standardize(x)
    assert not params.constant[0] and params.scale[0] == pytest.approx(x.std(), rel=1e-12)
    assert Z.std() == pytest.approx(1.0, rel=1e-12)


def test_constant_columns_are_found_exactly():
    # numpy's std of one repeated value is a few ulps, not 0: constancy must not hang on it
    x = np.full((1000, 2), [1.7e12 + 0.25, 0.1])
    assert (x.std(axis=0) > 0).any()
    mo = chunk_moments(x)
    assert mo.constant.all() and (mo.std() == 0.0).all()
    Z, params = standardize(x)
    assert params.constant.all() and (Z == 0.0).all()
    assert not varying_columns(x).any()
    x[5, 0] = np.nextafter(x[5, 0], np.inf)                 # one ulp apart: varying
    assert varying_columns(x).tolist() == [True, False]
    assert chunk_moments(x).std()[0] > 0


def test_co_moments_merge_to_the_covariance():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((500, 3)) @ rng.standard_normal((3, 3)) + [1e9, -5e8, 3.0]
    parts = [chunk_moments(p, cross=True) for p in np.array_split(X, 6)]
    merged = combine_moments(parts)
    np.testing.assert_allclose(merged.covariance(), np.cov(X.T, bias=True), rtol=1e-9, atol=1e-9)
    empty = chunk_moments(X[:0], cross=True)
    again = merge_moments(empty, merge_moments(merged, empty))
    np.testing.assert_array_equal(again.covariance(), merged.covariance())
    assert again.count == 500
