"""Distortion of p-probabilistic k-anonymous MDAV against k: the shape of Figs. 11–12 of the paper.

``003_0edb38f823409d2d.txt`` §VII-E: N = 10⁴ records, MDAV with the effective anonymity n_min in
place of k, for participation π ∈ {1, 0.75, 0.5} and acceptable cell failure p̄ ∈ {1e-4, 1e-6},
on independent standard Gaussian data (m = 10) and on Census-like data (m = 13; the paper uses a
10k subsample of "Large Census", here :func:`daskmicro.datasets.census_like`).  Distortion
D = SSE/SST after z-scoring (§VI-B: for constant π it is the ordinary distortion).

Also one line per data set for per-record participation π_j ~ U(0.5, 1) (cells grown until their
own q̄ ≤ p̄, :func:`daskmicro.privacy.probabilistic.grow_cells`), with the §VI-B distortion.

Usage::

    python benchmarks/bench_probabilistic.py [--n 10000] [--k 2 5 10 20 50 100] [--seed 0]
"""

import _common  # noqa: F401  (pins thread pools to one thread; import first)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from daskmicro.datasets import CENSUS_COLUMNS, census_like  # noqa: E402
from daskmicro.kernels import distortion, mdav, standardize  # noqa: E402
from daskmicro.privacy.effective import effective_anonymity  # noqa: E402
from daskmicro.privacy.probabilistic import expected_distortion, probabilistic_cells  # noqa: E402

SETTINGS = [(0.75, 1e-4), (0.75, 1e-6), (0.5, 1e-4), (0.5, 1e-6)]


def datasets(n, seed):
    gauss = np.random.default_rng(seed).standard_normal((n, 10))
    census = census_like(n, seed=seed)[list(CENSUS_COLUMNS)].to_numpy(dtype=np.float64)
    return {"Gaussian (m = 10)": standardize(gauss)[0], "Census-like (m = 13)": standardize(census)[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 5, 10, 20, 50, 100])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    _common.print_machine_info()
    mdav(np.random.default_rng(0).standard_normal((50, 2)), 3)  # JIT warm-up

    head = ("    |         | " + " | ".join(f"{f'π = {pi}, p̄ = {pbar:.0e}':^20}" for pi, pbar in SETTINGS)
            + "\n  k | D(π=1)  | " + " | ".join(f"{'n_min':>7} {'D':>7} {'×':>4}" for _ in SETTINGS))
    for name, Z in datasets(args.n, args.seed).items():
        print(f"{name}, N = {len(Z):,}: distortion D = SSE/SST; × = D / D(π=1)")
        print(head)
        started = time.perf_counter()
        for k in args.k:
            d1 = distortion(Z, mdav(Z, k), standardized=True)
            cols = []
            for pi, pbar in SETTINGS:
                n_min = effective_anonymity(k, pi, pbar, n_records=len(Z)).n_min
                d = distortion(Z, mdav(Z, n_min), standardized=True)
                cols.append(f"{n_min:7d} {d:7.4f} {d / d1:4.2f}")
            print(f"{k:3d} | {d1:.4f}  | " + " | ".join(cols))
        print(f"({time.perf_counter() - started:.1f} s for the table)")
        pis = np.random.default_rng(args.seed + 1).uniform(0.5, 1.0, len(Z))
        for k in (10, 50):
            t0 = time.perf_counter()
            cells = probabilistic_cells(Z, k, pis, 1e-6)
            secs = time.perf_counter() - t0
            d = expected_distortion(Z, cells.labels, pis)
            d1 = distortion(Z, mdav(Z, k), standardized=True)
            print(f"per-record π_j ~ U(0.5, 1), k = {k}, p̄ = 1e-6: cells {cells.cell_sizes.min()}–"
                  f"{cells.cell_sizes.max()} records, D(§VI-B) = {d:.4f} (× {d / d1:.2f}), "
                  f"max q̄_c = {cells.cell_failure.max():.2g}, t̄ = {cells.table_failure:.2g}, {secs:.1f} s")
        print()


if __name__ == "__main__":
    main()
