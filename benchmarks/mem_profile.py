"""Where the memory of a partitioned run goes: per stage, per process, managed vs unmanaged.

    python benchmarks/mem_profile.py --n 4e6                 # LocalCluster of 2 workers, Parquet lake in → out
    python benchmarks/mem_profile.py --n 4e6 --memory-limit 1.5GiB

One run through ``anonymize_file`` (lake in → committed lake out), after a small warm-up run in the
same cluster.  Every 0.1 s a thread samples the RSS of this process (the client and, in a
LocalCluster, the scheduler and the nannies) and of each worker process, and — from the scheduler,
which runs in this process — each worker's Dask-managed bytes in memory and spilled to disk (as
of its last heartbeat).  Samples are attributed to the stage running when they were taken (the
run's progress callback marks each stage's end).  Printed: per stage its seconds and peak
figures; for the whole run the peak of the summed tree RSS over its value before the run, and its
ratio to the raw QI bytes (n × 13 × 8).
"""

from __future__ import annotations

__import__("_common")  # first: one thread per process, before numpy is imported

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil

from daskmicro import anonymize_file
from daskmicro.datasets import CENSUS_COLUMNS

from bench_pipeline import CACHE, make_lake, memory_kwargs

MiB = 2 ** 20


class Sampler:
    """Samples per-role RSS and per-worker managed / spilled bytes every ``interval`` seconds."""

    def __init__(self, cluster, interval=0.1):
        self.cluster, self.interval = cluster, interval
        self.me = psutil.Process(os.getpid())
        self.samples = []          # (time, client, nannies, workers, managed, spilled, worker max)
        self.keys = {}             # stage → largest Counter of held bytes by key prefix (with --keys)
        self.by_key = False
        self._stage = "pre-scan"
        self.marks = []            # (time, stage) at each stage's end
        self._stop = threading.Event()

    def _roles(self):
        # a LocalCluster's nannies run in this process; the worker processes are its children
        # (with the multiprocessing resource tracker, a few MiB)
        return [], self.me.children(recursive=True)

    @staticmethod
    def _rss(procs):
        out = []
        for p in procs:
            try:
                out.append(p.memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        return out

    def sample(self):
        nannies, workers = self._roles()
        w = self._rss(workers)
        managed = spilled = 0
        unmanaged = 0   # largest RSS − managed bytes of one worker: its tasks' working memory
        for ws in list(self.cluster.scheduler.workers.values()):
            mem = ws.memory
            managed += mem.managed
            spilled += mem.spilled
            try:
                unmanaged = max(unmanaged, psutil.Process(ws.pid).memory_info().rss - mem.managed)
            except (psutil.NoSuchProcess, TypeError, ValueError):
                pass
        return (time.perf_counter(), self.me.memory_info().rss, sum(self._rss(nannies)), sum(w), managed, spilled,
                max(w) if w else 0, unmanaged)

    def __enter__(self):
        self.base = self.sample()
        self.t0 = self.base[0]
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _held(self):
        """Bytes the scheduler knows to be held (in memory or spilled), by key prefix, copies counted."""
        from collections import Counter

        from dask.utils import key_split

        c = Counter()
        for ts in list(self.cluster.scheduler.tasks.values()):
            if ts.state == "memory":
                c[key_split(ts.key)] += (ts.nbytes or 0) * max(1, len(ts.who_has or ()))
        return c

    def _run(self):
        i = 0
        while not self._stop.is_set():
            self.samples.append(self.sample())
            if self.by_key and i % 5 == 0:
                c = self._held()
                best = self.keys.get(self._stage)
                if best is None or sum(c.values()) > sum(best.values()):
                    self.keys[self._stage] = c
            i += 1
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.samples.append(self.sample())

    def progress(self, stage, seconds):
        self.marks.append((time.perf_counter(), stage))
        print(f"  {stage}: {seconds:.1f} s", flush=True)
        self._stage = f"after {stage}"

    def table(self, raw):
        b = self.base
        print(f"before the run: client {b[1] / MiB:.0f} MiB, nannies {b[2] / MiB:.0f}, workers {b[3] / MiB:.0f} MiB "
              f"(managed {b[4] / MiB:.0f}); raw QI bytes {raw / MiB:.0f} MiB")
        print(f"{'stage':<22} {'s':>6} {'client':>8} {'workers':>8} {'1 worker':>9} {'managed':>8} {'spilled':>8} "
              f"{'unmanaged':>9} {'tree+':>8} {'tree+/raw':>9}   (peak MiB in the stage; tree+ over the base; "
              "unmanaged: one worker's RSS − its managed bytes)")
        start = self.t0
        rows = []
        for end, stage in self.marks + [(float("inf"), "(after: commit)")]:
            s = [x for x in self.samples if start <= x[0] < end]
            if s:
                tree = max(x[1] + x[2] + x[3] for x in s) - (b[1] + b[2] + b[3])
                rows.append((stage, min(end, s[-1][0]) - start, max(x[1] for x in s), max(x[3] for x in s),
                             max(x[6] for x in s), max(x[4] for x in s), max(x[5] for x in s),
                             max(x[7] for x in s), tree))
            start = end
        for stage, sec, cl, wk, w1, mg, sp, um, tree in rows:
            print(f"{stage:<22} {sec:6.1f} {cl / MiB:8.0f} {wk / MiB:8.0f} {w1 / MiB:9.0f} {mg / MiB:8.0f} "
                  f"{sp / MiB:8.0f} {um / MiB:9.0f} {tree / MiB:8.0f} {tree / raw:9.2f}")
        peak = max(x[1] + x[2] + x[3] for x in self.samples) - (b[1] + b[2] + b[3])
        print(f"peak tree RSS over the base: {peak / MiB:.0f} MiB = {peak / raw:.2f}× the raw QI bytes; "
              f"peak client {max(x[1] for x in self.samples) / MiB:.0f} MiB, peak workers "
              f"{max(x[3] for x in self.samples) / MiB:.0f} MiB (one worker {max(x[6] for x in self.samples) / MiB:.0f}, "
              f"its unmanaged {max(x[7] for x in self.samples) / MiB:.0f}), peak spilled "
              f"{max(x[5] for x in self.samples) / MiB:.0f} MiB")
        for stage, c in self.keys.items():
            top = ", ".join(f"{k} {v / MiB:.0f}" for k, v in c.most_common(6))
            print(f"held by key, largest sample of the stage {stage!r}: {sum(c.values()) / MiB:.0f} MiB: {top}")
        return peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=4e6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="daskmicro",
                    help="per worker, e.g. 1.5GiB; 'daskmicro' (default): what daskmicro gives the LocalCluster it "
                         "starts (from the task size); 'dask': Dask's default (the machine's share)")
    ap.add_argument("--keys", action="store_true",
                    help="also sample the bytes the scheduler knows to be held, by key prefix (every 0.5 s)")
    ap.add_argument("--option", action="append", default=[], help="extra anonymize option NAME=VALUE (int)")
    a = ap.parse_args()
    from distributed import Client

    from daskmicro.runtime.cluster import local_cluster

    n = int(a.n)
    lake = make_lake(n)
    kw = memory_kwargs(a.memory_limit, a.workers)
    cluster = local_cluster(a.workers, dashboard_address=None, **kw)
    client = Client(cluster)
    options = {o.split("=")[0]: int(o.split("=")[1]) for o in a.option}
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        anonymize_file(make_lake(60_000), Path(tmp) / "warm", list(CENSUS_COLUMNS), 10, seed=0, client=client, ledger=False,
                       method="partitioned", partition_size=5_000, task_rows=20_000)
        time.sleep(2)   # let the heartbeats settle
        s = Sampler(cluster)
        s.by_key = a.keys
        with s:
            t0 = time.perf_counter()
            rep = anonymize_file(lake, Path(tmp) / "out", list(CENSUS_COLUMNS), 10, seed=0, client=client, ledger=False,
                                 method="partitioned", progress=s.progress, **options)
            wall = time.perf_counter() - t0
        assert rep.verified
    limit = kw.get("memory_limit", "Dask's default")
    print(f"n = {n:,}, {a.workers} workers, memory limit {limit} ({a.memory_limit}), options {options}: "
          f"wall {wall:.1f} s, "
          f"IL {rep.information_loss:.4f}")
    s.table(n * 13 * 8)
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
