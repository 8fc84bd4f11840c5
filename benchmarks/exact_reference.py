"""Exact MDAV labels for the pipeline benchmark's data, computed once and cached (takes minutes).

    python benchmarks/exact_reference.py --n 1000000
"""
import argparse
import time
from pathlib import Path

import numpy as np

from daskmicro import mdav, standardize
from daskmicro.datasets import census_like

CACHE = Path(__file__).parent / ".cache"


def reference_path(n: int, k: int, seed: int) -> Path:
    return CACHE / f"exact_census_like_n{n}_k{k}_seed{seed}.npy"


def cached_reference_il(n: int, k: int = 10, seed: int = 0):
    """Exact MDAV's information loss on census_like(n, seed), from the cached labels, or None."""
    path = reference_path(n, k, seed)
    if not path.exists():
        return None
    from daskmicro import information_loss

    return information_loss(census_like(n, seed=seed).to_numpy(np.float64), np.load(path))


def exact_labels(n: int, k: int = 10, seed: int = 0, data=None):
    path = reference_path(n, k, seed)
    if path.exists():
        return np.load(path), None
    X = (census_like(n, seed=seed) if data is None else data).to_numpy(np.float64)
    t0 = time.perf_counter()
    labels = mdav(standardize(X)[0], k)
    seconds = time.perf_counter() - t0
    CACHE.mkdir(exist_ok=True)
    np.save(path, labels)
    return labels, seconds


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    labels, seconds = exact_labels(a.n, a.k, a.seed)
    print(f"exact MDAV n={a.n} k={a.k}: {'cached' if seconds is None else f'{seconds:.1f} s'}")
