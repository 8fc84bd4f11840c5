"""Shared helpers of the benchmark scripts: single-thread set-up, machine info, best-of timing.

Import this module before numpy/numba: it pins every thread pool to one thread.  It also makes
every run of the script, and of the processes it starts, a trial run (``DASKMICRO_LEDGER=off``)
unless the environment names a ledger: a benchmark runs the same data again and again, and with
the user's release ledger each run after the first would be a re-release of the same records —
timed as such, and slower with every release the series holds.  ``bench_series.py`` names its own
ledgers.
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("DASKMICRO_LEDGER", "off")

import platform  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_machine_info() -> None:
    print(f"CPU:     {cpu_model()} ({os.cpu_count()} logical CPUs; benchmark uses 1 thread)")
    print(f"Python:  {platform.python_version()} on {platform.system()} {platform.release()}")
    print(f"numpy:   {np.__version__}")
    print(f"numba:   {numba.__version__} (NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']})")
    print()


def best_time(func, repeat):
    """Best wall time of ``repeat`` calls, and the last result."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - t0)
    return best, result


def tree_rss(pid: int) -> int:
    """Summed RSS of process ``pid`` and all its descendants (0 once it has gone)."""
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total
