"""Trade-off sweeps: Algorithm C in process, daskmicro.sweep, the sweep files and page, the CLI."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.errors import InputError, ParameterError
from daskmicro.kernels import information_loss, mdav, standardize
from daskmicro.kernels.algorithm_c import algorithm_c, distal_macrocells
from daskmicro.kernels.pca import pca_reduce
from daskmicro.report.sweep_page import render_sweep_html, sweep_document
from daskmicro.tuning.tradeoff import sweep

QI = list(CENSUS_COLUMNS)


@pytest.fixture(scope="module")
def data():
    return census_like(1500, seed=7, with_extra_columns=True)


@pytest.fixture(scope="module")
def Z(data):
    return standardize(data[QI].to_numpy(float))[0]


# --------------------------------------------------------------------------- kernel


def test_algorithm_c_extremes_are_algorithms_a_and_b(Z):
    k = 5
    exact = algorithm_c(Z, k, K=100, nu=1.0)
    assert np.array_equal(exact.labels, mdav(Z, k))  # ν = 1: exact MDAV, same cells
    assert exact.n_distal == exact.macrocells == 1 and exact.n_components is None
    pca = algorithm_c(Z, k, K=100, nu=0.0, n_components=3)
    scores = pca_reduce(Z, n_components=3).scores
    # ν = 0: MDAV on the 3 leading components of all records (Algorithm B)
    assert information_loss(Z, pca.labels) == pytest.approx(information_loss(Z, mdav(scores, k)), rel=1e-6)
    assert pca.n_distal == 0 and pca.n_components == 3


def test_algorithm_c_split(Z):
    k, K = 5, 100
    res = algorithm_c(Z, k, K=K, nu=0.4, energy_loss=0.2)
    C = res.macrocells
    assert C == Z.shape[0] // K  # MDAV at size K: cells of K … 2K−1
    assert res.n_distal == round(0.4 * C)
    sizes = np.bincount(res.labels)
    assert sizes.sum() == Z.shape[0] and sizes.min() >= k and sizes.max() <= 2 * k - 1
    # the distal macrocells are those of highest SSE
    mask = distal_macrocells(res.macrocell_sse, 0.4)
    assert res.macrocell_sse[mask].min() >= res.macrocell_sse[~mask].max()
    assert set(res.timings) == {"macroaggregation", "split", "microaggregation"}
    part = algorithm_c(Z, k, K=K, nu=0.5, partition_size=400)
    assert np.bincount(part.labels).min() >= k
    with pytest.raises(ValueError, match="nu"):
        algorithm_c(Z, k, nu=1.5)
    with pytest.raises(ValueError, match="K"):
        algorithm_c(Z, k, K=5, nu=0.5)


# --------------------------------------------------------------------------- API


def test_sweep_rows_reference_and_budget(data):
    res = sweep(data, QI, 5, nu=[0, 0.5, 1], K=[100, 150], energy_loss=[0.1, 0.3], sample=1200, seed=3,
                budget=0.15)
    # ν = 0 ignores K (2 rows, one per ε²), ν = 0.5 is 2 K × 2 ε², ν = 1 is exact MDAV once
    assert len(res) == 2 + 4 + 1
    assert res.attrs["sample_size"] == 1200 and res.attrs["n_input"] == 1500
    exact = res[res["exact"]]
    assert len(exact) == 1
    assert exact["relative_distortion"].iloc[0] == 0 and exact["delta_D"].iloc[0] == 0
    assert exact["relative_time"].iloc[0] == 1.0
    ref = res.attrs["reference"]["information_loss"]
    assert exact["information_loss"].iloc[0] == pytest.approx(ref)
    # δ and ΔD as defined, from the reported IL
    np.testing.assert_allclose(res["relative_distortion"], (res["information_loss"] - ref) / ref)
    np.testing.assert_allclose(res["delta_D"], (res["information_loss"] - ref) / 100)
    assert (res["relative_distortion"] > 0).sum() >= 5  # PCA costs distortion on this data
    assert set(res.loc[res["nu"] == 0.5, "macrocells"]) == {1200 // 100, 1200 // 150}
    # the recommendation is the fastest setting within the budget
    rec = res[res["recommended"]]
    assert len(rec) == 1
    within = res[res["relative_distortion"] <= 0.15]
    assert rec["relative_distortion"].iloc[0] <= 0.15
    assert rec["relative_time"].iloc[0] == within["relative_time"].min()
    assert res.attrs["recommended"] == rec["setting"].iloc[0]
    # a budget nothing but exact MDAV meets
    tight = sweep(data, QI, 5, nu=[0, 1], sample=600, budget=0.0)
    assert tight.attrs["recommended"] == "MDAV (ν = 1)"
    assert tight.attrs["recommended_options"] == {"method": "mdav"}


def test_recommended_setting_is_a_run(data):
    """The recommended setting is given as the options of a run, and a run takes them as they are."""
    from daskmicro import anonymize

    res = sweep(data, QI, 5, nu=[0.5], K=[100], energy_loss=[0.3], sample=1200, seed=3, budget=10.0)
    opts = res.attrs["recommended_options"]
    assert opts == {"method": "proximal-distal", "K": 100, "nu": 0.5, "energy_loss": 0.3}
    release, report = anonymize(data[QI], QI, 5, seed=0, ledger="off", **opts)
    assert report.verified and report.method == "proximal-distal" and len(release) == len(data)


def test_sweep_n_components_scan(data):
    res = sweep(data, QI, 5, nu=[0], n_components=[1, 3, 6], sample=800)
    assert list(res["m_tilde"]) == [1, 3, 6] and res["recommended"].sum() == 0
    # fewer components, more distortion (*Efficient k-Anonymous Microaggregation … via PCA*, Fig. 12)
    assert res["information_loss"].iloc[0] > res["information_loss"].iloc[2]


def test_sweep_dask_input(data):
    import dask.dataframe as dd

    res = sweep(dd.from_pandas(data, npartitions=3), QI, 5, nu=[0.5, 1], K=[100], sample=500, seed=1)
    assert len(res) == 2 and res.attrs["sample_size"] == 500 and res.attrs["n_input"] == 1500


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"nu": [0.5, 1.5]}, ParameterError, "nu must lie in"),
        ({"nu": []}, ParameterError, "nu is empty"),
        ({"K": [5]}, ParameterError, "K .* larger than k"),
        ({"K": [2000]}, ParameterError, "exceeds the sample"),
        ({"sample": 3}, ParameterError, "smaller than k"),
        ({"n_components": [0]}, ParameterError, "n_components"),
        ({"energy_loss": [1.0]}, ParameterError, "energy_loss"),
        ({"n_components": [2], "energy_loss": [0.1]}, ParameterError, "either"),
        ({"budget": -0.1}, ParameterError, "budget"),
        ({"repeat": 0}, ParameterError, "repeat"),
        ({"qi": ["AGI", "region"]}, InputError, "not numeric"),
    ],
)
def test_sweep_bad_parameters(data, kw, exc, match):
    args = {"qi": QI, **kw}
    with pytest.raises(exc, match=match):
        sweep(data, args.pop("qi"), 5, sample=args.pop("sample", 1000), **args)


# --------------------------------------------------------------------------- CLI and files

SWEEP_ARGS = ["--k", "5", "--nu", "0,0.4,1", "--K", "100", "--sample", "1000", "--budget", "20"]


@pytest.fixture(scope="module")
def input_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("in") / "census_like.parquet"
    data.to_parquet(path, index=False)
    return path


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, input_file):
    out = tmp_path_factory.mktemp("sweep") / "out"
    assert main(["sweep", str(input_file), "--qi", ",".join(QI), *SWEEP_ARGS, "--out", str(out)]) == 0
    return out


def test_cli_sweep_files(sweep_dir, capsys):
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["sweep.csv", "sweep.html", "sweep.json", "sweep.png"]
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    table = pd.read_csv(sweep_dir / "sweep.csv")
    assert len(doc["points"]) == len(table) == 3  # one row per setting
    assert [p["setting"] for p in doc["points"]] == list(table["setting"])
    exact = [p for p in doc["points"] if p["exact"]]
    assert len(exact) == 1 and exact[0]["relative_distortion"] == 0 and exact[0]["delta_D"] == 0
    assert doc["budget"] == pytest.approx(0.2) and doc["sample_size"] == 1000 and doc["k"] == 5
    best = [p for p in doc["points"] if p["recommended"]]
    assert len(best) == 1 and best[0]["setting"] == doc["recommended"]
    assert best[0]["relative_distortion"] <= 0.2
    assert min(p["relative_time"] for p in doc["points"] if p["relative_distortion"] <= 0.2) == best[0]["relative_time"]
    assert (sweep_dir / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (sweep_dir / "sweep.html").read_text()
    assert page.count('data-plot="sweep"') == 1 and "recommended: " in page
    assert re.search(r'id="recommendation">Recommended setting for δ ≤ 20 %: <b>', page)
    assert "<link" not in page and "@import" not in page
    targets = re.findall(r'\b(?:src|href)="([^"]*)"', page)  # no external resource: in-page or sibling files
    assert targets and all(t.startswith("#") or t in ("sweep.json", "sweep.csv", "sweep.png") for t in targets)


def test_cli_sweep_refuses_existing_files(sweep_dir, input_file, capsys):
    before = (sweep_dir / "sweep.json").read_text()
    assert main(["sweep", str(input_file), "--qi", ",".join(QI), *SWEEP_ARGS, "--out", str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" in err
    assert (sweep_dir / "sweep.json").read_text() == before


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--k", "5", "--nu", "0,1.5"], r"--nu values must lie in \[0, 1\]"),
        (["--k", "5", "--nu", "-0.1"], r"--nu values must lie in \[0, 1\]"),
        (["--k", "5", "--nu", ""], "--nu is empty"),
        (["--k", "5", "--nu", "0,,1"], "empty entry"),
        (["--k", "5", "--nu", "a"], "--nu must hold numbers"),
        (["--k", "5", "--K", "5"], "larger than k"),
        (["--k", "5", "--K", "100.5"], "--K must hold integers"),
        (["--k", "5", "--sample", "3"], "--sample 3 is smaller than k = 5"),
        (["--k", "5", "--n-components", "0"], "n_components"),
        (["--k", "5", "--budget", "-1"], "--budget"),
        (["--k", "5", "--qi", "AGI,nope"], "nope"),
        (["--k", "1"], "--k"),
    ],
)
def test_cli_sweep_bad_options(tmp_path, input_file, capsys, extra, match):
    out = tmp_path / "out"
    qi = [] if "--qi" in extra else ["--qi", ",".join(QI)]
    assert main(["sweep", str(input_file), *qi, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskmicro: error:") and err.count("\n") == 1
    assert re.search(match, err), err
    assert not out.exists()


def test_sweep_page_is_pure_and_escaped(sweep_dir):
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    assert render_sweep_html(doc) == render_sweep_html(doc)
    doc["points"][0]["setting"] = "<b>x</b>"
    assert "<b>x</b>" not in render_sweep_html(doc)
    with pytest.raises(ParameterError, match="points"):
        render_sweep_html({"points": []})
    with pytest.raises(ParameterError, match="daskmicro.sweep"):
        sweep_document(pd.DataFrame({"a": [1]}))


def test_sweep_page_renders_in_headless_chromium(sweep_dir, tmp_path):
    from PIL import Image
    from test_report_html import _browser, _chromium

    browser = _browser()
    url = (sweep_dir / "sweep.html").resolve().as_uri()
    dom = _chromium(browser, tmp_path / "profile-dom", "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body and 'data-js-errors="0"' in body.group(1) and 'data-plots-rendered="1"' in body.group(1)
    for sid in ("parameters", "tradeoff", "settings"):
        assert f'<section id="{sid}">' in dom.stdout
    shot = tmp_path / "sweep.png"
    res = _chromium(browser, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1100,1400", url)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    with Image.open(shot) as im:
        rgb = np.asarray(im.convert("RGB"))
    assert rgb[20:60, 20:400].mean() < 120  # dark header band
    blue = (rgb[..., 2] > 140) & (rgb[..., 0] < 90) & (rgb[..., 1] < 130)
    assert blue.sum() > 200, "no plot markers on the page"


def test_sweep_absolute_increment(data):
    res = sweep(data, QI, 5, nu=[0, 0.5, 1], K=[100], sample=1000, budget=0.004, increment="absolute")
    rec = res[res["recommended"]]
    assert len(rec) == 1 and rec["delta_D"].iloc[0] <= 0.004
    assert rec["relative_time"].iloc[0] == res.loc[res["delta_D"] <= 0.004, "relative_time"].min()
    doc = sweep_document(res)
    assert doc["increment"] == "absolute"
    assert all(p["relative_distortion"] == pytest.approx(r) for p, r in zip(doc["points"], res["relative_distortion"]))
    assert "Recommended setting for ΔD ≤ 0.4 %" in render_sweep_html(doc)
    with pytest.raises(ParameterError, match="increment"):
        sweep(data, QI, 5, sample=500, increment="percent")
