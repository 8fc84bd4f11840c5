"""Failure probabilities of p-probabilistic k-anonymity computed here, independently of daskmicro:
a cell of n records, each taking part independently, fails when 0 < K < k of them take part.

* constant participation π: K ~ Binomial(n, π), from scipy.stats;
* per-record participation π_j: K is Poisson-binomial, its PMF built by repeated convolution.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def binom_failure(k: int, pi: float, n: int) -> float:
    """q̄ = P{0 < K_n < k} for K_n ~ Binomial(n, π)."""
    return float(stats.binom.cdf(k - 1, n, pi) - stats.binom.pmf(0, n, pi))


def binom_n_min(k: int, pi: float, pbar: float) -> int:
    """Smallest n ≥ k from which q̄ stays ≤ p̄ (checked over a long stretch of larger n)."""
    q = np.array([binom_failure(k, pi, n) for n in range(k, 40 * k)])
    above = np.flatnonzero(q > pbar)
    return k + (int(above[-1]) + 1 if above.size else 0)


def poisson_binomial_failure(k: int, pis) -> float:
    """q̄ = P{0 < K < k} with K the number of successes of independent Bernoulli(π_j)."""
    pmf = np.array([1.0])
    for p in np.asarray(pis, dtype=np.float64):
        pmf = np.convolve(pmf, [1.0 - p, p])
    return float(pmf[1:k].sum())
