"""Incremental survey at scale: partitioned base stage, increment published as late files land, simulated survey.

The setting of the incremental paper (*Incremental k-Anonymous Microaggregation … With Optimized Scheduling*, §III-B, §VI-B) with the base
stage run by the partitioned pipeline across a LocalCluster:

1. the one-pass run is measured first: the partitioned pipeline on all n records, already on the
   workers, up to its verified release (its microaggregation time t_ref and its whole time);
2. a survey of ζ·(one-pass run time) seconds is simulated (uniform arrivals, ``--files`` Parquet
   files landing in a lake directory, read by the workers as they land);
3. :func:`daskmicro.anonymize_incremental` runs on it with ``base_method="partitioned"``, the
   ``--increment`` (default ``nn-fixed``: base release published and counted in the base stage,
   late files published as they land, :mod:`daskmicro.graph.incremental_fixed`) and no ν: ν comes
   from its own time model, calibrated on the partitioned base stage (and the increment's path)
   before the survey's records are needed, and the survey's duration;
   The release is written as a directory and committed (``_SUCCESS``) by the one commit every
   run has, as ``daskmicro anonymize --method incremental`` and a workflow spec do;
4. printed: the timeline, close → verified release and close → written, verified, committed
   release as shares of the one-pass run's time (target ≤ 3 %), δ = D_incremental / D_one-pass − 1,
   ν and where it came from.

    .venv/bin/python benchmarks/bench_incremental_scale.py --n 4000000            # the run of benchmarks/README.md
    .venv/bin/python benchmarks/bench_incremental_scale.py --n 200000 --zeta 3    # quick check
"""

from __future__ import annotations

from _common import print_machine_info  # first: pins thread pools to one thread before numpy is imported

import argparse
import os
import tempfile
import time

import dask.dataframe as dd
import distributed
import numpy as np

from daskmicro import anonymize_incremental
from daskmicro.runtime.cluster import local_cluster
from daskmicro.datasets import census_like
from daskmicro.graph.incremental import default_kernel, warm_up
from daskmicro.graph.pipeline import PipelineConfig, ReleaseOptions, run_pipeline
from daskmicro.io.arrivals import ArrivalSimulator


def one_pass(client, df, qi, k, options, chunk_rows):
    """The partitioned pipeline on all the records, already on the workers: (t_ref, run seconds, IL)."""
    pieces = [df.iloc[i:i + chunk_rows] for i in range(0, len(df), chunk_rows)]
    ddf = dd.from_delayed(client.scatter(pieces), meta=df.iloc[:0], verify_meta=False)
    client.persist(ddf)
    pub, details = run_pipeline(client, ddf, qi, PipelineConfig(method="partitioned", k=k, **options),
                                ReleaseOptions(0))
    pub.k_anonymity.raise_if_failed()
    t = details["timings"]
    cells = sum(t.get(s, 0.0) for s in ("ingest", "top_level", "macroaggregation", "split", "fan_out"))
    return cells, t["total"], details["information_loss"], t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--zeta", type=float, default=5.0, help="survey duration / one-pass run time")
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--increment", default="nn-fixed")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print_machine_info()
    options = {}
    df = census_like(args.n, seed=args.seed)
    df = df.iloc[np.random.default_rng(args.seed + 1).permutation(len(df))].reset_index(drop=True)  # arrival order
    qi = list(df.columns)
    print(f"n = {args.n:,}, m = {len(qi)}, k = {args.k}, ζ = {args.zeta:g}, increment {args.increment}, "
          f"{args.workers} workers; load {os.getloadavg()[0]:.1f}")
    with local_cluster(args.workers) as cluster, distributed.Client(cluster) as client:
        warm_up(client, "nn" if args.increment == "nn-fixed" else args.increment, default_kernel)
        t_ref, t_run, il_ref, t = one_pass(client, df, qi, args.k, options, 200_000)
        print(f"one pass: microaggregation t_ref = {t_ref:.1f} s, whole run to the verified release {t_run:.1f} s, "
              f"IL {il_ref:.3f}; stages " + ", ".join(f"{key} {v:.1f}" for key, v in t.items()))
        survey = args.zeta * t_run
        with tempfile.TemporaryDirectory() as tmp:
            lake = os.path.join(tmp, "lake")
            with ArrivalSimulator(df, lake, n_files=args.files, duration=survey, speed=1.0):
                started = time.time()
                _, report = anonymize_incremental(lake, qi, args.k, increment=args.increment,
                                                  base_method="partitioned", base_options=options, client=client,
                                                  seed=0, timeout=survey + 3600, output=os.path.join(tmp, "release"),
                                                  ledger="off")
                committed = time.time()
                wall = committed - started
    inc = report.incremental
    tm = inc["times"]
    o = tm["opened"]
    print(f"survey of {survey:.0f} s in {args.files} files; incremental call {wall:.0f} s")
    cal = inc.get("calibration") or {}
    print(f"ν = {inc['nu']:.4f} from: {inc['nu_from']}")
    if cal:
        print(f"  calibration: base stage {cal['n']} rows → {[round(s, 2) for s in cal['seconds']]} s "
              f"(a = {cal['a']:.3g}, β = {cal['beta']:.3f}); predicted t_ref {cal['a'] * args.n ** cal['beta']:.1f} s "
              f"(measured {t_ref:.1f} s)")
    print(f"base {inc['n_base']:,} records, increment {inc['n_increment']:,} (ν actual {inc['nu_actual']:.4f})")
    info = (inc.get("base_info") or {})
    if info:
        print("base stage steps: " + ", ".join(f"{key} {v:.1f} s" for key, v in info.items() if isinstance(v, float)))
    if cal:
        pred = cal["a"] * inc["n_base"] ** cal["beta"]
        print(f"base stage predicted {pred:.1f} s (× margin → planned), measured {inc['base_seconds']:.1f} s")
    print("timeline (s since the survey opened):")
    for key in ("base_submitted", "base_start", "base_end", "close", "increment_submitted", "increment_start",
                "increment_end", "release"):
        print(f"  {key:20s} {tm[key] - o:9.2f}")
    for key, v in (inc.get("increment_info") or {}).items():
        print(f"{key}: {v:,}")
    c2r = inc["close_to_release_seconds"]
    delta = report.information_loss / il_ref - 1.0
    print(f"base stage {inc['base_seconds']:.1f} s, increment stage {inc['increment_seconds']:.2f} s, "
          f"base ended {tm['close'] - tm['base_end']:.1f} s before the close")
    print(f"close → verified release: {c2r:.2f} s = {100 * c2r / t_run:.2f} % of the one-pass run ({t_run:.1f} s), "
          f"{100 * c2r / t_ref:.2f} % of its microaggregation time t_ref (target ≤ 3 %)")
    c2c = committed - tm["close"]
    print(f"close → written, verified, committed release (a directory with _SUCCESS): {c2c:.2f} s = "
          f"{100 * c2c / t_run:.2f} % of the one-pass run (target ≤ 3 %)")
    print(f"δ = D/D_one-pass − 1 = {100 * delta:+.2f} % (IL {report.information_loss:.3f} vs {il_ref:.3f}); "
          f"verified {report.verified}, rows {report.rows.rows_out:,}, smallest tuple count {report.k_anonymity.min_count}")


if __name__ == "__main__":
    main()
