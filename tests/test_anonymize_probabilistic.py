"""anonymize(participation=…, max_cell_failure=…): p-probabilistic k-anonymous releases.

Cell sizes and failure probabilities are recomputed here independently of the package: n_min and
q̄ for a constant π with scipy.stats.binom, q̄ for per-record π_j with a Poisson-binomial PMF built
by repeated convolution.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from daskmicro import anonymize
from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from daskmicro.errors import InputError, ParameterError
from daskmicro.report import render_html

from _oracles import binom_failure, binom_n_min, failure_figures, poisson_binomial_failure

PBAR = 1e-4


def cells_of(release: pd.DataFrame, qi) -> pd.core.groupby.DataFrameGroupBy:
    return release.groupby(list(qi), sort=False, dropna=False)


@pytest.fixture(scope="module")
def survey():
    """600 census-like records with a per-record participation column and a pass-through column."""
    df = census_like(600, seed=3, with_extra_columns=True)
    df["p_respond"] = np.random.default_rng(4).uniform(0.55, 1.0, len(df))
    return df


QI6 = ["AFNLWGT", "AGI", "EMCONTRB", "FEDTAX", "PTOTVAL", "STATETAX"]
# published as they are with QI6: record_id and the other census columns (whole numbers, nearly one value
# per record); p_respond (fractions) needs no keep where it is not the participation column
KEEP = ["record_id", *(c for c in CENSUS_COLUMNS if c not in QI6)]


def test_independent_n_min_matches_table_iii():
    # the test's own n_min agrees with Table III of the paper (k = 10, π = 0.75)
    assert [binom_n_min(10, 0.75, p) for p in (1e-4, 1e-5, 1e-6)] == [25, 27, 29]


@pytest.mark.parametrize("method,k,pi", [("mdav", 10, 0.75), ("mdav", 5, 0.5), ("pca-mdav", 5, 0.75)])
def test_constant_participation_in_process(census, method, k, pi):
    qi = list(census.columns)
    release, report = anonymize(census, qi, k, method=method, participation=pi, max_cell_failure=PBAR, seed=1)
    n_min = binom_n_min(k, pi, PBAR)
    sizes = cells_of(release, qi).size().to_numpy()
    assert sizes.min() >= n_min and report.min_cell_size >= n_min
    assert len(release) == len(census) and report.verified and report.k_anonymity.k == n_min
    prob = report.probabilistic
    assert (prob["n_min"], prob["k"], prob["participation"], report.k) == (n_min, k, pi, k)
    q = np.array([binom_failure(k, pi, int(s)) for s in sizes])
    assert q.max() <= PBAR
    assert prob["cell_failure_max"] == pytest.approx(q.max(), rel=1e-6)
    assert prob["n_cells"] == sizes.size
    assert prob["table_failure"] == pytest.approx(1 - np.prod(1 - q), rel=1e-6)
    # u·q̄ summed over cells: expected number of active records left in a failing cell
    u_q = 0.0
    for s in sizes:
        a = np.arange(1, k)
        u_q += float((a * stats.binom.pmf(a, int(s), pi)).sum())
    assert prob["expected_unprotected"] == pytest.approx(u_q, rel=1e-6)
    assert prob["record_failure"] == pytest.approx(u_q / len(census), rel=1e-6)
    assert prob["record_failure_given_active"] == pytest.approx(u_q / len(census) / pi, rel=1e-6)
    # π = 1 reference (same method, plain k) is run for small inputs; larger cells cost distortion
    assert prob["information_loss_at_k"] < report.information_loss
    assert prob["distortion_ratio"] == pytest.approx(report.information_loss / prob["information_loss_at_k"])
    json.dumps(report.to_dict())
    assert "n_min" in render_html(report.to_dict()) and "p-probabilistic" in report.summary()


def test_constant_participation_one_is_plain_k(census):
    qi = list(census.columns)
    release, report = anonymize(census, qi, 5, participation=1.0, max_cell_failure=1e-6, seed=0, plain_k_reference=False)
    plain, plain_report = anonymize(census, qi, 5, seed=0)
    assert report.probabilistic["n_min"] == 5 and report.probabilistic["cell_failure_max"] == 0.0
    assert report.information_loss == pytest.approx(plain_report.information_loss)
    assert "information_loss_at_k" not in report.probabilistic


@pytest.mark.parametrize("method", ["mdav", "pca-mdav"])
def test_per_record_participation(survey, method):
    k, pbar = 5, 1e-6
    release, report = anonymize(survey, QI6, k, method=method, participation="p_respond", max_cell_failure=pbar,
                                seed=2, keep_row_id=True, keep=KEEP)
    # the other non-QI columns are published untouched; the participation column is an input only
    back = survey.iloc[release["row_id"].to_numpy()].reset_index(drop=True)
    for col in ("record_id", "region"):
        pd.testing.assert_series_equal(release[col], back[col])
    assert "p_respond" not in release.columns
    groups = cells_of(release.assign(p_respond=back["p_respond"].to_numpy()), QI6)["p_respond"].apply(np.asarray)
    q = np.array([poisson_binomial_failure(k, pis) for pis in groups])
    assert q.max() <= pbar and groups.map(len).min() >= k
    prob = report.probabilistic
    assert prob["n_cells"] == len(groups) == report.cells
    assert prob["cell_failure_max"] == pytest.approx(q.max(), rel=1e-6)
    assert prob["table_failure"] == pytest.approx(1 - np.prod(1 - q), rel=1e-6)
    assert prob["participation_column"] == "p_respond" and "n_min" not in prob
    assert prob["participation_min"] == pytest.approx(survey["p_respond"].min())
    expect = failure_figures(k, pbar, list(groups))
    for key in ("cell_failure_mean", "expected_unprotected", "record_failure", "record_failure_given_active"):
        assert prob[key] == pytest.approx(expect[key], rel=1e-6), key
    worst = prob["worst_cells"]
    assert worst[0]["cell_failure"] == pytest.approx(q.max(), rel=1e-6)
    assert [w["cell_failure"] for w in worst] == sorted((w["cell_failure"] for w in worst), reverse=True)
    # cells grown to the participation they need: bigger than plain k, smaller than n_min at the lowest π
    assert report.min_cell_size > k
    assert report.max_cell_size < 2 * binom_n_min(k, float(survey["p_respond"].min()), pbar)
    assert 0 < prob["expected_distortion"] < 1


def test_per_record_equals_constant_when_all_equal(census):
    """With every π_j = π, grown cells are MDAV-shaped with n_min records (the last takes the rest)."""
    df = census.assign(pi=0.75)
    qi = list(census.columns)
    _, grown = anonymize(df, qi, 10, participation="pi", max_cell_failure=PBAR, seed=0, plain_k_reference=False)
    sizes = sorted(int(s) for s, c in grown.cell_size_counts.items() for _ in range(c))
    assert sizes[0] == binom_n_min(10, 0.75, PBAR) == 25
    assert sizes[-2] == 25 and sum(sizes) == len(census)


# --------------------------------------------------------------------------- bad input


def _bad(survey, **kw):
    args = dict(qi=QI6, k=5, seed=0, participation="p_respond", max_cell_failure=1e-6, keep=KEEP)
    args.update(kw)
    return anonymize(survey, **args)


@pytest.mark.parametrize("kw,error,words", [
    (dict(participation=0.0), ParameterError, "participation"),
    (dict(participation=1.5), ParameterError, "participation"),
    (dict(participation=-0.2), ParameterError, "participation"),
    (dict(participation=float("nan")), ParameterError, "participation"),
    (dict(participation=True), ParameterError, "participation"),
    (dict(participation=[0.5, 0.6]), ParameterError, "participation"),
    (dict(max_cell_failure=0.0), ParameterError, "max_cell_failure"),
    (dict(max_cell_failure=1.0), ParameterError, "max_cell_failure"),
    (dict(max_cell_failure=2.0), ParameterError, "max_cell_failure"),
    (dict(max_cell_failure="x"), ParameterError, "max_cell_failure"),
    (dict(max_cell_failure=None), ParameterError, "max_cell_failure"),
    (dict(participation=None), ParameterError, "participation"),
    (dict(participation=None, max_cell_failure=None, plain_k_reference=True), ParameterError, "reference"),
    (dict(plain_k_reference="yes"), ParameterError, "reference"),
    (dict(participation="nope"), ParameterError, "'nope'"),
    (dict(participation="AGI"), ParameterError, "'AGI'"),
    (dict(participation="region"), InputError, "'region'"),
    (dict(participation=0.5, k=300), ParameterError, "n_min"),
    (dict(k=700), ParameterError, "k = 700 exceeds"),
    (dict(k=550), ParameterError, "cannot be met"),
    (dict(method="pcl"), ParameterError, "PCL"),
    (dict(method="proximal-distal"), ParameterError, "proximal-distal"),
    (dict(participation=0.5, method="partitioned", K=30), ParameterError, "K"),
    (dict(participation=0.5, K=2000, method="mdav"), ParameterError, "partition_size"),
])
def test_bad_input(survey, kw, error, words):
    with pytest.raises(error) as exc:
        _bad(survey, **kw)
    assert words in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("values,words", [
    ([0.5] * 599 + [np.nan], "1 missing"),
    ([0.5] * 598 + [0.0, 1.2], "2 value(s) outside (0, 1]"),
])
def test_bad_participation_column(survey, values, words):
    df = survey.assign(p_respond=values)
    with pytest.raises(InputError) as exc:
        _bad(df)
    assert words in str(exc.value) and "'p_respond'" in str(exc.value) and "\n" not in str(exc.value)


# --------------------------------------------------------------------------- Dask pipeline


def test_constant_participation_on_cluster(client):
    import dask.dataframe as dd

    df = census_like(3000, seed=1, with_extra_columns=True)
    qi = [c for c in df.columns if c not in ("record_id", "region")]
    k, pi, pbar = 5, 0.5, 1e-6
    n_min = binom_n_min(k, pi, pbar)
    small = dict(method="partitioned", partition_size=1000, K=200, task_rows=1500, client=client, seed=3,
                 keep=["record_id"])
    release, report = anonymize(df, qi, k, participation=pi, max_cell_failure=pbar, plain_k_reference=True, **small)
    sizes = cells_of(release, qi).size().to_numpy()
    assert len(release) == len(df) and sizes.min() >= n_min and report.verified
    assert report.k == k and report.k_anonymity.k == n_min and report.pipeline["partitions"] > 1
    prob = report.probabilistic
    q = np.array([binom_failure(k, pi, int(s)) for s in sizes])
    assert prob["n_min"] == n_min and q.max() <= pbar
    assert prob["cell_failure_max"] == pytest.approx(q.max(), rel=1e-6)
    assert prob["table_failure"] == pytest.approx(1 - np.prod(1 - q), rel=1e-6)
    assert prob["information_loss_at_k"] < report.information_loss
    # a Dask DataFrame in, a Dask DataFrame out, the same guarantee
    ddf = dd.from_pandas(df, npartitions=3, sort=False)
    out, rep = anonymize(ddf, qi, k, participation=pi, max_cell_failure=pbar, **small)
    out = client.compute(out).result()
    assert len(out) == len(df) and cells_of(out, qi).size().min() >= n_min
    assert "information_loss_at_k" not in rep.probabilistic  # no reference run on a cluster unless asked


# --------------------------------------------------------------------------- command line


@pytest.fixture
def survey_csv(tmp_path, survey):
    path = tmp_path / "survey.csv"
    survey.to_csv(path, index=False)
    return path


def test_cli_participation_column(survey_csv, tmp_path, capsys):
    out = tmp_path / "release.parquet"
    argv = ["anonymize", str(survey_csv), str(out), "--qi", ",".join(QI6), "--k", "5", "--seed", "0",
            "--participation", "p_respond", "--max-cell-failure", "1e-6", "--keep", ",".join(KEEP)]
    assert main(argv) == 0
    report = json.loads((tmp_path / "release.report.json").read_text())
    prob = report["probabilistic"]
    assert prob["participation_column"] == "p_respond" and prob["cell_failure_max"] <= 1e-6
    release = pd.read_parquet(out)
    survey = pd.read_csv(survey_csv)
    assert "p_respond" not in release.columns and len(release) == len(survey)
    assert "p-probabilistic" in capsys.readouterr().out
    # each published cell's failure, from its records' π_j in the input
    release = release.merge(survey[["record_id", "p_respond"]], on="record_id", how="left")
    for _, cell in cells_of(release, QI6):
        assert len(cell) >= 5 and poisson_binomial_failure(5, cell["p_respond"].to_numpy()) <= 1e-6


def test_cli_constant_participation(survey_csv, tmp_path):
    out = tmp_path / "release.parquet"
    argv = ["anonymize", str(survey_csv), str(out), "--qi", ",".join(QI6), "--k", "5", "--seed", "0",
            "--participation", "0.75", "--max-cell-failure", "1e-4", "--keep", ",".join(KEEP)]
    assert main(argv) == 0
    report = json.loads((tmp_path / "release.report.json").read_text())
    n_min = binom_n_min(5, 0.75, 1e-4)
    assert report["probabilistic"]["n_min"] == n_min
    # the published cells, read back: each holds n_min records or more and fails with q̄ ≤ p̄
    sizes = cells_of(pd.read_parquet(out), QI6).size().to_numpy()
    assert sizes.sum() == 600 and sizes.min() >= n_min and report["min_cell_size"] >= n_min
    assert max(binom_failure(5, 0.75, int(n)) for n in sizes) <= 1e-4


@pytest.mark.parametrize("extra,words", [
    (["--participation", "0.75"], "go together"),
    (["--max-cell-failure", "1e-4"], "go together"),
    (["--participation", "1.5", "--max-cell-failure", "1e-4"], "participation"),
    (["--participation", "0", "--max-cell-failure", "1e-4"], "participation"),
    (["--participation", "0.5", "--max-cell-failure", "1"], "max_cell_failure"),
    (["--participation", "nope", "--max-cell-failure", "1e-4"], "nope"),
    (["--participation", "gap", "--max-cell-failure", "1e-4"], "missing"),
    (["--participation", "0.5", "--max-cell-failure", "1e-4", "--k", "300"], "n_min"),
    (["--participation", "p_respond", "--max-cell-failure", "1e-4", "--method", "proximal-distal"], "proximal-distal"),
])
def test_cli_bad_input(tmp_path, survey, capsys, extra, words):
    path = tmp_path / "survey.csv"
    survey.assign(gap=[np.nan] + [0.5] * (len(survey) - 1)).to_csv(path, index=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["anonymize", str(path), str(tmp_path / "out.parquet"), "--qi", ",".join(QI6), "--k", "5",
            "--keep", ",".join(KEEP), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskmicro: error:") and err.count("\n") == 1 and words in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _lake(df, root, files):
    """``df`` written as a Parquet directory of ``files`` consecutive parts."""
    root.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        df.iloc[part].to_parquet(root / f"part-{i}.parquet", index=False)
    return root


def test_cli_constant_participation_on_a_lake(survey, tmp_path, capsys, client):
    # a Parquet directory in and out: every group gets cells of n_min records, the written
    # release is verified against n_min and its failure figures against p̄ before the commit
    lake_dir = _lake(survey, tmp_path / "lake", 3)
    out = tmp_path / "out"
    argv = ["anonymize", str(lake_dir), str(out), "--qi", ",".join(QI6), "--k", "5", "--scheduler", client.scheduler.address,
            "--participation", "0.75", "--max-cell-failure", "1e-4", "--no-dask-report", "--keep", ",".join(KEEP)]
    assert main(argv) == 0
    assert (out / "_SUCCESS").exists()
    release = pd.read_parquet(out)
    report = json.loads((out / "_report.json").read_text())
    n_min = binom_n_min(5, 0.75, 1e-4)
    prob = report["probabilistic"]
    assert report["k"] == 5 and prob["n_min"] == n_min and prob["participation"] == 0.75
    sizes = cells_of(release, QI6).size().to_numpy()
    assert len(release) == len(survey) and sizes.min() >= n_min
    q = np.array([binom_failure(5, 0.75, int(n)) for n in sizes])
    assert q.max() <= 1e-4 and prob["cell_failure_max"] == pytest.approx(q.max(), rel=1e-6)
    assert prob["cells_above_max_cell_failure"] == 0
    assert prob["n_cells"] == cells_of(release, QI6).ngroups
    # the same cells as the in-process run with the same participation (one group, exact MDAV)
    _, rep = anonymize(survey, QI6, 5, method="mdav", participation=0.75, max_cell_failure=1e-4, seed=1,
                     keep=KEEP)
    assert rep.probabilistic["n_min"] == n_min


def test_cli_constant_participation_on_a_lake_with_strata_to_one_file(survey, tmp_path, client):
    lake_dir = _lake(survey, tmp_path / "lake", 2)
    out = tmp_path / "release.parquet"
    argv = ["anonymize", str(lake_dir), str(out), "--qi", ",".join(QI6), "--k", "4", "--scheduler", client.scheduler.address,
            "--strata", "region", "--participation", "0.6", "--max-cell-failure", "1e-5", "--no-dask-report",
            "--keep", ",".join(KEEP)]
    assert main(argv) == 0
    release = pd.read_parquet(out)
    report = json.loads(out.with_suffix(".report.json").read_text())
    n_min = binom_n_min(4, 0.6, 1e-5)
    assert report["probabilistic"]["n_min"] == n_min and report["k"] == 4
    sizes = release.groupby(["region", *QI6], dropna=False).size().to_numpy()
    assert sizes.sum() == len(survey) and sizes.min() >= n_min
    q = np.array([binom_failure(4, 0.6, int(n)) for n in sizes])
    assert q.max() <= 1e-5 and report["probabilistic"]["cell_failure_max"] == pytest.approx(q.max(), rel=1e-6)


def test_cli_participation_column_with_a_lake(survey, tmp_path, capsys, client):
    # a per-record π_j column on a Parquet directory: cells grown until each one's q̄ ≤ p̄ (§V-B),
    # checked here on the published release
    lake_dir = _lake(survey, tmp_path / "lake", 2)
    out = tmp_path / "out"
    argv = ["anonymize", str(lake_dir), str(out), "--qi", ",".join(QI6), "--k", "5", "--scheduler", client.scheduler.address,
            "--participation", "p_respond", "--max-cell-failure", "1e-4", "--no-dask-report",
            "--keep", ",".join(KEEP)]
    assert main(argv) == 0, capsys.readouterr().err
    release = pd.read_parquet(out)
    assert len(release) == len(survey) and "p_respond" not in release.columns
    release = release.merge(survey[["record_id", "p_respond"]], on="record_id", how="left")  # the inputs' π_j
    for _, cell in cells_of(release, QI6):
        assert len(cell) >= 5 and poisson_binomial_failure(5, cell["p_respond"].to_numpy()) <= 1e-4
