"""A re-release through the release ledger against a fresh run, on a LocalCluster.

Census-like lakes, k = 10, method partitioned (the default for lakes of this size), Parquet
directory in → committed Parquet directory out, 2 worker processes at daskmicro's default memory
limit.  The grown lake is the base lake plus 1 % new records (one more file).  Printed side by
side, each from reading the lake to the committed release:

* fresh, trial — the grown lake with the ledger off (nothing recorded: the cost of the run alone);
* fresh, recorded — the grown lake as the first release of a new ledger (fingerprints and the
  ledger's files written by the tasks that build the pieces);
* re-release — the grown lake after the base lake was released into the ledger: frozen cells looked
  up on the workers, the 1 % new records aggregated among themselves.

    .venv/bin/python benchmarks/bench_series.py --n 1e6
    .venv/bin/python benchmarks/bench_series.py --n 16e6
"""

import _common  # noqa: F401  (first: one thread per worker process)

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from bench_pipeline import CACHE, PeakRSS, make_lake, memory_kwargs

from daskmicro import anonymize_file
from daskmicro.datasets import CENSUS_COLUMNS, census_like


def grown_lake(base: Path, n_new: int, where: Path) -> Path:
    """``base``'s files (linked) plus one file of ``n_new`` new records."""
    out = where / "grown"
    out.mkdir()
    for f in sorted(base.glob("*.parquet")):
        (out / f.name).symlink_to(f)
    census_like(n_new, seed=987_654).to_parquet(out / "part-new.parquet", index=False)
    return out


def timed(client, lake, out, qi=CENSUS_COLUMNS, **kw):
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        rep = anonymize_file(lake, out, list(qi), 10, seed=0, client=client, method="partitioned", **kw)
        wall = time.perf_counter() - t0
    assert rep.verified and (out / "_SUCCESS").exists()
    shutil.rmtree(out, ignore_errors=True)
    return wall, (mem.peak - mem.base) / 2**20, rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--new", type=float, default=0.01, help="fraction of new records in the re-release")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--passthrough", type=int, default=0, help="census columns published as they are, not QIs")
    a = ap.parse_args()
    qi = list(CENSUS_COLUMNS)[:len(CENSUS_COLUMNS) - a.passthrough]
    from distributed import Client

    from daskmicro.runtime.cluster import local_cluster

    n = int(a.n)
    base = make_lake(n)
    cluster = local_cluster(a.workers, dashboard_address=None, **memory_kwargs("daskmicro", a.workers))
    client = Client(cluster)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        tmp = Path(tmp)
        timed(client, make_lake(60_000), tmp / "warm", ledger="off", partition_size=5_000, task_rows=20_000)
        _common.print_machine_info()
        grown = grown_lake(base, int(n * a.new), tmp)
        rows = []
        rows.append(("fresh, trial (ledger off)",) + timed(client, grown, tmp / "o1", qi, ledger="off"))
        rows.append(("fresh, recorded (first release)",) + timed(client, grown, tmp / "o2", qi, ledger=tmp / "l1"))
        t0 = time.perf_counter()
        timed(client, base, tmp / "o3", qi, ledger=tmp / "l2")
        base_wall = time.perf_counter() - t0
        rows.append((f"re-release, {a.new:.0%} new",) + timed(client, grown, tmp / "o4", qi, ledger=tmp / "l2"))
        ledger_mib = sum(p.stat().st_size for p in (tmp / "l2").rglob("*") if p.is_file()) / 2**20
    client.close()
    cluster.close()
    print(f"n = {n:,} base + {int(n * a.new):,} new census-like records, {len(qi)} QIs + {a.passthrough} columns "
          f"published as they are, k = 10, {a.workers} workers; "
          f"base release recorded in {base_wall:.1f} s; ledger after two releases {ledger_mib:.0f} MiB")
    print(f"{'run':<34} {'wall s':>8} {'× fresh':>8} {'peak MiB':>9} {'IL':>8}  series")
    fresh = rows[0][1]
    for label, wall, peak, rep in rows:
        s = rep.series or {}
        what = (f"republished {s.get('republished', 0):,}, new {s.get('new', 0):,}, new cells {s.get('new_cells', 0):,}"
                if s.get("recorded") else "not recorded")
        print(f"{label:<34} {wall:8.1f} {wall / fresh:8.2f} {peak:9.0f} {rep.information_loss:8.4f}  {what}")
        print(" " * 36 + "stages (s): " + " ".join(f"{k}={v:.1f}" for k, v in rep.timings.items() if k != "total"))


if __name__ == "__main__":
    main()
