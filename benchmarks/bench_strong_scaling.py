"""Strong scaling: one data set, the same run on 1, 2, 4, 8, 16 … workers, each pinned to a core.

Every point is one ``anonymize_file`` run at the default settings (k = 10, census-like records as a
Parquet lake of 125,000-row files, a committed and verified Parquet lake out) on a LocalCluster of W
single-threaded worker processes set up as ``daskmicro anonymize`` sets up its own, after a small
warm-up run on that cluster (not counted).  Each worker process (and its nanny) is pinned to one
logical CPU, one per physical core first; the client and the scheduler (one process, as in the CLI)
are pinned to the CPUs the workers do not use, or share them all where the workers take every CPU.

One point (``--record``, 2 workers by default) also records its task stream
(``bench_parallelism.py``'s recorder and analysis): its work and span predict the time on every W,
max(span, work / W) + o · tasks / W per stage, printed beside the measured times so that the
prediction can be judged.  Per point: wall time, speed-up and efficiency against one worker
(T1 / (W · TW)), the prediction and measured / predicted.

The recorded point runs first, then the others from the most workers down; ``--deadline`` (seconds
from the start) skips a point whose predicted time would not fit in what is left, and each finished
point is printed and written (``--json``) at once.

    python benchmarks/bench_strong_scaling.py --n 1000000 --workers 1,2
    python benchmarks/bench_strong_scaling.py --n 16000000 --workers 1,2,4,8,16 --json /tmp/scaling.json
"""

from __future__ import annotations

import _common  # noqa: F401  (pins thread pools before numpy is imported)

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import bench_parallelism as bp

#: Seconds a point needs besides its run: the cluster's start, pinning and the warm-up run.
POINT_EXTRA_S = 20.0
#: Safety factor on a point's predicted time when checking it against the deadline.
PREDICTION_MARGIN = 1.25


def cpu_order() -> list[int]:
    """The logical CPUs this process may use, one per physical core first (then their SMT siblings)."""
    allowed = sorted(os.sched_getaffinity(0))
    rank = {}
    for cpu in allowed:
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            rank[cpu] = (0, cpu)
            continue
        siblings = []
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            siblings.extend(range(int(lo), int(hi or lo) + 1))
        rank[cpu] = (sorted(siblings).index(cpu) if cpu in siblings else 0, cpu)
    return sorted(allowed, key=lambda c: rank[c])


def pin_threads(cpus) -> list[int]:
    """Pin every thread of this process to ``cpus`` (threads started later inherit it from their
    creator); the process's affinity afterwards."""
    cpus = set(cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):
            pass   # a thread that ended meanwhile
    return sorted(os.sched_getaffinity(0))


def pin_cluster(client, order: list[int], workers: int) -> dict:
    """Worker i (by address) and its nanny onto ``order[i]``; this process (client and scheduler)
    onto the CPUs left, or all of them where none is left.  {worker address: its CPUs}."""
    addrs = sorted(client.scheduler_info()["workers"])
    got = {}
    for i, addr in enumerate(addrs):
        cpu = order[i % len(order)]
        got[addr] = client.run(pin_threads, [cpu], workers=[addr])[addr]
        client.run(pin_threads, [cpu], workers=[addr], nanny=True)
    rest = order[workers:] or order
    pin_threads(rest)
    return got


def run_point(workers: int, lake_in: Path, tmp: Path, order: list[int], predict_w) -> dict:
    """One point: its cluster started and pinned, warmed up, the run timed; its task stream recorded
    and analysed (predicted for ``predict_w``) where ``predict_w`` is given."""
    import logging

    from distributed import Client

    from daskmicro.config import RunConfig
    from daskmicro.datasets import CENSUS_COLUMNS
    from daskmicro.plan import open_input, worker_settings
    from daskmicro.runtime.cluster import local_cluster

    qi, k, seed = list(CENSUS_COLUMNS), 10, 0
    pin_threads(order)   # unpinned while the cluster starts (the fork server inherits this)
    cfg = RunConfig.build(qi=qi, k=k, workers=workers)
    settings = worker_settings(cfg, open_input(cfg, None, lake_in))
    lake_out = tmp / f"out-{workers}"
    cluster = local_cluster(workers, dashboard_address=None, memory_limit=settings["memory_limit"],
                            silence_logs=logging.ERROR)
    try:
        with cluster, Client(cluster) as client:
            client.wait_for_workers(workers)
            pins = pin_cluster(client, order, workers)
            warm = bp.warm_up(client, tmp, qi, k, seed)
            report, tasks, events, t_call, t_return = bp.recorded_run(
                client, cluster, lake_in, lake_out, qi, k, seed, record=bool(predict_w))
    finally:
        pin_threads(order)
        shutil.rmtree(lake_out, ignore_errors=True)
    wall = t_return - t_call
    point = {"workers": workers, "wall": wall, "warm_up_s": warm, "il": report.information_loss,
             "worker_cpus": sorted(c for cpus in pins.values() for c in cpus),
             "stages": {name: s for name, s, _ in events}}
    if predict_w:
        point["analysis"] = bp.analyse(tasks, bp.stage_intervals(t_call, t_return, events), workers, wall,
                                       predict_w=predict_w)
    return point



def print_summary(n: int, points: dict, recorded: int | None, skipped: list) -> None:
    pred = points[recorded]["analysis"]["total"]["predicted"] if recorded in points else {}
    t1 = points[1]["wall"] if 1 in points else None
    base_w = min(points)
    print()
    print(f"strong scaling, n = {n:,} census-like × 13, k = 10, defaults; "
          + (f"prediction from the task stream of the {recorded}-worker run" if pred else "no recorded run"))
    head = (f"{'W':>3} {'wall s':>8} {'speed-up':>8} {'efficiency':>10} {'predicted s':>11} {'meas/pred':>9} "
            f"{'IL':>7}  worker CPUs")
    print(head)
    print("-" * len(head))
    for w in sorted(points):
        p = points[w]
        if t1 is not None:
            speed, eff = t1 / p["wall"], t1 / (w * p["wall"])
        else:   # no one-worker point: against the fewest workers measured
            speed = points[base_w]["wall"] * base_w / p["wall"]
            eff = speed / w
        pr = pred.get(str(w))
        print(f"{w:>3} {p['wall']:>8.2f} {speed:>8.2f} {eff:>10.2f} "
              + (f"{pr:>11.2f} {p['wall'] / pr:>9.2f}" if pr else f"{'-':>11} {'-':>9}")
              + f" {p['il']:>7.4f}  {','.join(map(str, p['worker_cpus']))}")
    if t1 is None:
        print(f"(no 1-worker point: speed-up and efficiency against {base_w} worker(s) × {base_w})")
    for w, why in skipped:
        print(f"W = {w} skipped: {why}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="records (default: %(default)s)")
    ap.add_argument("--workers", default="1,2,4,8,16", help="worker counts, comma-separated (default: %(default)s)")
    ap.add_argument("--record", type=int, default=2, help="the point whose task stream is recorded (default: 2)")
    ap.add_argument("--deadline", type=float, default=math.inf,
                    help="seconds from the start: skip a point whose predicted time does not fit")
    ap.add_argument("--json", metavar="PATH", help="write the figures here, after every point")
    ap.add_argument("--lake", metavar="DIR", help="the input lake: made here if it does not exist, and kept "
                    "(default: a temporary one, removed at the end)")
    a = ap.parse_args(argv)
    t_start = time.monotonic()
    order = cpu_order()
    ws = sorted({int(w) for w in a.workers.split(",")})
    if max(ws) > len(order):
        ap.error(f"--workers: {max(ws)} workers but {len(order)} CPUs to pin them to")
    recorded = a.record if a.record in ws else None
    todo = ([recorded] if recorded else []) + sorted((w for w in ws if w != recorded), reverse=True)
    print(f"{len(order)} CPUs ({_common.cpu_model()}), pinning order {order}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    points, skipped = {}, []
    try:
        lake = Path(a.lake) if a.lake else tmp / "in"
        t0 = time.monotonic()
        if not lake.exists():
            bp.make_lake(lake, a.n, 0)
            print(f"lake of {a.n:,} records made in {time.monotonic() - t0:.1f} s", flush=True)
        else:
            print(f"lake {lake} reused", flush=True)
        for w in todo:
            left = a.deadline - (time.monotonic() - t_start)
            guess = None
            if recorded in points:
                guess = points[recorded]["analysis"]["total"]["predicted"][str(w)] * PREDICTION_MARGIN
            if guess is not None and guess + POINT_EXTRA_S > left:
                skipped.append((w, f"predicted {guess / PREDICTION_MARGIN:.0f} s, {max(left, 0):.0f} s left"))
                print(f"W = {w}: {skipped[-1][1]}: skipped", flush=True)
                continue
            p = run_point(w, lake, tmp, order, predict_w=ws if w == recorded else None)
            points[w] = p
            print(f"W = {w}: {p['wall']:.2f} s (warm-up {p['warm_up_s']:.1f} s), IL {p['il']:.4f}, stages "
                  + ", ".join(f"{k} {v:.1f}" for k, v in p["stages"].items()), flush=True)
            if w == recorded:
                bp.print_table(p["analysis"], w)
            if a.json:
                Path(a.json).write_text(json.dumps({"n": a.n, "cpus": len(order), "cpu": _common.cpu_model(),
                                                    "order": order, "recorded": recorded,
                                                    "points": points, "skipped": skipped}, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_summary(a.n, points, recorded, skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
