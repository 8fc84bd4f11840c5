"""Distortion of p-probabilistic k-anonymous MDAV against k: the shape of Figs. 11–12 of the paper.

*p-Probabilistic k-Anonymous Microaggregation …*, §VII-E: N = 10⁴ records, MDAV with the effective anonymity n_min in
place of k, for participation π ∈ {1, 0.75, 0.5} and acceptable cell failure p̄ ∈ {1e-4, 1e-6},
on independent standard Gaussian data (m = 10) and on Census-like data (m = 13; the paper uses a
10k subsample of "Large Census", here :func:`daskmicro.datasets.census_like`).  Distortion
D = SSE/SST after z-scoring (§VI-B: for constant π it is the ordinary distortion).

Also one line per data set for per-record participation π_j ~ U(0.5, 1) (cells grown until their
own q̄ ≤ p̄, :func:`daskmicro.privacy.probabilistic.grow_cells`), with the §VI-B distortion.

With ``--anonymize METHOD`` the same table is made end to end through :func:`daskmicro.anonymize`
(``participation=π, max_cell_failure=p̄``; D = IL/100 of the verified release), with METHOD one of
mdav, pca-mdav (in process) or partitioned, proximal-distal (on a LocalCluster of ``--workers``
processes); the per-record line then uses a participation column (in-process methods only).

Usage::

    python benchmarks/bench_probabilistic.py [--n 10000] [--k 2 5 10 20 50 100] [--seed 0]
    python benchmarks/bench_probabilistic.py --anonymize partitioned --partition-size 2500 --K 600
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
    ap.add_argument("--anonymize", metavar="METHOD", choices=["mdav", "pca-mdav", "partitioned", "proximal-distal"],
                    help="go through daskmicro.anonymize with this method")
    ap.add_argument("--workers", type=int, default=2, help="--anonymize on a cluster: LocalCluster workers")
    ap.add_argument("--partition-size", type=int, help="--anonymize partitioned: records per partition")
    ap.add_argument("--K", type=int, help="--anonymize partitioned / proximal-distal: macrocell size (> n_min)")
    args = ap.parse_args()
    if args.anonymize:
        return main_anonymize(args)
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


def frames(n, seed):
    """The two data sets as DataFrames, with a per-record participation column π_j ~ U(0.5, 1)."""
    import pandas as pd

    gauss = pd.DataFrame(np.random.default_rng(seed).standard_normal((n, 10)), columns=[f"x{j:02d}" for j in range(10)])
    census = census_like(n, seed=seed)[list(CENSUS_COLUMNS)].reset_index(drop=True)
    pis = np.random.default_rng(seed + 1).uniform(0.5, 1.0, n)
    return {"Gaussian (m = 10)": gauss.assign(pi_j=pis), "Census-like (m = 13)": census.assign(pi_j=pis)}


def main_anonymize(args):
    from daskmicro import anonymize

    _common.print_machine_info()
    method = args.anonymize
    extra = {}
    client = cluster = None
    if method in ("partitioned", "proximal-distal"):
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0", silence_logs=40)
        client = Client(cluster, set_as_default=False)
        extra = {"client": client, "partition_size": args.partition_size, "K": args.K}
        extra = {key: value for key, value in extra.items() if value is not None}
    head = ("    |         | " + " | ".join(f"{f'π = {pi}, p̄ = {pbar:.0e}':^20}" for pi, pbar in SETTINGS)
            + "\n  k | D(π=1)  | " + " | ".join(f"{'n_min':>7} {'D':>7} {'×':>4}" for _ in SETTINGS))
    try:
        for name, df in frames(args.n, args.seed).items():
            qi = [c for c in df.columns if c != "pi_j"]
            print(f"{name}, N = {len(df):,}, method {method} through anonymize(): D = IL/100; × = D / D(π=1)")
            print(head)
            started = time.perf_counter()
            for k in args.k:
                _, plain = anonymize(df, qi, k, method=method, seed=0, **extra)
                d1 = plain.distortion
                cols = []
                for pi, pbar in SETTINGS:
                    _, rep = anonymize(df, qi, k, method=method, seed=0, participation=pi, max_cell_failure=pbar,
                                       plain_k_reference=False, **extra)
                    assert rep.min_cell_size >= rep.probabilistic["n_min"] and rep.verified
                    cols.append(f"{rep.probabilistic['n_min']:7d} {rep.distortion:7.4f} {rep.distortion / d1:4.2f}")
                print(f"{k:3d} | {d1:.4f}  | " + " | ".join(cols))
            print(f"({time.perf_counter() - started:.1f} s for the table)")
            if method in ("mdav", "pca-mdav"):
                for k in (10, 50):
                    t0 = time.perf_counter()
                    _, rep = anonymize(df, qi, k, method=method, seed=0, participation="pi_j", max_cell_failure=1e-6,
                                       plain_k_reference=True)
                    p = rep.probabilistic
                    print(f"per-record π_j ~ U(0.5, 1), k = {k}, p̄ = 1e-6: cells {rep.min_cell_size}–{rep.max_cell_size}"
                          f" records, D = {rep.distortion:.4f} (× {p['distortion_ratio']:.2f}), D(§VI-B) = "
                          f"{p['expected_distortion']:.4f}, max q̄_c = {p['cell_failure_max']:.2g}, "
                          f"t̄ = {p['table_failure']:.2g}, {time.perf_counter() - t0:.1f} s")
            print()
    finally:
        if client is not None:
            client.close()
            cluster.close()


if __name__ == "__main__":
    main()
