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


def _full_run():
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
    return report


@pytest.fixture(scope="module")
def full_run():
    return _full_run()


@pytest.fixture(scope="module")
def full_report(full_run):
    """A real PCA-MDAV run with every optional field filled in, exact (the private run record's
    report): the page shows every section."""
    d = full_run.exact_dict()
    d["sweep"] = {"points": SWEEP, "budget": 0.01}
    return d


@pytest.fixture(scope="module")
def public_report(full_run):
    """The same run's report as published: IL rounded, no figure of the original spread."""
    d = full_run.to_dict()
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
    assert names == ["distributions", "correlations", "timings", "cell-sizes", "energy-spectrum", "macrocell-sse",
                     "eigenvalues", "sweep"]
    assert "private, not for publication" in full_page  # the exact report's page says what it is
    assert "+2.00 %" in _section(full_page, "information-loss")  # δ against exact MDAV
    assert "2 % more distortion than exact MDAV" in _section(full_page, "summary")
    assert "retaining" in _section(full_page, "pca-spectrum")
    assert "τ₀" in _section(full_page, "incremental")
    assert "IL1s" in _section(full_page, "utility") and "AGI" in _section(full_page, "utility")
    assert "record linkage" in _section(full_page, "risk").lower()
    assert "C_D=10" in _section(full_page, "sweep")  # fastest within δ ≤ 1 %
    assert 'href="dask-performance.html"' in _section(full_page, "performance")


def test_sections_only_for_what_ran(minimal_report):
    page = render_html(minimal_report)
    for sid in ("pca-spectrum", "macrocells", "incremental", "probabilistic", "utility", "risk", "sweep",
                "performance"):
        assert f'id="{sid}"' not in page and f'href="#{sid}"' not in page, sid
    assert "not run" not in page
    assert "passed" in _section(page, "verification")
    # a plain MDAV run still has its summary, its release pictures and its glossary
    for sid in ("summary", "release", "glossary"):
        assert f'<section id="{sid}">' in page
    assert re.findall(r'<svg class="plot" data-plot="([^"]+)"', page) == ["distributions", "correlations"]
    # no exact-MDAV reference in this report: the summary makes no comparison and no risk card
    summary = _section(page, "summary")
    assert "than exact MDAV" not in summary and "as exact MDAV" not in summary and "<h3>Risk</h3>" not in summary
    assert "formed by <b>exact MDAV</b>" in summary   # what ran, named


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


def test_write_report_and_cli(tmp_path, full_report, full_page, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text(json.dumps(full_report))
    path = write_report(run_dir)
    assert path == run_dir / "report.html" and path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    # the page of the report as written to JSON and read back: the page of the report itself
    # (which test_renders_in_headless_chromium opens)
    assert path.read_text(encoding="utf-8") == full_page
    path.unlink()
    assert main(["report", str(run_dir)]) == 0
    assert (run_dir / "report.html").is_file() and "report.html" in capsys.readouterr().out
    assert (run_dir / "report.html").read_text(encoding="utf-8") == full_page


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
    for other in ({"a": 1}, {"format": "daskmicro-run-record/1", "report": {"k": 3}}):  # JSON, not a report
        (tmp_path / "other.json").write_text(json.dumps(other))
        assert main(["report", str(tmp_path / "other.json")]) == 2
        err = capsys.readouterr().err
        assert "not a daskmicro report" in err and err.count("\n") == 1
        assert not (tmp_path / "other.html").exists()


# --------------------------------------------------------------------------- headless Chromium

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"needs a headless Chromium to render the page (none of {', '.join(BROWSERS)} is on PATH; "
                "install one, e.g. the chromium package)")


def _chromium(browser, profile, *args):
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def test_renders_in_headless_chromium(tmp_path, full_page):
    from PIL import Image

    browser = _browser()
    # the page write_report writes for this report (test_write_report_and_cli: byte for byte), rendered once
    page = tmp_path / "report.html"
    page.write_text(full_page, encoding="utf-8")
    url = page.resolve().as_uri()

    dom = _chromium(browser, tmp_path / "profile-dom", "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, "page did not load"
    assert 'data-js-errors="0"' in body.group(1)
    assert 'data-plots-rendered="8"' in body.group(1), body.group(1)  # every plot has a non-empty box
    for sid in SECTION_IDS:
        assert f'<section id="{sid}">' in dom.stdout
    # the verdict comes first, then the release pictures; one timings table, one total
    assert dom.stdout.index('<section id="summary">') < dom.stdout.index('<section id="release">') \
        < dom.stdout.index('<section id="parameters">')
    assert "Every combination of published quasi-identifier" in dom.stdout
    release = _section(dom.stdout, "release")
    assert 'data-plot="distributions"' in release and 'data-plot="correlations"' in release
    assert dom.stdout.count('<table class="timings">') == 1
    assert _section(dom.stdout, "timings").count("<td>total") == 1

    shot = tmp_path / "report.png"
    res = _chromium(browser, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,2400", url)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1280, 2400)
        rgb = np.asarray(im.convert("RGB"))
    packed = (rgb[..., 0].astype(np.int64) << 16) | (rgb[..., 1].astype(np.int64) << 8) | rgb[..., 2]
    colours = np.unique(packed)
    assert len(colours) > 100, "screenshot is (nearly) blank"
    # the header band is dark, the page background (right margin) light, and the plots add orange bars
    # (the released data) on the first screen
    assert rgb[20:60, 20:400].mean() < 120 and rgb[200:, -12:].mean() > 200
    orange = (rgb[..., 0] > 200) & (rgb[..., 1] > 90) & (rgb[..., 1] < 150) & (rgb[..., 2] < 60)
    assert orange.sum() > 2000, "no plot colour on the first screen"


# --------------------------------------------------------------------------- the page a data owner reads


def test_summary_in_plain_words(full_report, full_page):
    summary = _section(full_page, "summary")  # render_html(full_report): pure (test_self_contained_and_deterministic)
    k, smallest = full_report["k"], full_report["verification"]["k_anonymity"]["min_count"]
    assert f"shared by at least <b>{k}</b> records" in summary
    assert f"smallest published group holds <b>{smallest}</b> records" in summary
    assert "verified" in summary and "FAILED" not in summary
    assert "more distortion than exact MDAV" in summary
    # risk: the linkage rate in words, and what it means per person (rate / k)
    rate = full_report["risk"]["record_linkage"]["rate"]
    assert "<h3>Risk</h3>" in summary and f"guess 1 in {k}" in summary and "Lower is safer" in summary
    assert f"{100 * rate / k:.3g} % of the records tried re-identified" in summary
    assert "the release is informative" not in summary   # interval disclosure says what it measured
    failed = copy.deepcopy(full_report)
    failed["verification"]["passed"] = False
    assert "verification FAILED" in _section(render_html(failed), "summary")
    better = dict(full_report, reference_information_loss=full_report["information_loss"] * 1.05)
    assert "less distortion than exact MDAV" in _section(render_html(better), "summary")


def test_one_timings_table_one_total_and_compile_apart(full_report):
    # the planner records a "total" (wall clock, cluster start-up included): it is shown once, not summed again
    report = dict(full_report, timings={"pre-scan": 0.5, "cells": 2.0, "write + verify": 0.0006323, "total": 4.0})
    assert "compile" in full_report  # every run records its kernel warm-up: shown apart (below), never as a stage
    report.pop("compile")
    timings = _section(render_html(report), "timings")
    assert timings.count("<table") == 1 and timings.count("<td>total") == 1
    assert "<td>total (wall clock)</td><td>4 s</td>" in timings
    assert "&lt; 0.001 s" in timings and "e-04" not in timings
    assert "other (cluster start-up" in timings  # 4.0 − 2.5006 s that no stage timed
    assert "compile" not in timings.lower()
    # without a recorded total, the sum of the stages is the total
    timings = _section(render_html(dict(report, timings={"a": 1.0, "b": 2.0})), "timings")
    assert timings.count("<td>total") == 1 and "<td>total (wall clock)</td><td>3 s</td>" in timings
    assert "other" not in timings
    # compile time: its own line, outside the table
    report["compile"] = {"seconds": 61.2, "workers": {"tcp://a": 61.2, "tcp://b": 40.0},
                         "cache_dir": "/cache/numba", "compiled": True}
    timings = _section(render_html(report), "timings")
    table_html = re.search(r"<table.*?</table>", timings, re.S).group(0)
    assert "compile" not in table_html.lower()
    assert "Kernel compile / cache load: <b>1 min 01 s</b>, not counted in the stages" in timings
    assert "2 worker(s)" in timings and "/cache/numba" in timings


def test_one_bar_cell_histogram_said_in_words(full_report):
    page = render_html(dict(full_report, cell_size_counts={"5": 80}, cells=80, min_cell_size=5, max_cell_size=5))
    cells = _section(page, "cell-sizes")
    assert "Every one of the 80 groups holds exactly 5 records." in cells
    assert 'data-plot="cell-sizes"' not in page


def test_numbers_for_people(full_report):
    from daskmicro.report.page import fmt, number, percent, seconds

    assert number(3.514e-16) == "≈ 0" and number(0.0) == "0"
    assert number(6.323e-04) == "0.0006323" and number(3e-8) == "3.0 × 10⁻⁸"
    assert number(1234.5678) == "1,235" and number(9.0912345) == "9.091" and number(2e6) == "2,000,000"
    assert number(float("nan")) == "not a number"
    assert seconds(6.323e-04) == "< 0.001 s" and seconds(12.34) == "12.3 s" and seconds(125.2) == "2 min 05 s"
    assert seconds(4000) == "1 h 07 min" and percent(0.038) == "3.8 %"
    assert fmt(6.323e-04) == "0.0006323" and fmt(1_000_000) == "1,000,000"
    report = copy.deepcopy(full_report)
    report["timings"] = {"pre-scan": 6.323e-04, "cells": 3.514e-16}
    report["information_loss"] = 3.514e-16
    page = render_html(report)
    assert not re.search(r"\d(\.\d+)?e[-+]\d\d", re.sub(r"<svg.*?</svg>", "", page, flags=re.S))


def test_glossary_explains_the_papers_terms(full_page):
    glossary = _section(full_page, "glossary")
    for term in ("ν (nu), n_distal, C_D", "IL1s", "SSE, SST", "macrocell", "proximal / distal", "eigenvalues",
                 "k-anonymity"):
        assert f"<dt>{term}" in glossary or term in glossary, term


def test_release_figures_of_a_real_run(full_run):
    """The release section: bins from the smallest to the largest published value, counts of the
    published values, the release's correlations; nothing of the original values."""
    release = anonymize(census_like(400, seed=3), qi=QI, k=5, seed=0, method="pca-mdav", energy_loss=0.1)[0]
    figures = full_run.to_dict()["release_figures"]
    assert figures == full_run.exact_dict()["release_figures"]  # figures of the release: public as they are
    assert [c["name"] for c in figures["columns"]] == QI
    data = census_like(400, seed=3)
    k = full_run.k
    for column in figures["columns"]:
        y, x = release[column["name"]].to_numpy(float), data[column["name"]].to_numpy(float)
        edges = np.asarray(column["edges"])
        assert edges[0] == y.min() and edges[-1] == y.max()
        axis = {"linear": lambda v: v, "log": np.log, "asinh": lambda v: np.arcsinh(v / column.get("linear_width", 1))}
        t = axis[column["scale"]](edges)   # equal bins on the column's axis
        assert np.allclose(np.diff(t), (t[-1] - t[0]) / 32)
        for v in (x.mean(), x.std(), x.min(), x.max()):   # no original figure among the edges
            assert not np.isclose(edges, v, rtol=1e-6, atol=0).any() or v in y
        assert "original" not in column
        counts = column["released"]
        assert all(v == 0 or v >= k for v in counts) and sum(counts) == len(y)
        assert counts == np.histogram(y, bins=edges)[0].tolist()
    assert "original" not in figures["correlation"]
    corr = np.array(figures["correlation"]["released"], dtype=float)
    assert np.allclose(corr, np.corrcoef(release[QI].to_numpy(float), rowvar=False), atol=1e-4)


def test_public_page_gives_no_figure_of_the_original_spread(public_report, full_run):
    """What the published report's page shows: the information loss rounded with its interval, no
    reference IL or δ, no utility measures, no SSE curve, no spectrum of the original correlation."""
    il = full_run.information_loss
    assert public_report["information_loss"] != il and public_report["information_loss_rounding"]["rounded"]
    low, high = public_report["information_loss_rounding"]["interval"]
    assert low <= il < high
    for key in ("utility", "macrocell_sse", "reference_information_loss"):
        assert key not in public_report, key
    assert "eigenvalues" not in public_report["pca"] and "energy_loss" not in public_report["pca"]
    assert "delta" not in public_report["incremental"] and public_report["incremental"]["tau0"] == 12.0
    page = render_html(public_report)
    assert 'id="utility"' not in page and "private, not for publication" not in page
    names = re.findall(r'<svg class="plot" data-plot="([^"]+)"', page)
    assert names == ["distributions", "correlations", "timings", "cell-sizes", "sweep"]
    loss = _section(page, "information-loss")
    assert "rounded" in loss and f"{low:g} – {high:g} %" in loss and "private run record" in loss
    assert "δ" not in loss and "more distortion than exact MDAV" not in _section(page, "summary")
    assert "components kept" in _section(page, "pca-spectrum") and "retaining" not in page
    assert "SSE curve is not published" in _section(page, "macrocells")
    for digits in (3, 4, 6):   # the exact information loss appears nowhere
        assert f"{il:.{digits}g}" not in page.replace(f"{public_report['information_loss']:g}", "")


def test_skewed_columns_get_few_compact_tick_labels():
    """Income-like values up to 800,000: at most a handful of labels per axis, each short, one unit
    per axis (never ``200000400000600000800000`` run together); every non-empty bin visible."""
    from daskmicro.report.release_figures import distribution_plot, tick_text

    edges = list(np.linspace(1_000.0, 800_000.0, 33))
    released = [400, 60, 30, 12, 6] + [0] * 25 + [None, 5]
    svg = distribution_plot([{"name": "income", "edges": edges, "released": released}])
    # the bins of 6 and 5 records beside one of 400: bars too low to see, marked at their foot
    assert "a few records (bar too low to see)" in svg and "suppressed (&lt; k)" in svg
    labels = re.findall(r">([^<>]*\d[^<>]*)</text>", svg)
    x_labels = [t for t in labels if t.endswith("k")]
    assert 2 <= len(x_labels) <= 5 and all(len(t) <= 5 for t in x_labels), labels
    assert tick_text(200_000, 800_000) == "200k" and tick_text(1_500_000, 2e6) == "1.5M"
    assert tick_text(2_500, 6_000) == "2,500" and tick_text(0, 8e5) == "0" and tick_text(0.25) == "0.25"
