"""First run vs warm runs of ``daskmicro anonymize``: which numba kernels compile, and what it costs.

Three scenarios, each in a fresh HOME (so the default cache dir, $XDG_CACHE_HOME/daskmicro/numba, starts
empty) with NUMBA_CACHE_DIR unset:

  A. the command on an empty cache;     B. the same command again (new LocalCluster, warm cache);
  C. ``daskmicro warmup`` on an empty cache, then the command.

Every process (the CLI and each Dask worker) records numba's ``numba:compile`` events — fired only by a
real compile, never by a cache load — through a ``sitecustomize.py`` put on PYTHONPATH, one JSON line per
compile: function, signature, seconds (exclusive of the compiles it triggered).

  .venv/bin/python benchmarks/bench_first_run.py --n 20000 --partition-size 5000 --workers 2
  .venv/bin/python benchmarks/bench_first_run.py --n 150000 --workers 2     # the case of benchmarks/README.md

Each run also prints its kernel warm-up as the run reports it (``compile`` in the report: seconds before
the stages, per worker, compiled or loaded), the first-task cost of each fresh worker process.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITECUSTOMIZE = r'''
import builtins, json, os, sys, time
_log = os.environ.get("BENCH_COMPILE_LOG")
if _log:
    _orig = builtins.__import__
    _done = []
    def _install():
        from numba.core import event as ev
        stack = []
        class Recorder(ev.Listener):
            def on_start(self, event):
                stack.append([time.perf_counter(), 0.0])
            def on_end(self, event):
                t0, child = stack.pop()
                dt = time.perf_counter() - t0
                if stack:
                    stack[-1][1] += dt
                fn = getattr((event.data or {}).get("dispatcher"), "py_func", None)
                name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
                with open(_log, "a") as f:
                    f.write(json.dumps({"pid": os.getpid(), "func": name, "sig": str((event.data or {}).get("args")),
                                        "excl": dt - child}) + "\n")
        ev.register("numba:compile", Recorder())
    def _import(name, *a, **k):
        m = _orig(name, *a, **k)
        if not _done and hasattr(sys.modules.get("numba.core.event"), "_setup_chrome_trace_exit_handler"):
            _done.append(True)  # once: outer frames of a nested import return here too
            builtins.__import__ = _orig
            _install()
        return m
    builtins.__import__ = _import
'''


def _summary(log: Path) -> dict:
    recs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    by = collections.defaultdict(lambda: [set(), 0.0])
    for r in recs:
        by[r["func"]][0].add(r["sig"])
        by[r["func"]][1] += r["excl"]
    return {"compiles": len(recs), "processes": len({r["pid"] for r in recs}),
            "compile_s": round(sum(r["excl"] for r in recs), 2),
            "functions": {f: {"signatures": len(s), "seconds": round(t, 2)}
                          for f, (s, t) in sorted(by.items(), key=lambda kv: -kv[1][1]) if f.startswith("daskmicro.")}}


def _run(cmd, home: Path, site: Path, log: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DASKMICRO_CACHE_DIR")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"), BENCH_COMPILE_LOG=str(log),
               PYTHONPATH=os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return round(time.perf_counter() - t0, 2)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--partition-size", type=int, default=None, help="default: the tool's")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", metavar="PATH", help="write the results here too")
    args = p.parse_args(argv)
    exe = [sys.executable, "-m", "daskmicro"]
    with tempfile.TemporaryDirectory(prefix="bench-first-run-") as tmp:
        tmp = Path(tmp)
        site = tmp / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        data = tmp / "census.parquet"
        subprocess.run([*exe, "demo-data", str(data), "--n", str(args.n), "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
        import pyarrow.parquet as pq

        qi = ",".join(n for n, t in zip(pq.read_schema(data).names, pq.read_schema(data).types) if str(t) == "int64")
        anonymize = [*exe, "anonymize", str(data), str(tmp / "out.parquet"), "--qi", qi, "--k", "5", "--method",
                     "partitioned", *(["--partition-size", str(args.partition_size)] if args.partition_size else []),
                     "--workers", str(args.workers),
                     "--seed", "0", "--overwrite", "--no-dask-report", "--ledger", "off"]   # B: no re-release
        results = {}
        for label, home, steps in (("A_first_run", tmp / "home1", [("anonymize", anonymize)]),
                                   ("B_again", tmp / "home1", [("anonymize", anonymize)]),
                                   ("C_warmup_then_run", tmp / "home2", [("warmup", [*exe, "warmup", "--quiet"]),
                                                                        ("anonymize", anonymize)])):
            for step, cmd in steps:
                log = tmp / f"{label}-{step}.jsonl"
                wall = _run(cmd, home, site, log)
                results[f"{label}/{step}"] = {"wall_s": wall, **_summary(log)}
                rep = tmp / "out.report.json"
                if step == "anonymize" and rep.exists():  # the run's own account of its kernel warm-up
                    c = json.loads(rep.read_text()).get("compile") or {}
                    results[f"{label}/{step}"]["warm_up"] = c
                    print(f"  kernel warm-up before the stages: {c.get('seconds', float('nan')):.2f} s "
                          f"({'compiled' if c.get('compiled') else 'loaded from the cache'}); per worker: "
                          + ", ".join(f"{v:.2f} s" for v in (c.get("workers") or {}).values()), flush=True)
                    rep.unlink()
                print(f"{label}/{step}: wall {wall:.2f} s, {results[f'{label}/{step}']['compiles']} compiles "
                      f"({results[f'{label}/{step}']['compile_s']:.2f} s) in {results[f'{label}/{step}']['processes']} process(es)",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
