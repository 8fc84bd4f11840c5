"""Compile time of each warm-up unit, and who compiles what when processes share the compile.

Two parts, each on an empty numba cache dir of its own:

1. ``serial``: one process runs the units of the kernel sets in order and prints each unit's seconds and
   the functions numba compiled for it (exclusive seconds, from numba's ``numba:compile`` events, which fire
   on real compiles only), its own kernels and numba's library overloads alike;
2. ``shared``: ``--procs`` processes run :func:`daskmicro.runtime.warmup.run_units` on one cache dir, as a
   machine's worker processes do, and print their timelines (unit, start, end, seconds since the start).

    .venv/bin/python benchmarks/compile_units.py                      # mdav + partitioned + improve
    .venv/bin/python benchmarks/compile_units.py --sets mdav,partitioned,pca,pcl,improve,incremental
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import os
import tempfile
import time


def _listen():
    from numba.core import event

    stack, seconds = [], collections.Counter()

    class Recorder(event.Listener):
        def on_start(self, e):
            stack.append([time.perf_counter(), 0.0])

        def on_end(self, e):
            t0, inner = stack.pop()
            dt = time.perf_counter() - t0
            if stack:
                stack[-1][1] += dt
            fn = getattr((e.data or {}).get("dispatcher"), "py_func", None)
            seconds[f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"] += dt - inner

    event.register("numba:compile", Recorder())
    return seconds


def serial(sets: list[str], top: int) -> None:
    seconds = _listen()
    from daskmicro.runtime.compile_cache import configure
    from daskmicro.runtime.warmup import units

    configure()
    total = 0.0
    for u in units(sets):
        seconds.clear()
        t = time.perf_counter()
        u.run()
        dt = time.perf_counter() - t
        total += dt
        print(f"{u.name:22s} {dt:6.2f} s  (cost weight {u.cost})")
        for name, s in seconds.most_common(top):
            if s >= 0.05:
                print(f"    {s:6.2f} s  {name}")
    print(f"{'all units':22s} {total:6.2f} s")


def _share(sets: list[str], t0: float):
    from daskmicro.runtime.compile_cache import configure
    from daskmicro.runtime.warmup import Unit, lock_dir, run_units, units

    configure()
    log = []

    def timed(u):
        def run():
            t = time.time()
            u.run()
            log.append((u.name, t - t0, time.time() - t0))
        return Unit(u.name, run, u.deps, u.cost)

    run_units([timed(u) for u in units(sets)], lock_dir())
    return os.getpid(), log, time.time() - t0


def shared(sets: list[str], procs: int) -> None:
    t0 = time.time()
    with mp.get_context("spawn").Pool(procs) as pool:
        results = pool.starmap(_share, [(sets, t0)] * procs)
    for pid, log, end in results:
        print(f"process {pid}: done at {end:.2f} s")
        for name, a, b in log:
            print(f"    {name:22s} {a:6.2f} → {b:6.2f} s" + ("   (compiled)" if b - a > 0.1 else ""))
    print(f"wall: {max(r[2] for r in results):.2f} s for {procs} processes")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", default="mdav,partitioned,improve", help="comma-separated kernel sets")
    p.add_argument("--procs", type=int, default=2, help="processes sharing the compile in part 2")
    p.add_argument("--top", type=int, default=8, help="functions listed per unit in part 1")
    args = p.parse_args()
    sets = args.sets.split(",")
    # each part in fresh processes (spawned: numba reads NUMBA_CACHE_DIR at import) on an empty cache dir
    with tempfile.TemporaryDirectory() as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache
        print("== serial (one process)")
        proc = mp.get_context("spawn").Process(target=serial, args=(sets, args.top))
        proc.start()
        proc.join()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache
        print(f"== shared ({args.procs} processes, one cache dir)")
        shared(sets, args.procs)


if __name__ == "__main__":
    main()
