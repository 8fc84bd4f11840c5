"""The prefetch hints of the compiled kernels (:mod:`daskmicro.kernels._prefetch`): emitted as
LLVM's prefetch instruction, and changing no value."""

import numpy as np
import pytest
from numba import njit

from daskmicro.kernels._prefetch import prefetch, prefetch_row


@njit(cache=False)
def _gather_sum(a, rows, ahead):
    total = 0.0
    for t in range(rows.shape[0]):
        if t + ahead < rows.shape[0]:
            prefetch_row(a, rows[t + ahead])
            prefetch(rows, t + ahead)
        for j in range(a.shape[1]):
            total += a[rows[t], j]
    return total


@pytest.mark.parametrize("width", [1, 3, 7, 16])
def test_prefetched_reads_give_the_same_values_and_the_hint_is_emitted(width):
    rng = np.random.default_rng(width)
    a = rng.standard_normal((5000, width))
    rows = rng.integers(0, 5000, 20000)
    expect = 0.0
    for r in rows:
        for j in range(width):
            expect += a[r, j]
    assert _gather_sum(a, rows, 8) == expect
    ir = next(iter(_gather_sum.inspect_llvm().values()))
    assert "llvm.prefetch" in ir
