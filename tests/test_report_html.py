"""The HTML run report: sections, plots, self-containment, the CLI, and a render in headless Chromium."""

import copy
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from daskmicro.anonymize import anonymize
from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.errors import InputError, ParameterError
from daskmicro.kernels.utility import utility_measures
from daskmicro.privacy.risk import disclosure_risk
from daskmicro.report import recommend_setting, render_html, sweep_plot, write_report
from daskmicro.report.html import SECTION_IDS

QI = list(CENSUS_COLUMNS)
SWEEP = [
    {"setting": "C_D=0", "relative_time": 0.45, "relative_distortion": 0.060},
    {"setting": "C_D=5", "relative_time": 0.55, "relative_distortion": 0.015},
    {"setting": "C_D=10", "relative_time": 0.62, "relative_distortion": 0.008},
    {"setting": "C_D=20", "relative_time": 1.00, "relative_distortion": 0.0},
]


def _run(method="pca-mdav", **kw):
    data = census_like(400, seed=3)
    release, report = anonymize(data, qi=QI, k=5, seed=0, keep_row_id=True, method=method, **kw)
    release = release.sort_values("row_id")
    return data[QI].to_numpy(float), release[QI].to_numpy(float), report


@pytest.fixture(scope="module")
def full_report():
    """A real PCA-MDAV run with every optional field filled in."""
    X, Y, report = _run(energy_loss=0.1)
    report.utility = utility_measures(X, Y, columns=QI)
    report.risk = disclosure_risk(X, Y, sample_size=200, seed=0)
    report.timings = {"read": 0.02, "macroaggregation": 0.4, "fan-out": 1.1, "gather": 0.1}
    report.reference_information_loss = report.information_loss / 1.02
    report.cell_size_counts = {5: 70, 6: 8, 7: 2}
    report.macrocell_sse = [40.0, 22.5, 11.0, 9.0, 4.0, 2.5, 1.0, 0.4]
    report.nu, report.n_distal = 0.25, 2
    report.incremental = {"tau0": 12.0, "tau_plus": 3.0, "delta_tau": 5.0, "delta": 0.012, "nu": 0.146}
    report.probabilistic = {"p": 0.9, "n_min": 5, "table_failure": 0.001}
    report.performance_report = "dask-performance.html"
    d = report.to_dict()
    d["sweep"] = {"points": SWEEP, "budget": 0.01}
    return d


@pytest.fixture(scope="module")
def full_page(full_report):
    return render_html(full_report)


@pytest.fixture(scope="module")
def minimal_report():
    # a plain MDAV run's report with only what every run has (its timings and cell sizes removed)
    d = _run(method="mdav")[2].to_dict()
    for key in ("timings", "cell_size_counts"):
        d.pop(key, None)
    return d


def _section(page, sid):
    match = re.search(rf'<section id="{sid}">(.*?)</section>', page, re.S)
    assert match, f"section {sid} missing"
    return match.group(1)


def test_all_sections_and_plots(full_page):
    for sid in SECTION_IDS:
        body = _section(full_page, sid)
        assert "not run" not in body, sid
    names = re.findall(r'<svg class="plot" data-plot="([^"]+)"', full_page)
    assert names == ["timings", "cell-sizes", "energy-spectrum", "macrocell-sse", "eigenvalues", "sweep"]
    assert "+2.00 %" in _section(full_page, "information-loss")  # δ against exact MDAV
    assert "retaining" in _section(full_page, "pca-spectrum")
    assert "τ₀" in _section(full_page, "incremental")
    assert "IL1s" in _section(full_page, "utility") and "AGI" in _section(full_page, "utility")
    assert "record linkage" in _section(full_page, "risk").lower()
    assert "C_D=10" in _section(full_page, "sweep")  # fastest within δ ≤ 1 %
    assert 'href="dask-performance.html"' in _section(full_page, "performance")


def test_absent_data_says_not_run(minimal_report):
    page = render_html(minimal_report)
    for sid in ("pca-spectrum", "macrocells", "incremental", "probabilistic", "utility", "risk"):
        assert "not run" in _section(page, sid), sid
    for sid in ("sweep", "performance"):
        assert f'id="{sid}"' not in page
    assert "passed" in _section(page, "verification")
    assert re.findall(r'<svg class="plot"', page) == []


def test_self_contained_and_deterministic(full_report, full_page):
    before = copy.deepcopy(full_report)
    assert render_html(full_report) == full_page  # pure: same dict, same page
    assert full_report == before
    assert "<link" not in full_page and "@import" not in full_page
    # every src/href is an in-page anchor, or the relative link to the performance report
    targets = re.findall(r'\b(?:src|href)="([^"]*)"', full_page)
    assert targets and all(t.startswith("#") or t == "dask-performance.html" for t in targets)
    ids = re.findall(r'\bid="([^"]+)"', full_page)
    assert len(ids) == len(set(ids)), "duplicate element ids across inline SVGs"


def test_values_are_escaped():
    page = render_html({"method": "mdav", "k": 3, "n": 10, "qi": ["<script>alert(1)</script>"]})
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page


def test_report_optional_fields_only_when_set():
    _, _, report = _run(method="mdav")
    d = report.to_dict()
    # every run times its stages and counts its cells (one timing model): the rest only when set
    assert set(d["timings"]) >= {"pre-scan", "cells", "collect + verify", "total"}
    assert sum(d["cell_size_counts"].values()) == d["cells"]
    for key in ("utility", "risk", "macrocell_sse", "nu", "n_distal",
                "reference_information_loss", "incremental", "probabilistic", "performance_report"):
        assert key not in d
    report.cell_size_counts = {np.int64(6): np.int64(2), 5: 10}
    report.timings = {"mdav": np.float64(0.5)}
    d = report.to_dict()
    assert d["cell_size_counts"] == {"5": 10, "6": 2} and d["timings"] == {"mdav": 0.5}
    json.dumps(d)


def test_sweep_recommendation_and_bad_points():
    assert recommend_setting(SWEEP, 0.01)["setting"] == "C_D=10"
    assert recommend_setting(SWEEP, 0.1)["setting"] == "C_D=0"
    assert recommend_setting(SWEEP, -0.5) is None and recommend_setting(SWEEP, None) is None
    svg = sweep_plot(SWEEP, budget=0.01)
    assert svg.startswith("<svg") and "recommended: C_D=10" in svg
    with pytest.raises(ParameterError, match="points"):
        sweep_plot([])
    with pytest.raises(ParameterError, match=r"points\[0\]"):
        sweep_plot([{"setting": "a", "relative_time": "fast"}])
    with pytest.raises(ParameterError, match="report must be a dict"):
        render_html([1, 2])


def test_write_report_and_cli(tmp_path, full_report, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text(json.dumps(full_report))
    path = write_report(run_dir)
    assert path == run_dir / "report.html" and path.read_text().startswith("<!DOCTYPE html>")
    path.unlink()
    assert main(["report", str(run_dir)]) == 0
    assert (run_dir / "report.html").is_file() and "report.html" in capsys.readouterr().out


def test_write_report_bad_input(tmp_path, capsys):
    with pytest.raises(InputError, match="does not exist"):
        write_report(tmp_path / "nope")
    with pytest.raises(InputError, match="no report.json"):
        write_report(tmp_path)
    (tmp_path / "report.json").write_text("{not json")
    with pytest.raises(InputError, match="report.json"):
        write_report(tmp_path)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskmicro: error:") and err.count("\n") == 1 and "report.json" in err
    assert not (tmp_path / "report.html").exists()


# --------------------------------------------------------------------------- headless Chromium

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no headless Chromium here (looked for {', '.join(BROWSERS)}); .ci/run installs Debian's chromium")


def _chromium(browser, profile, *args):
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def test_renders_in_headless_chromium(tmp_path, full_report):
    from PIL import Image

    browser = _browser()
    (tmp_path / "report.json").write_text(json.dumps(full_report))
    page = write_report(tmp_path)
    url = page.resolve().as_uri()

    dom = _chromium(browser, tmp_path / "profile-dom", "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, "page did not load"
    assert 'data-js-errors="0"' in body.group(1)
    assert 'data-plots-rendered="6"' in body.group(1), body.group(1)  # every plot has a non-empty box
    for sid in SECTION_IDS:
        assert f'<section id="{sid}">' in dom.stdout

    shot = tmp_path / "report.png"
    res = _chromium(browser, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,2400", url)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1280, 2400)
        rgb = np.asarray(im.convert("RGB"))
    packed = (rgb[..., 0].astype(np.int64) << 16) | (rgb[..., 1].astype(np.int64) << 8) | rgb[..., 2]
    colours = np.unique(packed)
    assert len(colours) > 100, "screenshot is (nearly) blank"
    # the header band is dark, the page background light, and the plots add blue bars
    assert rgb[20:60, 20:400].mean() < 120 and rgb[-50:, :].mean() > 200
    blue = (rgb[..., 2] > 140) & (rgb[..., 0] < 90) & (rgb[..., 1] < 130)
    assert blue.sum() > 2000, "no plot colour on the first screen"
