"""The secondary commands (``run``, ``spec``, ``assign``, ``audit``) on inputs that are legal to
write but wrong: one line naming the parameter, column or file, exit status 2, nothing written,
nothing the user owns replaced."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


def _tree(root: Path) -> dict:
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _records(n=120, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.normal(50, 10, n), "b": rng.normal(1000, 200, n), "c": rng.integers(0, 100, n)})


_SPEC = """\
version: 1
name: t
input:
  path: in.parquet
qi: [a, b, c]
k: 5
method: mdav
output:
  path: rel.parquet
  overwrite: true
report:
  path: {report}
cluster:
  workers: 1
series:
  ledger: off
"""


@pytest.mark.parametrize("report", ["w.yaml", "./w.yaml"])
def test_a_workflow_never_writes_its_report_over_its_own_spec(tmp_path, cli, report):
    _records().to_parquet(tmp_path / "in.parquet")
    (tmp_path / "w.yaml").write_text(_SPEC.format(report=report))
    before = _tree(tmp_path)
    r = cli("run", tmp_path / "w.yaml", "--workers", "1", "--quiet")
    assert r.returncode == 2, r.stdout
    line = r.stderr.strip()
    assert "\n" not in line and "w.yaml" in line and "report" in line
    assert _tree(tmp_path) == before


# --------------------------------------------------------------------------- spec and assign: the one QI rule


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.assign(c=d["c"] + 2 ** 53), ["'c'", "2^53"]),            # rounded by float64: refused as anonymize does
    (lambda d: d.assign(a=d["a"] * 1e300), ["'a'", "1e+150"]),             # squared distances overflow
    (lambda d: d.assign(c=d["c"].astype("Int64").mask(d.index == 3)), ["'c'", "missing"]),
])
def test_spec_and_assign_read_qi_columns_by_the_rule_of_every_command(tmp_path, cli, edit, words):
    from daskmicro import build_spec
    from daskmicro.errors import InputError
    from daskmicro.kernels import mdav, standardize

    bad = edit(_records())
    bad.to_parquet(tmp_path / "bad.parquet")
    model = _records(seed=1)
    spec = build_spec(model[["a", "b", "c"]].to_numpy(float), mdav(standardize(model[["a", "b", "c"]].to_numpy(float))[0], 5),
                      ["a", "b", "c"], 5)
    (tmp_path / "good.spec.json").write_text(__import__("json").dumps(spec))
    before = _tree(tmp_path)
    for args in (["spec", tmp_path / "bad.parquet", tmp_path / "s.json", "--qi", "a,b,c", "--k", "5"],
                 ["assign", "--spec", tmp_path / "good.spec.json", tmp_path / "bad.parquet", tmp_path / "out.parquet"]):
        r = cli(*args)
        line = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(line) == 1 and all(w in line[0] for w in words), (args[0], r.stderr)
        assert _tree(tmp_path) == before
    with pytest.raises(InputError, match=words[0]):
        __import__("daskmicro").assign(spec, bad)


def test_assign_refuses_records_whose_distances_would_overflow_instead_of_picking_a_cell(tmp_path):
    """A record far outside the spec's scale squared to inf against every cell: every cell tied and
    the record went to cell 0 whatever its values."""
    from daskmicro import assign, build_spec
    from daskmicro.errors import InputError
    from daskmicro.kernels import mdav, standardize

    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 2)) * 1e-10        # a model measured in tiny units
    spec = build_spec(X, mdav(standardize(X)[0], 5), ["x", "y"], 5)
    far = pd.DataFrame({"x": [1e145, -1e145], "y": [0.0, 0.0]})   # within ±1e150, z-scores beyond it
    with np.errstate(all="raise"), pytest.raises(InputError, match="'x'") as err:
        assign(spec, far)
    assert "'y'" not in str(err.value) and "1e+145" not in str(err.value)
    near = pd.DataFrame({"x": X[:3, 0], "y": X[:3, 1]})
    assert assign(spec, near).shape == (3,)


# --------------------------------------------------------------------------- audit


def test_audit_counts_cells_by_the_ids_present_not_by_the_largest_id(tmp_path, cli):
    """Cell ids counted by a table as long as the largest id: one id of 10^12 took terabytes and
    ended as an internal error with exit status 1, which audit uses for 'k failed'."""
    cells = np.r_[np.repeat(np.arange(4), 5), [10 ** 12]]
    pd.DataFrame({"cell": cells}).to_parquet(tmp_path / "assigned.parquet")
    r = cli("audit", tmp_path / "assigned.parquet", "--k", "5", "--report", tmp_path / "audit.json")
    assert r.returncode == 1 and "FAILED in 1 cell(s), 1 unprotected record(s)" in r.stdout, r.stderr
    report = __import__("json").loads((tmp_path / "assigned.parquet").with_name("audit.json").read_text())
    assert report["n_cells"] == 10 ** 12 + 1 and report["empty_cells"] == 10 ** 12 + 1 - 5
    assert report["failed_cells"] == [{"cell": 10 ** 12, "active": 1}]
    pd.DataFrame({"cell": np.r_[cells[:-1], [2 ** 60]]}).to_parquet(tmp_path / "beyond.parquet")
    r = cli("audit", tmp_path / "beyond.parquet", "--k", "5")
    assert r.returncode == 2 and "'cell'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- the ledger turned off by the environment


@pytest.mark.parametrize("env", ["off", "OFF", " Off "])
def test_a_ledger_turned_off_by_the_environment_is_off_for_every_rule_and_every_command(tmp_path, monkeypatch, cli, env):
    """``DASKMICRO_LEDGER=OFF`` made a ledger directory named ``OFF`` in the working directory (``--ledger OFF``
    is off), and with the ledger off by the environment --new-series / --id-column were silently ignored
    (refused only after an explicit --ledger off)."""
    from daskmicro import anonymize
    from daskmicro.errors import ParameterError

    monkeypatch.setenv("DASKMICRO_LEDGER", env)
    monkeypatch.chdir(tmp_path)
    df = _records().assign(pid=np.arange(120))
    for bad in (dict(new_series=True), dict(id_column="pid")):
        with pytest.raises(ParameterError, match=next(iter(bad))) as err:
            anonymize(df, qi=["a", "b", "c"], k=5, keep=["pid"], **bad)
        assert "DASKMICRO_LEDGER=off" in str(err.value) and "\n" not in str(err.value)
    anonymize(df, qi=["a", "b", "c"], k=5, keep=["pid"])   # a trial run: nothing recorded, nowhere
    assert os.listdir(tmp_path) == []
    df.to_parquet(tmp_path / "in.parquet")
    for option in (["--id-column", "pid"], ["--new-series"]):
        r = cli("spec", "in.parquet", "s.json", "--qi", "a,b,c", "--k", "5", *option)
        assert r.returncode == 2 and option[0] in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert os.listdir(tmp_path) == ["in.parquet"]


# --------------------------------------------------------------------------- warmup


def test_warmup_starts_at_most_one_process_per_compiled_unit(monkeypatch, cli):
    """``--jobs`` had no ceiling: ``warmup --jobs 100000`` spawned processes (each importing numba) one per
    job until the machine gave out, for 20 units to compile."""
    import concurrent.futures

    from daskmicro.runtime.warmup import KERNEL_SETS, units

    started = []

    class Pool:
        def __init__(self, max_workers, mp_context=None):
            started.append(max_workers)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, fn, items):
            return [None for _ in items]

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Pool)
    r = cli("warmup", "--jobs", "100000", "--quiet")
    assert r.returncode == 0, r.stderr
    assert started == [len(units(list(KERNEL_SETS)))]


# --------------------------------------------------------------------------- LocalCluster size


@pytest.mark.parametrize("command", ["anonymize", "run"])
def test_a_local_cluster_beyond_the_machines_memory_is_refused_before_it_starts(tmp_path, cli, monkeypatch, command):
    """``--workers`` / ``cluster.workers`` had no ceiling: a LocalCluster of 10^6 worker processes was started."""
    import distributed

    started = []

    def cluster(*args, **kwargs):
        started.append(kwargs.get("n_workers"))
        raise RuntimeError("a LocalCluster was started")

    monkeypatch.setattr(distributed, "LocalCluster", cluster)
    _records().to_parquet(tmp_path / "in.parquet")
    (tmp_path / "w.yaml").write_text(_SPEC.format(report="rel.report.json").replace("workers: 1", "workers: 1000000"))
    before = _tree(tmp_path)
    if command == "anonymize":
        r = cli("anonymize", tmp_path / "in.parquet", tmp_path / "out.parquet", "--qi", "a,b,c", "--k", "5",
                "--workers", "1000000", "--method", "partitioned", "--quiet")
    else:
        r = cli("run", tmp_path / "w.yaml", "--quiet")
    line = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(line) == 1 and "--workers" in line[0] and "1,000,000" in line[0], r.stderr
    assert started == [] and _tree(tmp_path) == before


# --------------------------------------------------------------------------- generated data sets


def test_a_data_set_larger_than_the_machine_is_refused_in_one_line(tmp_path, cli):
    """demo-data --n 10^13 ended as 'internal error (MemoryError)' (exit 1), a gaussian --m 10^6 the same
    way, after the directories on the way to the output had been made."""
    from daskmicro.datasets import census_like, correlated_gaussian
    from daskmicro.errors import ParameterError

    for make in (lambda: census_like(10 ** 13), lambda: correlated_gaussian(10, m=10 ** 6)):
        with pytest.raises(ParameterError, match="memory"):
            make()
    for args in (["--n", str(10 ** 13)], ["--n", "10", "--kind", "gaussian", "--m", str(10 ** 6)]):
        r = cli("demo-data", tmp_path / "new" / "sub" / "big.parquet", *args)
        line = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(line) == 1 and "GiB" in line[0], r.stderr
        assert os.listdir(tmp_path) == []


def test_spec_with_the_ledger_reads_only_the_columns_a_spec_publishes(tmp_path, cli):
    """With a ledger, spec ran a release of the whole model table: a column named like an identifier was
    refused with advice to use --drop / --keep, options spec does not have."""
    _records().assign(record_id=np.arange(120), region="n").to_parquet(tmp_path / "model.parquet")
    args = ["spec", tmp_path / "model.parquet", tmp_path / "s.json", "--qi", "a,b,c", "--k", "5",
            "--ledger", tmp_path / "ledger"]
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    again = cli(*args, "--overwrite")   # the same series: the frozen cells, the same spec
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == first.stdout.splitlines()[-1]
    r = cli(*args[:-1], tmp_path / "ledger2", "--id-column", "pid", "--overwrite")
    assert r.returncode == 2 and "'pid'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ledger2").exists()


def test_spec_with_certain_participation_prints_a_table_failure_of_0_not_minus_0(tmp_path, cli):
    _records().to_parquet(tmp_path / "m.parquet")
    r = cli("spec", tmp_path / "m.parquet", tmp_path / "s.json", "--qi", "a,b,c", "--k", "5",
            "--participation", "1", "--max-cell-failure", "0.5")
    assert r.returncode == 0 and "t̄ = 0" in r.stdout and "-0" not in r.stdout, r.stdout
