"""The terminal summary speaks to a statistician: what was protected (records, QIs, k, the groups and
their sizes), the information loss in percent of the QIs' variance with a plain word, the comparison
with exact MDAV as the report decides it, the checks and where the files are — and no word of Dask
(stages, layout, workers, dashboard, kernels) unless ``--verbose`` asks for it.  One builder for
``anonymize``, ``run`` and ``Report.summary()``."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import daskmicro
from daskmicro.cli import main
from daskmicro.report.coarse import IL_GRID, LOSS_QUALIFIERS, loss_qualifier, rounded_information_loss
from daskmicro.report.terminal import group_sizes_text, summary_text, where_lines

#: Words of how Dask ran a release, none of which a default summary prints.
DASK_WORDS = re.compile(r"top_level|fan_out|\bpartitions?\b|partition\(s\)|macrocell|worker|dashboard|kernel",
                        re.IGNORECASE)
#: Stage lines of the planner (stderr): only with --verbose.
STAGE_LINE = re.compile(r"^  (pre-scan|ingest|top_level|fan_out|gather|cells|improve|write \+ verify|"
                        r"collect \+ verify|kernel load|kernel compile) +[0-9.]+ s$", re.M)
IL_LINE = re.compile(r"information loss: about [0-9.]+ % of the QIs' variance — "
                     r"(very little|little|moderate|substantial) \(rounded: [0-9.]+ – [0-9.]+ %\)")


# --------------------------------------------------------------------------- the plain word


@pytest.mark.parametrize("il, word", [
    (0.0, "very little"), (0.8, "very little"), (1.0, "very little"), (1.24, "very little"),  # published 1 %
    (1.25, "little"), (1.5, "little"), (5.0, "little"), (5.49, "little"),                   # published 1.5 … 5 %
    (5.5, "moderate"), (6.0, "moderate"), (15.0, "moderate"), (17.49, "moderate"),           # published 6 … 15 %
    (17.5, "substantial"), (20.0, "substantial"), (60.0, "substantial"), (100.0, "substantial"),
])
def test_the_word_at_the_boundaries(il, word):
    assert loss_qualifier(il) == word


def test_the_word_is_one_of_the_published_value():
    """Decided on the published (rounded) value: the word tells nothing the rounded figure does not."""
    tops = [top for top, _ in LOSS_QUALIFIERS]
    assert all(top in IL_GRID for top in tops)          # every threshold is a published value
    for il in np.linspace(0, 100, 2001):
        assert loss_qualifier(il) == loss_qualifier(rounded_information_loss(il)[0])


def test_census_benchmark_figures_are_moderate():
    """Exact MDAV on Census at k = 3, 4, 5, 10 (docs/methods.md): the typical loss is "moderate"."""
    assert {loss_qualifier(il) for il in (5.69, 7.49, 9.09, 14.16)} == {"moderate"}


def test_group_sizes_in_words():
    assert group_sizes_text({"cells": 600, "min_cell_size": 5, "max_cell_size": 5}) == "600 groups of 5 records"
    assert (group_sizes_text({"cells": 540, "min_cell_size": 5, "max_cell_size": 9,
                              "cell_size_counts": {"5": 500, "6": 20, "9": 20}})
            == "540 groups of 5–9 records (most of 5)")
    assert group_sizes_text({"cells": 1, "min_cell_size": 7, "max_cell_size": 7}) == "1 group of 7 records"


def test_where_the_files_are(tmp_path):
    lines = where_lines(tmp_path / "out", files=3)
    assert lines[0] == f"release: {tmp_path / 'out'}/ (3 file(s), committed with _SUCCESS)"
    assert lines[1] == f"report:  {tmp_path / 'out' / '_report.json'}"
    assert f"'daskmicro report {tmp_path / 'out'}' writes it as {tmp_path / 'out.report.html'}" in lines[2]
    lines = where_lines(tmp_path / "r.parquet", tmp_path / "r.report.json")
    assert lines[2].endswith(f"writes it as {tmp_path / 'r.report.html'}")
    lines = where_lines(tmp_path / "r.parquet", tmp_path / "elsewhere.json")
    assert f"'daskmicro report {tmp_path / 'elsewhere.json'}' writes it as {tmp_path / 'elsewhere.html'}" in lines[2]
    assert where_lines("r.parquet", "r.json", page="r.html")[2] == "page:    r.html"


# --------------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("words") / "survey.parquet"
    pd.DataFrame(rng.normal(size=(1200, 3)), columns=["age", "income", "rent"]).to_parquet(path)
    return path


def _plain(text: str, k: int, n: str) -> None:
    """What every default summary says, and what it never says."""
    assert not DASK_WORDS.search(text), DASK_WORDS.search(text)
    assert not STAGE_LINE.search(text)
    assert f"protected {n} records" in text and f"at k = {k}" in text
    assert f"shared by at least {k} records" in text and " groups of " in text
    assert IL_LINE.search(text), text
    assert "verification passed" in text and "release:" in text and "report:" in text and "page:" in text


def test_in_process_exact_mdav(table, tmp_path, capsys):
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(table), str(out), "--qi", "age,income,rent", "--k", "4", "--seed", "1"]) == 0
    captured = capsys.readouterr()
    _plain(captured.out + captured.err, 4, "1,200")
    assert "QI columns (age, income, rent)" in captured.out and "300 groups of 4 records" in captured.out
    assert "compared with exact MDAV (the reference method): the same groups" in captured.out
    assert "method: exact MDAV" in captured.out


def test_in_process_high_quality_names_the_comparison_without_a_figure(table, tmp_path, capsys):
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(table), str(out), "--qi", "age,income,rent", "--k", "5", "--seed", "1",
                 "--quality", "high"]) == 0
    captured = capsys.readouterr()
    _plain(captured.out + captured.err, 5, "1,200")
    # δ is a figure of the original spread: the published report, so the summary, leave it out
    assert "compared with exact MDAV (the reference method): in the private run record" in captured.out
    assert "improved by quality 'high'" in captured.out and "neighbouring groups" in captured.out


def test_on_the_shared_cluster_plain_and_verbose(table, tmp_path, capsys, client):
    args = ["--qi", "age,income,rent", "--k", "5", "--seed", "1", "--method", "partitioned", "--partition-size",
            "300", "--K", "30", "--scheduler", client.scheduler.address]
    assert main(["anonymize", str(table), str(tmp_path / "plain"), *args]) == 0
    plain = capsys.readouterr()
    _plain(plain.out + plain.err, 5, "1,200")
    assert "method: the partitioned pipeline" in plain.out
    assert re.search(r"^  (reading|grouping|writing \+ checking) +[0-9.]+ s$", plain.err, re.M)

    assert main(["anonymize", str(table), str(tmp_path / "verbose"), *args, "--verbose"]) == 0
    verbose = capsys.readouterr()
    assert STAGE_LINE.search(verbose.err) and "  gather" in verbose.err
    assert "layout:" in verbose.out and "partition(s)" in verbose.out and "macrocells distal" in verbose.out
    assert "microaggregation time:" in verbose.out and IL_LINE.search(verbose.out)
    # the same summary otherwise: the verbose lines are added, nothing else changes
    extra = ("  microaggregation time:", "  kernel", "  layout:", "  refinement:")

    def summary(out):
        lines = out.splitlines()
        return lines[:[i for i, line in enumerate(lines) if line.startswith("release:")][0]]
    assert [line for line in summary(verbose.out) if not line.startswith(extra)] == summary(plain.out)


def test_api_summary_and_workflow_run_share_the_words(table, tmp_path, capsys, client):
    df = pd.read_parquet(table)
    _, report = daskmicro.anonymize(df, qi=["age", "income", "rent"], k=3, seed=2, reference="auto")
    text = report.summary()
    assert not DASK_WORDS.search(text) and IL_LINE.search(text) and "400 groups of 3 records" in text
    assert text == summary_text(report.to_dict())          # one builder, on the published report
    assert "microaggregation time:" in report.summary(verbose=True)

    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: words\ninput: {{path: {table}}}\nqi: [age, income, rent]\nk: 3\n"
                    f"parameters: {{seed: 2}}\noutput: {{path: {tmp_path / 'wf.parquet'}}}\n")
    assert main(["run", str(spec), "--scheduler", client.scheduler.address]) == 0
    captured = capsys.readouterr()
    _plain(captured.out + captured.err, 3, "1,200")
    assert "run key: words-" in captured.out
    # the run's summary is the one of the report it committed
    import json

    doc = json.loads((tmp_path / "wf.report.json").read_text())
    assert summary_text(doc) in captured.out
