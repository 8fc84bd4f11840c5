"""Incremental surveys on an S3-compatible object store, against a real S3 server (moto's server
mode on loopback, as in test_object_store): the survey's files land as objects under a prefix while
the run waits, and its release and report are written to the store by the same commit as every
run's.  The API, the CLI and a workflow spec each run one survey from s3:// arrivals to an s3://
release, checked as read back from the store; bad inputs are refused in one line, nothing written."""

from __future__ import annotations

import io
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from daskmicro import anonymize_file, anonymize_incremental
from daskmicro import cli as lake_cli
from daskmicro.errors import InputError
from daskmicro.graph.incremental import default_kernel, warm_up
from daskmicro.io.arrivals import CLOSED, OFFSET_KEY
from daskmicro.privacy import verify_k_anonymity

from _s3 import (BUCKET, KEY_ID, OPT_SECRET, SECRET,   # the store: the ``store`` fixture of conftest.py
                 no_credentials, read_object, release_on_store, run_cli, store_text)
from _store_survey import K, N, N_BASE, NU, QI, StoreSurvey, land_after_the_base, survey_frame


@pytest.fixture(scope="module")
def warm(client):
    """The shared cluster with the stages' kernels loaded before a survey opens (the run loads them
    too, but only once it starts: here the survey would already be landing)."""
    warm_up(client, "2mdav", default_kernel)
    return client


def check_published(rel: pd.DataFrame, df: pd.DataFrame, survey: StoreSurvey, texts=()) -> None:
    """The release as read back: every record once, k-anonymous on its published values, the
    survey's columns only, shuffled out of the arrival order; no arrival object named in it."""
    assert len(rel) == len(df) and sorted(rel.record_id) == list(range(len(df)))
    assert verify_k_anonymity(rel, QI, K)
    assert sorted(rel.columns) == sorted(df.columns)
    assert not rel.record_id.is_monotonic_increasing   # the arrival order is not published
    for text in texts:
        assert not any(name in text for name in survey.names)
        no_credentials(text)


def _file_metadata(fs, key: str) -> dict:
    return pq.read_schema(io.BytesIO(fs.cat_file(key))).metadata or {}


def test_api_survey_on_store_to_directory_release_on_store(store, warm, tmp_path, monkeypatch):
    endpoint, fs = store
    monkeypatch.chdir(tmp_path)
    df = survey_frame(1)
    survey = StoreSurvey(fs, "surveys/api", df).start()
    land_after_the_base(warm, survey)
    report_url = f"s3://{BUCKET}/reports/api.json"
    try:
        release, report = anonymize_incremental(
            survey.url, QI, K, nu=NU, keep=["record_id"], seed=2, timeout=120, client=warm,
            output=f"s3://{BUCKET}/releases/api", report=report_url, storage_options={"endpoint_url": endpoint})
    finally:
        survey.join()
    assert release is None
    inc = report.incremental
    # the sixth object landed after the base stage was submitted: it is the increment
    assert (inc["n_base"], inc["n_increment"]) == (N_BASE, N - N_BASE)
    manifest, rel, keys = release_on_store(fs, "releases/api")
    assert manifest["rows"] == {"in": N, "out": N} and report.rows.rows_out == N
    doc = json.loads(fs.cat_file(f"{BUCKET}/reports/api.json"))
    assert doc["incremental"]["n_increment"] == N - N_BASE and doc["paths"]["report"] == report_url
    assert f"{BUCKET}/releases/api/{manifest['run']}/_report.json" in keys
    check_published(rel, df, survey, [store_text(fs, "releases/api"), store_text(fs, "reports")])
    for entry in manifest["files"]:
        assert OFFSET_KEY not in _file_metadata(fs, f"{BUCKET}/releases/api/{manifest['run']}/{entry['path']}")
    assert list(tmp_path.iterdir()) == []   # nothing written here


def test_cli_survey_on_store_to_object_release(store, warm, tmp_path, monkeypatch, capsys):
    endpoint, fs = store
    monkeypatch.chdir(tmp_path)
    df = survey_frame(2)
    survey = StoreSurvey(fs, "surveys/cli", df).start()
    land_after_the_base(warm, survey)
    out = f"s3://{BUCKET}/releases/cli.parquet"
    argv = [survey.url, out, "--method", "incremental", "--qi", ",".join(QI), "--k", K, "--data-ratio", NU,
            "--keep", "record_id", "--seed", 3, "--survey-timeout", 120]
    capsys.readouterr()
    try:
        assert run_cli(argv, warm) == (0, "")
    finally:
        survey.join()
    captured = capsys.readouterr()
    assert out in captured.out
    rel = read_object(fs, "releases/cli.parquet")
    doc = json.loads(fs.cat_file(f"{BUCKET}/releases/cli.report.json"))
    assert (doc["incremental"]["n_base"], doc["incremental"]["n_increment"]) == (N_BASE, N - N_BASE)
    check_published(rel, df, survey, [fs.cat_file(f"{BUCKET}/releases/cli.parquet").decode("latin-1"),
                                      json.dumps(doc), captured.out, captured.err])
    assert OFFSET_KEY not in _file_metadata(fs, f"{BUCKET}/releases/cli.parquet")
    assert list(tmp_path.iterdir()) == []


def test_workflow_spec_survey_on_store(store, warm, tmp_path):
    from daskmicro.workflow import parse_spec
    from daskmicro.workflow.runner import execute_run

    endpoint, fs = store
    df = survey_frame(3)
    survey = StoreSurvey(fs, "surveys/spec", df).start()
    land_after_the_base(warm, survey)
    spec = parse_spec({
        "name": "s3-survey", "input": {"path": survey.url, "keep": ["record_id"],
                                       "storage_options": {"endpoint_url": endpoint}},
        "qi": QI, "k": K, "method": "incremental",
        "incremental": {"close_at": "60s", "nu": NU, "deadline": "120s"}, "parameters": {"seed": 4},
        "output": {"path": f"s3://{BUCKET}/releases/spec"}, "report": {"path": f"s3://{BUCKET}/reports/spec.json"},
    }, base_dir=tmp_path)
    try:
        summary = execute_run(spec, client=warm)
    finally:
        survey.join()
    assert summary["rows"] == N
    manifest, rel, _ = release_on_store(fs, "releases/spec")
    doc = json.loads(fs.cat_file(f"{BUCKET}/reports/spec.json"))
    assert manifest["rows"] == {"in": N, "out": N} and doc["workflow"]["name"] == "s3-survey"
    assert (doc["incremental"]["n_base"], doc["incremental"]["n_increment"]) == (N_BASE, N - N_BASE)
    check_published(rel, df, survey, [store_text(fs, "releases/spec"), json.dumps(doc)])
    assert list(tmp_path.iterdir()) == []


def test_an_object_changed_after_it_landed_is_refused(store, warm, tmp_path):
    """A landed object rewritten while the survey is open: its records may have been read already,
    so the run stops in one line and nothing is written."""
    endpoint, fs = store
    df = survey_frame(4)
    holder = {}

    def rewrite():   # instead of the last file: the first one again, changed
        holder["survey"].put_file(0, df.iloc[:250].assign(AGI=df.AGI.iloc[:250] + 1))
    survey = holder["survey"] = StoreSurvey(fs, "surveys/changed", df, late=rewrite).start()
    land_after_the_base(warm, survey)
    try:
        with pytest.raises(InputError, match=r"part-00000-t0000000000000\.parquet of the survey in "
                                             rf"s3://{BUCKET}/surveys/changed changed after it landed"):
            anonymize_incremental(survey.url, QI, K, nu=NU, keep=["record_id"], timeout=60, client=warm,
                                  output=f"s3://{BUCKET}/releases/changed")
    finally:
        survey.join()
    fs.invalidate_cache()
    assert fs.find(f"{BUCKET}/releases/changed") == []


def test_bad_survey_inputs_one_line_nothing_written(store, warm, tmp_path, monkeypatch, capsys):
    endpoint, fs = store
    monkeypatch.chdir(tmp_path)
    fs.pipe_file(f"{BUCKET}/surveys/one.parquet", b"not read")
    StoreSurvey(fs, "surveys/bad", survey_frame(5)).open()   # a survey opened, no file landed yet
    fs.invalidate_cache()
    before = sorted(fs.find(BUCKET))
    out = f"s3://{BUCKET}/releases/bad"
    for url, message in [
        ("s3://no-such-bucket-s/survey", "input not found: s3://no-such-bucket-s/survey (no such bucket)"),
        (f"s3://{BUCKET}/surveys/none", f"input not found: s3://{BUCKET}/surveys/none (no object under this prefix"),
        (f"s3://{BUCKET}/surveys/one.parquet", "an incremental survey is read from a prefix whose objects land over "
                                               f"time, not from one object: s3://{BUCKET}/surveys/one.parquet"),
        (f"s3://KEY:{SECRET}@{BUCKET}/surveys/bad", "credentials in a URL are refused"),
    ]:
        code = lake_cli.main(["anonymize", url, out, "--method", "incremental", "--qi", ",".join(QI), "--k", "5",
                              "--data-ratio", "0.3", "--keep", "record_id", "--survey-timeout", "30"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
        no_credentials(err)
    # a release inside the survey's prefix, in one line before anything is read or written
    code = lake_cli.main(["anonymize", f"s3://{BUCKET}/surveys/bad", f"s3://{BUCKET}/surveys/bad/rel", "--method",
                          "incremental", "--qi", ",".join(QI), "--k", "5", "--data-ratio", "0.3", "--keep",
                          "record_id"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"output s3://{BUCKET}/surveys/bad/rel is the input or lies" in err
    with pytest.raises(InputError, match="no object under this prefix"):
        anonymize_incremental(f"s3://{BUCKET}/surveys/none", QI, K, nu=NU, output=tmp_path / "rel.parquet")
    with pytest.raises(InputError, match="no such bucket"):
        anonymize_file("s3://no-such-bucket-s/survey", f"s3://{BUCKET}/releases/bad.parquet", QI, K,
                       method="incremental", incremental={"nu": NU}, keep=["record_id"], client=warm)
    fs.invalidate_cache()
    assert sorted(fs.find(BUCKET)) == before and list(tmp_path.iterdir()) == []


def test_an_object_is_read_as_it_was_listed(store):
    """Where a survey's objects land, listed afresh at each look (the close marker from the same
    listing); a worker reads an object on the ETag it was listed with: changed or deleted since,
    it is refused in one line.  The object travels to the workers with its store's options, which
    it never shows."""
    import pickle

    from daskmicro.io.objectsurvey import StoreArrivals

    endpoint, fs = store
    survey = StoreSurvey(fs, "surveys/read", survey_frame(6)).open()
    survey.put_file(0)
    options = {"endpoint_url": endpoint, "key": KEY_ID, "secret": OPT_SECRET}
    where = StoreArrivals(survey.url, options)
    [(name, obj, _)] = where.look()
    assert name == survey.names[0] and where.rows(obj) == 250 and not where.closed()
    assert where.manifest()["rows"] == N and where.columns(obj) == list(survey.df.columns)
    obj = pickle.loads(pickle.dumps(obj))   # as a worker gets it
    no_credentials(repr(obj), str(obj))
    pd.testing.assert_frame_equal(obj.read().to_pandas(), survey.df.iloc[:250])
    survey.put_file(1)
    fs.pipe_file(f"{survey.root}/{CLOSED}", b"{}")
    assert [n for n, _, _ in where.look()] == survey.names[:2] and where.closed()
    survey.put_file(0, survey.df.iloc[:250].assign(AGI=survey.df.AGI.iloc[:250] + 1))
    with pytest.raises(InputError, match=rf"{survey.names[0]} of the survey changed after it landed"):
        obj.read()
    fs.rm(f"{survey.root}/{survey.names[0]}")
    with pytest.raises(InputError, match=rf"{survey.names[0]} of the survey was deleted after it landed"):
        obj.read()
