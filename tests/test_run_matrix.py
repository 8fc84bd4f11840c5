"""One run model: every combination of input kind × method × strata × missing × participation ×
refinement × quality × entry runs through the one planner, or is refused in one line for
a reason inherent to the methods (the README's combination table, ``daskmicro.config.RULES``).

The full product has 4,320 combinations.  Every one is *validated* (cheap: the run description
alone decides whether it is refused); the runs themselves cover every pair of levels of every two
factors (an all-pairs design, ~30 runs on one shared LocalCluster of worker processes, whatever the entry).  Each
release is judged here, independently of daskmicro's own verifier: read back as published, every
combination of stratum columns and QIs occurs at least k times, and under participation each
published cell's failure q̄ = P{0 < K < k} is at most p̄, computed here (a binomial tail from
scipy.stats for a constant π, a Poisson-binomial PMF by convolution for the π_j of the cell's
records); rows in = rows out; non-QI columns equal as multisets.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

import daskmicro
from daskmicro.cli import main
from daskmicro.config import RunConfig
from daskmicro.errors import ParameterError

from _oracles import binom_failure, binom_n_min, poisson_binomial_failure


K_ANON, PI, PBAR = 4, 0.8, 0.05
QI = ["x1", "x2", "x3"]

FACTORS = {
    "input": ["pandas", "dask", "file", "lake"],
    "method": ["mdav", "pca-mdav", "pcl", "partitioned", "proximal-distal"],
    "strata": ["none", "some", "merged"],
    "missing": ["refuse", "separate"],
    "participation": ["none", "constant", "column"],
    "refine": ["off", "pcl"],
    "quality": ["balanced", "high"],
    "entry": ["api", "cli", "spec"],
}


def applicable(case: dict) -> bool:
    """A command line and a spec read files: an in-memory frame cannot be handed to them."""
    return not (case["entry"] in ("cli", "spec") and case["input"] in ("pandas", "dask"))


def expected_refusal(case: dict) -> bool:
    """Refused for a reason inherent to the methods, written here independently of the code."""
    one_task = case["method"] in ("mdav", "pca-mdav", "pcl")
    per_record = case["participation"] == "column"
    if case["refine"] == "pcl" and one_task:
        return True       # no partitions to refine in a one-task method
    if per_record and (case["method"] == "pcl" or case["refine"] == "pcl"):
        return True       # PCL moves records between cells: q̄ ≤ p̄ is not kept
    if per_record and case["method"] == "proximal-distal":
        return True       # Algorithm C forms fixed-size cells
    if per_record and case["quality"] == "high":
        return True       # its moves and swaps between cells do not keep q̄ ≤ p̄ either
    return False


def all_pairs(factors: dict, keep) -> list:
    """A greedy all-pairs design over ``factors`` restricted to cases ``keep`` accepts."""
    names = list(factors)
    universe = [dict(zip(names, v)) for v in itertools.product(*factors.values())]
    universe = [c for c in universe if keep(c)]

    def pairs(c):
        return {(a, c[a], b, c[b]) for a, b in itertools.combinations(names, 2)}

    needed = set().union(*(pairs(c) for c in universe))
    chosen = []
    while needed:
        best = max(universe, key=lambda c: len(pairs(c) & needed))
        chosen.append(best)
        needed -= pairs(best)
    return chosen


def make_frame(n=480, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) @ np.array([[1.0, 0.4, 0.1], [0.0, 1.0, 0.3], [0.0, 0.0, 1.0]])
    df = pd.DataFrame({"id": np.arange(n, dtype=np.int64), "x1": X[:, 0] * 1000 + 5e4,
                       "x2": np.round(X[:, 1] * 10 + 40), "x3": X[:, 2].astype(np.float32)})
    df["s"] = np.array(["a", "b"])[np.arange(n) % 2]
    df["t"] = df["s"].where(np.arange(n) >= 3, "z")            # stratum "z": 3 records, merged
    df["p"] = rng.uniform(0.6, 1.0, n)
    return df


def with_missing(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df.loc[(np.arange(len(df)) % 10 == 7) & (np.arange(len(df)) >= 3), "x2"] = np.nan
    return df


def options(case: dict) -> dict:
    # "id" is published as it is; the π column "p" (fractions) needs no keep when it is not the participation column
    opts = {"qi": QI, "k": K_ANON, "method": case["method"], "seed": 7, "keep": ["id"]}
    if case["method"] in ("partitioned", "proximal-distal"):
        opts.update(K=40)
    if case["method"] == "partitioned":
        opts.update(partition_size=120)
    if case["strata"] != "none":
        opts["strata"] = ["s"] if case["strata"] == "some" else ["t"]
        opts["merge_small_strata"] = case["strata"] == "merged"
    if case["missing"] == "separate":
        opts["missing"] = "separate"
    if case["participation"] == "constant":
        opts.update(participation=PI, max_cell_failure=PBAR)
    elif case["participation"] == "column":
        opts.update(participation="p", max_cell_failure=PBAR)
    if case["refine"] == "pcl":
        opts["refine"] = "pcl"
    if case["quality"] == "high":
        opts["quality"] = "high"
    return opts


def test_every_combination_is_validated_by_the_run_description():
    """All 4,320 combinations: accepted or refused by the config alone, exactly as expected."""
    for values in itertools.product(*FACTORS.values()):
        case = dict(zip(FACTORS, values))
        opts = options(case)
        if expected_refusal(case):
            with pytest.raises(ParameterError) as err:
                RunConfig.build(**opts)
            assert "\n" not in str(err.value)
        else:
            RunConfig.build(**opts)


def _write_input(df: pd.DataFrame, kind: str, root: Path) -> Path:
    if kind == "file":
        path = root / "in.parquet"
        df.to_parquet(path, index=False)
        return path
    path = root / "lake"
    path.mkdir()
    for i, idx in enumerate(np.array_split(np.arange(len(df)), 3)):
        df.iloc[idx].to_parquet(path / f"part-{i}.parquet", index=False)
    return path


def _spec(case, opts, inp, out, path: Path) -> Path:
    import yaml

    spec = {"version": 1, "name": "matrix", "input": {"path": str(inp), "keep": opts["keep"]}, "qi": QI,
            "k": K_ANON, "method": case["method"], "parameters": {"seed": 7}, "output": {"path": str(out)}}
    for key in ("K", "partition_size", "refine", "quality"):
        if key in opts:
            spec["parameters"][key] = opts[key]
    if "strata" in opts:
        spec["input"]["strata"] = opts["strata"]
        spec["input"]["merge_small_strata"] = opts["merge_small_strata"]
    if "missing" in opts:
        spec["input"]["missing"] = "separate"
    if "participation" in opts:
        key = "pi" if opts["participation"] == PI else "column"
        spec["participation"] = {key: opts["participation"], "max_cell_failure": PBAR}
    path.write_text(yaml.safe_dump(spec))
    return path


def _cli_argv(opts, inp, out) -> list:
    argv = ["anonymize", str(inp), str(out), "--qi", ",".join(QI), "--k", str(K_ANON), "--method", opts["method"],
            "--seed", "7", "--no-dask-report", "--keep", ",".join(opts["keep"])]
    for key, flag in (("K", "--K"), ("partition_size", "--partition-size"), ("refine", "--refine"),
                      ("quality", "--quality")):
        if key in opts:
            argv += [flag, str(opts[key])]
    if "strata" in opts:
        argv += ["--strata", opts["strata"][0]] + (["--merge-small-strata"] if opts["merge_small_strata"] else [])
    if "missing" in opts:
        argv += ["--missing", "separate"]
    if "participation" in opts:
        argv += ["--participation", str(opts["participation"]), "--max-cell-failure", str(PBAR)]
    return argv


def _published(path: Path) -> pd.DataFrame:
    if path.is_dir():
        return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pandas()
    return pd.read_parquet(path)


def judge(release: pd.DataFrame, original: pd.DataFrame, case: dict, opts: dict) -> None:
    assert len(release) == len(original), "rows in = rows out"
    strata = list(opts.get("strata", []))
    cols = strata + QI
    sizes = release.groupby(cols, dropna=False, observed=True).size()
    need = binom_n_min(K_ANON, PI, PBAR) if case["participation"] == "constant" else K_ANON
    assert int(sizes.min()) >= need, f"a published tuple occurs {int(sizes.min())} < {need} times"
    if case["participation"] == "constant":
        worst = max(binom_failure(K_ANON, PI, int(n)) for n in sizes.unique())
        assert worst <= PBAR + 1e-12, f"a published cell fails with probability {worst:.3g} > {PBAR}"
    if case["participation"] == "column":
        # π_j are inputs, not published: each record's is read from the input by its id
        pis = original.set_index("id")["p"]
        for _, cell in release.groupby(cols, dropna=False, observed=True):
            q = poisson_binomial_failure(K_ANON, pis.loc[cell["id"]].to_numpy())
            assert q <= PBAR + 1e-12, f"a published cell fails with probability {q:.3g} > {PBAR}"
    if case["participation"] == "column":
        assert "p" not in release.columns, "the participation column was published"
    untouched = ["id"] + (["p"] if case["participation"] != "column" else []) + \
        [c for c in ("s", "t") if not (opts.get("merge_small_strata") and c in strata)]
    for c in untouched:
        a = np.sort(release[c].astype(str).to_numpy())
        b = np.sort(original[c].astype(str).to_numpy())
        assert (a == b).all(), f"non-QI column {c!r} changed"
    # the QIs are centroids: every published tuple's values lie within the input's range
    for c in QI:
        lo, hi = original[c].min(), original[c].max()
        vals = release[c].dropna().astype(float)
        assert ((vals >= float(lo) - 1e-3 * abs(float(lo)) - 1e-6) & (vals <= float(hi) + 1e-3 * abs(float(hi)) + 1e-6)).all()


CASES = all_pairs(FACTORS, applicable)


def test_the_design_covers_every_pair():
    names = list(FACTORS)
    universe = [dict(zip(names, v)) for v in itertools.product(*FACTORS.values())]
    universe = [c for c in universe if applicable(c)]
    assert 20 <= len(CASES) <= 60
    for a, b in itertools.combinations(names, 2):
        want = {(c[a], c[b]) for c in universe}
        got = {(c[a], c[b]) for c in CASES}
        assert want <= got, f"pairs of {a} × {b} not run: {sorted(want - got)[:3]}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c.values()))
def test_combination_runs_or_is_refused_in_one_line(case, client, tmp_path, capsys):
    df = make_frame()
    if case["missing"] == "separate":
        df = with_missing(df)
    opts = options(case)
    out = tmp_path / ("out" if case["input"] == "lake" else "out.parquet")
    refused = expected_refusal(case)
    if case["entry"] == "api":
        if case["input"] in ("pandas", "dask"):
            import dask.dataframe as dd

            data = df if case["input"] == "pandas" else dd.from_pandas(df, npartitions=3)
            if refused:
                with pytest.raises(ParameterError):
                    daskmicro.anonymize(data, client=client, **opts)
                return
            release, report = daskmicro.anonymize(data, client=client, **opts)
            if not isinstance(release, pd.DataFrame):  # a Dask release lives on the cluster
                release = client.compute(release).result()
            assert report.k_anonymity.ok
            judge(release, df, case, opts)
            return
        inp = _write_input(df, case["input"], tmp_path)
        if refused:
            with pytest.raises(ParameterError):
                daskmicro.anonymize_file(inp, out, client=client, dask_report=False, **opts)
            assert not out.exists()
            return
        daskmicro.anonymize_file(inp, out, client=client, dask_report=False, **opts)
    else:
        inp = _write_input(df, case["input"], tmp_path)
        if case["entry"] == "cli":
            # on the shared cluster, as the spec entry runs: the matrix varies the run, not the cluster
            # (the command line starting its own LocalCluster: test_adversarial.py, test_no_values.py)
            rc = main(_cli_argv(opts, inp, out) + ["--scheduler", client.scheduler.address])
        else:
            spec = _spec(case, opts, inp, out, tmp_path / "spec.yaml")
            rc = main(["run", str(spec), "--scheduler", client.scheduler.address])
        err = capsys.readouterr().err.strip().splitlines()
        if refused:
            assert rc == 2, err[-3:]
            assert err and (err[-1].startswith("daskmicro: error:") or "workflow spec" in err[-1]), err[-3:]
            assert not out.exists()
            return
        assert rc == 0, err[-3:]
    judge(_published(out), df, case, opts)


def test_the_readme_lists_exactly_the_refused_combinations():
    from daskmicro.config import rules_table

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert rules_table() in readme
