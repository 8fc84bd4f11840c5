"""``daskmicro report`` renders the release a real ``daskmicro anonymize`` run wrote."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS

QI = ",".join(CENSUS_COLUMNS[:4])
# published as they are: record_id and the other census columns (nearly one value per record)
KEEP = ",".join(["record_id", *CENSUS_COLUMNS[4:]])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "census.parquet"
    assert main(["demo-data", str(path), "--n", "1200", "--seed", "4"]) == 0
    return path


def _page_ok(path):
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '<section id="parameters">' in page
    return page


def test_report_of_file_release(data, tmp_path, capsys):
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(data), str(out), "--qi", QI, "--k", "5", "--seed", "1", "--keep", KEEP]) == 0
    assert (tmp_path / "release.report.json").is_file()
    record = re.findall(r"private run record .*: (\S+)\s*$", capsys.readouterr().err, re.M)[-1]
    assert main(["report", str(out)]) == 0
    html = tmp_path / "release.report.html"
    assert f"report: {html}" in capsys.readouterr().out
    page = _page_ok(html)
    assert '<section id="summary">' in page and 'data-plot="distributions"' in page
    assert "rounded" in page and "private, not for publication" not in page
    # the private run record's page: the exact report, marked private, written beside the record
    private = tmp_path / "private.html"
    assert main(["report", record, "--output", str(private)]) == 0
    assert "private, not for publication" in _page_ok(private)
    # an existing page is refused in one line, and left as it was
    before = html.read_bytes()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskmicro: error:") and err.count("\n") == 1 and "--overwrite" in err
    assert html.read_bytes() == before
    assert main(["report", str(out), "--overwrite"]) == 0
    # the JSON itself, and --output elsewhere
    assert main(["report", str(tmp_path / "release.report.json"), "--overwrite"]) == 0
    other = tmp_path / "elsewhere.html"
    assert main(["report", str(out), "--output", str(other)]) == 0
    _page_ok(other)


def test_page_of_a_private_run_record_is_owner_only(data, tmp_path, capsys, monkeypatch):
    """The run record is owner-only (0600): the page of its exact report — exact information loss,
    per-group figures, exact risk counts, utility — is as private, so it is written owner-only too,
    beside the record and wherever --output puts it (a release's page keeps the usual mode)."""
    import os
    import stat

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(data), str(out), "--qi", QI, "--k", "5", "--seed", "1", "--keep", KEEP,
                 "--ledger", "off", "--risk"]) == 0
    record = re.findall(r"private run record .*: (\S+)\s*$", capsys.readouterr().err, re.M)[-1]
    old = os.umask(0o022)
    try:
        for argv in ([record], [record, "--output", str(tmp_path / "private.html")]):
            assert main(["report", *argv]) == 0
            page = Path(re.findall(r"report: (\S+)", capsys.readouterr().out)[-1])
            assert "private, not for publication" in _page_ok(page)
            assert stat.S_IMODE(page.stat().st_mode) == 0o600, argv
        assert main(["report", str(out)]) == 0
        assert stat.S_IMODE((tmp_path / "release.report.html").stat().st_mode) == 0o644
    finally:
        os.umask(old)


def test_report_of_directory_release(data, tmp_path, capsys, client):
    out = tmp_path / "lake"
    assert main(["anonymize", str(data), str(out), "--qi", QI, "--k", "5", "--seed", "1", "--method", "partitioned",
                 "--K", "100", "--partition-size", "400", "--scheduler", client.scheduler.address,
                 "--keep", KEEP]) == 0
    assert (out / "_report.json").is_file() and (out / "_SUCCESS").is_file()
    listing = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["report", str(out) + "/"]) == 0
    html = tmp_path / "lake.report.html"
    assert f"report: {html}" in capsys.readouterr().out
    page = _page_ok(html)
    assert sorted(p.name for p in out.iterdir()) == listing  # the committed release is not changed
    report = json.loads((out / "_report.json").read_text())
    if report.get("performance_report"):  # the link is rebased to the page's place, beside the directory
        assert 'href="lake/_dask-report.html"' in page
    # the release figures, counted as the written files were read back: every record counted, on
    # bins from the smallest to the largest published value
    figures = report["release_figures"]
    assert [c["name"] for c in figures["columns"]] == QI.split(",")
    release = pd.read_parquet(out)
    for column in figures["columns"]:
        assert sum(column["released"]) == 1200 and "original" not in column
        values = release[column["name"]]
        assert column["edges"][0] == values.min() and column["edges"][-1] == values.max()
        assert column["released"] == np.histogram(values, bins=column["edges"])[0].tolist()
    assert figures["correlation"]["records"] == 1200
    assert 'data-plot="distributions"' in page and 'data-plot="correlations"' in page


def test_report_refuses_path_without_report(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    lone = tmp_path / "lone.parquet"
    lone.write_bytes(b"PAR1")
    for path in (empty, lone, tmp_path / "missing"):
        assert main(["report", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("daskmicro: error:") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "lone.parquet"]
    assert list(empty.iterdir()) == []


def _subparsers(parser, prefix=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,), sub
                yield from _subparsers(sub, prefix + (name,))


def test_every_subcommand_help_has_an_example():
    from daskmicro.cli import build_parser

    commands = list(_subparsers(build_parser()))
    assert {"anonymize", "report", "demo-data", "status", "cancel"} <= {c[0] for c, _ in commands}
    missing = [" ".join(c) for c, sub in commands if "example" not in sub.format_help().lower()]
    assert not missing, f"--help without an example: {missing}"
    for command, sub in commands:
        assert f"daskmicro {' '.join(command)}" in sub.format_help(), command
