"""The microaggregation function as a spec: cells on the model records, rule, checksum, refusal of bad specs."""

import copy
import json

import numpy as np
import pytest

from daskmicro.datasets import CENSUS_COLUMNS
from daskmicro.errors import InputError, ParameterError
from daskmicro.io.tables import write_json_atomic
from daskmicro.kernels import mdav, standardize
from daskmicro.privacy.probabilistic import probabilistic_cells
from daskmicro.privacy.spec import RULES, assign, build_spec, cell_values, check_spec, load_spec, spec_checksum

from _oracles import binom_failure, binom_n_min, poisson_binomial_failure

QI = list(CENSUS_COLUMNS)


@pytest.fixture(scope="module")
def mdav_spec(census):
    Z = standardize(census[QI].to_numpy(float))[0]
    labels = mdav(Z, 5)
    return build_spec(census, labels, QI, 5), labels


def _resign(spec):
    spec = copy.deepcopy(spec)
    spec["checksum"]["value"] = spec_checksum(spec)
    return spec


def _check_model_cells(spec, data, labels, k):
    """What the spec promises on the model records: its counts, ≥ k per cell, moved records as stated."""
    got = assign(spec, data)
    sizes = np.bincount(got, minlength=len(spec["cells"]))
    assert sizes.tolist() == spec["model"]["cell_sizes"] and sizes.min() >= k
    # every kept cell is one design cell: the rule moves exactly the records counted
    design = [int(np.argmin([np.abs(Zc - c["centroid"]).max() for Zc in _design_centroids(data, labels)]))
              for c in spec["cells"]]
    assert len(set(design)) == len(design)
    assert int((np.asarray(design)[got] != labels).sum()) == spec["model"]["moved_records"]
    assert spec["model"]["removed_cells"] == labels.max() + 1 - len(spec["cells"])
    return got


def _design_centroids(data, labels):
    X = data[QI].to_numpy(float) if hasattr(data, "columns") else np.asarray(data, float)
    Z = standardize(X)[0]
    return [Z[labels == c].mean(0) for c in range(labels.max() + 1)]


def test_mdav_spec_cells(census, mdav_spec, tmp_path):
    spec, labels = mdav_spec
    assert spec["version"] == 2 and spec["rule"]["name"] == "nearest-centroid"
    assert spec["rule"]["statement"] == RULES["nearest-centroid"]
    got = _check_model_cells(spec, census, labels, 5)
    # MDAV cells are not Voronoi cells of their centroids: some records move, most cells survive
    assert 0 < spec["model"]["moved_records"] < len(census) and len(spec["cells"]) > (labels.max() + 1) // 2
    X = census[QI].to_numpy(float)
    st = spec["standardization"]
    for cell in spec["cells"]:  # value and centroid describe the same records
        assert np.array(cell["value"]) == pytest.approx(np.array(st["mean"]) + np.array(st["scale"]) * cell["centroid"])
    path = write_json_atomic(check_spec(spec), tmp_path / "s.json")
    loaded = load_spec(path, expected_checksum=spec["checksum"]["value"].upper())
    assert loaded == spec
    # a matrix in QI order and a shuffled table give the same assignment
    assert np.array_equal(assign(loaded, X), got)
    perm = np.random.default_rng(0).permutation(len(census))
    shuffled = census.iloc[perm][QI[::-1] + []]
    assert np.array_equal(assign(loaded, shuffled), got[perm])


def test_rule_as_stated(census, mdav_spec):
    """An independent reading of the rule's statement gives the same cells on new records."""
    spec, _ = mdav_spec
    rng = np.random.default_rng(1)
    X = census[QI].to_numpy(float)
    new = X[rng.integers(0, len(X), 300)] * rng.normal(1.0, 0.05, (300, len(QI)))
    st = spec["standardization"]
    Z = (new - np.array(st["mean"])) / np.array(st["scale"])
    Z[:, np.array(st["constant"])] = 0.0
    expected = []
    for z in Z:
        best = None
        for cell in spec["cells"]:
            v = sum((z[i] - cell["centroid"][i]) ** 2 for i in range(len(z))) + cell["cost"]
            if best is None or v < best[0]:
                best = (v, cell["id"])
        expected.append(best[1])
    assert np.array_equal(assign(spec, new), expected)


def test_probabilistic_specs(census):
    X = census[QI].to_numpy(float)
    Z = standardize(X)[0]
    cells = probabilistic_cells(Z, 5, 0.75, 1e-4)
    n_min = binom_n_min(5, 0.75, 1e-4)
    assert cells.n_min == n_min
    spec = build_spec(census, cells.labels, QI, 5, participation=0.75, max_cell_failure=1e-4, n_min=cells.n_min)
    assert spec["anonymity"] == {"k": 5, "n_min": n_min, "participation": 0.75, "max_cell_failure": 1e-4}
    got = _check_model_cells(spec, census, cells.labels, 5)
    q = [binom_failure(5, 0.75, int(s)) for s in np.bincount(got)]
    assert spec["model"]["cell_failure"] == pytest.approx(q) and max(q) <= 1e-4
    pis = np.random.default_rng(2).uniform(0.4, 1.0, len(X))
    cells = probabilistic_cells(Z, 5, pis, 1e-4)
    spec = build_spec(X, cells.labels, QI, 5, participation=pis, max_cell_failure=1e-4)
    assert spec["anonymity"]["participation"] == "per-record"
    got = _check_model_cells(spec, X, cells.labels, 5)
    q = [poisson_binomial_failure(5, pis[got == c]) for c in range(len(spec["cells"]))]
    # per-record π: each q̄_c published as a bound rounded up (exact, it would give a π back)
    assert all(e <= b <= 1e-4 for e, b in zip(q, spec["model"]["cell_failure"])) and max(q) <= 1e-4
    # published values are plain means of design cells: π-weights could pull them onto one record
    means = np.array([X[cells.labels == c].mean(0) for c in range(cells.labels.max() + 1)])
    for v in cell_values(spec):
        assert np.abs(means - v).max(axis=1).min() <= 1e-9 * np.abs(X).max()


def test_nearest_centroid_rule_with_costs():
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    X = np.repeat(centres, 6, axis=0) + rng.normal(0, 0.5, (24, 2))
    labels = np.repeat(np.arange(4), 6)
    spec = build_spec(X, labels, ["a", "b"], 3, rule="nearest-centroid")
    assert spec["model"]["moved_records"] == 0 and np.array_equal(assign(spec, X), labels)
    Zc = np.array([cell["centroid"] for cell in spec["cells"]])
    st = spec["standardization"]
    point = np.array(st["mean"]) + np.array(st["scale"]) * (Zc[0] + 0.49 * (Zc[1] - Zc[0]))
    assert assign(spec, point[None, :])[0] == 0
    # an additive cost on cell 0 moves the boundary towards it (PCL's weighted Voronoi cells)
    costed = build_spec(X, labels, ["a", "b"], 3, rule="nearest-centroid", costs=[0.3, 0, 0, 0])
    assert costed["cells"][0]["cost"] == 0.3
    assert assign(costed, point[None, :])[0] == 1


@pytest.mark.parametrize("offset", [0.0, 1.7e12, -3e9, 1e-3])
def test_two_cells_of_one_mean_do_not_split_their_records_by_position(offset):
    """Two design cells with the same mean get the same centroid, whatever their records and
    their offset: the rule puts both cells' records in the first (ties to the lowest id) and the
    second is removed, for every set of records with those means and sizes.  Centroids computed
    from the z-scored records came out an ulp apart at large offsets, and the published cell
    sizes then told on which side of the ulp each record lay."""
    rng = np.random.default_rng(5)
    sizes = np.array([4, 3, 5, 3])
    labels = np.repeat(np.arange(4), sizes)
    means = offset + np.array([[10.0, 20.0], [-150.0, -110.0], [300.0, 40.0], [-150.0, -110.0]])
    specs = []
    for _ in range(6):
        d = rng.integers(-3, 4, (labels.size, 2)).astype(float)
        for c in range(4):   # integer spreads summing to 0: the same means, other records
            rows = np.flatnonzero(labels == c)
            d[rows[-1]] = -d[rows[:-1]].sum(axis=0)
        specs.append(build_spec(means[labels] + d, labels, ["a", "b"], 3))
    for spec in specs:
        assert spec["model"]["removed_cells"] == 1 and spec["model"]["cell_sizes"] == [4, 6, 5]
        assert [c["value"] for c in spec["cells"]] == [c["value"] for c in specs[0]["cells"]]
        assert [c["centroid"] for c in spec["cells"]] == [c["centroid"] for c in specs[0]["cells"]]


def test_requirement_that_cannot_be_met(census):
    Z = standardize(census[QI].to_numpy(float))[0]
    labels = mdav(Z, 5)
    with pytest.raises(ParameterError, match="fewer than k = 6"):
        build_spec(census, labels, QI, 6)  # a design cell of 5 records: its centroid may not be published
    with pytest.raises(ParameterError, match="even a single cell"):
        build_spec(census.iloc[:8], np.zeros(8, dtype=int), QI, 5, participation=0.5, max_cell_failure=1e-6)


def test_duplicates_split_by_mdav():
    """Equal records can only go to one cell under any rule on their values: the spec absorbs them."""
    X = np.repeat(np.arange(8, dtype=float), 5)[:, None]  # 8 values × 5 copies
    labels = mdav(X, 3)
    try:
        spec = build_spec(X, labels, ["v"], 3)
    except ParameterError as exc:
        assert "fewer than k" in str(exc)
    else:
        got = assign(spec, X)
        sizes = np.bincount(got)
        assert sizes[sizes > 0].min() >= 3
        for v in range(8):
            assert np.unique(got[X[:, 0] == v]).size == 1


def test_build_spec_bad_input(census):
    Z = standardize(census[QI].to_numpy(float))[0]
    labels = mdav(Z, 5)
    with pytest.raises(ParameterError, match="rule"):
        build_spec(census, labels, QI, 5, rule="voronoi")
    with pytest.raises(ParameterError, match="no longer available"):
        build_spec(census, labels, QI, 5, rule="sequential-balls")
    with pytest.raises(ParameterError, match="labels"):
        build_spec(census, labels[:-1], QI, 5)
    with pytest.raises(ParameterError, match="every cell id"):
        build_spec(census, labels * 2, QI, 5)
    with pytest.raises(ParameterError, match="together"):
        build_spec(census, labels, QI, 5, participation=0.5)
    with pytest.raises(ParameterError, match="k must be"):
        build_spec(census, labels, QI, 1)
    with pytest.raises(ParameterError, match="costs"):
        build_spec(census, labels, QI, 5, costs=np.zeros(labels.max()))
    with pytest.raises(InputError, match="missing"):
        build_spec(census, labels, QI + ["nope"], 5)
    bad = census.copy()
    bad.loc[3, "AGI"] = np.nan
    with pytest.raises(InputError, match="AGI"):
        build_spec(bad, labels, QI, 5)


def _write(tmp_path, spec, name="s.json"):
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return path


def test_tampered_spec_refused(mdav_spec, tmp_path):
    spec, _ = mdav_spec
    forged = copy.deepcopy(spec)
    forged["cells"][0]["cost"] += 1.5
    with pytest.raises(InputError, match="checksum"):
        load_spec(_write(tmp_path, forged))
    with pytest.raises(InputError, match="checksum"):
        assign(forged, np.zeros((1, len(QI))))
    forged = copy.deepcopy(spec)
    forged["anonymity"]["k"] = 2
    with pytest.raises(InputError, match="checksum"):
        load_spec(forged)
    with pytest.raises(InputError, match="not the expected"):
        load_spec(spec, expected_checksum="0" * 64)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda s: s.pop("cells"), "missing key"),
        (lambda s: s.update(extra=1), "unknown key"),
        (lambda s: s.update(format="other"), "format"),
        (lambda s: s.update(version=3), "version must be 2"),
        (lambda s: s.update(version=1), "version 1, whose cells publish model records"),
        (lambda s: s.update(qi=[]), "qi"),
        (lambda s: s["anonymity"].update(k="5"), "anonymity.k"),
        (lambda s: s["anonymity"].update(n_min=3), "n_min"),
        (lambda s: s["anonymity"].update(participation=1.5, max_cell_failure=0.1), "participation"),
        (lambda s: s["standardization"]["scale"].__setitem__(0, 0.0), "scale"),
        (lambda s: s["standardization"]["mean"].pop(), "mean"),
        (lambda s: s["rule"].update(name="nearest-neighbour"), "rule.name"),
        (lambda s: s["rule"].update(name="sequential-balls"), "rule.name"),
        (lambda s: s["rule"].update(statement="anything goes"), "statement"),
        (lambda s: s["cells"][0].update(id=7), "ids"),
        (lambda s: s["cells"][1]["centroid"].pop(), "centroid"),
        (lambda s: s["cells"][1].update(cost="1"), "cost"),
        (lambda s: s["cells"][-1].update(reference=[0.0] * 13), "keys"),
        (lambda s: s["cells"][2].pop("value"), "keys"),
        (lambda s: s["cells"][2]["value"].__setitem__(0, True), "value"),
    ],
)
def test_malformed_spec_refused(mdav_spec, edit, match):
    spec = copy.deepcopy(mdav_spec[0])
    edit(spec)
    with pytest.raises(InputError, match=match):
        load_spec(_resign(spec))


def test_unreadable_spec_files(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_spec(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_spec(bad)
    nan = tmp_path / "nan.json"
    nan.write_text('{"format": NaN}')
    with pytest.raises(InputError, match="non-finite"):
        load_spec(nan)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        load_spec(arr)


def test_assign_bad_records(mdav_spec, census):
    spec, _ = mdav_spec
    with pytest.raises(InputError, match="missing"):
        assign(spec, census.drop(columns=["AGI"]))
    bad = census.astype(float)
    bad.loc[0, "FICA"] = np.inf
    with pytest.raises(InputError, match="FICA"):
        assign(spec, bad)
    with pytest.raises(InputError, match="one column per QI"):
        assign(spec, np.zeros((3, 2)))
    text = census.astype({"AGI": str})
    with pytest.raises(InputError, match="not numeric"):
        assign(spec, text)
