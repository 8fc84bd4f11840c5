"""The published disclosure-risk rates of a small sample: rounded so that they never give a count.

Each rate counts one yes/no per sampled record.  Rounded to whole percentage points, a sample of
fewer than 200 records publishes the exact count (rate × sample size, the sample size published
beside it): someone who knows every other sampled record reads the last one's bit, and in a
release of one cell the interval-disclosure rate counts the records whose values *are* the
published centroid (the released column's spread is 0), so `1 of 3` says that one person has
exactly the published values.  The published rate must move with a single record at most once in
every 10 records of the sample, as whole percentage points do from 1,000 records on."""

from __future__ import annotations

import pandas as pd
import pytest

import daskmicro
from daskmicro.report.coarse import public_risk


def _published(values) -> dict:
    df = pd.DataFrame({"age": [float(v) for v in values], "income": [10.0, 20.0, 30.0]})
    _, report = daskmicro.anonymize(df, qi=["age", "income"], k=3, seed=0, risk=True, ledger="off")
    return report.to_dict()["risk"]


def test_one_cell_does_not_say_that_a_record_is_its_centroid():
    # one cell of three: the centroid is (40, 20); in the first table the middle record IS (40, 20)
    exact_record = _published([30, 40, 50])
    no_such_record = _published([31, 38, 51])
    assert exact_record == no_such_record


def _risk(count: int, n: int) -> dict:
    return {"record_linkage": {"rate": count / n, "n_linked": count, "n_sampled": n},
            "interval_disclosure": {"rate": count / n, "n_disclosed": count, "n_sampled": n, "p": 0.05,
                                    "max_outside": 0},
            "sample": {"records": n, "of": n}}


@pytest.mark.parametrize("n", [2, 3, 6, 19, 20, 45, 150, 199, 600, 999, 1000, 2000, 10_000])
def test_one_record_moves_the_rate_at_most_once_in_ten(n):
    rates = [public_risk(_risk(c, n))["record_linkage"]["rate"] for c in range(n + 1)]
    changes = sum(a != b for a, b in zip(rates[:-1], rates[1:]))
    assert changes <= n // 10, (n, changes)
    for c, rate in enumerate(rates):
        if rate is not None:
            assert 0.0 <= rate <= 1.0 and abs(rate - c / n) <= 0.5 / min(100, n // 10) + 1e-4  # 4 decimals
    if n >= 1000:   # whole percentage points, as before
        assert all(round(rate, 2) == rate for rate in rates)
    if n < 20:      # too few records for any rounded rate
        assert set(rates) == {None}
