"""The default run of this checkout against the default run of an earlier commit, side by side:

    python benchmarks/bench_vs_revision.py                  # against 4c28746, the pipeline before the improvement stage
    python benchmarks/bench_vs_revision.py --rev HEAD~3 --rounds 4 --n 1e6

It checks that the default is no slower than the earlier code's default — by default that of
the pipeline before the improvement stage.  The earlier commit is checked out into a temporary git worktree and both
codes run the same command — ``anonymize_file`` of the 1M census-like and 1M correlated Gaussian
(m = 13) Parquet lakes of ``bench_quality.py`` (cached), k = 10, seed 0, the defaults, 2 worker
processes of one thread (the LocalCluster each code starts for its own runs), committed Parquet out — in their own processes, alternately, ``--rounds``
times, so that both see the same machine.  Each process runs every data set once before it is
timed (compiling the kernels of a commit whose compile cache is cold) and then ``--repeat`` times.
Printed: every wall time, the median per code and the ratio, the information loss of each code,
and each code's median over the **yardstick**: exact MDAV of the first 50,000 records of the
census-like lake (z-scored, k = 10, one thread, this checkout's kernel), timed in the parent
process before every child run, so that it sees the machine as the runs do.
"""

from __future__ import annotations

import _common  # noqa: F401  (one thread per process)

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = ("census_like", "gaussian")


def run_code(n: int, repeat: int, out_dir: str) -> None:
    """In a child process: the default run on each data set, once untimed and then ``repeat`` times."""
    import pyarrow.parquet as pq
    from distributed import Client, LocalCluster

    import daskmicro

    try:   # the LocalCluster each code starts for a run of its own (its workers' environment and settings)
        from daskmicro.runtime.cluster import local_cluster
    except ImportError:   # a code from before it had one
        def local_cluster(n, dashboard_address=None):
            return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=dashboard_address)

    result = {"code": str(Path(daskmicro.__file__).parent), "walls": {}, "il": {}}
    with local_cluster(2, dashboard_address=None) as cl, Client(cl) as client:
        for data in DATA:
            lake = HERE / ".cache" / f"lake_{data}_n{n}_seed0"   # made by the parent (bench_quality.make_lake)
            qi = list(pq.read_schema(sorted(lake.glob("*.parquet"))[0]).names)
            walls = []
            for r in range(repeat + 1):
                out = Path(out_dir) / f"out-{data}-{r}"
                t0 = time.perf_counter()
                rep = daskmicro.anonymize_file(lake, out, qi, 10, seed=0, client=client, dask_report=False)
                wall = time.perf_counter() - t0
                shutil.rmtree(out, ignore_errors=True)
                if r:
                    walls.append(wall)
            result["walls"][data] = walls
            result["il"][data] = rep.information_loss
    print("RESULT " + json.dumps(result), flush=True)


#: Records of the yardstick run of exact MDAV.
YARDSTICK_ROWS = 50_000


def yardstick(lake: Path) -> float:
    """Seconds of exact MDAV (k = 10) of the first YARDSTICK_ROWS records of ``lake``, z-scored
    (the compiled kernel loaded before the clock starts); the fastest of three."""
    import numpy as np
    import pyarrow.dataset as ds

    from daskmicro.kernels import standardize
    from daskmicro.kernels.mdav import mdav

    X = ds.dataset(lake, format="parquet").head(YARDSTICK_ROWS).to_pandas().to_numpy(np.float64)
    Z = np.ascontiguousarray(standardize(X)[0])
    mdav(Z[:200], 10)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        mdav(Z, 10)
        best = min(best, time.perf_counter() - t0)
    return best


def child(code_root: Path, n: int, repeat: int, tmp: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code_root), str(HERE)])}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--n", str(n), "--repeat",
                           str(repeat), "--tmp", str(tmp)], env=env, capture_output=True, text=True, cwd=str(tmp))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"run of {code_root} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="4c28746", help="the earlier commit (default: the pipeline before the improvement stage)")
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two codes")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per data set in each process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    a = ap.parse_args()
    n = int(a.n)
    if a.child:
        run_code(n, a.repeat, a.tmp)
        return
    _common.print_machine_info()
    from bench_quality import make_lake

    for d in DATA:
        make_lake(n, d)
    rev = subprocess.run(["git", "rev-parse", "--short", a.rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="daskmicro-rev-") as td:
        tmp = Path(td)
        old = tmp / "worktree"
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(old), rev], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            walls = {"this": {d: [] for d in DATA}, rev: {d: [] for d in DATA}}
            il, sticks = {}, []
            census_lake = HERE / ".cache" / f"lake_census_like_n{n}_seed0"
            for r in range(a.rounds):
                for label, root in (("this", ROOT), (rev, old)):
                    load = os.getloadavg()[0]
                    sticks.append(yardstick(census_lake))
                    got = child(root, n, a.repeat, tmp)
                    for d in DATA:
                        walls[label][d] += got["walls"][d]
                        il[(label, d)] = got["il"][d]
                    print(f"round {r + 1}, {label:>8} (load {load:.1f}, yardstick {sticks[-1]:.3f} s, "
                          f"{got['code']}): " + "; ".join(
                        f"{d} " + " ".join(f"{w:.2f}" for w in got["walls"][d]) for d in DATA), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    print(f"\nn = {n:,}, k = 10, defaults, 2 worker processes; this checkout = {head} (with its uncommitted "
          f"changes), earlier = {rev}")
    stick = statistics.median(sticks)
    print(f"yardstick (exact MDAV, {YARDSTICK_ROWS:,} records, k = 10, one thread): median {stick:.3f} s "
          f"(range {min(sticks):.3f}–{max(sticks):.3f}, {len(sticks)} timings)")
    print(f"{'data':<12} {'this: median s':>15} {rev + ': median s':>16} {'this / earlier':>15} "
          f"{'this / yardstick':>17} {'earlier / yardstick':>20} {'IL this':>9} {'IL earlier':>11}")
    for d in DATA:
        mt, mo = statistics.median(walls["this"][d]), statistics.median(walls[rev][d])
        print(f"{d:<12} {mt:15.2f} {mo:16.2f} {mt / mo:15.3f} {mt / stick:17.2f} {mo / stick:20.2f} "
              f"{il[('this', d)]:9.4f} {il[(rev, d)]:11.4f}")


if __name__ == "__main__":
    main()
