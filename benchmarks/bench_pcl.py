"""PCL (probability-constrained Lloyd) against exact MDAV: distortion and time, one thread.

Three parts, each printed as a table:

1. **Census** (1080 × 13, z-scored), k = 3, 5, 10 by default: MDAV IL (published 5.69, 9.09,
   14.16), PCL IL (default settings: noisy variant for k ≤ 10, MDAV initialisation), the ratio
   PCL/MDAV (target ≤ 0.90), PCL seconds (target ≤ 30 s) and the smallest cell.
2. **2-D uniform and Gaussian data** (the PCL paper's §5.2 setting: uniform on the unit square,
   independent standard normal coordinates), for a small and a large k: SSE improvement of PCL
   over MDAV, noiseless and noisy.
3. **Refinement** of an exact-MDAV partition of census-like data (the pipeline's per-partition
   use, ``pcl(Z, k, init=mdav_labels, noisy=False)``): time and distortion against MDAV.
4. **Macroaggregation** (only with ``--macro-n``): PCL with large k from MDAV at size k.

Targets are informational PASS/FAIL text, never assertions.  Numba compilation is done on a
tiny input first and not timed.

    python benchmarks/bench_pcl.py
    python benchmarks/bench_pcl.py --census-k 3 5 10 --n2d 5000 --k2d 5 250 --refine-n 25000
    python benchmarks/bench_pcl.py --skip-2d --refine-n 10000       # quick check
    python benchmarks/bench_pcl.py --census-k --skip-2d --refine-n 0 --macro-n 50000 --macro-k 500
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_machine_info  # noqa: E402  (pins threads to 1 first)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from daskmicro import mdav, sse, sst, standardize  # noqa: E402
from daskmicro.datasets import census_like, load_census  # noqa: E402
from daskmicro.kernels.pcl import pcl  # noqa: E402

TARGET_RATIO = 0.90
TARGET_SECONDS = 30.0


def timed(func):
    t0 = time.perf_counter()
    out = func()
    return time.perf_counter() - t0, out


def warm_up():
    X = np.random.default_rng(0).standard_normal((200, 3))
    t, _ = timed(lambda: (pcl(X, 3, noisy=True, n_noisy=3), pcl(X, 3, noisy=False, init="random")))
    return t


def census(ks, seed):
    Z = standardize(load_census().to_numpy(dtype=np.float64))[0]
    total = sst(Z)
    print("1. Census (1080 × 13, z-scored): PCL with default settings vs exact MDAV")
    print(f"{'k':>4} {'MDAV IL':>8} {'PCL IL':>8} {'ratio':>6} {'PCL s':>7} {'noisy':>5} {'iters':>7} "
          f"{'min cell':>8}  targets")  # fmt: skip
    for k in ks:
        il_mdav = 100 * sse(Z, mdav(Z, k)) / total
        t, (labels, info) = timed(lambda: pcl(Z, k, seed=seed, return_info=True))
        il = 100 * info.sse / total
        ratio = il / il_mdav
        verdict = (f"≤{TARGET_RATIO:.2f}× {'PASS' if ratio <= TARGET_RATIO else 'FAIL'}, "
                   f"≤{TARGET_SECONDS:g}s {'PASS' if t <= TARGET_SECONDS else 'FAIL'}")  # fmt: skip
        iters = f"{info.n_noisy_iter}+{info.n_iter}"
        print(f"{k:>4} {il_mdav:>8.3f} {il:>8.3f} {ratio:>6.3f} {t:>7.2f} {str(info.noisy):>5} {iters:>7} "
              f"{np.bincount(labels).min():>8}  {verdict}")  # fmt: skip
    print()


def two_d(n, ks, seed):
    rng = np.random.default_rng(seed)
    data = {"uniform": rng.random((n, 2)), "gaussian": rng.standard_normal((n, 2))}
    print(f"2. 2-D data, n = {n} (PCL paper §5.2): SSE relative to exact MDAV")
    print(f"{'data':>9} {'k':>5} {'MDAV s':>7} {'noiseless':>9} {'s':>6} {'noisy':>7} {'s':>6} {'best gain':>9}")
    for name, X in data.items():
        for k in ks:
            t_m, lab_m = timed(lambda: mdav(X, k))
            base = sse(X, lab_m)
            t_0, lab_0 = timed(lambda: pcl(X, k, noisy=False, seed=seed))
            t_1, lab_1 = timed(lambda: pcl(X, k, noisy=True, seed=seed))
            r0, r1 = sse(X, lab_0) / base, sse(X, lab_1) / base
            gain = 100 * (1 - min(r0, r1))
            print(f"{name:>9} {k:>5} {t_m:>7.2f} {r0:>9.3f} {t_0:>6.2f} {r1:>7.3f} {t_1:>6.2f} {gain:>8.1f}%")
    print()


def refine(n, k, seed, noisy_too):
    Z = standardize(census_like(n, seed=seed).to_numpy(dtype=np.float64))[0]
    total = sst(Z)
    t_m, lab = timed(lambda: mdav(Z, k))
    il_m = 100 * sse(Z, lab) / total
    print(f"3. Refinement of exact MDAV on census-like data, n = {n}, k = {k}")
    print(f"   exact MDAV: {t_m:.2f} s, IL {il_m:.3f}")
    variants = [("noiseless", False)] + ([("noisy", True)] if noisy_too else [])
    for name, noisy in variants:
        t, (labels, info) = timed(lambda: pcl(Z, k, init=lab, noisy=noisy, seed=seed, return_info=True))
        il = 100 * info.sse / total
        print(f"   PCL refinement ({name}): {t:.2f} s, IL {il:.3f}, ratio {il / il_m:.3f} "
              f"(SSE −{100 * (1 - il / il_m):.1f} %), {info.n_noisy_iter}+{info.n_iter} iterations, "
              f"smallest cell {np.bincount(labels).min()}")  # fmt: skip
    print()


def macro(n, k, seed):
    Z = standardize(census_like(n, seed=seed).to_numpy(dtype=np.float64))[0]
    total = sst(Z)
    t_m, lab = timed(lambda: mdav(Z, k))
    il_m = 100 * sse(Z, lab) / total
    print(f"4. Macroaggregation (clustering) of census-like data, n = {n}, k = {k} ({n // k} cells)")
    print(f"   exact MDAV at size k: {t_m:.2f} s, IL {il_m:.3f}")
    t, (labels, info) = timed(lambda: pcl(Z, k, init=lab, seed=seed, return_info=True))
    il = 100 * info.sse / total
    print(f"   PCL from MDAV: {t:.2f} s, IL {il:.3f}, ratio {il / il_m:.3f}, {info.n_iter} iterations, "
          f"smallest cell {np.bincount(labels).min()}")  # fmt: skip
    print()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--census-k", type=int, nargs="*", default=[3, 5, 10], help="k values on Census")
    parser.add_argument("--n2d", type=int, default=5000, help="records of the 2-D data sets (default 5000)")
    parser.add_argument("--k2d", type=int, nargs="*", default=[5, 250], help="k values on 2-D data (default 5 250)")
    parser.add_argument("--refine-n", type=int, default=25000, help="census-like records to refine (default 25000)")
    parser.add_argument("--refine-k", type=int, default=10, help="k of the refinement (default 10)")
    parser.add_argument("--refine-noisy", action="store_true", help="also time a noisy refinement")
    parser.add_argument("--skip-2d", action="store_true", help="skip part 2")
    parser.add_argument("--macro-n", type=int, default=0, help="census-like records to macroaggregate (0: skip)")
    parser.add_argument("--macro-k", type=int, default=500, help="cell size of the macroaggregation (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and PCL (default 0)")
    args = parser.parse_args(argv)

    print_machine_info()
    print(f"PCL warm-up (compile or cache load, not timed below): {warm_up():.2f} s")
    print()
    if args.census_k:
        census(args.census_k, args.seed)
    if not args.skip_2d and args.k2d:
        two_d(args.n2d, args.k2d, args.seed)
    if args.refine_n:
        refine(args.refine_n, args.refine_k, args.seed, args.refine_noisy)
    if args.macro_n:
        macro(args.macro_n, args.macro_k, args.seed)


if __name__ == "__main__":
    main()
