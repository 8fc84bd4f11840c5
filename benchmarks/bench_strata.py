"""Stratified runs against the same records unstratified, side by side (and against an earlier commit):

    python benchmarks/bench_strata.py                          # 200,000 records, 0 / 100 / 2,000 / 20,000 strata
    python benchmarks/bench_strata.py --n 1e6 --strata 0,100 --rev HEAD~1
    python benchmarks/bench_strata.py --strata 0,2000 --rerelease       # the re-release of a series

A statistical office publishes by region × sex × age band: thousands of strata, most of them
small.  Each stratum is microaggregated on its own (exact MDAV in one task for a stratum of up to
100,000 records, the tasks of small ones shared in batches), so a stratified run should cost
about what the unstratified one does.  The records: ``--n`` × 5 standard Gaussian QIs, a stratum
column spreading them evenly over S strata in a random order (every input file holds every
stratum), one more column passed through, as a lake of 4 Parquet files (a directory input: the
run is on a cluster whatever its size); k = 5 (3 where a stratum would hold fewer than 5), the
default method (``auto``: the unstratified run of more than 100,000 records is the partitioned
pipeline), a directory release, seed 0.  Each run is ``daskmicro anonymize`` in its own process
on its own LocalCluster of 2 workers, once untimed per code (compiling its kernels), then
``--rounds`` times alternating between the codes.  With ``--rerelease`` the timed run is the
re-release, into the release ledger of an untimed first release, of the same records and n/10 new
ones spread evenly over the strata (every stratum grows by at least k).
Printed: every wall time, the median per code and setting, its ratio to the unstratified run of
the same code, and the ratio of this checkout to the earlier commit.
"""

from __future__ import annotations

import _common  # noqa: F401  (one thread per process; trial runs)

import argparse
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


def make_input(path: Path, n: int, strata: int) -> None:
    """The lake ``path`` of ``n`` records; with it ``path`` + "-more": the same records and n/10 new
    ones, spread evenly over the strata (the input of a re-release)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    extra = n // 10
    df = pd.DataFrame(rng.normal(size=(n + extra, 5)), columns=[f"q{i}" for i in range(5)])
    df["area"] = np.concatenate([rng.permutation(np.arange(n) % max(strata, 1)), np.arange(extra) % max(strata, 1)])
    df["note"] = rng.integers(0, 3, n + extra)
    df["pid"] = np.arange(n + extra)
    for where, records in ((path, df.iloc[:n]), (path.with_name(path.name + "-more"), df)):
        where.mkdir()
        for i, rows in enumerate(np.array_split(np.arange(len(records)), 4)):
            records.iloc[rows].to_parquet(where / f"part-{i}.parquet", index=False)


def one_run(code: Path, src: Path, out: Path, strata: int, k: int, rerelease: bool = False) -> float:
    """One timed run of ``code``; with ``rerelease``, the re-release (of ``src`` + "-more") that
    follows an untimed first release into a new ledger."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, "-m", "daskmicro", "anonymize", str(src), str(out), "--qi", "q0,q1,q2,q3,q4",
            "--k", str(k), "--seed", "0", "--workers", "2"]
    if strata:
        argv += ["--strata", "area"]
    ledger = src.parent / "ledger"
    shutil.rmtree(ledger, ignore_errors=True)
    runs = [argv + ["--drop", "pid"]]   # a trial run: the record id is dropped, a direct identifier
    if rerelease:   # the record id identifies the records in the ledger, never published
        runs = [argv + ["--id-column", "pid", "--ledger", str(ledger)] for _ in range(2)]
        runs[1][4], runs[1][5] = str(src) + "-more", str(out) + "-more"
    for run in runs:
        shutil.rmtree(run[5], ignore_errors=True)
        started = time.perf_counter()
        # run from the temporary folder: `python -m` puts the working directory first on the path
        done = subprocess.run(run, env=env, capture_output=True, text=True, cwd=src.parent)
        seconds = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"{code}: {' '.join(run[3:])} failed:\n{done.stderr[-2000:]}")
    for run in runs:
        shutil.rmtree(run[5], ignore_errors=True)
    shutil.rmtree(ledger, ignore_errors=True)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=float, default=200_000)
    ap.add_argument("--strata", default="0,100,2000,20000", help="comma-separated stratum counts (0: unstratified)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rev", default=None, help="an earlier commit to run side by side")
    ap.add_argument("--rerelease", action="store_true",
                    help="time a re-release with n/10 new records (after an untimed first release into a new ledger)")
    args = ap.parse_args()
    n = int(args.n)
    counts = [int(s) for s in args.strata.split(",")]
    _common.print_machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        codes = {"this checkout": ROOT}
        if args.rev:
            old = tmp / "worktree"
            subprocess.run(["git", "worktree", "add", "--detach", "-f", str(old), args.rev], cwd=ROOT, check=True,
                           capture_output=True)
            codes[args.rev] = old
        try:
            inputs = {}
            for s in counts:
                inputs[s] = tmp / f"in{s}"
                make_input(inputs[s], n, s)
            ks = {s: 5 if not s or n // s >= 5 else 3 for s in counts}
            for name, code in codes.items():   # untimed: compiles each code's kernels
                one_run(code, inputs[counts[0]], tmp / "warm", counts[0], ks[counts[0]])
            times = {(name, s): [] for name in codes for s in counts}
            for _ in range(args.rounds):
                for s in counts:
                    for name, code in codes.items():
                        t = one_run(code, inputs[s], tmp / "out", s, ks[s], args.rerelease)
                        times[(name, s)].append(t)
                        print(f"  {name:>14}  {s:>6,} strata  {t:8.2f} s", flush=True)
        finally:
            if args.rev:
                subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    what = f"a re-release of {n:,} records and {n // 10:,} new ones" if args.rerelease else f"{n:,} records"
    print(f"\n{what} × 5 QIs in 4 files, default method, 2 workers; median of {args.rounds} "
          "(wall time of the whole command)")
    head = f"{'strata':>8} {'k':>3}" + "".join(f" {name[:14]:>14} {'÷ unstrat.':>10}" for name in codes)
    print(head + ("  this ÷ earlier" if args.rev else ""))
    for s in counts:
        line = f"{s:>8,} {ks[s]:>3}"
        med = {}
        for name in codes:
            med[name] = statistics.median(times[(name, s)])
            base = statistics.median(times[(name, counts[0])]) if counts[0] == 0 else float("nan")
            line += f" {med[name]:>12.2f} s {med[name] / base:>10.2f}"
        if args.rev:
            line += f"  {med['this checkout'] / med[args.rev]:>14.3f}"
        print(line)


if __name__ == "__main__":
    main()
