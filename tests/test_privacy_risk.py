"""Disclosure risk: record linkage and interval disclosure on hand-computed fixtures."""

import numpy as np
import pytest

from daskmicro.errors import InputError, ParameterError
from daskmicro.kernels.mdav import mdav
from daskmicro.kernels.metrics import centroids
from daskmicro.privacy.risk import disclosure_risk, interval_disclosure, record_linkage


def _release(X, labels):
    X = np.asarray(X, dtype=float)
    return centroids(X, labels)[labels]


def test_record_linkage_hand_computed():
    # cells {0, 1, 9} -> 3.33 and {10, 11, 20} -> 13.67: record 9 is nearer the other centroid
    X = np.array([[0.0], [1.0], [9.0], [10.0], [11.0], [20.0]])
    labels = np.array([0, 0, 0, 1, 1, 1])
    res = record_linkage(X, _release(X, labels), sample_size=None)
    assert (res.n_linked, res.n_sampled, res.n_tuples) == (5, 6, 2)
    assert res.rate == pytest.approx(5 / 6)


def test_record_linkage_ties_count_as_links():
    # cells {0, 4} -> 2 and {4, 8} -> 6: both records at 4 are equidistant from the two tuples
    X = np.array([[0.0], [4.0], [4.0], [8.0]])
    res = record_linkage(X, _release(X, np.array([0, 0, 1, 1])), sample_size=None)
    assert res.n_linked == 4 and res.rate == 1.0


def test_record_linkage_uses_z_scores():
    # column 2 has a huge scale; unscaled, it alone would decide the nearest tuple
    X = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 1000.0], [11.0, 1000.0], [0.4, 900.0], [10.6, 100.0]])
    labels = np.array([0, 0, 1, 1, 0, 1])
    Y = _release(X, labels)
    Z = (X - X.mean(0)) / X.std(0)
    T = (Y - X.mean(0)) / X.std(0)
    tuples = np.unique(T, axis=0)
    expected = 0
    for z, own in zip(Z, T):
        d = np.linalg.norm(tuples - z, axis=1)
        expected += np.linalg.norm(own - z) <= d.min() + 1e-12
    res = record_linkage(X, Y, sample_size=None)
    assert res.n_linked == expected


def test_record_linkage_matches_brute_force_and_samples():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3)) * [1, 10, 0.1]
    Y = _release(X, mdav(X, 5))
    Z = (X - X.mean(0)) / X.std(0)
    T = (Y - X.mean(0)) / X.std(0)
    tuples = np.unique(T, axis=0)
    d_all = np.linalg.norm(Z[:, None, :] - tuples[None, :, :], axis=2)
    d_own = np.linalg.norm(Z - T, axis=1)
    brute = d_own <= d_all.min(axis=1) + 1e-9
    full = record_linkage(X, Y, sample_size=None)
    assert full.n_linked == int(brute.sum()) and full.n_tuples == len(tuples)
    part = record_linkage(X, Y, sample_size=100, seed=7)
    again = record_linkage(X, Y, sample_size=100, seed=7)
    assert part == again and part.n_sampled == 100
    idx = np.sort(np.random.default_rng(7).choice(400, size=100, replace=False))
    assert part.n_linked == int(brute[idx].sum())


def test_interval_disclosure_hand_computed():
    # released std (ddof 1): col0 sqrt(4/3), col1 2; with p = 0.5 the half-widths are 0.577 and 1
    Y = np.array([[0.0, 1.0], [0.0, 1.0], [2.0, 1.0], [2.0, 5.0]])
    X = np.array([[0.5, 1.5], [0.7, 1.0], [2.0, 3.0], [3.0, 5.0]])
    res = interval_disclosure(X, Y, p=0.5)
    assert (res.n_disclosed, res.n_sampled) == (1, 4) and res.rate == 0.25
    assert interval_disclosure(X, Y, p=0.5, max_outside=1).rate == 1.0  # sdcMicro's dRisk rule
    assert interval_disclosure(X, Y, p=0.0).rate == 0.0
    assert interval_disclosure(X, X, p=0.0).rate == 1.0


def test_disclosure_risk_dict():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 2))
    d = disclosure_risk(X, _release(X, mdav(X, 4)), sample_size=50, seed=1)
    assert set(d) == {"record_linkage", "interval_disclosure"}
    assert d["record_linkage"]["n_sampled"] == 50 and d["interval_disclosure"]["n_sampled"] == 50
    assert 0.0 <= d["record_linkage"]["rate"] <= 1.0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"sample_size": 0}, ParameterError, "sample_size"),
        ({"sample_size": True}, ParameterError, "sample_size"),
        ({"p": -0.1}, ParameterError, "p must be"),
        ({"p": "x"}, ParameterError, "p must be"),
        ({"max_outside": -1}, ParameterError, "max_outside"),
    ],
)
def test_bad_parameters(kwargs, error, match):
    X = np.arange(8.0).reshape(4, 2)
    with pytest.raises(error, match=match):
        disclosure_risk(X, X, **kwargs)


def test_bad_input():
    with pytest.raises(InputError, match="row-aligned"):
        record_linkage(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(InputError, match="released contains NaN"):
        interval_disclosure(np.zeros((3, 1)), np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(InputError, match="at least 2 records"):
        record_linkage(np.zeros((1, 2)), np.zeros((1, 2)))
