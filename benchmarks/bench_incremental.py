"""Increment algorithms over the data ratio ν: relative time τ₊ and distortion loss δ (Figs. 22–23).

Reproduces the comparison of §V-B (Figs. 17–23) of the incremental paper
(*Incremental k-Anonymous Microaggregation … With Optimized Scheduling*): a base MDAV on the first 1 − ν of the records (in a random
arrival order), then each increment algorithm on the last ν.  For every ν and method it prints

* τ₀ = t(base MDAV) / t(one-pass MDAV) and τ₊ = t(increment stage) / t(one-pass MDAV);
* δ = D_T/D − 1, the relative distortion loss of the joined partition against one-pass MDAV
  (D = SSE/SST on the z-scored data; z-scoring on all records, for a like-for-like comparison);
* the theory for 2MDAV, τ₀ = (1 − ν)², τ₊ = ν² (§IV-A).

Data: ``census_like(n)`` (13 columns) and ``correlated_gaussian(n, m)`` (the paper's Gaussian data
has 15 dimensions; ours are correlated, see ``daskmicro.datasets``).  One thread.

    .venv/bin/python benchmarks/bench_incremental.py
    .venv/bin/python benchmarks/bench_incremental.py --n 10000 --nu 0.1 0.5        # quick check
    .venv/bin/python benchmarks/bench_incremental.py --inertial                     # + inertial variants
"""

from __future__ import annotations

from _common import best_time, print_machine_info  # first: pins thread pools to one thread before numpy is imported

import argparse
import time

import numpy as np

from daskmicro.datasets import census_like, correlated_gaussian
from daskmicro.kernels.increment import METHODS, increment
from daskmicro.kernels.mdav import mdav
from daskmicro.kernels.metrics import distortion, standardize

SHORT = {"2mdav": "2MDAV", "nn": "NN", "nn-split-mid": "NN-SM", "nn-split-end": "NN-SE"}


def _data(kind: str, n: int, m: int, seed: int) -> np.ndarray:
    X = census_like(n, seed=seed).to_numpy(np.float64) if kind == "census" else correlated_gaussian(n, m=m, seed=seed)
    return standardize(X)[0]


def _warm_up(k: int) -> float:
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(20 * k, 3))
    lb = mdav(Z[: 10 * k], k)
    for method in METHODS:
        for inertial in ([False] if method == "2mdav" else [False, True]):
            increment(method, Z[: 10 * k], lb, Z[10 * k:], k, inertial=inertial)
    return time.perf_counter() - t0


def run(kind, n, m, k, nus, variants, seed, repeat):
    X = _data(kind, n, m, seed)
    X = X[np.random.default_rng(seed + 1).permutation(n)]  # arrival order independent of the data
    t_ref, labels = best_time(lambda: mdav(X, k), repeat)
    D = distortion(X, labels, standardized=True)
    print(f"### {kind}: n = {n:,}, m = {X.shape[1]}, k = {k}")
    print(f"one-pass MDAV: t_ref = {t_ref:.3f} s, D = SSE/SST = {D:.5f} (IL {100 * D:.3f})")
    print()
    names = [SHORT[mth] + ("+in" if inertial else "") for mth, inertial in variants]
    rows = []
    for nu in nus:
        n0 = int(round(n * (1 - nu)))
        Zb, Zi = X[:n0], X[n0:]
        t0, lb = best_time(lambda: mdav(Zb, k), repeat)
        taus, deltas = [], []
        for method, inertial in variants:
            if method == "2mdav" and len(Zi) < k:
                taus.append(float("nan"))
                deltas.append(float("nan"))
                continue
            t_inc, out = best_time(lambda: increment(method, Zb, lb, Zi, k, inertial=inertial), repeat)
            sizes = np.bincount(out)
            assert sizes.min() >= k and len(out) == n, (method, inertial)
            taus.append(t_inc / t_ref)
            deltas.append(100 * (distortion(X, out, standardized=True) / D - 1))
        rows.append((nu, t0 / t_ref, taus, deltas))
    head = "| ν | τ₀ | ν̄² | " + " | ".join(f"{nm} τ₊" for nm in names) + " | ν² |"
    print("Relative running times (t / t_ref):\n")
    print(head)
    print("|" + "---:|" * (head.count("|") - 1))
    for nu, tau0, taus, _ in rows:
        print(f"| {nu:.2f} | {tau0:.3f} | {(1 - nu) ** 2:.3f} | " + " | ".join(f"{t:.3f}" for t in taus) + f" | {nu * nu:.3f} |")
    head = "| ν | " + " | ".join(f"{nm} δ %" for nm in names) + " |"
    print("\nRelative distortion loss δ = D_T/D − 1 (per cent):\n")
    print(head)
    print("|" + "---:|" * (head.count("|") - 1))
    for nu, _, _, deltas in rows:
        print(f"| {nu:.2f} | " + " | ".join(f"{d:+.2f}" for d in deltas) + " |")
    print()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000, help="number of records (default: %(default)s)")
    ap.add_argument("--k", type=int, default=10, help="anonymity parameter (default: %(default)s)")
    ap.add_argument("--m", type=int, default=15, help="gaussian: number of columns (default: %(default)s, as in the paper)")
    ap.add_argument("--nu", type=float, nargs="+", default=[0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9], help="data ratios ν")
    ap.add_argument("--data", nargs="+", default=["gaussian", "census"], choices=["gaussian", "census"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--inertial", action="store_true", help="also run the nearest-neighbour methods with the inertial coefficient")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="timed calls per measurement, best kept")
    args = ap.parse_args(argv)
    print_machine_info()
    print(f"warm-up (numba compile or cache load): {_warm_up(args.k):.1f} s\n")
    variants = [(m, False) for m in args.methods]
    if args.inertial:
        variants += [(m, True) for m in args.methods if m != "2mdav"]
    for kind in args.data:
        run(kind, args.n, args.m, args.k, args.nu, variants, args.seed, args.repeat)


if __name__ == "__main__":
    main()
