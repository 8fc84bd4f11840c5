"""The partitioned pipeline with and without PCL refinement, Parquet lake in → Parquet lake out.

    python benchmarks/bench_pcl_pipeline.py                       # 1M census-like, k = 10, 2 workers
    python benchmarks/bench_pcl_pipeline.py --quick               # default vs default + refine only
    python benchmarks/bench_pcl_pipeline.py --macro               # also macro="pcl" settings (slow)
    python benchmarks/bench_pcl_pipeline.py --macro --only macro  # only those

Same measurement as ``bench_pipeline.py`` (whose helpers it uses): wall time from reading the lake
to the committed release directory, cluster start-up and numba warm-up excluded; distortion
relative to exact MDAV on the same records (``benchmarks/exact_reference.py --n N`` once, cached
under ``benchmarks/.cache``).  For each setting the table shows the refinement stage's own wall
time and the SSE ratio after/before refinement.  The 1-minute load average is printed before
every run: the machine is shared, and a load above the worker count slows every figure.
"CPU s" is the CPU time of the client and the worker processes during the run (user + system),
"ref CPU" the CPU time inside the refinement tasks: both are much less sensitive to the load than
wall time, and CPU s / workers is a lower bound of the wall time on an idle machine.
Targets: ≤ 1.00× exact MDAV's distortion, ≤ 60 s.
"""

from __future__ import annotations

import _common  # noqa: F401  (one thread per process)

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

from bench_pipeline import CACHE, make_lake, run_once
from daskmicro import anonymize
from daskmicro.datasets import CENSUS_COLUMNS, census_like
from exact_reference import cached_reference_il

TARGET_RATIO = 1.00
TARGET_SECONDS = 60.0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its children (the workers) so far."""
    total = 0.0
    for p in [psutil.Process()] + psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def settings(quick: bool, macro: bool):
    P = {"method": "partitioned"}
    out = [
        ("partitioned P=50000 (default)", P),
        ("partitioned P=50000 + refine pcl ≤2 it (default)", {**P, "refine": "pcl"}),
    ]
    if quick:
        return out
    out += [
        ("partitioned P=50000 + refine pcl ≤1 it", {**P, "refine": "pcl", "refine_iter": 1}),
        ("partitioned P=50000 + refine pcl ≤4 it", {**P, "refine": "pcl", "refine_iter": 4}),
        ("partitioned P=20000", {**P, "partition_size": 20_000}),
        ("partitioned P=20000 + refine pcl ≤2 it", {**P, "partition_size": 20_000, "refine": "pcl"}),
        ("partitioned P=100000 + refine pcl ≤2 it", {**P, "partition_size": 100_000, "refine": "pcl"}),
    ]
    if macro:
        out += [
            ("partitioned P=50000 macro pcl ≤1 it", {**P, "macro": "pcl", "macro_iter": 1}),
            ("P=50000 macro pcl ≤1 it + refine pcl ≤2 it", {**P, "macro": "pcl", "macro_iter": 1, "refine": "pcl"}),
        ]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="only the default with and without refinement")
    ap.add_argument("--macro", action="store_true", help="add macro='pcl' settings")
    ap.add_argument("--only", metavar="TEXT", help="run only the settings whose label contains TEXT")
    a = ap.parse_args()
    n = int(a.n)
    from distributed import Client

    from daskmicro.runtime.cluster import local_cluster

    t0 = time.perf_counter()
    cluster = local_cluster(a.workers, dashboard_address=None)  # daskmicro's own worker settings
    client = Client(cluster)
    # warm-up: the workers load every compiled kernel (MDAV, PCL's auction) from numba's cache once
    anonymize(census_like(30_000), list(CENSUS_COLUMNS), 10, method="partitioned", partition_size=5_000,
              task_rows=10_000, client=client, seed=0, refine="pcl", macro="pcl", macro_iter=1)
    print(f"cluster start-up and warm-up: {time.perf_counter() - t0:.1f} s (not counted below)")
    _common.print_machine_info()

    lake_in = make_lake(n)
    ref_il = cached_reference_il(n)
    print(f"n = {n:,} census-like × 13, k = 10, {len(client.scheduler_info()['workers'])} workers, "
          f"{os.cpu_count()} CPUs on the machine")
    print(f"exact MDAV IL: {ref_il:.4f}" if ref_il else "exact MDAV IL: not cached (run exact_reference.py)")
    head = (f"{'setting':<46} {'load':>5} {'wall s':>7} {'CPU s':>7} {'IL':>7} {'× exact':>8} {'refine s':>8} "
            f"{'ref CPU':>7} {'SSE ratio':>9}  targets")
    print(head)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        for i, (label, kw) in enumerate(settings(a.quick, a.macro)):
            if a.only and a.only not in label:
                continue
            load = os.getloadavg()[0]
            out = Path(tmp) / f"out-{i}"
            c0 = cpu_seconds()
            wall, rep = run_once(client, lake_in, out, **kw)
            cpu = cpu_seconds() - c0
            shutil.rmtree(out, ignore_errors=True)
            ratio = rep.information_loss / ref_il if ref_il else float("nan")
            r = rep.pipeline.get("refine") or {}
            t_ref = rep.timings.get("refine")
            verdict = []
            if ref_il:
                verdict.append("IL " + ("PASS" if ratio <= TARGET_RATIO else "FAIL"))
            verdict.append("time " + ("PASS" if wall <= TARGET_SECONDS else "FAIL"))
            print(f"{label:<46} {load:5.1f} {wall:7.2f} {cpu:7.1f} {rep.information_loss:7.4f} {ratio:8.4f} "
                  f"{t_ref if t_ref is not None else float('nan'):8.2f} {r.get('task_cpu_seconds', float('nan')):7.1f} "
                  f"{r.get('sse_ratio', float('nan')):9.4f}  "
                  f"{', '.join(verdict)}", flush=True)
            stages = " ".join(f"{k}={v:.1f}" for k, v in rep.timings.items() if k != "total")
            print(f"{'':<46}   stages (s): {stages}; min cell {rep.min_cell_size}", flush=True)
    print(f"load average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
