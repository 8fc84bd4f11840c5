"""Failure probabilities of p-probabilistic k-anonymity computed here, independently of daskmicro:
a cell of n records, each taking part independently, fails when 0 < K < k of them take part.

* constant participation π: K ~ Binomial(n, π), from scipy.stats;
* per-record participation π_j: K is Poisson-binomial, its PMF built by repeated convolution;
* the table-level figures (expected unprotected records, record failures, table failure) from
  those PMFs, by their definitions.
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


def poisson_binomial_pmf(pis) -> np.ndarray:
    """P{K = m}, m = 0 … n, for K the number of successes of independent Bernoulli(π_j)."""
    pmf = np.array([1.0])
    for p in np.asarray(pis, dtype=np.float64):
        pmf = np.convolve(pmf, [1.0 - p, p])
    return pmf


def poisson_binomial_failure(k: int, pis) -> float:
    """q̄ = P{0 < K < k} with K the number of successes of independent Bernoulli(π_j)."""
    return float(poisson_binomial_pmf(pis)[1:k].sum())


def failure_figures(k: int, pbar: float, pis_by_cell, n: int | None = None) -> dict:
    """Table-level failure figures of a set of cells, each given by the π_j of its records.

    q̄_c = P{0 < K_c < k}; the expected number of unprotected records Σ_c E[K_c; 0 < K_c < k];
    the record failure r̄ = that / N; the record failure given active r̄′ = (1/N) Σ_j P{the other
    records of j's cell leave it with 0 < 1 + K_{−j} < k}, i.e. P{K_{−j} ≤ k − 2}; the table
    failure t̄ = 1 − Π_c (1 − q̄_c).
    """
    q, unprotected, given_active = [], 0.0, 0.0
    for pis in pis_by_cell:
        pis = np.asarray(pis, dtype=np.float64)
        pmf = poisson_binomial_pmf(pis)
        q.append(float(pmf[1:k].sum()))
        unprotected += float(np.dot(np.arange(1, k), pmf[1:k]))
        for j in range(pis.size):
            others = poisson_binomial_pmf(np.delete(pis, j))
            given_active += float(others[:k - 1].sum())
    q = np.array(q)
    n = sum(len(p) for p in pis_by_cell) if n is None else n
    return {
        "cell_failure": q,
        "n_cells": int(q.size),
        "cell_failure_max": float(q.max()),
        "cell_failure_mean": float(q.mean()),
        "cells_above_max_cell_failure": int((q > pbar).sum()),
        "table_failure": float(-np.expm1(np.log1p(-q).sum())),
        "expected_unprotected": unprotected,
        "record_failure": unprotected / n,
        "record_failure_given_active": given_active / n,
    }
