"""The Dask pipeline on real LocalClusters of worker processes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dask.dataframe as dd

from daskmicro import anonymize, information_loss, mdav, standardize
from daskmicro.datasets import census_like
from daskmicro.errors import InputError, ParameterError

N = 6_000
# small sizes so that a 6,000-row set exercises every level: 3 top cells (chunked MDAV),
# several partitions per top cell, macrocells and a proximal/distal split
SMALL = dict(method="partitioned", task_rows=2_000, partition_size=750, K=150)


@pytest.fixture(scope="module")
def data():
    df = census_like(N, seed=5, with_extra_columns=True)
    df["AGI"] = df["AGI"].astype(np.float32)
    return df


def _by_row(release: pd.DataFrame) -> pd.DataFrame:
    return release.sort_values("row_id").reset_index(drop=True)


def _run(data, qi, client, npartitions, **kw):
    ddf = dd.from_pandas(data, npartitions=npartitions, sort=False)
    release, report = anonymize(ddf, qi, 5, seed=11, keep_row_id=True, client=client, keep=["record_id"],
                                **{**SMALL, **kw})
    return _by_row(client.compute(release).result()), report


@pytest.mark.parametrize("nu", [1.0, 0.5])
def test_same_release_for_1_2_4_workers_and_any_chunking(data, qi, client, nu, clients):
    reference, rep = _run(data, qi, client, 3, nu=nu)
    assert rep.pipeline["top_cells"] == 3 and rep.pipeline["partitions"] > 3
    # the default quality's improvement stage ran on every top cell and moved records
    imp = rep.pipeline["improve"]
    assert imp["top_cells"] == 3 and imp["steps"] > 0 and imp["sse_after"] < imp["sse_before"]
    # ν = 1 with 3 top cells and 2 worker threads: one task per top cell (graph.improve_stage.joint_top_cells);
    # ν = 0.5 ranks the macrocells of all top cells together: the staged fan-out
    assert ("cells" in rep.timings) == (nu == 1.0) and ("fan_out" in rep.timings) == (nu != 1.0)
    for npartitions in (1, 7):
        other, _ = _run(data, qi, client, npartitions, nu=nu)
        pd.testing.assert_frame_equal(other, reference)
    for workers in (1, 4) if nu == 1.0 else ():  # (the worker count plays no part in ν's role)
        own = clients(workers)
        other, rep_w = _run(data, qi, own, 5, nu=nu)
        pd.testing.assert_frame_equal(other, reference)
        # 4 worker threads for 3 top cells: the staged tasks (fan-out, then the improvement stage),
        # the same release as the joint tasks above
        assert ("fan_out" in rep_w.timings and "improve" in rep_w.timings) == (workers == 4)


def test_quality_high_same_release_for_1_2_workers_and_any_chunking(data, qi, client, clients):
    """quality="high" on the pipeline: moves, PCL iterations with searched candidates (k = 3: more
    than 1000 cells per top cell) and moves again — still one release whatever the chunking and the
    number of workers, k-anonymous as verified before the commit."""
    def run(client, npartitions):
        ddf = dd.from_pandas(data, npartitions=npartitions, sort=False)
        release, report = anonymize(ddf, qi, 3, seed=11, keep_row_id=True, client=client, quality="high", keep=["record_id"],
                                    **{**SMALL, "task_rows": 4_000, "partition_size": 1_500})
        return _by_row(client.compute(release).result()), report

    reference, rep = run(client, 3)
    imp = rep.pipeline["improve"]
    assert imp["pcl_iter"] == 2 and imp["post_sweeps"] == 2 and imp["sse_after"] < imp["sse_before"]
    assert set(imp["seconds"]) == {"moves", "pcl", "moves after"}
    assert rep.min_cell_size >= 3 and len(reference) == N
    other, _ = run(client, 7)
    pd.testing.assert_frame_equal(other, reference)
    for workers in (1, 4):  # one task per top cell on 1 worker; the staged fan-out and stage on 4 threads
        own = clients(workers)
        other, rep_w = run(own, 2)
        pd.testing.assert_frame_equal(other, reference)
        assert ("improve" in rep_w.timings) == (rep.pipeline["top_cells"] < workers)


def test_recursive_top_level_is_deterministic_and_k_anonymous(data, qi, client):
    # task_rows = 500 on 6,000 rows: the top level cuts into 4 cells, then each into 3 (the
    # recursion of the top level), the deeper level running on pieces joined into chunks of 250 rows
    kw = dict(task_rows=500, partition_size=500, K=150, nu=1.0)
    reference, rep = _run(data, qi, client, 3, **kw)
    assert rep.pipeline["top_cells"] == 12 and rep.verified and rep.min_cell_size >= 5
    assert sorted(reference["row_id"]) == list(range(N))
    for npartitions in (1, 7):  # (worker counts: test_same_release_for_1_2_4_workers_and_any_chunking)
        other, _ = _run(data, qi, client, npartitions, **kw)
        pd.testing.assert_frame_equal(other, reference)
    X = data[qi].to_numpy(np.float64)
    exact = information_loss(X, mdav(standardize(X)[0], 5))
    print("recursive top level: IL", rep.information_loss, "exact MDAV", exact)
    assert rep.information_loss < 1.25 * exact


def test_release_is_k_anonymous_and_keeps_every_row(data, qi, client):
    release, report = _run(data, qi, client, 4, nu=0.3)
    assert report.verified and report.min_cell_size >= 5
    assert sorted(release["row_id"]) == list(range(N))          # no row lost or duplicated
    counts = release.groupby(qi).size()
    assert counts.min() >= 5
    # non-QI columns untouched, row by row
    assert (release["record_id"].to_numpy() == data["record_id"].to_numpy()).all()
    assert (release["region"].to_numpy() == data["region"].to_numpy()).all()
    assert release["AGI"].dtype == np.float32
    # the reported information loss is the one of the published centroids
    X = data[qi].to_numpy(np.float64)
    cells = release.groupby(qi, sort=False).ngroup().to_numpy()
    assert report.information_loss == pytest.approx(information_loss(X, cells), rel=1e-6)


def test_one_task_mdav_equals_the_kernel(data, qi, client):
    sub = data.iloc[:3000]
    release, report = anonymize(dd.from_pandas(sub, npartitions=2, sort=False), qi, 4, method="mdav",
                                seed=1, keep_row_id=True, client=client, keep=["record_id"])
    release = _by_row(client.compute(release).result())
    X = sub[qi].to_numpy(np.float64)
    labels = mdav(standardize(X)[0], 4)
    cells = release.groupby(qi, sort=False).ngroup().to_numpy()
    # same partition of the rows: a bijection between kernel labels and published tuples
    pairs = pd.DataFrame({"a": labels, "b": cells}).drop_duplicates()
    assert len(pairs) == labels.max() + 1 == cells.max() + 1
    assert report.information_loss == pytest.approx(information_loss(X, labels), rel=1e-9)


def test_nu_extremes_of_the_two_partition_mode(data, qi, client):
    sub = data.iloc[:4000]
    X = sub[qi].to_numpy(np.float64)
    _, plain = anonymize(sub, qi, 5, method="proximal-distal", nu=1.0, K=500, client=client, seed=0,
                         keep=["record_id"])
    assert plain.information_loss == pytest.approx(information_loss(X, mdav(standardize(X)[0], 5)), rel=1e-9)
    _, pca = anonymize(sub, qi, 5, method="proximal-distal", nu=0.0, K=500, client=client, seed=0,
                       keep=["record_id"])
    _, pca_ref = anonymize(sub, qi, 5, method="pca-mdav", seed=0, keep=["record_id"])
    assert pca.information_loss == pytest.approx(pca_ref.information_loss, rel=0.02)
    _, mid = anonymize(sub, qi, 5, method="proximal-distal", nu=0.4, K=500, client=client, seed=0,
                       keep=["record_id"])
    assert mid.pipeline["distal_macrocells"] == round(0.4 * mid.pipeline["macrocells"])
    assert plain.information_loss <= mid.information_loss <= pca.information_loss * 1.05


def test_pandas_in_pandas_out(data, qi, client):
    release, report = anonymize(data.iloc[:5000], qi, 5, seed=3, client=client, keep=["record_id"], **SMALL)
    assert isinstance(release, pd.DataFrame) and len(release) == 5000 and report.verified
    assert list(release.columns) == list(data.columns)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(K=5), "K \\(macrocell size\\) must be larger than k"),
        (dict(K=3), "K must be an integer ≥ 2|K \\(macrocell size\\)"),
        (dict(nu=1.5), "nu must be in \\[0, 1\\]"),
        (dict(nu=-0.1), "nu must be in \\[0, 1\\]"),
        (dict(partition_size=100), "partition_size must be at least K"),
        (dict(task_rows=500), "task_rows must be at least partition_size"),
        (dict(method="mdav", max_task_rows=1000, K=None, partition_size=None, task_rows=None),
         "use the scalable method 'partitioned'"),
        (dict(method="proximal-distal", max_task_rows=1000), "use the scalable method 'partitioned'"),
    ],
)
def test_bad_pipeline_parameters_are_refused(data, qi, client, kw, message):
    with pytest.raises(ParameterError, match=message):
        anonymize(data.iloc[:4000], qi, 5, client=client, keep=["record_id"], **{**SMALL, **kw})


def test_bad_input_on_the_cluster(data, qi, client):
    bad = data.iloc[:2000].copy()
    bad.loc[bad.index[3], "AGI"] = np.nan
    with pytest.raises(InputError, match="'AGI' \\(1\\)"):
        anonymize(dd.from_pandas(bad, npartitions=2), qi, 5, client=client, method="partitioned",
                  keep=["record_id"])
    with pytest.raises(ParameterError, match="k must be at most|k"):
        anonymize(dd.from_pandas(data.iloc[:20], npartitions=2), qi, 50, client=client, method="partitioned",
                  keep=["record_id"])
    with pytest.raises(ParameterError, match="unknown QI"):
        anonymize(dd.from_pandas(data.iloc[:20], npartitions=2), ["nope"], 5, client=client)


# --------------------------------------------------------------------------- ingest spread


def _epoch_frame(n=3000, seed=4):
    """Epoch milliseconds (1.7e12 ± 1000, integers), two ordinary columns and a constant 1.7e12 + 0.3."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "ts": 1_700_000_000_000 + rng.integers(-1000, 1001, n),
        "age": rng.normal(45.0, 12.0, n),
        "income": rng.lognormal(10.0, 0.6, n),
        "batch": np.full(n, 1.7e12 + 0.3),
        "id": np.arange(n),
    })


def test_ingest_keeps_the_spread_of_epoch_milliseconds_for_any_chunking(client):
    from daskmicro.graph.ingest import ingest

    df = _epoch_frame()
    qi = ["ts", "age", "income", "batch"]
    X = df[qi].to_numpy(np.float64)
    assert X[:, 3].std() > 0                  # numpy's std of the constant column is a few ulps
    runs = [ingest(client, dd.from_pandas(df, npartitions=p, sort=False), qi) for p in (1, 3, 7)]
    for ing in runs:
        assert ing.varying.tolist() == [True, True, True, False]   # constant by min == max, exactly
        assert ing.std[3] == 0.0
        np.testing.assert_allclose(ing.mean, X.mean(axis=0), rtol=1e-15)
        np.testing.assert_allclose(ing.std[:3], X[:, :3].std(axis=0), rtol=1e-12)
        np.testing.assert_array_equal(ing.std, runs[0].std)        # bit-identical for every chunking
        np.testing.assert_array_equal(ing.mean, runs[0].mean)
        Z = np.concatenate(client.gather(ing.blocks))
        np.testing.assert_allclose(Z.std(axis=0), 1.0, rtol=1e-12)


def test_epoch_milliseconds_end_to_end_match_in_process_mdav(client):
    df = _epoch_frame()
    qi = ["ts", "age", "income", "batch"]
    _, local = anonymize(df, qi, 5, method="mdav", seed=2, keep=["id"])
    release, report = anonymize(dd.from_pandas(df, npartitions=4, sort=False), qi, 5, method="mdav", seed=2,
                                client=client, keep=["id"])
    assert report.verified and local.verified
    assert report.constant_columns == local.constant_columns == ["batch"]
    assert report.m_used == 3
    assert report.information_loss == pytest.approx(local.information_loss, rel=1e-6)
    X = df[["ts", "age", "income"]].to_numpy(np.float64)
    assert report.information_loss == pytest.approx(information_loss(X, mdav(standardize(X)[0], 5)), rel=1e-6)
    out = client.compute(release).result()
    assert out["ts"].nunique() > 1 and (out["batch"] == 1.7e12 + 0.3).all()


# --------------------------------------------------------------------------- release order


def _spearman(a, b) -> float:
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.fixture(scope="module")
def big():
    df = census_like(20_000, seed=8, with_extra_columns=True)
    return df, [c for c in df.columns if c not in ("record_id", "region")][:4]


def test_release_order_is_global_and_independent_of_the_chunking(big, client):
    df, qi4 = big
    kw = dict(method="partitioned", task_rows=10_000, partition_size=2_500, K=500, seed=7, keep_row_id=True,
              client=client, keep=["record_id"])
    ddf = dd.from_pandas(df, npartitions=8, sort=False)
    release, report = anonymize(ddf, qi4, 5, **kw)
    assert release.npartitions == 8 and report.verified
    out = client.compute(release).result().reset_index(drop=True)
    rid = out["row_id"].to_numpy()
    assert sorted(rid) == list(range(len(df)))
    assert abs(_spearman(rid, np.arange(len(rid)))) < 0.05        # release position ⟂ input position
    # the first 10 % of the release draws from every input partition, about evenly
    lengths = ddf.map_partitions(len).compute().to_numpy()
    source = np.searchsorted(np.cumsum(lengths), rid[: len(rid) // 10], side="right")
    counts = np.bincount(source, minlength=8)
    assert (counts >= 150).all(), counts                          # 250 expected from each
    assert (out["record_id"].to_numpy() == df["record_id"].to_numpy()[rid]).all()   # rows travel whole
    # same seed, other chunkings (Dask and pandas input): the very same release, row for row
    other, _ = anonymize(dd.from_pandas(df, npartitions=3, sort=False), qi4, 5, **kw)
    pd.testing.assert_frame_equal(client.compute(other).result().reset_index(drop=True), out)
    in_memory, _ = anonymize(df, qi4, 5, **kw)
    pd.testing.assert_frame_equal(in_memory, out, check_dtype=False)   # dask makes strings pyarrow-backed
    # another seed, another order
    reseeded, _ = anonymize(ddf, qi4, 5, **{**kw, "seed": 8})
    assert not (client.compute(reseeded).result()["row_id"].to_numpy() == rid).all()
