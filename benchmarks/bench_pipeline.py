"""The partitioned pipeline, Parquet lake in → Parquet lake out, on a LocalCluster.

    python benchmarks/bench_pipeline.py                     # 1M rows: settings table vs exact MDAV
    python benchmarks/bench_pipeline.py --scale 1e6,4e6     # scaling: time, slope, peak memory

Time is wall time from reading the lake to the committed release directory (cluster start-up
excluded and printed apart).  Distortion is compared with exact MDAV on the same records: run
``benchmarks/exact_reference.py --n N`` once (minutes) and it is read from the cache.
Peak memory is the largest sum of RSS over the client and worker processes during the run, minus
their sum before it (after the warm-up run), compared with the raw QI bytes (n × 13 × 8).
"""

from __future__ import annotations

import _common  # noqa: F401  (one thread per process)

import argparse
import math
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from daskmicro import anonymize_file
from daskmicro.datasets import CENSUS_COLUMNS, census_like

from exact_reference import cached_reference_il

CACHE = Path(__file__).parent / ".cache"


#: Larger lakes are generated file by file (see make_lake).
STREAM_ROWS = 16_000_000


def make_lake(n: int, seed: int = 0, files: int | None = None) -> Path:
    path = CACHE / f"lake_census_like_n{n}_seed{seed}"
    if path.exists():
        return path
    tmp = CACHE / f".{path.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if n > STREAM_ROWS:  # file by file, 1,000,000 rows each (its own seed): never the whole table in memory
        files = files or math.ceil(n / 1_000_000)
        step = math.ceil(n / files)
        for i in range(files):
            rows = min(step, n - i * step)
            census_like(rows, seed=(seed << 20) + i + 1).to_parquet(tmp / f"part-{i:04d}.parquet", index=False)
        tmp.rename(path)
        return path
    files = files or max(1, math.ceil(n / 125_000))
    step = math.ceil(n / files)
    df = census_like(n, seed=seed)
    for i in range(files):
        df.iloc[i * step:(i + 1) * step].to_parquet(tmp / f"part-{i:04d}.parquet", index=False)
    del df
    tmp.rename(path)
    return path


class PeakRSS:
    """Samples the summed RSS of this process and its children every 50 ms."""

    def __init__(self):
        self.pid = os.getpid()
        self.peak = 0
        self._stop = threading.Event()

    def total(self) -> int:
        return _common.tree_rss(self.pid)

    def __enter__(self):
        self.base = self.total()
        self.peak = self.base
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.total())
            time.sleep(0.05)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def memory_kwargs(choice: str, workers: int) -> dict:
    """LocalCluster memory limit: 'daskmicro' (what ``daskmicro anonymize`` gives the LocalCluster it
    starts, from the default task size and rows per file of 13 QI columns), 'dask' (Dask's default,
    the machine's share) or a size."""
    from daskmicro.runtime.cluster import worker_memory_limit
    from daskmicro.config import DEFAULT_ROWS_PER_FILE, DEFAULT_TASK_ROWS

    if choice == "dask":
        return {}
    if choice == "daskmicro":
        m = len(CENSUS_COLUMNS)
        return {"memory_limit": worker_memory_limit(max(DEFAULT_TASK_ROWS * 8 * (m + 3),
                                                        DEFAULT_ROWS_PER_FILE * 8 * (m + 2)), workers)}
    return {"memory_limit": choice}


def run_once(client, lake_in: Path, out: Path, **kw):
    """One run through the planner, lake in → committed lake out (written files read back and
    verified), as ``daskmicro anonymize LAKE OUT`` does."""
    import pyarrow.parquet as pq

    # the QIs by the lake's own names: bench_quality.py caches the same census-like data under the same
    # path with columns x01 … x13
    qi = list(pq.read_schema(sorted(Path(lake_in).glob("*.parquet"))[0]).names)
    t0 = time.perf_counter()
    report = anonymize_file(lake_in, out, qi, 10, seed=0, client=client, dask_report=False, **kw)
    assert report.verified and (out / "_SUCCESS").exists()
    return time.perf_counter() - t0, report


def settings_table(client, n: int, tmpdir: Path, settings):
    lake_in = make_lake(n)
    ref_il = cached_reference_il(n)
    print(f"n = {n:,} census-like × 13, k = 10, {len(client.scheduler_info()['workers'])} workers")
    print(f"exact MDAV IL: {ref_il:.4f}" if ref_il else "exact MDAV IL: not cached (run exact_reference.py)")
    print(f"{'setting':<44} {'wall s':>7} {'IL':>7} {'× exact':>8}  stages (s)")
    for label, kw in settings:
        out = tmpdir / f"out-{abs(hash(label))}"
        wall, rep = run_once(client, lake_in, out, **kw)
        shutil.rmtree(out, ignore_errors=True)
        ratio = f"{rep.information_loss / ref_il:8.4f}" if ref_il else "     n/a"
        t = rep.timings
        stages = " ".join(f"{k}={v:.1f}" for k, v in t.items() if k != "total")
        print(f"{label:<44} {wall:7.2f} {rep.information_loss:7.4f} {ratio}  {stages}", flush=True)


def scaling(client, sizes, tmpdir: Path, kw):
    print(f"{'n':>12} {'wall s':>8} {'IL':>7} {'peak MiB':>9} {'raw QI MiB':>10} {'peak/raw':>8}  dominant stage")
    points = []
    for n in sizes:
        lake_in = make_lake(n)
        out = tmpdir / f"scale-{n}"
        with PeakRSS() as mem:
            wall, rep = run_once(client, lake_in, out, **kw)
        shutil.rmtree(out, ignore_errors=True)
        raw = n * 13 * 8
        extra = mem.peak - mem.base
        t = {k: v for k, v in rep.timings.items() if k != "total"}
        dom = max(t, key=t.get)
        points.append((n, wall))
        print(f"{n:>12,} {wall:8.1f} {rep.information_loss:7.4f} {extra / 2**20:9.0f} {raw / 2**20:10.0f} "
              f"{extra / raw:8.2f}  {dom} ({t[dom]:.1f} s of {sum(t.values()):.1f})", flush=True)
        print(" " * 14 + "stages (s): " + " ".join(f"{k}={v:.1f}" for k, v in t.items())
              + f"; {rep.pipeline['top_cells']} top cells, {rep.pipeline['partitions']} partitions", flush=True)
    if len(points) > 1:
        x = np.log([p[0] for p in points])
        y = np.log([p[1] for p in points])
        slope = np.polyfit(x, y, 1)[0]
        print(f"log-log slope of wall time vs n: {slope:.3f} (target ≤ 1.15)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--scale", help="comma-separated sizes for the scaling run, e.g. 1e6,4e6,16e6")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="only the default setting")
    ap.add_argument("--quality", default="balanced", help="quality setting of the --scale runs (balanced, high)")
    ap.add_argument("--memory-limit", default="daskmicro", help="per worker: 'daskmicro' (default: what daskmicro "
                    "gives its LocalCluster), 'dask' (Dask's default, the machine's share) or a size such as 3GiB")
    a = ap.parse_args()
    from distributed import Client

    from daskmicro.runtime.cluster import local_cluster

    t0 = time.perf_counter()
    # daskmicro's own worker settings (memory limit: see --memory-limit)
    cluster = local_cluster(a.workers, dashboard_address=None, **memory_kwargs(a.memory_limit, a.workers))
    client = Client(cluster)
    # warm-up, one small lake round trip: workers load the compiled kernels from numba's cache and
    # import pyarrow's Parquet readers and writers once (a one-time ~200 MiB of code, not data)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        run_once(client, make_lake(60_000), Path(tmp) / "out", method="partitioned", partition_size=5_000,
                 task_rows=20_000)
    print(f"cluster start-up and warm-up: {time.perf_counter() - t0:.1f} s (not counted below)")
    _common.print_machine_info()
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        tmpdir = Path(tmp)
        if a.scale:
            scaling(client, [int(float(s)) for s in a.scale.split(",")], tmpdir,
                    {"method": "partitioned", "quality": a.quality})
        else:
            settings = [("partitioned (default: P=50000, ν=1)", {"method": "partitioned"})]
            if not a.quick:
                P = {"method": "partitioned", "partition_size": 20_000}
                settings += [
                    ("partitioned P=10000", {"method": "partitioned", "partition_size": 10_000}),
                    ("partitioned P=20000", P),
                    ("partitioned P=100000 (task_rows 250000)", {"method": "partitioned", "partition_size": 100_000}),
                    ("partitioned P=20000 ν=0.5 K=1000", {**P, "nu": 0.5}),
                    ("partitioned P=20000 ν=0.5 K=5000", {**P, "nu": 0.5, "K": 5000}),
                    ("partitioned P=20000 ν=0 (PCA-MDAV everywhere)", {**P, "nu": 0.0}),
                    ("partitioned + repair (refine=pcl, 1 iteration)",
                     {"method": "partitioned", "refine": "pcl", "refine_iter": 1}),
                    ("partitioned + repair (refine=pcl, default 2)", {"method": "partitioned", "refine": "pcl"}),
                ]
            settings_table(client, int(a.n), tmpdir, settings)
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
