"""Algorithm A (effective anonymity): Tables II–IV of the p-probabilistic paper, scipy, brute force, bad input."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binom

from daskmicro.errors import ParameterError
from daskmicro.privacy.effective import cell_failure, effective_anonymity, table_failure

# Table III of *p-Probabilistic k-Anonymous Microaggregation …*: k, π, p̄ → n_min, q̄, u, r̄, r̄′
TABLE_III = [
    (10, 0.75, 1e-4, 25, 4.31e-5, 8.80, 1.52e-5, 2.02e-5),
    (10, 0.75, 1e-5, 27, 6.05e-6, 8.82, 1.98e-6, 2.64e-6),
    (10, 0.75, 1e-6, 29, 7.95e-7, 8.84, 2.42e-7, 3.23e-7),
    (10, 0.5, 1e-4, 43, 8.51e-5, 8.69, 1.72e-5, 3.44e-5),
    (10, 0.5, 1e-5, 48, 7.61e-6, 8.73, 1.38e-6, 2.77e-6),
    (10, 0.5, 1e-6, 53, 6.1e-7, 8.77, 1.01e-7, 2.02e-7),
    (50, 0.75, 1e-4, 88, 6.2e-5, 48.4, 3.41e-5, 4.54e-5),
    (50, 0.75, 1e-5, 91, 9.82e-6, 48.4, 5.22e-6, 6.97e-6),
    (50, 0.75, 1e-6, 95, 7.14e-7, 48.5, 3.64e-7, 4.86e-7),
    (50, 0.5, 1e-4, 144, 7.86e-5, 48.1, 2.62e-5, 5.25e-5),
    (50, 0.5, 1e-5, 151, 9.64e-6, 48.2, 3.08e-6, 6.15e-6),
    (50, 0.5, 1e-6, 159, 7.35e-7, 48.3, 2.23e-7, 4.46e-7),
]

# Table IV (π = 0.75): k, N → t̄ for p̄ = 1e-4, 1e-5, 1e-6
TABLE_IV = {
    (10, 10**4): (0.0171, 0.00223, 0.000273),
    (10, 10**5): (0.158, 0.0221, 0.00274),
    (10, 10**6): (0.822, 0.201, 0.027),
    (50, 10**4): (0.00692, 0.00106, 7.42e-5),
    (50, 10**5): (0.0679, 0.0107, 0.00075),
    (50, 10**6): (0.505, 0.102, 0.00748),
}


def sig3(x: float) -> float:
    return float(f"{x:.3g}")


@pytest.mark.parametrize("row", TABLE_III, ids=lambda r: f"k{r[0]}-pi{r[1]}-p{r[2]:g}")
def test_table_iii(row):
    k, pi, pbar, n_min, q, u, r, r_active = row
    res = effective_anonymity(k, pi, pbar)
    assert res.n_min == n_min
    assert sig3(res.cell_failure) == pytest.approx(q, rel=1e-12)
    assert sig3(res.unprotected) == pytest.approx(u, rel=1e-12)
    assert sig3(res.record_failure) == pytest.approx(r, rel=1e-12)
    assert sig3(res.record_failure_given_active) == pytest.approx(r_active, rel=1e-12)
    # per-record form with the same π gives the same numbers (Algorithm A is the same procedure)
    per = effective_anonymity(k, np.full(400, pi), pbar)
    assert per.n_min == n_min and per.participation is None
    for name in ("cell_failure", "unprotected", "record_failure", "record_failure_given_active"):
        assert getattr(per, name) == pytest.approx(getattr(res, name), rel=1e-10)


@pytest.mark.parametrize("key", sorted(TABLE_IV), ids=lambda key: f"k{key[0]}-N{key[1]}")
def test_table_iv(key):
    k, N = key
    for pbar, expected in zip((1e-4, 1e-5, 1e-6), TABLE_IV[key]):
        res = effective_anonymity(k, 0.75, pbar, n_records=N)
        assert sig3(res.table_failure) == pytest.approx(expected, rel=1e-12)
        assert res.n_cells == N // res.n_min
        assert res.n_min <= res.last_cell_size < 2 * res.n_min
        assert res.last_cell_failure <= res.cell_failure  # q̄ does not rise past n_min


def test_table_ii_algorithm_and_monte_carlo():
    """k = 20, p̄ = 0.1, π = 0.5 → n_min = 48; 10⁵ simulated cells, as in Table II."""
    res = effective_anonymity(20, 0.5, 0.1)
    assert res.n_min == 48
    assert round(res.cell_failure, 5) == 0.09671
    assert round(res.unprotected, 2) == 17.85
    assert round(res.record_failure, 5) == 0.03597
    cells, n = 100_000, res.n_min
    active = np.random.default_rng(20170).random((cells, n)) < 0.5
    K = active.sum(axis=1)
    fail = (K > 0) & (K < 20)
    q_sim = fail.mean()
    u_sim = K[fail].mean()
    r_sim = K[fail].sum() / (cells * n)
    se_q = math.sqrt(res.cell_failure * (1 - res.cell_failure) / cells)
    assert abs(q_sim - res.cell_failure) < 4 * se_q
    se_u = K[fail].std() / math.sqrt(fail.sum())
    assert abs(u_sim - res.unprotected) < 4 * se_u
    se_r = (K * fail).std() / n / math.sqrt(cells)
    assert abs(r_sim - res.record_failure) < 4 * se_r
    # the paper's own simulated values lie within the same error of our algorithm's values
    assert abs(0.09606 - res.cell_failure) < 4 * se_q
    assert abs(17.83 - res.unprotected) < 4 * se_u
    assert abs(0.03605 - res.record_failure) < 4 * se_r


@pytest.mark.parametrize("k", [2, 5, 20, 50])
@pytest.mark.parametrize("pi", [0.3, 0.5, 0.9])
@pytest.mark.parametrize("pbar", [1e-3, 1e-10, 1e-17])
def test_against_scipy_binom(k, pi, pbar):
    res = effective_anonymity(k, pi, pbar)
    n = res.n_min

    def q(n):
        return binom.pmf(np.arange(1, k), n, pi).sum()

    assert res.cell_failure == pytest.approx(q(n), rel=1e-9)
    assert res.cell_failure <= pbar
    assert n == k or q(n - 1) > pbar  # smallest such n (q̄ decreases in this regime)
    j = np.arange(1, k)
    u = (j * binom.pmf(j, n, pi)).sum() / q(n)
    assert res.unprotected == pytest.approx(u, rel=1e-9)
    assert res.record_failure == pytest.approx(u * q(n) / n, rel=1e-9)
    assert res.record_failure_given_active == pytest.approx(u * q(n) / n / pi, rel=1e-9)


def test_stable_far_below_1e17_and_with_long_cells():
    for pbar in (1e-17, 1e-30, 1e-100):
        res = effective_anonymity(20, 0.5, pbar)
        ref = binom.pmf(np.arange(1, 20), res.n_min, 0.5).sum()
        assert res.cell_failure == pytest.approx(ref, rel=1e-9) and res.cell_failure <= pbar
    # π small: cells of thousands of records; π̄^n underflows without rescaling
    res = effective_anonymity(50, 0.01, 1e-17)
    logs = binom.logpmf(np.arange(1, 50), res.n_min, 0.01)
    assert math.log(res.cell_failure) == pytest.approx(np.logaddexp.reduce(logs), abs=1e-9)


def _brute(k, pis):
    """q̄, u, r̄, r̄′ of a cell by enumerating every participation pattern."""
    n = len(pis)
    q = su = 0.0
    r_j = np.zeros(n)
    for pattern in itertools.product((0, 1), repeat=n):
        a = np.array(pattern)
        p = float(np.prod(np.where(a == 1, pis, 1 - pis)))
        K = a.sum()
        if 0 < K < k:
            q += p
            su += K * p
            r_j += a * p
    return q, su / q, r_j.mean(), (r_j / pis).mean()


def test_per_record_against_enumeration():
    rng = np.random.default_rng(3)
    for k, n in ((2, 6), (4, 9), (5, 10)):
        pis = rng.uniform(0.2, 1.0, n)
        got = cell_failure(k, pis)
        q, u, r, ra = _brute(k, pis)
        assert got.n == n
        assert got.cell_failure == pytest.approx(q, rel=1e-12)
        assert got.unprotected == pytest.approx(u, rel=1e-12)
        assert got.record_failure == pytest.approx(r, rel=1e-12)
        assert got.record_failure_given_active == pytest.approx(ra, rel=1e-12)


def test_per_record_order_matters_and_monte_carlo():
    pis = np.random.default_rng(5).uniform(0.3, 0.95, 500)
    up = effective_anonymity(10, np.sort(pis), 1e-3)
    down = effective_anonymity(10, np.sort(pis)[::-1], 1e-3)
    assert down.n_min < up.n_min
    first = np.sort(pis)[::-1][: down.n_min]
    sim = np.random.default_rng(6).random((200_000, first.size)) < first
    K = sim.sum(axis=1)
    fail = (K > 0) & (K < 10)
    se = math.sqrt(down.cell_failure / sim.shape[0])
    assert abs(fail.mean() - down.cell_failure) < 4 * se + 1e-12


def test_pathological_small_participation_is_guarded():
    """k = 2, π = 0.01: a 2-record cell fails rarely (q̄ ≈ 0.02) but larger cells fail more often.

    n_min must make every cell of at least n_min records meet p̄ (Table I's definition)."""
    res = effective_anonymity(2, 0.01, 0.1)
    n = np.arange(2, 3 * res.n_min)
    q = n * 0.01 * 0.99 ** (n - 1)
    assert q[0] <= 0.1  # Algorithm A's first stop would be n = 2
    assert (q[n >= res.n_min] <= 0.1).all()
    assert q[n == res.n_min - 1][0] > 0.1


def test_participation_one_is_deterministic():
    res = effective_anonymity(7, 1.0, 1e-9, n_records=30)
    assert (res.n_min, res.cell_failure, res.record_failure, res.table_failure) == (7, 0.0, 0.0, 0.0)


def test_table_failure_helper():
    assert table_failure([]) == 0.0
    assert table_failure([1e-20] * 1000) == pytest.approx(1e-17, rel=1e-9)
    assert table_failure([0.5, 0.5]) == pytest.approx(0.75)
    with pytest.raises(ParameterError):
        table_failure([0.1, 1.5])


@pytest.mark.parametrize(
    "args, match",
    [
        ((10, 0.0, 1e-4), "participation"),
        ((10, 1.5, 1e-4), "participation"),
        ((10, -0.2, 1e-4), "participation"),
        ((10, float("nan"), 1e-4), "participation"),
        ((10, [0.5, float("nan")] * 20, 1e-4), "missing"),
        ((10, [0.5, 1.2] * 20, 1e-4), "outside"),
        ((10, [], 1e-4), "empty"),
        ((10, True, 1e-4), "participation"),
        ((10, "half", 1e-4), "participation"),
        ((10, 0.5, 0.0), "max_cell_failure"),
        ((10, 0.5, 1.0), "max_cell_failure"),
        ((10, 0.5, -1e-3), "max_cell_failure"),
        ((10, 0.5, float("nan")), "max_cell_failure"),
        ((1, 0.5, 1e-4), "k must be"),
        ((2.5, 0.5, 1e-4), "k must be"),
        ((True, 0.5, 1e-4), "k must be"),
    ],
)
def test_bad_parameters(args, match):
    with pytest.raises(ParameterError, match=match):
        effective_anonymity(*args)


def test_k_that_n_records_cannot_satisfy():
    with pytest.raises(ParameterError, match="exceeds"):
        effective_anonymity(50, 0.5, 1e-6, n_records=40)
    with pytest.raises(ParameterError, match="cannot be met"):
        effective_anonymity(50, 0.5, 1e-6, n_records=150)  # n_min = 159
    with pytest.raises(ParameterError, match="cannot be met"):
        effective_anonymity(10, np.full(30, 0.5), 1e-6)  # n_min = 53 > 30 records
    with pytest.raises(ParameterError, match="differs"):
        effective_anonymity(10, np.full(30, 0.5), 1e-6, n_records=31)
    with pytest.raises(ParameterError, match="n_records"):
        effective_anonymity(10, 0.5, 1e-6, n_records=0)
    assert effective_anonymity(50, 0.5, 1e-6, n_records=159).n_cells == 1
