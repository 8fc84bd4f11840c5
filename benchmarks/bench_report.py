"""Cost of the report measures and of the HTML page on census-like data, one thread.

Data: ``census_like(n, seed)`` (default 50 000 records, 13 attributes), microaggregated with exact
MDAV at k; the release is the matrix of cell centroids, row-aligned with the original.  Prints
the wall time of :func:`utility_measures` (all n records), :func:`record_linkage` on a record
sample of each size given (KD-tree on the distinct released tuples) and on all records,
:func:`interval_disclosure` on all records, and :func:`render_html` of a full report, together
with the measured values.  The MDAV time is printed for scale.

    python benchmarks/bench_report.py
    python benchmarks/bench_report.py --n 150000 --k 10 --samples 1000 10000
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_time, print_machine_info  # noqa: E402  (pins threads to 1 first)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from daskmicro.datasets import CENSUS_COLUMNS, census_like  # noqa: E402
from daskmicro.kernels import centroids, mdav, standardize  # noqa: E402
from daskmicro.kernels.utility import utility_measures  # noqa: E402
from daskmicro.privacy.risk import disclosure_risk, interval_disclosure, record_linkage  # noqa: E402
from daskmicro.report import Report, render_html  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, nargs="+", default=[1_000, 10_000])
    args = ap.parse_args()
    print_machine_info()

    X = census_like(args.n, seed=args.seed)[list(CENSUS_COLUMNS)].to_numpy(np.float64)
    Z, _ = standardize(X)
    mdav(Z[:50], 3)  # compile or load from cache
    t0 = time.perf_counter()
    labels = mdav(Z, args.k)
    t_mdav = time.perf_counter() - t0
    Y = centroids(X, labels)[labels]
    print(f"n = {args.n:,}, m = {X.shape[1]}, k = {args.k}: exact MDAV {t_mdav:.2f} s, "
          f"{labels.max() + 1:,} cells\n")

    t, u = best_time(lambda: utility_measures(X, Y, columns=list(CENSUS_COLUMNS)), 3)
    print(f"utility_measures (all records)     {t:8.3f} s   IL1s {u.il1s:.4f}  eigen {u.eigen:.3f}  "
          f"IL {u.information_loss:.2f}  max|Δcorr| {u.correlation_max_abs_diff:.4f}")
    for size in [*args.samples, None]:
        t, r = best_time(lambda: record_linkage(X, Y, sample_size=size, seed=args.seed), 3)
        label = "all records" if size is None else f"sample {size:,}"
        print(f"record_linkage ({label:>13})    {t:8.3f} s   rate {r.rate:.4f} "
              f"({r.n_linked:,}/{r.n_sampled:,}, {r.n_tuples:,} tuples)")
    for p in (0.05, 0.5):
        t, r = best_time(lambda: interval_disclosure(X, Y, p=p), 3)
        print(f"interval_disclosure (p={p:<4}, all)  {t:8.3f} s   rate {r.rate:.4f}")

    report = Report(n=args.n, m=X.shape[1], k=args.k, method="mdav", qi=list(CENSUS_COLUMNS),
                    cells=int(labels.max()) + 1, min_cell_size=int(np.bincount(labels).min()),
                    max_cell_size=int(np.bincount(labels).max()), information_loss=u.information_loss,
                    seconds=t_mdav, seed=args.seed, m_used=X.shape[1])
    sizes, counts = np.unique(np.bincount(labels), return_counts=True)
    report.cell_size_counts = dict(zip(sizes.tolist(), counts.tolist()))
    report.utility = u
    report.risk = disclosure_risk(X, Y, sample_size=args.samples[-1], seed=args.seed)
    report.timings = {"mdav": t_mdav}
    d = report.to_dict()
    render_html(d)  # import matplotlib once
    t, page = best_time(lambda: render_html(d), 3)
    print(f"render_html (full report)          {t:8.3f} s   {len(page) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
