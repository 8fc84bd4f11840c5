"""The kernels a run needs are compiled before its stages, once per machine, with the one
specialization runs use."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

from daskmicro.kernels import _blocktree as bt
from daskmicro.kernels.mdav import compile_units, mdav
from daskmicro.runtime.warmup import KERNEL_SETS, kernel_sets, units, warm


def test_tree_like_is_typed_like_a_real_index():
    X = np.random.default_rng(0).normal(size=(300, 5))
    assert numba.typeof(bt.tree_like(5)) == numba.typeof(bt.build(X, 16, 4))


def test_after_the_warm_up_a_run_compiles_nothing_and_every_kernel_has_one_specialization():
    from numba.core import event

    warm(["mdav", "partitioned", "improve"])
    rng = np.random.default_rng(1)
    with event.install_recorder("numba:compile") as rec:
        for n, m, k in ((400, 3, 3), (5000, 7, 5)):  # a rebuild of the index happens at n = 5000
            labels = mdav(rng.normal(size=(n, m)), k)
            assert np.bincount(labels).min() >= k
    assert rec.buffer == [], [e.data.get("dispatcher") for _, e in rec.buffer]
    for name, dispatcher, sig, _ in compile_units():
        assert len(dispatcher.signatures) == 1, (name, dispatcher.signatures)
        assert not any(isinstance(t, numba.types.Literal) for t in dispatcher.signatures[0]), name


def test_kernel_sets_follow_the_methods_a_run_uses():
    assert kernel_sets(["mdav"]) == ["mdav"]
    assert kernel_sets(["partitioned"]) == ["mdav", "partitioned"]
    assert kernel_sets(["partitioned"], nu=0.5) == ["mdav", "partitioned", "pca"]
    assert kernel_sets(["partitioned"], refine="pcl") == ["mdav", "partitioned", "pcl"]
    assert kernel_sets(["pca-mdav", "mdav"]) == ["mdav", "partitioned", "pca"]
    assert kernel_sets(["partitioned"], improve=True) == ["mdav", "partitioned", "improve"]
    names = [u.name for u in units(["pcl"])]
    assert names.index("mdav") < names.index("partitioned") < names.index("pcl")  # leaf first
    with pytest.raises(ValueError, match="unknown kernel set 'gpu'"):
        units(["gpu"])
    for s, us in KERNEL_SETS.items():
        for u in us:
            assert all(d == "mdav" or d in KERNEL_SETS for d in u.deps), (s, u)


def test_units_start_with_the_longest_chain_and_keep_every_callee_first():
    order = units(["mdav", "partitioned", "pca", "pcl", "improve", "incremental"])
    names = [u.name for u in order]
    assert len(names) == len(set(names))
    for i, u in enumerate(order):
        assert all(names.index(d) < i for d in u.deps if d in names), (u.name, names)
    # the index build heads the longest chain (index -> MDAV loop -> the methods built on it) ...
    assert names[0] == "mdav.tree"
    # ... and the improvement kernel, which calls nothing, waits until the MDAV loop can be taken:
    # it fills the time one process spends on that loop instead of leaving the other idle
    assert names.index("improve") > names.index("mdav")


_WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from daskmicro.runtime.warmup import Unit, run_units

    store, lock_dir, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    ran = []
    started = {}  # unit -> the cache entries present when this process started it

    def make(name):
        def run():
            started[name] = sorted(p.name for p in store.iterdir())
            # a stand-in for numba's cache: the first process to get here "compiles" (slowly) and
            # writes the entry; the others find it
            entry = store / name
            if not entry.exists():
                time.sleep(0.4)
                entry.write_text(str(os.getpid()))
                ran.append(name)
        return run

    deps = {"a": (), "b": (), "c": (), "d": (), "e": ("a", "b"), "f": ("c", "d"), "top": ("e", "f")}
    run_units([Unit(n, make(n), d) for n, d in deps.items()], lock_dir)
    out.write_text(json.dumps({"ran": ran, "started": started, "seen": sorted(p.name for p in store.iterdir())}))
""")


def test_processes_of_a_machine_share_the_units_instead_of_each_running_all(tmp_path):
    store, locks = tmp_path / "store", tmp_path / "locks"
    store.mkdir()
    locks.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    outs = [tmp_path / f"out{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, str(script), str(store), str(locks), str(o)]) for o in outs]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    results = [json.loads(o.read_text()) for o in outs]
    ran = [r["ran"] for r in results]
    # every unit ran exactly once on the machine, and both processes took a share
    assert sorted(ran[0] + ran[1]) == ["a", "b", "c", "d", "e", "f", "top"]
    assert ran[0] and ran[1]
    # each process saw everything at the end
    assert all(r["seen"] == ["a", "b", "c", "d", "e", "f", "top"] for r in results)
    # a unit started only once the units it calls were in the cache, as seen by the process that
    # started it at that moment (whichever process had compiled them)
    for r in results:
        assert set(r["started"]) == {"a", "b", "c", "d", "e", "f", "top"}
        for unit, deps in (("e", "ab"), ("f", "cd"), ("top", "ef")):
            assert set(deps) <= set(r["started"][unit]), (unit, r["started"][unit])


def test_a_run_reports_the_kernel_warm_up_apart_from_its_stages(tmp_path):
    import pandas as pd

    import daskmicro

    warm(["mdav"])  # the cache is warm from here on (compiled now if this test runs alone)
    df = pd.DataFrame(np.random.default_rng(2).normal(size=(600, 3)), columns=["a", "b", "c"])
    out = tmp_path / "out.parquet"
    df.to_parquet(tmp_path / "in.parquet")
    report = daskmicro.anonymize_file(str(tmp_path / "in.parquet"), str(out), qi=["a", "b", "c"], k=3, seed=0)
    data = json.loads(Path(report.paths["report"]).read_text()) if "report" in report.paths else report.to_dict()
    c = data["compile"]
    assert c["kernel_sets"][0] == "mdav" and c["seconds"] >= 0 and c["workers"]
    assert "kernel compile" not in data["timings"] and "kernel load" not in data["timings"]
    # nothing compiled, and the summary says so
    assert c["compiled"] is False
    assert "kernels loaded from the cache" in report.summary(verbose=True)
    assert "kernel" not in report.summary()
