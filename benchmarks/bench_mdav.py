"""Exact MDAV: compiled kernel (``daskmicro.mdav``) against the plain numpy baseline, one thread.

Data: ``correlated_gaussian(n, 13, seed)``, z-scored columnwise (the library's convention:
distances are measured on standardised attributes).  For every n the script times the kernel
and, up to ``--baseline-max-n``, the baseline of ``numpy_mdav.py``, then prints one table row:

    n, kernel seconds, baseline seconds, speed-up, kernel IL, baseline IL, identical labels,
    and an informational check of the targets (kernel ≤ 2 s at n = 150 000; ≥ 4× the baseline).

Times are the best of ``--repeat`` runs.  The kernel is compiled (or loaded from numba's cache)
on a tiny input before anything is timed.

    python benchmarks/bench_mdav.py                      # n = 50 000 and 150 000
    python benchmarks/bench_mdav.py --n 600000           # baseline skipped above 150 000
    python benchmarks/bench_mdav.py --n 20000 --baseline-max-n 20000 --repeat 3
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, print_machine_info  # noqa: E402  (pins threads to 1 first)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from numpy_mdav import numpy_mdav  # noqa: E402

from daskmicro import information_loss, mdav, standardize  # noqa: E402
from daskmicro.datasets import correlated_gaussian  # noqa: E402

TARGET_N = 150_000
TARGET_SECONDS = 2.0
TARGET_SPEEDUP = 4.0


def warm_up(k):
    X = np.random.default_rng(0).standard_normal((max(64, 4 * k), 3))
    t0 = time.perf_counter()
    mdav(X, k)
    return time.perf_counter() - t0


def target_text(n, t_kernel, speedup):
    parts = []
    if n == TARGET_N:
        verdict = "PASS" if t_kernel <= TARGET_SECONDS else "FAIL"
        parts.append(f"≤{TARGET_SECONDS:g}s@150k {verdict}")
    if speedup is not None:
        verdict = "PASS" if speedup >= TARGET_SPEEDUP else "FAIL"
        parts.append(f"≥{TARGET_SPEEDUP:g}× {verdict}")
    return ", ".join(parts) if parts else "-"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[50_000, 150_000], help="numbers of records")
    parser.add_argument("--k", type=int, default=10, help="anonymity parameter (default 10)")
    parser.add_argument("--m", type=int, default=13, help="number of attributes (default 13)")
    parser.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    parser.add_argument(
        "--baseline-max-n",
        type=int,
        default=150_000,
        help="skip the numpy baseline for n above this (default 150000)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per method; best is kept (default 1)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be ≥ 1")

    print_machine_info()
    print(f"Exact MDAV, correlated Gaussian data (m = {args.m}, seed {args.seed}, z-scored), k = {args.k}, "
          f"best of {args.repeat}")  # fmt: skip
    print(f"kernel warm-up (compile or cache load, not timed below): {warm_up(args.k):.2f} s")
    print()

    header = (
        f"{'n':>9}  {'kernel s':>9}  {'numpy s':>9}  {'speed-up':>8}  {'kernel IL':>9}  {'numpy IL':>9}  "
        f"{'identical':>9}  targets"
    )
    print(header)
    print("-" * len(header))
    for n in args.n:
        X, _ = standardize(correlated_gaussian(n, args.m, seed=args.seed))
        t_kernel, labels = best_time(lambda: mdav(X, args.k), args.repeat)
        il_kernel = information_loss(X, labels, standardized=True)
        if n <= args.baseline_max_n:
            t_base, base = best_time(lambda: numpy_mdav(X, args.k), args.repeat)
            il_base = information_loss(X, base, standardized=True)
            speedup = t_base / t_kernel
            same = "yes" if np.array_equal(labels, base) else "no"
            base_cols = f"{t_base:>9.2f}  {speedup:>7.1f}×  {il_kernel:>9.3f}  {il_base:>9.3f}  {same:>9}"
        else:
            speedup = None
            base_cols = f"{'skipped':>9}  {'-':>8}  {il_kernel:>9.3f}  {'-':>9}  {'-':>9}"
        print(f"{n:>9}  {t_kernel:>9.3f}  {base_cols}  {target_text(n, t_kernel, speedup)}", flush=True)


if __name__ == "__main__":
    main()
