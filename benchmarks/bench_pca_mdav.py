"""MDAV with PCA against exact MDAV on census-like data, one thread.

Data: ``census_like(n, seed)`` (default 75 000 records, 13 attributes), z-scored columnwise.
The script times exact MDAV once, then PCA-MDAV for every energy-loss bound ε² given, and
prints for each: the number of components m̃ chosen, the attained ε², the time, the
information loss IL = 100·SSE/SST, the relative time τ = t_PCA-MDAV / t_MDAV and the relative
distortion increment ΔD = (D − D_MDAV)/D_MDAV.

With ``--scan`` it also runs PCA-MDAV for every m̃ = 1 … m and prints τ and ΔD against m̃ (the
shape of the relative-time and distortion-increment curves of the PCA paper, Figs. 11–12).

PCA-MDAV times include the PCA itself (covariance, eigendecomposition, projection).  The MDAV
kernel is compiled (or loaded from numba's cache) on a tiny input before anything is timed.

    python benchmarks/bench_pca_mdav.py                         # 75 000 records, ε² = 0.1, 0.2
    python benchmarks/bench_pca_mdav.py --energy-loss 0.05 0.1 0.3 --scan
    python benchmarks/bench_pca_mdav.py --n 10000
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, print_machine_info  # noqa: E402  (pins threads to 1 first)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from daskmicro import distortion, mdav, pca_mdav, pca_reduce, relative_distortion, standardize  # noqa: E402
from daskmicro.datasets import census_like  # noqa: E402



def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=75_000, help="number of records (default 75000)")
    parser.add_argument("--k", type=int, default=10, help="anonymity parameter (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="census_like seed (default 0)")
    parser.add_argument(
        "--energy-loss",
        type=float,
        nargs="+",
        default=[0.1, 0.2],
        help="bounds on the relative energy loss ε² (default 0.1 0.2)",
    )
    parser.add_argument("--scan", action="store_true", help="also run every m̃ = 1 … m (Figs. 11–12)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per method; best is kept (default 1)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be ≥ 1")

    print_machine_info()
    X, _ = standardize(census_like(args.n, seed=args.seed).to_numpy(dtype=np.float64))
    n, m = X.shape
    print(f"census_like({n}, seed={args.seed}), z-scored, m = {m}; k = {args.k}; best of {args.repeat}")

    t0 = time.perf_counter()
    mdav(np.random.default_rng(0).standard_normal((max(64, 4 * args.k), 3)), args.k)
    print(f"kernel warm-up (compile or cache load, not timed below): {time.perf_counter() - t0:.2f} s")

    spectrum = pca_reduce(X, n_components=m)
    cumulative = np.cumsum(spectrum.eigenvalues) / spectrum.eigenvalues.sum()
    print("eigenvalues:      " + " ".join(f"{v:.3f}" for v in spectrum.eigenvalues))
    print("residual ε²(m̃):   " + " ".join(f"{max(0.0, 1.0 - c):.3f}" for c in cumulative))
    print()

    t_mdav, labels = best_time(lambda: mdav(X, args.k), args.repeat)
    d_mdav = distortion(X, labels, standardized=True)
    print(f"MDAV:  time {t_mdav:.3f} s   IL {100 * d_mdav:.3f}   cells {labels.max() + 1}")
    print()

    header = f"{'bound ε²':>8}  {'m̃':>3}  {'ε²':>7}  {'time s':>8}  {'IL':>8}  {'τ':>6}  {'ΔD':>8}"
    print("PCA-MDAV")
    print(header)
    print("-" * len(header))
    for bound in args.energy_loss:
        red = pca_reduce(X, energy_loss=bound)
        t, lab = best_time(lambda: pca_mdav(X, args.k, energy_loss=bound), args.repeat)
        d = distortion(X, lab, standardized=True)
        print(
            f"{bound:>8.3f}  {red.n_components:>3}  {red.energy_loss:>7.4f}  {t:>8.3f}  {100 * d:>8.3f}  "
            f"{t / t_mdav:>6.3f}  {100 * relative_distortion(d, d_mdav):>7.2f}%",
            flush=True,
        )

    if args.scan:
        print()
        print("Scan over m̃ (relative time τ = t/t_MDAV, distortion increment ΔD)")
        header = f"{'m̃':>3}  {'ε²':>7}  {'time s':>8}  {'τ':>6}  {'IL':>8}  {'ΔD':>8}"
        print(header)
        print("-" * len(header))
        for m_tilde in range(1, m + 1):
            eps2 = float(spectrum.eigenvalues[m_tilde:].sum() / spectrum.eigenvalues.sum())
            t, lab = best_time(lambda: pca_mdav(X, args.k, n_components=m_tilde), args.repeat)
            d = distortion(X, lab, standardized=True)
            print(
                f"{m_tilde:>3}  {eps2:>7.4f}  {t:>8.3f}  {t / t_mdav:>6.3f}  {100 * d:>8.3f}  "
                f"{100 * relative_distortion(d, d_mdav):>7.2f}%",
                flush=True,
            )


if __name__ == "__main__":
    main()
