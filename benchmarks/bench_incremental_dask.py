"""Incremental run on a LocalCluster with simulated arrivals at ζ = 5: time from close to release.

The setting of the incremental paper's worked example (*Incremental k-Anonymous Microaggregation … With Optimized Scheduling*, §VI-B): a
survey lasting ζ = 5 times the one-pass microaggregation time, uniform arrivals, exact MDAV base
stage on the first 1 − ν* of the records, 2MDAV increment at the close.  Theory (quadratic
stages): ν* ≈ 14.6 %, the base stage ends exactly at the close and the release follows
ν*²·t_ref ≈ 2.1 % of the one-pass time later.

For each stage kernel the script

1. measures the one-pass time t_ref on a worker (all n records, z-scored);
2. opens a simulated survey of ζ·t_ref seconds (:class:`~daskmicro.io.arrivals.ArrivalSimulator`,
   uniform arrivals, ``--files`` Parquet files);
3. runs :func:`daskmicro.anonymize_incremental` on the lake with ``zeta=ζ`` and ``reference=True``
   and prints the measured timeline, τ₀, τ₊, τ₋, the time from close to verified release as a
   fraction of t_ref, and δ against one-pass MDAV.

Kernels: ``textbook`` — MDAV with full distance passes (``quadratic_mdav.py``, quadratic like the paper's);
``fast`` — the package's exact MDAV (pruned k-d tree, far from quadratic, so the paper's ν*
is not optimal for it: see the README).

    .venv/bin/python benchmarks/bench_incremental_dask.py --n 100000              # both kernels
    .venv/bin/python benchmarks/bench_incremental_dask.py --kernel fast --n 50000  # quick check
"""

from __future__ import annotations

from _common import print_machine_info  # first: pins thread pools to one thread before numpy is imported

import argparse
import os
import tempfile
import time

import cloudpickle
import distributed
import numpy as np

import quadratic_mdav
from daskmicro import anonymize_incremental, schedule
from daskmicro.datasets import census_like
from daskmicro.io.arrivals import ArrivalSimulator
from daskmicro.kernels import mdav, standardize

cloudpickle.register_pickle_by_value(quadratic_mdav)  # the workers cannot import the benchmarks folder

KERNELS = {"textbook": quadratic_mdav.quadratic_mdav, "fast": mdav}


def _one_pass(X, k, kernel):
    Z = standardize(X)[0]
    kernel(Z[: 3 * k], k)  # load / compile
    t0 = time.perf_counter()
    kernel(Z, k)
    return time.perf_counter() - t0


def _load() -> str:
    return "load average %.1f / %.1f / %.1f (1 / 5 / 15 min)" % os.getloadavg()


def run(name, client, df, qi, k, zeta, n_files, increment, calibrate=False):
    kernel = KERNELS[name]
    X = df[qi].to_numpy(np.float64)
    print(f"### kernel {name}: n = {len(df):,}, m = {len(qi)}, k = {k}, ζ = {zeta:g}, increment {increment}")
    print(f"before: {_load()}")
    [X_remote] = client.scatter([X])
    t_ref0 = client.submit(_one_pass, X_remote, k, kernel, pure=False).result()
    del X_remote
    survey = zeta * t_ref0
    print(f"one-pass time measured first: {t_ref0:.2f} s → survey of {survey:.1f} s in {n_files} files")
    with tempfile.TemporaryDirectory() as tmp:
        lake = os.path.join(tmp, "lake")
        sim = ArrivalSimulator(df, lake, n_files=n_files, duration=survey, speed=1.0, timestamp_column="arrived")
        sim.start()
        try:
            # --calibrate: ν from a time model a·n^β fitted by short runs on a worker and the
            # survey's length (the simulator's manifest), not from the ζ the benchmark set up
            schedule_kw = {} if calibrate else {"zeta": zeta}
            release, report = anonymize_incremental(lake, qi, k, base_method=kernel, increment=increment,
                                                    client=client, reference=True, seed=0, timeout=survey + 600,
                                                    **schedule_kw)
        finally:
            sim.stop()
    inc = report.incremental
    t = inc["times"]
    o = t["opened"]
    print(f"after:  {_load()}")
    if inc.get("calibration"):
        cal = inc["calibration"]
        print(f"calibrated time model t(n) = {cal['a']:.3g}·n^{cal['beta']:.3f} from n = {cal['n']}; "
              f"predicted t_ref {cal['a'] * len(df) ** cal['beta']:.2f} s → ζ = {inc['zeta']:.2f}")
    print(f"ν = {inc['nu']:.4f} ({inc['nu_source']}, ν* of ζ = {inc['zeta']:.3g}); base {inc['n_base']:,} records, increment {inc['n_increment']:,}")
    print("timeline (s since the survey opened):")
    for key in ("base_submitted", "base_start", "base_end", "close", "increment_submitted", "increment_start",
                "increment_end", "release"):
        print(f"  {key:20s} {t[key] - o:8.2f}")
    t_ref = inc["t_ref"]
    theory = inc["nu"] ** 2
    print(f"t_ref (one pass, measured after the release) = {t_ref:.2f} s")
    print(f"τ₀ = {inc['tau_0']:.3f} (theory {(1 - inc['nu']) ** 2:.3f}), τ₊ = {inc['tau_plus']:.4f} "
          f"(theory {theory:.4f}), τ₋ = {inc['tau_minus']:.3f} (theory {zeta * inc['nu']:.3f}), Δτ = {inc['delta_tau']:.3f}")
    print(f"close → verified release: {inc['close_to_release_seconds']:.3f} s = "
          f"{100 * inc['close_to_release_ratio']:.2f} % of t_ref (theory ν*² = {100 * theory:.2f} %; target ≤ 3 %)")
    print(f"δ = D_T/D − 1 = {100 * inc['delta']:+.2f} % (IL {report.information_loss:.3f} vs one-pass "
          f"{report.reference_information_loss:.3f}); verified: {report.verified}")
    print()
    return inc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=150_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--zeta", type=float, default=5.0)
    ap.add_argument("--files", type=int, default=400, help="Parquet files the survey lands in (default: %(default)s)")
    ap.add_argument("--kernel", nargs="+", default=["textbook", "fast"], choices=list(KERNELS))
    ap.add_argument("--increment", default="2mdav")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibrate", action="store_true",
                    help="let the run calibrate its time model and choose ν (instead of being given ζ)")
    args = ap.parse_args(argv)
    print_machine_info()
    print(f"ν*(ζ = {args.zeta:g}) = {schedule.optimal_ratio(args.zeta):.4f}, ν*² = {schedule.optimal_ratio(args.zeta) ** 2:.4f}\n")
    df = census_like(args.n, seed=args.seed)
    df = df.iloc[np.random.default_rng(args.seed + 1).permutation(len(df))].reset_index(drop=True)  # arrival order
    qi = list(df.columns)
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        for name in args.kernel:
            run(name, client, df, qi, args.k, args.zeta, args.files, args.increment, args.calibrate)


if __name__ == "__main__":
    main()
