"""Algorithm C of *Efficient k-Anonymous Microaggregation … via PCA* (§IV-B) on 150,000 census-like records, K = 1000, k = 10.

    python benchmarks/bench_algorithm_c.py

Prints (1) the sorted macrocell SSE curve in summary (Fig. 13: a few macrocells carry most of
the distortion) and (2) the ν scan (Fig. 14): for each fraction ν of distal macrocells, the
microaggregation time relative to ν = 1 (plain MDAV) and the distortion increment ΔD relative to
plain MDAV.  Runs through ``anonymize(method="proximal-distal")`` on a one-worker LocalCluster
so the times are single-thread times, as in the paper.
"""

from __future__ import annotations

import _common  # noqa: F401

import argparse

import numpy as np

from daskmicro import anonymize
from daskmicro.datasets import CENSUS_COLUMNS, census_like


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=150_000)
    ap.add_argument("--K", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    from distributed import Client

    from daskmicro.runtime.cluster import local_cluster

    cluster = local_cluster(1, dashboard_address=None)
    client = Client(cluster)
    _common.print_machine_info()
    df = census_like(a.n, seed=0)
    qi = list(CENSUS_COLUMNS)
    anonymize(df.iloc[:5000], qi, a.k, method="proximal-distal", K=a.K, nu=0.5, client=client, seed=0)  # warm-up

    rows = []
    for nu in np.linspace(0.0, 1.0, a.steps + 1):
        _, rep = anonymize(df, qi, a.k, method="proximal-distal", K=a.K, nu=float(nu), client=client, seed=0)
        rows.append((float(nu), rep))
    base = rows[-1][1]
    curve = np.asarray(base.pipeline["macrocell_sse"])
    share = np.cumsum(curve) / curve.sum()
    C = curve.size
    print(f"n = {a.n:,}, K = {a.K}, k = {a.k}: {C} macrocells")
    print("Fig. 13 — sorted macrocell SSE (z-space), largest first:")
    for q in (1, 5, 10, 20, 40, 60, 80, 100):
        i = max(1, round(q / 100 * C))
        print(f"  top {q:3d}% of macrocells ({i:4d}) carry {100 * share[i - 1]:5.1f}% of the macro SSE;"
              f" SSE of macrocell #{i}: {curve[i - 1]:9.1f}")
    print()
    print("Fig. 14 — ν scan (C_D = round(ν·C) distal macrocells run MDAV, the rest PCA-MDAV):")
    print(f"{'ν':>5} {'C_D':>5} {'m̃':>3} {'time s':>7} {'τ rel':>6} {'IL':>7} {'ΔD':>8}")
    for nu, rep in rows:
        t = rep.seconds
        print(f"{nu:5.2f} {rep.pipeline['distal_macrocells']:5d} {str(rep.n_components or '-'):>3} {t:7.2f} "
              f"{t / base.seconds:6.3f} {rep.information_loss:7.3f} {100 * (rep.information_loss / base.information_loss - 1):+7.1f}%")
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
