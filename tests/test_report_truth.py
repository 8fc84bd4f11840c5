"""What the report says is what the run did: for every method × quality × reference, the terminal
summary, the published JSON report, its HTML page and the private (exact) page are checked against
figures computed here, independently of the report code — exact MDAV's cells and information loss
on the same records, and the cells the release actually publishes.

"The same cells as exact MDAV" and the reference kind "self" appear only when the release's cells
are exact MDAV's; the method is named as what ran, the improvement pass of ``quality`` included;
the quality and every option are recorded.  One-task methods run in this process; the pipeline
methods on the suite's shared LocalCluster.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import daskmicro
from daskmicro.datasets import census_like
from daskmicro.graph.group_task import same_partition
from daskmicro.release.publish import ROW_ID
from daskmicro.report.describe import method_text
from daskmicro.report.html import render_html
from daskmicro.report.reference import attach_reference

METHODS = ("auto", "mdav", "pca-mdav", "pcl", "partitioned", "proximal-distal")
QUALITIES = ("balanced", "high")
REFERENCES = ("auto", "exact", "sample", None)
K = 5
N = 300


@pytest.fixture(scope="module")
def data():
    df = census_like(N, seed=3, with_extra_columns=True)
    qi = list(df.columns[:6])
    df = df[qi + ["record_id", "region"]]
    X = df[qi].to_numpy(np.float64)
    Z = daskmicro.standardize(X)[0]
    labels = daskmicro.mdav(Z, K)
    return df, qi, X, labels, daskmicro.information_loss(X, labels)


def _release_cells(release, qi) -> np.ndarray:
    """The cells the release publishes, as labels in input row order (records sharing a QI tuple)."""
    ordered = release.sort_values(ROW_ID)
    return ordered.groupby(qi, sort=False).ngroup().to_numpy(np.int64)


def _expects_improvement(method: str, quality: str) -> bool:
    return quality == "high" or method == "partitioned"


@pytest.mark.parametrize("method,quality", list(itertools.product(METHODS, QUALITIES)))
def test_report_says_what_ran(data, client, method, quality):
    df, qi, X, mdav_labels, mdav_il = data
    pipeline = method in ("partitioned", "proximal-distal")
    for reference in REFERENCES:
        release, report = daskmicro.anonymize(df, qi=qi, k=K, seed=1, method=method, quality=quality,
                                              reference=reference, keep_row_id=True, keep=["record_id"],
                                              client=client if pipeline else None)
        cells = _release_cells(release, qi)
        exact = same_partition(cells, mdav_labels)
        assert np.isclose(report.information_loss, daskmicro.information_loss(X, cells))
        doc, private = report.to_dict(), report.exact_dict()
        where = f"{method}/{quality}/{reference}"

        # every option recorded, the quality among them; the improvement as it ran
        assert doc["quality"] == quality and doc["options"]["quality"] == quality, where
        assert doc["options"]["method"] == method and doc["options"]["reference"] == reference, where
        assert "seed" not in doc["options"]
        imp = doc["improvement"]
        assert (imp is not None) == _expects_improvement(method, quality), where
        improved = bool(imp and imp["changed"])
        if improved:
            assert imp["quality"] == quality
            assert "improved" in doc["method_text"] and f"quality '{quality}'" in doc["method_text"], where

        # the method named as what ran, in the summary, the JSON and the page's title
        ran = {"auto": "mdav"}.get(method, method)
        assert doc["method"] == ran, where
        said = [line for line in report.summary().splitlines() if line.startswith("  method: ")][0]
        assert said == f"  method: {method_text(doc, plain=True)}", where
        assert said.count("exact MDAV") == (ran == "mdav"), where
        assert ("improved" in said) == improved, where
        # the claims checked are sentences; the before/after plots (tested in test_report_html.py) are
        # left out of these pages: drawing them is nearly all of a page's rendering time
        page = render_html({key: v for key, v in json.loads(json.dumps(doc)).items() if key != "release_figures"})
        exact_page = render_html({key: v for key, v in private.items() if key != "release_figures"})
        assert ("improved (quality" in page.split("</header>")[0]) == improved, where

        # the reference: "self" only when the release's cells are exact MDAV's
        if reference is None:
            assert "reference" not in doc and report.reference_information_loss is None, where
        else:
            kind = doc["reference"]["kind"]
            assert (kind == "self") == exact, where
            assert kind in ("self", "exact"), where   # a sample of 20,000 holds all 300 records
            assert np.isclose(report.reference_information_loss, mdav_il), where
            assert "reference_information_loss" not in doc and "reference_information_loss" in private
        for html in (page, exact_page):
            assert "same distortion as exact MDAV" not in html, where
            assert ("the same cells as exact MDAV" in html) == (exact and reference is not None), where
        if reference is not None and not exact:
            delta = (report.information_loss - mdav_il) / mdav_il
            word = "more" if delta > 0 else "less"
            assert f"{word} distortion than exact MDAV" in exact_page, where
            assert f"{100 * delta:+.2f} %" in exact_page, where


def test_sample_reference_repeats_the_improvement(data):
    """On a sample, exact MDAV improved by quality 'high' is repeated with its improvement pass: the
    ratio to exact MDAV on the sample is below 1, not the 1 of an unimproved run."""
    df, qi, X, _, _ = data
    _, report = daskmicro.anonymize(df, qi=qi, k=K, seed=1, method="mdav", quality="high", reference=None,
                                    keep=["record_id"])
    assert report.improvement and report.improvement["changed"]
    record = attach_reference(report, df, qi, "sample", sample_rows=200)
    assert record["kind"] == "sample"
    assert record["sample_layout"]["improvement"]["pcl_iter"] == report.improvement["pcl_iter"]
    assert record["ratio"] < 1.0
    assert "same cells as exact MDAV" not in render_html(report.exact_dict())


def test_groups_all_exact_mdav_are_their_own_reference(data):
    """A run split into strata, exact MDAV in each and nothing improved: the reference is "self"."""
    df, qi, _, _, _ = data
    _, report = daskmicro.anonymize(df, qi=qi, k=K, seed=1, method="mdav", strata=["region"], reference="auto",
                                    keep=["record_id"])
    doc = report.to_dict()
    assert doc["reference"]["kind"] == "self"
    assert all(g["method"] == "mdav" and not g["improved"] for g in doc["strata"]["groups"])
    _, high = daskmicro.anonymize(df, qi=qi, k=K, seed=1, method="mdav", quality="high", strata=["region"],
                                  reference="auto", keep=["record_id"])
    assert high.to_dict()["reference"]["kind"] == "exact"
    assert "the same cells as exact MDAV" not in render_html(high.exact_dict())
