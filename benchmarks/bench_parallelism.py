"""How parallel a run is: work, span and predicted wall time per stage of one real run.

One ``anonymize_file`` run at the default settings (k = 10, census-like records written as a Parquet
lake of 125,000-row files, a committed and verified Parquet lake out) on a LocalCluster of
``--workers`` single-threaded worker processes, set up as ``daskmicro anonymize`` sets up its own
(:func:`daskmicro.runtime.cluster.local_cluster`, the CLI's memory limit).  A scheduler plugin records
every task that ran (its compute intervals on its worker, its dependencies, when the client submitted
it); the run's ``progress(stage, seconds)`` callback marks the stage boundaries.  Per stage:

* **work**: the sum of the task durations (compute time on the workers);
* **chain**: the longest chain of dependent tasks inside the stage, by task durations along
  dependency edges (the inputs made by an earlier stage count as ready);
* **idle**: the time in the stage when no task ran on any worker: the client's own sequential work
  (planning, merging the reductions that came back, graph building), its round trips to the
  scheduler and the data moved between tasks;
* **span** = chain + idle: what the stage would take with unlimited workers;
* the **prediction** on W workers: max(span, work / W) + o × tasks / W, with o the per-task overhead
  measured in the run: the median gap between a task's last dependency ending and the task starting,
  over the tasks that the client had already submitted and whose worker was idle in that gap.

The stages are barriers (the client waits for each before it starts the next), so the run's span and
its prediction are the sums over the stages.  Before the first stage: ``set-up`` (the input opened,
fingerprinted, planned); after the last: ``report + commit``.  The measured wall time of the run is
printed beside the prediction for W = ``--workers``.  A small warm-up run goes first (not counted;
``--cold`` skips it): the figures are those of a run on a cluster that has run before.

    python benchmarks/bench_parallelism.py --n 200000
    python benchmarks/bench_parallelism.py --n 1000000 --json /tmp/parallelism.json
"""

from __future__ import annotations

import _common  # noqa: F401  (pins thread pools before numpy is imported)

import argparse
import bisect
import json
import math
import shutil
import statistics
import sys
import tempfile
import threading
from pathlib import Path

#: Rows per input Parquet file (as benchmarks/bench_pipeline.py lays out its lakes).
FILE_ROWS = 125_000
#: Worker counts of the prediction, besides ``--workers``.
PREDICT_W = (2, 16, 100)
#: Records of the warm-up run (partitioned, small partitions: the kernels of the pipeline's stages).
WARM_ROWS = 12_000
#: Rows of the table of task functions by work.
FUNCTIONS_SHOWN = 16
#: Per-task overhead used when the run gives no gap to measure it from.
FALLBACK_OVERHEAD = 0.001


class TaskRecorder:
    """Scheduler plugin: every task that finished in memory, with its compute intervals, its
    dependencies and when the client submitted it (all on the ``distributed.metrics.time`` clock)."""

    name = "bench-parallelism-recorder"

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.submitted: dict = {}
        self.tasks: list = []
        self.lock = threading.Lock()

    def transition(self, key, start, finish, *args, **kwargs):
        from distributed.metrics import time as now

        if start == "released" and finish in ("waiting", "no-worker", "queued", "processing"):
            self.submitted[key] = now()
        elif start == "processing" and finish == "memory":
            computes = [s for s in kwargs.get("startstops") or () if s.get("action") == "compute"]
            if not computes:
                return
            ts = self.scheduler.tasks.get(key)
            deps = [d.key for d in ts.dependencies] if ts is not None else []
            moves = [(s.get("action"), s["start"], s["stop"]) for s in kwargs.get("startstops") or ()
                     if s.get("action") != "compute"]
            with self.lock:
                self.tasks.append({"key": key, "worker": kwargs.get("worker"),
                                   "start": min(s["start"] for s in computes),
                                   "stop": max(s["stop"] for s in computes),
                                   "seconds": sum(s["stop"] - s["start"] for s in computes),
                                   "deps": deps, "submitted": self.submitted.get(key), "moves": moves})

    # the rest of the SchedulerPlugin interface: nothing to do
    async def start(self, scheduler):
        pass

    async def before_close(self):
        pass

    async def close(self):
        pass

    def update_graph(self, *args, **kwargs):
        pass

    def restart(self, *args, **kwargs):
        pass

    def add_worker(self, *args, **kwargs):
        pass

    def remove_worker(self, *args, **kwargs):
        pass

    def add_client(self, *args, **kwargs):
        pass

    def remove_client(self, *args, **kwargs):
        pass

    def log_event(self, *args, **kwargs):
        pass


#: Most records generated at once: a larger lake is made block by block (each block its own seed).
MAKE_ROWS = 16_000_000


def make_lake(root: Path, n: int, seed: int) -> None:
    """Census-like records as Parquet files of FILE_ROWS rows; up to MAKE_ROWS records from one
    draw of ``census_like(n, seed)``, beyond that block by block (block b drawn with seed
    ``seed * 1000 + b``), so that 100M records never sit in memory at once."""
    from daskmicro.datasets import census_like

    root.mkdir(parents=True)
    files = max(1, math.ceil(n / FILE_ROWS))
    step = math.ceil(n / files)
    per_block = max(1, MAKE_ROWS // step)
    for b0 in range(0, files, per_block):
        rows = min(n, (b0 + per_block) * step) - b0 * step
        df = census_like(rows, seed=seed if n <= MAKE_ROWS else seed * 1000 + b0 // per_block)
        for i in range(b0, min(files, b0 + per_block)):
            df.iloc[(i - b0) * step:(i - b0 + 1) * step].to_parquet(root / f"part-{i:04d}.parquet", index=False)
        del df


def stage_intervals(t_call: float, t_return: float, events: list) -> list:
    """[(stage, start, end)] covering the run: set-up, one per progress event, report + commit."""
    out, prev = [], t_call
    if events:
        name, seconds, t_end = events[0]
        first_start = max(t_call, t_end - seconds)
        if first_start > t_call:
            out.append(("set-up", t_call, first_start))
        prev = first_start
    for name, _seconds, t_end in events:
        out.append((name, prev, t_end))
        prev = t_end
    out.append(("report + commit", prev, max(prev, t_return)))
    return out


def busy_time(intervals, lo: float, hi: float) -> float:
    """Length of the union of ``intervals`` clipped to [lo, hi]."""
    total, cur_lo, cur_hi = 0.0, None, None
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi):
        if cur_hi is None or a > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = a, b
        else:
            cur_hi = max(cur_hi, b)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total


def longest_chains(tasks: list, stage_of: list) -> tuple[list, float]:
    """Per task, the longest chain of dependent tasks ending with it, inside its stage; and the
    longest chain over the whole run (stages ignored).  A key computed again (a release piece built
    once to verify and again to write it) depends on the latest finished instance of its inputs."""
    order = sorted(range(len(tasks)), key=lambda i: tasks[i]["start"])
    latest: dict = {}           # key -> (stage, chain in stage, chain over the run)
    in_stage = [0.0] * len(tasks)
    overall = 0.0
    for i in order:
        t = tasks[i]
        best_stage = best_all = 0.0
        for d in t["deps"]:
            got = latest.get(d)
            if got is None:
                continue
            if got[0] == stage_of[i]:
                best_stage = max(best_stage, got[1])
            best_all = max(best_all, got[2])
        in_stage[i] = best_stage + t["seconds"]
        whole = best_all + t["seconds"]
        overall = max(overall, whole)
        latest[t["key"]] = (stage_of[i], in_stage[i], whole)
    return in_stage, overall


def task_overhead(tasks: list) -> tuple[float, int]:
    """(median gap, gaps measured): for each task with dependencies, submitted before its last
    dependency ended and whose worker ran nothing between that end and its start, the time from
    that end to its start (report to the scheduler, transition, dispatch, data moved)."""
    ends = {}
    for t in tasks:
        ends[t["key"]] = max(ends.get(t["key"], 0.0), t["stop"])
    by_worker: dict = {}
    for t in tasks:
        by_worker.setdefault(t["worker"], []).append((t["start"], t["stop"]))
    for v in by_worker.values():
        v.sort()
    gaps = []
    for t in tasks:
        dep_ends = [ends[d] for d in t["deps"] if d in ends and ends[d] <= t["start"]]
        if not dep_ends or t["submitted"] is None:
            continue
        ready = max(dep_ends)
        if t["submitted"] > ready:
            continue   # the client submitted it later: client time, not the scheduler's
        runs = by_worker[t["worker"]]
        j = bisect.bisect_left(runs, (t["start"], t["stop"]))
        prev_stop = runs[j - 1][1] if j > 0 else -math.inf
        if prev_stop > ready:
            continue   # its worker was busy with another task: queueing, not overhead
        gaps.append(t["start"] - ready)
    return (statistics.median(gaps), len(gaps)) if gaps else (FALLBACK_OVERHEAD, 0)


def analyse(tasks: list, intervals: list, workers: int, wall: float, predict_w=PREDICT_W) -> dict:
    from dask.utils import key_split

    starts = [s for _, s, _ in intervals]
    stage_of = [max(0, bisect.bisect_right(starts, t["start"]) - 1) for t in tasks]
    chains, overall_chain = longest_chains(tasks, stage_of)
    overhead, n_gaps = task_overhead(tasks)
    ws = sorted(set(predict_w) | {workers})
    stages = []
    for s, (name, lo, hi) in enumerate(intervals):
        idx = [i for i, st in enumerate(stage_of) if st == s]
        work = sum(tasks[i]["seconds"] for i in idx)
        chain = max((chains[i] for i in idx), default=0.0)
        runs = [(tasks[i]["start"], tasks[i]["stop"]) for i in idx]
        idle = (hi - lo) - busy_time(runs, lo, hi)
        moves: dict = {}
        for i in idx:
            for action, a, b in tasks[i].get("moves", ()):
                moves[action] = moves.get(action, 0.0) + (b - a)
        still = (hi - lo) - busy_time(runs + [(a, b) for i in idx for _, a, b in tasks[i].get("moves", ())], lo, hi)
        span = chain + idle
        big = max(idx, key=lambda i: tasks[i]["seconds"], default=None)
        stages.append({
            "stage": name, "wall": hi - lo, "tasks": len(idx), "work": work, "chain": chain, "idle": idle,
            "moves": moves, "idle_no_moves": still,
            "span": span, "parallelism": work / span if span > 0 else 0.0,
            "largest": key_split(tasks[big]["key"]) if big is not None else "",
            "largest_s": tasks[big]["seconds"] if big is not None else 0.0,
            "predicted": {str(w): max(span, work / w) + overhead * len(idx) / w for w in ws},
        })
    work = sum(s["work"] for s in stages)
    span = sum(s["span"] for s in stages)
    big = max(range(len(tasks)), key=lambda i: tasks[i]["seconds"], default=None)
    total = {
        "stage": "total", "wall": wall, "tasks": len(tasks), "work": work,
        "chain": sum(s["chain"] for s in stages), "idle": sum(s["idle"] for s in stages), "span": span,
        "parallelism": work / span if span > 0 else 0.0,
        "largest": key_split(tasks[big]["key"]) if big is not None else "",
        "largest_s": tasks[big]["seconds"] if big is not None else 0.0,
        "predicted": {str(w): sum(s["predicted"][str(w)] for s in stages) for w in ws},
    }
    by_function: dict = {}
    for t, st in zip(tasks, stage_of):
        row = by_function.setdefault((intervals[st][0], key_split(t["key"])), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += t["seconds"]
        row[2] = max(row[2], t["seconds"])
    functions = [{"stage": st, "function": fn, "tasks": c, "work": w, "largest_s": m}
                 for (st, fn), (c, w, m) in sorted(by_function.items(), key=lambda kv: -kv[1][1])]
    return {"stages": stages, "total": total, "functions": functions, "overhead_s": overhead,
            "overhead_gaps": n_gaps, "chain_over_run": overall_chain, "predict_workers": ws}


def print_table(res: dict, workers: int) -> None:
    ws = res["predict_workers"]
    head = (f"{'stage':<18} {'tasks':>6} {'work s':>8} {'chain s':>8} {'idle s':>7} {'span s':>7} {'work/span':>9} "
            f"{'largest task':<26} " + " ".join(f"{'W=' + str(w):>7}" for w in ws) + f" {'wall s':>7}")
    print(head)
    print("-" * len(head))
    for row in res["stages"] + [res["total"]]:
        big = f"{row['largest'][:17]} {row['largest_s']:.3f}" if row["largest"] else "-"
        print(f"{row['stage']:<18} {row['tasks']:>6} {row['work']:>8.2f} {row['chain']:>8.2f} {row['idle']:>7.2f} "
              f"{row['span']:>7.2f} {row['parallelism']:>9.2f} {big:<26} "
              + " ".join(f"{row['predicted'][str(w)]:>7.2f}" for w in ws) + f" {row['wall']:>7.2f}")
    print()
    print(f"per-task overhead o = {res['overhead_s'] * 1e3:.2f} ms (median of {res['overhead_gaps']} gaps between a "
          f"task's last dependency ending and its start on an idle worker"
          + (", none measured: a stated constant)" if not res["overhead_gaps"] else ")"))
    print(f"prediction per stage: max(span, work/W) + o·tasks/W; total = sum over the stages. "
          f"Measured wall on W = {workers}: {res['total']['wall']:.2f} s, predicted "
          f"{res['total']['predicted'][str(workers)]:.2f} s")
    print(f"longest chain of dependent tasks over the whole run (stages ignored): {res['chain_over_run']:.2f} s")
    print()
    actions = sorted({a for row in res["stages"] for a in row.get("moves", {})})
    print("the idle time beside the data moved for the tasks (seconds summed over the workers, by the "
          "scheduler's record of each task: transfers from other workers, reads of spilled data, …), and the "
          "idle time in which no worker computed nor moved data for a task")
    print(f"{'stage':<18} {'idle s':>7} " + " ".join(f"{a[:12]:>12}" for a in actions) + f" {'idle, no move':>13}")
    for row in res["stages"]:
        print(f"{row['stage']:<18} {row['idle']:>7.2f} "
              + " ".join(f"{row['moves'].get(a, 0.0):>12.2f}" for a in actions) + f" {row['idle_no_moves']:>13.2f}")
    print()
    print("where the work goes: the task functions with the most work (key prefix of the tasks)")
    print(f"{'stage':<18} {'function':<28} {'tasks':>6} {'work s':>8} {'% work':>7} {'largest s':>9}")
    total = res["total"]["work"] or 1.0
    for row in res["functions"][:FUNCTIONS_SHOWN]:
        print(f"{row['stage']:<18} {row['function'][:28]:<28} {row['tasks']:>6} {row['work']:>8.2f} "
              f"{100 * row['work'] / total:>6.1f}% {row['largest_s']:>9.3f}")


def warm_up(client, tmp: Path, qi: list, k: int, seed: int) -> float:
    """Load the client's imports, the workers' kernels and Parquet readers and writers once, as on a
    cluster that has run before: a small run through the same pipeline stages.  Its seconds."""
    from distributed.metrics import time as now

    from daskmicro import anonymize_file

    t0 = now()
    warm_in, warm_out = tmp / "warm-in", tmp / "warm-out"
    shutil.rmtree(warm_in, ignore_errors=True)
    shutil.rmtree(warm_out, ignore_errors=True)
    make_lake(warm_in, WARM_ROWS, seed)
    anonymize_file(warm_in, warm_out, qi, k, seed=seed, client=client, dask_report=False,
                   method="partitioned", partition_size=2_000, task_rows=4_000)
    return now() - t0


def recorded_run(client, cluster, lake_in: Path, lake_out: Path, qi: list, k: int, seed: int, record=True):
    """One run at the default settings, its tasks recorded by a :class:`TaskRecorder` (none where
    ``record`` is false): (report, tasks, stage events, call time, return time)."""
    from distributed.metrics import time as now

    from daskmicro import anonymize_file

    recorder = TaskRecorder(cluster.scheduler)
    if record:
        cluster.scheduler.add_plugin(recorder, name=recorder.name)
    events = []

    def progress(stage, seconds):
        events.append((stage, float(seconds), now()))

    t_call = now()
    report = anonymize_file(lake_in, lake_out, qi, k, seed=seed, client=client, progress=progress,
                            dask_report=False)
    t_return = now()
    assert report.verified and (lake_out / "_SUCCESS").exists(), "the release was not verified and committed"
    if record:
        cluster.scheduler.remove_plugin(name=recorder.name)
    with recorder.lock:
        tasks = [t for t in recorder.tasks if t["start"] >= t_call]
    return report, tasks, events, t_call, t_return


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="records (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the data and of the release (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="write the figures here too")
    ap.add_argument("--cold", action="store_true", help="no warm-up run first: the run pays the client's imports "
                    "and the workers' kernel loading (or compiling) in its set-up and kernel stages")
    a = ap.parse_args(argv)

    import logging
    import os

    os.environ.setdefault("DASKMICRO_LEDGER", "off")
    from distributed import Client

    from daskmicro.config import RunConfig
    from daskmicro.datasets import CENSUS_COLUMNS
    from daskmicro.plan import open_input, worker_settings
    from daskmicro.runtime.cluster import local_cluster

    qi, k = list(CENSUS_COLUMNS), 10
    tmp = Path(tempfile.mkdtemp(prefix="bench-parallelism-"))
    try:
        lake_in, lake_out = tmp / "in", tmp / "out"
        make_lake(lake_in, a.n, a.seed)
        cfg = RunConfig.build(qi=qi, k=k, workers=a.workers)
        settings = worker_settings(cfg, open_input(cfg, None, lake_in))
        cluster = local_cluster(a.workers, dashboard_address=None, memory_limit=settings["memory_limit"],
                                silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:
            client.wait_for_workers(a.workers)
            warm = 0.0 if a.cold else warm_up(client, tmp, qi, k, a.seed)
            report, tasks, events, t_call, t_return = recorded_run(client, cluster, lake_in, lake_out, qi, k, a.seed)
        wall = t_return - t_call
        res = analyse(tasks, stage_intervals(t_call, t_return, events), a.workers, wall)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"n = {a.n:,} census-like records × 13 QIs, k = {k}, default settings, Parquet lake "
          f"({math.ceil(a.n / FILE_ROWS)} files) → committed Parquet lake; {a.workers} single-threaded worker "
          f"processes; {os.cpu_count()} logical CPUs ({_common.cpu_model()})")
    print(f"warm-up run ({WARM_ROWS:,} records) before, not counted: {warm:.1f} s" if not a.cold
          else "cold: no warm-up run before (set-up and kernel stages include the first-run costs)")
    print(f"IL {report.information_loss:.4f}, verified; stage seconds as the run reports them: "
          + ", ".join(f"{name} {s:.2f}" for name, s, _ in events))
    print()
    print_table(res, a.workers)
    if a.json:
        Path(a.json).write_text(json.dumps({"n": a.n, "seed": a.seed, "k": k, "workers": a.workers, "cold": a.cold,
                                            "warm_up_s": warm, **res},
                                           indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
