"""Every kind of HTML page daskmicro writes — a file release's report, a directory release's report,
the demo's report and the sweep page — rendered in headless Chromium and checked as a reader sees it:
no script error, every plot drawn with a box, nothing wider than the window, no two tick labels of an
axis overlapping.

The pages are the product's own files; the checks run in a copy of each page with a checking script
appended (the product's page is not changed for the test)."""

from __future__ import annotations

import json
import re

import pytest

from daskmicro.anonymize import anonymize
from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.report import render_html

from test_report_html import _browser, _chromium

WIDTH = 1280

# Written into <body> as data-check-* attributes once the page has loaded and laid out.
CHECK = """<script>
window.addEventListener('load', function () {
  var errors = (window.__reportErrors || []).length, wide = [], overlaps = [], plots = 0, empty = 0;
  var limit = document.documentElement.clientWidth + 1;
  document.querySelectorAll('body *').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > limit) { wide.push(el.tagName + '#' + (el.id || '') + ':' + Math.round(r.right)); }
  });
  document.querySelectorAll('img').forEach(function (img) {
    if (!img.complete || img.naturalWidth === 0) { errors += 1; }
  });
  document.querySelectorAll('svg.plot').forEach(function (svg) {
    plots += 1;
    var box = svg.getBoundingClientRect();
    if (box.width < 10 || box.height < 10) { empty += 1; }
    // matplotlib writes each axis as a group of tick groups (xtick_N / ytick_N), each with its label
    svg.querySelectorAll('g[id*="matplotlib.axis"]').forEach(function (axis) {
      var boxes = [];
      axis.querySelectorAll('g[id*="tick_"] text').forEach(function (t) {
        var r = t.getBoundingClientRect();
        if (r.width > 0 && t.textContent.trim()) { boxes.push([r, t.textContent.trim()]); }
      });
      for (var i = 0; i < boxes.length; i++) {
        for (var j = i + 1; j < boxes.length; j++) {
          var a = boxes[i][0], b = boxes[j][0];
          if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) {
            overlaps.push(svg.getAttribute('data-plot') + ':' + boxes[i][1] + '|' + boxes[j][1]);
          }
        }
      }
    });
  });
  var body = document.body;
  body.setAttribute('data-check-errors', String(errors));
  body.setAttribute('data-check-plots', String(plots));
  body.setAttribute('data-check-empty', String(empty));
  body.setAttribute('data-check-wide', wide.join(' '));
  body.setAttribute('data-check-overlaps', overlaps.join(' '));
});
</script>"""


def _checked(page, tmp_path) -> dict:
    """Render a copy of ``page`` with the checking script; the page's data-check-* verdicts."""
    browser = _browser()
    html = page.read_text(encoding="utf-8")
    assert "</body>" in html
    copy = tmp_path / f"checked-{page.name}"
    copy.write_text(html.replace("</body>", CHECK + "</body>", 1), encoding="utf-8")
    dom = _chromium(browser, tmp_path / f"profile-{page.stem}", f"--window-size={WIDTH},1600",
                    "--virtual-time-budget=5000", "--dump-dom", copy.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body and "data-check-errors" in body.group(1), "the page did not load, or its check did not run"
    return dict(re.findall(r'data-check-(\w+)="([^"]*)"', body.group(1)))


def _assert_reads_well(verdict: dict, plots: int) -> None:
    assert verdict["errors"] == "0", verdict
    assert int(verdict["plots"]) >= plots and verdict["empty"] == "0", verdict
    assert verdict["wide"] == "", f"wider than a {WIDTH}px window: {verdict['wide']}"
    assert verdict["overlaps"] == "", f"overlapping tick labels: {verdict['overlaps']}"


def test_file_release_report_page(tmp_path):
    data = census_like(600, seed=3)
    _, report = anonymize(data, qi=list(CENSUS_COLUMNS), k=5, seed=0, method="pca-mdav")
    page = tmp_path / "release.report.html"
    page.write_text(render_html(report.to_dict()), encoding="utf-8")
    _assert_reads_well(_checked(page, tmp_path), plots=2)


def test_skewed_data_report_page(tmp_path):
    """Heavy-tailed columns (incomes, turnovers): the small multiples still read."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(2)
    data = pd.DataFrame({"turnover": rng.lognormal(13, 1.6, 900), "assets": rng.pareto(1.2, 900) * 5e5,
                         "staff": rng.lognormal(3, 1.1, 900), "margin": rng.normal(0.08, 0.05, 900)})
    _, report = anonymize(data, qi=list(data.columns), k=5, seed=0)
    page = tmp_path / "skewed.report.html"
    page.write_text(render_html(report.to_dict()), encoding="utf-8")
    _assert_reads_well(_checked(page, tmp_path), plots=2)


def test_directory_release_report_page(tmp_path, client, capsys):
    src = tmp_path / "in.parquet"
    census_like(1500, seed=4).to_parquet(src, index=False)
    out = tmp_path / "lake"
    assert main(["anonymize", str(src), str(out), "--qi", ",".join(CENSUS_COLUMNS), "--k", "5", "--seed", "1",
                 "--method", "partitioned", "--K", "100", "--partition-size", "500", "--keep", "record_id,region",
                 "--scheduler", client.scheduler.address]) == 0
    assert main(["report", str(out)]) == 0
    page = next(p for p in tmp_path.glob("lake*.html"))
    _assert_reads_well(_checked(page, tmp_path), plots=2)


def test_demo_report_page(tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--output", str(out), "--n", "2000", "--k", "4", "--seed", "2", "--workers", "1",
                 "--partition-size", "1000"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert "risk" in report
    _assert_reads_well(_checked(out / "report.html", tmp_path), plots=2)


def test_sweep_page(tmp_path):
    src = tmp_path / "in.parquet"
    census_like(1200, seed=5).to_parquet(src, index=False)
    out = tmp_path / "sweep"
    assert main(["sweep", str(src), "--qi", ",".join(CENSUS_COLUMNS), "--k", "5", "--nu", "0,1", "--K", "100",
                 "--sample", "600", "--out", str(out)]) == 0
    _assert_reads_well(_checked(out / "sweep.html", tmp_path), plots=1)


@pytest.mark.parametrize("bad", ["tick", "wide"])
def test_the_checks_can_fail(tmp_path, bad):
    """The checking script itself: two overlapping tick labels, or a box wider than the window, are seen."""
    if bad == "tick":
        svg = ('<svg class="plot" data-plot="t" width="300" height="100"><g id="t-matplotlib.axis_1">'
               '<g id="t-xtick_1"><text x="10" y="50">200000</text></g>'
               '<g id="t-xtick_2"><text x="20" y="50">400000</text></g></g></svg>')
    else:
        svg = f'<svg class="plot" data-plot="w" width="{WIDTH + 400}" height="100"></svg>'
    page = tmp_path / f"{bad}.html"
    page.write_text(f"<!DOCTYPE html><html><body>{svg}</body></html>", encoding="utf-8")
    verdict = _checked(page, tmp_path)
    assert verdict["overlaps" if bad == "tick" else "wide"] != "", verdict
