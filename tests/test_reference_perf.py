"""IL relative to exact MDAV in reports, and the Dask performance report of cluster runs."""

import json

import pytest

from daskmicro.anonymize import anonymize
from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.errors import ParameterError
from daskmicro.kernels import information_loss, mdav, standardize
from daskmicro.report.reference import attach_reference
from daskmicro.report import render_html

QI = list(CENSUS_COLUMNS)


@pytest.fixture(scope="module")
def data():
    return census_like(900, seed=11, with_extra_columns=True)


def _exact_il(frame, k):
    return information_loss(frame[QI].to_numpy(float), mdav(standardize(frame[QI].to_numpy(float))[0], k))


def test_reference_exact_and_self(data):
    _, report = anonymize(data, QI, 5, method="pca-mdav", n_components=3, seed=0, reference="exact",
                          keep=["record_id"])
    assert report.reference["kind"] == "exact"
    assert report.reference_information_loss == pytest.approx(_exact_il(data, 5), rel=1e-9)
    assert report.information_loss > report.reference_information_loss  # 3 of 13 components cost distortion
    d = report.to_dict()
    assert d["reference"]["label"] == "exact MDAV on all 900 records"
    # published: how the reference was obtained, not its value (a figure of the original spread)
    assert "reference_information_loss" not in d and "information_loss" not in d["reference"]
    page = render_html(d)
    assert "exact MDAV on all 900 records" in page and "private run record" in page
    assert "relative distortion increment δ =" not in page
    # the exact report (private run record) has it, and so has its page
    assert report.run_record()["report"]["reference_information_loss"] == report.reference_information_loss
    assert "relative distortion increment δ =" in render_html(report.exact_dict())
    # "auto" on a small table is exact; MDAV is its own reference; the default computes nothing
    _, auto = anonymize(data, QI, 5, method="pca-mdav", n_components=3, seed=0, reference="auto",
                        keep=["record_id"])
    assert auto.reference_information_loss == pytest.approx(report.reference_information_loss)
    _, own = anonymize(data, QI, 5, method="mdav", seed=0, reference="auto", keep=["record_id"])
    assert own.reference["kind"] == "self" and own.reference_information_loss == own.information_loss
    _, none = anonymize(data, QI, 5, method="pca-mdav", seed=0, keep=["record_id"])
    assert none.reference_information_loss is None and "reference" not in none.to_dict()


def test_reference_estimated_on_a_sample(data):
    _, report = anonymize(data, QI, 5, method="pca-mdav", n_components=2, seed=0, keep=["record_id"])
    rec = attach_reference(report, data, QI, "sample", sample_rows=400, seed=3)
    assert rec["kind"] == "sample" and rec["sample_size"] == 400 and rec["sample_seed"] == 3
    assert rec["label"] == "estimated on a sample of 400 records"
    assert rec["ratio"] == pytest.approx(rec["method_information_loss"] / rec["mdav_information_loss"])
    assert rec["ratio"] > 1
    assert report.reference_information_loss == pytest.approx(report.information_loss / rec["ratio"])
    # the estimate lands near the exact value (same data, 44 % sample)
    assert report.reference_information_loss == pytest.approx(_exact_il(data, 5), rel=0.25)
    page = render_html(report.exact_dict())
    assert "estimated on a sample of 400 records" in page and "ratio IL(method)/IL(exact MDAV)" in page
    public = report.to_dict()["reference"]
    assert public["sample_size"] == 400 and not {"ratio", "method_information_loss", "mdav_information_loss",
                                                 "information_loss"} & set(public)
    # "auto" switches to the sample above its threshold
    rec2 = attach_reference(report, data, QI, "auto", max_exact_rows=500, sample_rows=300)
    assert rec2["kind"] == "sample" and rec2["sample_size"] == 300


def test_reference_of_cluster_layouts_on_a_sample(data):
    """The proximal-distal and partitioned layouts are rerun in miniature on the sample."""
    from daskmicro.report.run import Report

    base = dict(n=900, m=13, k=5, qi=QI, cells=180, min_cell_size=5, max_cell_size=5, information_loss=9.0,
                seconds=1.0, seed=0, m_used=13)
    for method, pipeline in (("proximal-distal", {"K": 100, "nu": 0.4, "partition_size": None}),
                             ("partitioned", {"K": 50, "nu": 0.5, "partition_size": 300})):
        report = Report(method=method, pipeline=pipeline, **base)
        rec = attach_reference(report, data, QI, "sample", sample_rows=450)
        assert rec["kind"] == "sample" and rec["ratio"] > 0
        layout = rec["sample_layout"]
        assert layout["K"] == round(pipeline["K"] / 2) and layout["nu"] == pipeline["nu"]
        if method == "partitioned":
            assert layout["partition_size"] == 150


def test_reference_bad_value(data):
    with pytest.raises(ParameterError, match="reference must be"):
        anonymize(data, QI, 5, reference="approx")


# --------------------------------------------------------------------------- Dask performance report

OPTIONS = ["--method", "partitioned", "--partition-size", "300", "--K", "60", "--nu", "0.5", "--keep", "record_id"]


@pytest.fixture(scope="module")
def CLUSTER(client):
    """The run's options on the suite's shared LocalCluster of worker processes."""
    return [*OPTIONS, "--scheduler", client.scheduler.address]


@pytest.fixture(scope="module")
def input_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("in") / "data.parquet"
    data.to_parquet(path, index=False)
    return path


def test_performance_report_next_to_file_output(tmp_path, input_file, capsys, CLUSTER):
    out = tmp_path / "rel.parquet"
    assert main(["anonymize", str(input_file), str(out), "--qi", ",".join(QI), "--k", "5", "--seed", "0",
                 "--dask-report", *CLUSTER]) == 0
    perf = tmp_path / "rel.report.dask.html"
    assert perf.is_file() and "Dask Performance Report" in perf.read_text()
    assert "cdn.bokeh.org" not in perf.read_text()[:200_000]  # BokehJS inline: opens offline
    report = json.loads((tmp_path / "rel.report.json").read_text())
    assert report["performance_report"] == "rel.report.dask.html"
    assert report["reference"]["kind"] == "exact"  # --reference auto: 900 records
    page = render_html(report)
    assert 'href="rel.report.dask.html"' in page
    # a second run refuses the existing performance report before doing anything
    (tmp_path / "rel.parquet").unlink()
    (tmp_path / "rel.report.json").unlink()
    capsys.readouterr()
    assert main(["anonymize", str(input_file), str(out), "--qi", ",".join(QI), "--k", "5", "--dask-report",
                 *CLUSTER]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Dask performance report already exists" in err
    assert not out.exists()


def test_performance_report_in_lake_output_only_when_asked(tmp_path, data, input_file, CLUSTER):
    lake_in = tmp_path / "lake"
    lake_in.mkdir()
    data.iloc[:450].to_parquet(lake_in / "part.0.parquet", index=False)
    data.iloc[450:].to_parquet(lake_in / "part.1.parquet", index=False)
    lake = tmp_path / "release"
    assert main(["anonymize", str(lake_in), str(lake), "--qi", ",".join(QI), "--k", "5", "--seed", "0",
                 "--reference", "none", "--dask-report", *CLUSTER]) == 0
    assert (lake / "_dask-report.html").is_file()
    report = json.loads((lake / "_report.json").read_text())
    assert report["performance_report"] == "_dask-report.html" and "reference" not in report

    # the default: no performance report (--no-dask-report, the old opt-out, is still accepted)
    out = tmp_path / "plain.parquet"
    assert main(["anonymize", str(input_file), str(out), "--qi", ",".join(QI), "--k", "5", "--seed", "0",
                 "--no-dask-report", "--reference", "none", *CLUSTER]) == 0
    assert not (tmp_path / "plain.report.dask.html").exists()
    assert "performance_report" not in json.loads((tmp_path / "plain.report.json").read_text())
