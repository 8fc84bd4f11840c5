"""Distortion against time for the ``quality`` settings, in one run:

    python benchmarks/bench_quality.py                      # 1M census-like + 1M Gaussian (m = 13), k = 10; Census, EIA
    python benchmarks/bench_quality.py --n 2e5 --only default,high --no-census       # a quick look
    python benchmarks/bench_quality.py --only "default,quality='high'" --no-census --rounds 3   # the time ratio

1. **1M census-like and 1M correlated Gaussian** (m = 13), k = 10, Parquet lake in → committed
   Parquet lake out (``anonymize_file``, 2 worker processes, warm): per setting the wall time,
   the information loss, its ratio to exact MDAV on the same records (cached by
   ``exact_reference.py --n N [--data gaussian]``), the improvement stage's own time, and the
   1-minute load average before the run (the machine is shared; a load above 2 slows every figure).
   Settings: the default (``quality="balanced"``), ``quality="high"``, and the knobs tried —
   the pipeline without the improvement stage (the earlier default), "high" as it was
   before its PCL step, "high" with smaller top cells, one PCL iteration or no moves
   after it, the balanced stage with fewer sweeps or other partition sizes, and PCL refinement
   with and without the stage.
2. **Census** (1080 × 13) and **EIA** (4092 × 11), the CASC reference sets shipped in
   ``daskmicro/data``, k = 3, 5, 10, one thread in this process: exact
   MDAV, PCL (noisy variant, the kernel's defaults) and ``anonymize(..., quality="high")``
   (exact MDAV + the improvement pass), information loss and seconds.

Settings that are not user options (no improvement, one sweep) are set through
:data:`daskmicro.config.QUALITY` for the duration of one run.
"""

from __future__ import annotations

import _common  # noqa: F401  (one thread per process)

import argparse
import contextlib
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from daskmicro import anonymize, anonymize_file, information_loss, mdav, standardize
from daskmicro.config import QUALITY
from exact_reference import CACHE, DATA, cached_reference_il

K = 10


def make_lake(n: int, data: str, seed: int = 0) -> Path:
    """A directory of Parquet files of 125,000 rows, cached; columns x01 … x13 (the census-like lake
    of ``bench_pipeline.py``, with its column names, is the same data and is used when present)."""
    path = CACHE / f"lake_{data}_n{n}_seed{seed}"
    if path.exists():
        return path
    tmp = CACHE / f".{path.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    X = DATA[data](n, seed)
    files = max(1, math.ceil(n / 125_000))
    step = math.ceil(n / files)
    for i in range(files):
        pd.DataFrame(X[i * step:(i + 1) * step], columns=qi_names(X.shape[1])).to_parquet(
            tmp / f"part-{i:04d}.parquet", index=False)
    tmp.rename(path)
    return path


def qi_names(m: int = 13) -> list[str]:
    return [f"x{j + 1:02d}" for j in range(m)]


@contextlib.contextmanager
def quality_override(name: str | None, **values):
    """Temporarily change one entry of QUALITY (the knobs that are not user options)."""
    if name is None:
        yield
        return
    old = dict(QUALITY[name])
    QUALITY[name].update(values)
    try:
        yield
    finally:
        QUALITY[name].clear()
        QUALITY[name].update(old)


#: (label, anonymize_file options, QUALITY entry to override or None, its overrides)
SETTINGS = [
    ("default (quality='balanced')", {}, None, {}),
    ("quality='high'", {"quality": "high"}, None, {}),
    ("no improvement, P 50000 (earlier default)", {"partition_size": 50_000}, "balanced", {"improve_sweeps": 0}),
    ("high before its PCL step (8 x 16 moves, no PCL, 250k top cells)", {"quality": "high", "task_rows": 250_000}, "high",
     {"improve_sweeps": 8, "improve_pcl_iter": 0, "improve_post_sweeps": 0}),
    ("high with 250k top cells", {"quality": "high", "task_rows": 250_000}, None, {}),
    ("high with 1 PCL iteration", {"quality": "high"}, "high", {"improve_pcl_iter": 1}),
    ("high without the moves after PCL", {"quality": "high"}, "high", {"improve_post_sweeps": 0}),
    ("no improvement, P 25000", {}, "balanced", {"improve_sweeps": 0}),
    ("balanced, 2 sweeps", {}, "balanced", {"improve_sweeps": 2}),
    ("balanced, P 50000", {"partition_size": 50_000}, None, {}),
    ("balanced, P 12500", {"partition_size": 12_500}, None, {}),
    ("balanced, P 16000", {"partition_size": 16_000}, None, {}),
    ("balanced, P 20000", {"partition_size": 20_000}, None, {}),
    ("high, partition_size 100000", {"quality": "high", "partition_size": 100_000}, None, {}),
    ("refine='pcl' (P 50000) without improvement", {"refine": "pcl", "partition_size": 50_000}, "balanced",
     {"improve_sweeps": 0}),
    ("refine='pcl' + high", {"refine": "pcl", "quality": "high"}, None, {}),
]


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its children (the workers) so far: much less
    sensitive to the other jobs on a shared machine than wall time."""
    import psutil

    total = 0.0
    for p in [psutil.Process()] + psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def run_setting(client, lake, qi, out, kw, name, over):
    """One run of one setting: (wall s, CPU s, report); the release is checked and removed."""
    with quality_override(name, **over):
        t0, c0 = time.perf_counter(), cpu_seconds()
        rep = anonymize_file(lake, out, qi, K, seed=0, client=client, dask_report=False, **kw)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    assert rep.verified and (out / "_SUCCESS").exists() and rep.min_cell_size >= K
    shutil.rmtree(out, ignore_errors=True)
    return wall, cpu, rep


def pipeline_table(client, n: int, data: str, tmp: Path, only, with_refine=False, rounds: int = 1):
    """The table of one data set.  With ``rounds`` > 1 the settings run in turn, round after
    round (so that a slow spell of the shared machine falls on all of them), and each row shows
    the median run (its wall time, CPU time and stages) and the range of the wall times."""
    lake = make_lake(n, data)
    import pyarrow.parquet as pq

    qi = list(pq.read_schema(sorted(lake.glob("*.parquet"))[0]).names)  # the columns of the (cached) lake
    ref = cached_reference_il(n, K, 0, data)
    print(f"\n{data}, n = {n:,} × 13, k = {K}, Parquet lake in → committed Parquet lake out; exact MDAV IL: "
          + (f"{ref:.4f}" if ref else "not cached (run exact_reference.py)")
          + (f"; median of {rounds} rounds, settings in turn" if rounds > 1 else ""))
    print(f"{'setting':<40} {'load':>5} {'wall s':>7} {'CPU s':>6} {'IL':>7} {'× exact':>8} {'improve s':>9}  "
          + ("range s  " if rounds > 1 else "") + "stages (s)")
    chosen = [(i, s) for i, s in enumerate(SETTINGS)
              if not ((only and not any(o in s[0] for o in only)) or ("refine" in s[0] and not with_refine))]
    runs = {i: [] for i, _ in chosen}
    for _ in range(rounds):
        for i, (label, kw, name, over) in chosen:
            load = os.getloadavg()[0]
            runs[i].append((load, *run_setting(client, lake, qi, tmp / f"out-{data}-{i}", kw, name, over)))
            if rounds == 1:
                _print_row(label, runs[i], ref)
    if rounds > 1:
        for i, (label, *_) in chosen:
            _print_row(label, runs[i], ref)
        walls = {SETTINGS[i][0]: [w for _, w, _, _ in runs[i]] for i, _ in chosen}
        high, default = walls.get("quality='high'"), walls.get("default (quality='balanced')")
        if high and default:
            # each round runs the default and then high back to back, so the ratio within a round
            # shares that round's slow or quiet spell: its median is the steadier figure
            paired = sorted(h / d for h, d in zip(high, default))
            print(f"quality='high' / default: ratio of the median wall times "
                  f"{np.median(high) / np.median(default):.3f}; median of the {len(paired)} rounds' ratios "
                  f"{np.median(paired):.3f} (range {paired[0]:.3f}–{paired[-1]:.3f})")


def _print_row(label, runs, ref):
    """A table row: the median run by wall time (the only one with a single round)."""
    walls = [w for _, w, _, _ in runs]
    load, wall, cpu, rep = sorted(runs, key=lambda run: run[1])[(len(runs) - 1) // 2]
    ratio = rep.information_loss / ref if ref else float("nan")
    t = rep.timings
    stages = " ".join(f"{s}={v:.1f}" for s, v in t.items() if s != "total" and v >= 0.05)
    spread = f"{min(walls):.1f}–{max(walls):.1f}  " if len(runs) > 1 else ""
    print(f"{label:<40} {load:5.1f} {wall:7.2f} {cpu:6.1f} {rep.information_loss:7.4f} {ratio:8.4f} "
          f"{t.get('improve', float('nan')):9.2f}  {spread}{stages}", flush=True)


def census_table():
    """The small public reference sets (Census 1080 × 13, EIA 4092 × 11), k = 3, 5, 10."""
    from daskmicro.datasets import load_census, load_eia
    from daskmicro.kernels.pcl import pcl

    for name, load in (("Census", load_census), ("EIA", load_eia)):
        df = load()
        X = df.to_numpy(dtype=float)
        Z = standardize(X)[0]
        print(f"\n{name} ({X.shape[0]} × {X.shape[1]}), one thread: information loss (seconds)")
        print(f"{'k':>3} {'MDAV':>16} {'PCL':>22} {'quality=high':>22}")
        for k in (3, 5, 10):
            t0 = time.perf_counter()
            il_m = information_loss(X, mdav(Z, k))
            t_m = time.perf_counter() - t0
            t0 = time.perf_counter()
            il_p = information_loss(X, pcl(Z, k, init="mdav", seed=0))
            t_p = time.perf_counter() - t0
            t0 = time.perf_counter()
            _, rep = anonymize(df, list(df.columns), k, seed=0, quality="high")
            t_h = time.perf_counter() - t0
            il_h = rep.information_loss
            print(f"{k:>3} {il_m:8.3f} ({t_m:5.2f}) {il_p:8.3f} ×{il_p / il_m:.3f} ({t_p:5.2f}) "
                  f"{il_h:8.3f} ×{il_h / il_m:.3f} ({t_h:5.2f})", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", nargs="+", default=["census_like", "gaussian"], choices=sorted(DATA))
    ap.add_argument("--only", help="comma-separated parts of setting labels to run (default: all)")
    ap.add_argument("--no-census", action="store_true", help="skip the small reference sets (Census, EIA)")
    ap.add_argument("--small-only", action="store_true", help="only the small reference sets (Census, EIA)")
    ap.add_argument("--with-refine", action="store_true", help="also the refine='pcl' settings (each 1–2 min)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the settings in turn this many times and show the median (default 1)")
    a = ap.parse_args()
    only = a.only.split(",") if a.only else None
    from distributed import Client

    from daskmicro.runtime.cluster import local_cluster
    from daskmicro.datasets import census_like

    _common.print_machine_info()
    if not a.no_census:
        census_table()
    if a.small_only:
        return
    t0 = time.perf_counter()
    cluster = local_cluster(a.workers, dashboard_address=None)
    client = Client(cluster)
    warm = census_like(30_000)
    for q in ("balanced", "high"):  # the workers load every compiled kernel once
        anonymize(warm, list(warm.columns), K, method="partitioned", partition_size=5_000, task_rows=10_000,
                  client=client, seed=0, quality=q, refine="pcl")
    print(f"\ncluster start-up and warm-up: {time.perf_counter() - t0:.1f} s (not counted below)")
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        for data in a.data:
            pipeline_table(client, int(a.n), data, Path(tmp), only, a.with_refine, a.rounds)
    print(f"\nload average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    client.close()
    cluster.close()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
