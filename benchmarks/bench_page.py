"""Render time of a release's HTML page, this checkout against an earlier commit, side by side.

    python benchmarks/bench_page.py                    # against 52e6137, the plots before fixed layouts
    python benchmarks/bench_page.py --rev HEAD~2 --rounds 5 --repeat 10

Two reports: the census test data set (1,080 records, 13 QIs, k = 3) and 60 records of 2 Gaussian
QIs (k = 3), both from ``daskmicro.anonymize`` in process.  The earlier commit is checked out into
a temporary git worktree; each code renders both pages in its own process (one untimed render
first: imports and fonts), alternately, ``--rounds`` times, the best of ``--repeat`` renders each.
Printed: every round's seconds per page, the median per code and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, os, sys, time
os.environ["DASKMICRO_LEDGER"] = "off"
import numpy as np, pandas as pd
from daskmicro import anonymize
from daskmicro.datasets import CENSUS_COLUMNS, load_census
from daskmicro.report.html import render_html
repeat = int(sys.argv[1])
pages = {}
census = load_census()
pages["census, 13 QIs"] = anonymize(census, qi=list(CENSUS_COLUMNS), k=3, seed=1, ledger=False)[1].to_dict()
small = pd.DataFrame(np.random.default_rng(0).normal(size=(60, 2)), columns=["a", "b"])
pages["60 records, 2 QIs"] = anonymize(small, qi=["a", "b"], k=3, seed=1, ledger=False)[1].to_dict()
out = {}
for name, report in pages.items():
    render_html(report)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        render_html(report)
        times.append(time.perf_counter() - t0)
    out[name] = min(times)
print(json.dumps(out))
"""


def render_times(tree: Path, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(repeat)], env=env, cwd=tree, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="52e6137", help="the earlier commit (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        earlier = Path(tmp) / "earlier"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(earlier), args.rev], check=True)
        try:
            results: dict = {"this checkout": [], args.rev: []}
            for r in range(args.rounds):
                for code, tree in (("this checkout", ROOT), (args.rev, earlier)):
                    results[code].append(render_times(tree, args.repeat))
                    print(f"round {r + 1}  {code:<14}", "  ".join(f"{k}: {v:.3f} s" for k, v in results[code][-1].items()),
                          flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(earlier)], check=False)
    print()
    print(f"{'page':<20}{'this checkout':>16}{args.rev:>16}{'ratio':>8}")
    for name in results["this checkout"][0]:
        now = statistics.median(r[name] for r in results["this checkout"])
        then = statistics.median(r[name] for r in results[args.rev])
        print(f"{name:<20}{now:>14.3f} s{then:>14.3f} s{now / then:>8.2f}")


if __name__ == "__main__":
    main()
