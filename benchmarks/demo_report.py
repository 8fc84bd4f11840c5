"""Write a full example run report (JSON + HTML) on census-like data, with a measured m̃ sweep.

Runs exact MDAV and MDAV with PCA (Algorithm B of *Efficient k-Anonymous Microaggregation … via PCA*) for every m̃ = 1 … m on
``census_like(n)``, one thread, and writes OUT/report.json and OUT/report.html for the PCA run
chosen by the energy bound ε²: parameters, timings, information loss relative to exact MDAV,
cell-size histogram, PCA energy spectrum with m̃ (Fig. 9), utility and disclosure-risk measures,
and the sweep of relative time τ against distortion increment δ over m̃ (the shape of Figs.
11–12, plotted as in Fig. 14) with the fastest m̃ within the distortion budget.  Prints the sweep.

This is a stand-in until the pipeline's ``daskmicro sweep`` (which scans ν / C_D, K and m̃) exists.

    python benchmarks/demo_report.py --out /tmp/report-demo
    python benchmarks/demo_report.py --n 75000 --budget 0.02 --out /tmp/report-demo
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_machine_info  # noqa: E402  (pins threads to 1 first)

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from daskmicro.datasets import CENSUS_COLUMNS, census_like  # noqa: E402
from daskmicro.io.tables import write_json_atomic  # noqa: E402
from daskmicro.kernels import centroids, distortion, mdav, pca_mdav, pca_reduce, standardize  # noqa: E402
from daskmicro.kernels.utility import utility_measures  # noqa: E402
from daskmicro.privacy import verify_k_anonymity, verify_rows  # noqa: E402
from daskmicro.privacy.risk import disclosure_risk  # noqa: E402
from daskmicro.report import Report, write_report  # noqa: E402


def _timed(func):
    t0 = time.perf_counter()
    out = func()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--energy-loss", type=float, default=0.1)
    ap.add_argument("--budget", type=float, default=0.02, help="distortion budget on δ (fraction)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="run directory to write report.json/html into")
    args = ap.parse_args()
    print_machine_info()

    cols = list(CENSUS_COLUMNS)
    t_read, X = _timed(lambda: census_like(args.n, seed=args.seed)[cols].to_numpy(np.float64))
    t_z, (Z, _) = _timed(lambda: standardize(X))
    mdav(Z[:50], 3)  # compile or load from cache
    t_mdav, labels_mdav = _timed(lambda: mdav(Z, args.k))
    d_mdav = distortion(Z, labels_mdav, standardized=True)
    print(f"n = {args.n:,}, k = {args.k}: exact MDAV {t_mdav:.2f} s, IL {100 * d_mdav:.3f}")
    print(" m̃    time (s)   τ (%)    IL     δ (%)")
    points = []
    for mt in range(1, Z.shape[1] + 1):
        t, labels = _timed(lambda: pca_mdav(Z, args.k, n_components=mt))
        d = distortion(Z, labels, standardized=True)
        points.append({"setting": f"m̃={mt}", "relative_time": t / t_mdav, "relative_distortion": (d - d_mdav) / d_mdav})
        print(f"{mt:3d} {t:10.2f} {100 * t / t_mdav:7.1f} {100 * d:7.3f} {100 * (d - d_mdav) / d_mdav:8.2f}")

    red = pca_reduce(Z, energy_loss=args.energy_loss)
    t_pca, labels = _timed(lambda: pca_mdav(Z, args.k, energy_loss=args.energy_loss))
    Y = centroids(X, labels)[labels]
    release = __import__("pandas").DataFrame(Y, columns=cols)
    t_verify, (kcheck, rcheck) = _timed(lambda: (verify_k_anonymity(release, cols, args.k), verify_rows(len(X), release)))
    t_util, util = _timed(lambda: utility_measures(X, Y, columns=cols))
    t_risk, risk = _timed(lambda: disclosure_risk(X, Y, sample_size=10_000, seed=args.seed))
    sizes = np.bincount(labels)
    size_values, size_counts = np.unique(sizes, return_counts=True)
    report = Report(
        n=args.n, m=len(cols), m_used=len(cols), k=args.k, method="pca-mdav", qi=cols, cells=int(sizes.size),
        min_cell_size=int(sizes.min()), max_cell_size=int(sizes.max()),
        information_loss=100 * distortion(Z, labels, standardized=True), seconds=t_pca, seed=args.seed,
        energy_loss=args.energy_loss, n_components=int(red.n_components),
        eigenvalues=[float(v) for v in red.eigenvalues], pca_energy_loss=float(red.energy_loss),
        k_anonymity=kcheck, rows=rcheck,
    )
    report.timings = {"generate data": t_read, "z-score": t_z, "PCA-MDAV": t_pca, "verification": t_verify,
                      "utility measures": t_util, "risk measures": t_risk}
    report.reference_information_loss = 100 * d_mdav
    report.cell_size_counts = dict(zip(size_values.tolist(), size_counts.tolist()))
    report.utility, report.risk = util, risk
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = report.to_dict()
    data["sweep"] = {"points": points, "budget": args.budget}
    write_json_atomic(data, out / "report.json")
    print(f"\nwrote {write_report(out)} (m̃ = {red.n_components} for ε² ≤ {args.energy_loss})")


if __name__ == "__main__":
    main()
