"""Lake run end to end on the CLI: a Parquet lake of many files with strata, 2 workers.

Writes a lake of ``--files`` Parquet files (``--rows`` rows in all, ``--m`` correlated Gaussian QI
columns, a stratum column ``s`` with ``--strata`` values of unequal size, an ``id`` column
dropped as a direct identifier), runs ``daskmicro anonymize`` on it in a subprocess with
``--strata s --workers 2``, samples the resident memory of the whole process tree (CLI, scheduler,
nanny and worker processes) every 0.2 s, and prints wall time, peak summed RSS and the report's
figures.  Usage::

    python bench_lake.py --rows 10000000 --files 100 --dir /tmp/lake-bench
"""

from __future__ import annotations

import _common  # noqa: F401  (pins thread pools before numpy is imported)

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd


def make_lake(root: Path, rows: int, files: int, m: int, n_strata: int, seed: int = 0) -> None:
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, m)) / np.sqrt(m) + np.eye(m)
    weights = np.arange(1, n_strata + 1, dtype=float)
    weights /= weights.sum()
    per = rows // files
    for i in range(files):
        size = per if i < files - 1 else rows - per * (files - 1)
        X = rng.normal(size=(size, m)) @ A
        df = pd.DataFrame(X, columns=[f"x{j + 1}" for j in range(m)])
        df["s"] = np.array([f"s{j}" for j in range(n_strata)])[rng.choice(n_strata, size=size, p=weights)]
        df["id"] = np.arange(i * per, i * per + size, dtype=np.int64)
        df.to_parquet(root / f"part-{i:05d}.parquet", index=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--m", type=int, default=5)
    ap.add_argument("--strata", type=int, default=3)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/daskmicro-bench-lake")
    ap.add_argument("--keep", action="store_true", help="keep the lake and the release")
    a = ap.parse_args()
    _common.print_machine_info()
    base = Path(a.dir)
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.perf_counter()
    make_lake(base / "in", a.rows, a.files, a.m, a.strata)
    print(f"lake: {a.rows:,} rows × {a.m} QI in {a.files} files, {a.strata} strata, written in "
          f"{time.perf_counter() - t0:.1f} s")
    qi = ",".join(f"x{j + 1}" for j in range(a.m))
    cmd = [sys.executable, "-m", "daskmicro", "anonymize", str(base / "in"), str(base / "out"), "--qi", qi,
           "--k", str(a.k), "--strata", "s", "--drop", "id", "--workers", "2", "--seed", "1"]
    print("command:", " ".join(cmd[1:]))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = [0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], _common.tree_rss(proc.pid))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    th.join()
    print(out)
    if proc.returncode != 0:
        raise SystemExit(f"run failed with exit status {proc.returncode}")
    report = json.loads((base / "out" / "_report.json").read_text())
    raw = a.rows * a.m * 8
    print(f"wall time (CLI, end to end): {wall:.1f} s")
    print(f"peak RSS of the process tree: {peak[0] / 2**30:.2f} GiB (raw QI data {raw / 2**30:.2f} GiB)")
    print(f"information loss {report['information_loss']:.4f}; cells {report['cells']:,}; "
          f"groups {len(report['strata']['groups'])}; files {len(report['lake']['files'])}")
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
