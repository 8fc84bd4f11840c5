"""What a spec discloses: no model record, in any field, in z-scores or original units.

The attacker holds the published spec and nothing else.  Every list of m numbers in it is taken
as a candidate record, as it stands and after undoing (or applying) the standardization the spec
carries, and compared with every model record; a candidate may coincide only with a value that at
least k model records share.  Every published centroid must be the mean of a design cell of ≥ k
records.
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, load_census
from daskmicro.errors import InputError
from daskmicro.kernels import mdav, standardize
from daskmicro.privacy.probabilistic import probabilistic_cells
from daskmicro.privacy.spec import FORMAT, RULES, assign, build_spec, load_spec, spec_checksum

QI = list(CENSUS_COLUMNS)


def _vectors(node, m, out):
    """Every list of m numbers anywhere in a JSON tree."""
    if isinstance(node, dict):
        for value in node.values():
            _vectors(value, m, out)
    elif isinstance(node, list):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in node)
        if len(node) == m and numbers and not all(isinstance(v, int) for v in node):  # int lists are counts
            out.append(np.asarray(node, dtype=np.float64))
        for value in node:
            _vectors(value, m, out)
    return out


def _matches(rows, v):
    tol = 1e-9 * max(1.0, float(np.abs(rows).max()))
    return int((np.abs(rows - v).max(axis=1) <= tol).sum())


def assert_no_record_disclosed(spec, X, labels, k):
    X = np.asarray(X, dtype=np.float64)
    Z = standardize(X)[0]
    mean = np.asarray(spec["standardization"]["mean"])
    scale = np.asarray(spec["standardization"]["scale"])
    vectors = _vectors(spec, X.shape[1], [])
    assert vectors  # the walk finds the centroids at least
    for v in vectors:
        for rows, candidate in ((Z, v), (X, v), (X, mean + scale * v), (Z, (v - mean) / scale)):
            hits = _matches(rows, candidate)
            assert hits == 0 or hits >= k, "a published vector equals a model record shared by fewer than k"
    design = {c: X[labels == c] for c in range(labels.max() + 1)}
    for cell in spec["cells"]:
        owners = [c for c, rows in design.items() if _matches(rows.mean(0)[None, :], np.asarray(cell["value"])) == 1]
        assert owners and len(design[owners[0]]) >= k, "a published centroid is not the mean of ≥ k records"
        published_z = (X[labels == owners[0]] - mean) / scale   # z as the spec's own standardization gives it
        assert _matches(published_z.mean(0)[None, :], np.asarray(cell["centroid"])) == 1
    assert min(spec["model"]["cell_sizes"]) >= k


@pytest.fixture(scope="module")
def census_with_outliers():
    X = load_census()[QI].to_numpy(float)
    rng = np.random.default_rng(11)
    far = X[rng.integers(0, len(X), 4)] * 50.0 + X.std(0) * 20.0  # four isolated records
    return np.vstack([X, far])


@pytest.mark.parametrize("k", [3, 5])
def test_mdav_spec_discloses_no_record(census_with_outliers, k):
    X = census_with_outliers
    labels = mdav(standardize(X)[0], k)
    spec = build_spec(X, labels, QI, k)
    assert_no_record_disclosed(spec, X, labels, k)
    cells = assign(spec, X)
    assert np.bincount(cells).min() >= k  # the outliers too sit in cells of ≥ k model records


def test_probabilistic_spec_discloses_no_record(census_with_outliers):
    X = census_with_outliers
    Z = standardize(X)[0]
    pis = np.random.default_rng(12).uniform(0.3, 1.0, len(X))
    pis[-4:] = 1.0  # outliers that would dominate a π-weighted centroid
    cells = probabilistic_cells(Z, 4, pis, 1e-3)
    spec = build_spec(X, cells.labels, QI, 4, participation=pis, max_cell_failure=1e-3)
    assert_no_record_disclosed(spec, X, cells.labels, 4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(6, 120), m=st.integers(1, 4), k=st.integers(2, 6),
       heavy=st.booleans())
def test_no_record_disclosed_property(seed, n, m, k, heavy):
    rng = np.random.default_rng(seed)
    if n < k:
        return
    X = rng.standard_t(1.5, (n, m)) if heavy else rng.normal(size=(n, m))
    X[rng.integers(0, n, n // 4)] = X[rng.integers(0, n, n // 4)]  # some duplicated records
    labels = mdav(standardize(X)[0], k)
    qi = [f"q{i}" for i in range(m)]
    spec = build_spec(X, labels, qi, k)
    assert_no_record_disclosed(spec, X, labels, k)
    assert np.bincount(assign(spec, X)).min() >= k


def _version_1_spec():
    """A spec as version 1 wrote it: the reference of cell 0 is a z-scored record."""
    spec = {
        "format": FORMAT, "version": 1, "qi": ["a"],
        "standardization": {"mean": [0.0], "scale": [1.0], "constant": [False]},
        "anonymity": {"k": 2, "n_min": None, "participation": None, "max_cell_failure": None},
        "rule": {"name": "sequential-balls", "statement": "…"},
        "cells": [{"id": 0, "reference": [3.5], "radius2": 1.0, "value": [3.0]},
                  {"id": 1, "reference": None, "radius2": None, "value": [0.0]}],
    }
    spec["checksum"] = {"algorithm": "sha256", "canonicalization": "…", "value": spec_checksum(spec)}
    return spec


def test_version_1_spec_refused(tmp_path, capsys):
    spec = _version_1_spec()
    with pytest.raises(InputError, match="version 1, whose cells publish model records"):
        load_spec(spec)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(spec))
    records = tmp_path / "me.csv"
    records.write_text("a\n3.5\n")
    out = tmp_path / "out.csv"
    for args in (["assign", "--spec", str(path), str(records), str(out)], ["audit", str(records), "--spec", str(path)]):
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("daskmicro: error:") and err.count("\n") == 1 and "version 1" in err
        assert "3.5" not in err and not out.exists()
    assert set(RULES) == {"nearest-centroid"}


def test_cli_spec_discloses_no_record(census_with_outliers, tmp_path, capsys):
    import pandas as pd

    X = census_with_outliers
    src = tmp_path / "model.csv"
    pd.DataFrame(X, columns=QI).to_csv(src, index=False)
    out = tmp_path / "spec.json"
    capsys.readouterr()
    assert main(["spec", str(src), str(out), "--qi", ",".join(QI), "--k", "5"]) == 0
    printed = capsys.readouterr().out
    spec = json.loads(out.read_text())
    Xr = pd.read_csv(src)[QI].to_numpy(float)
    assert_no_record_disclosed(spec, Xr, mdav(standardize(Xr)[0], 5), 5)
    assert "moves" in printed
