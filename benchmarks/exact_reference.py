"""Exact MDAV labels for the pipeline benchmarks' data, computed once and cached (takes minutes).

    python benchmarks/exact_reference.py --n 1000000
    python benchmarks/exact_reference.py --n 1000000 --data gaussian     # correlated Gaussian, m = 13
"""
import argparse
import time
from pathlib import Path

import numpy as np

from daskmicro import mdav, standardize
from daskmicro.datasets import census_like, correlated_gaussian

CACHE = Path(__file__).parent / ".cache"
#: Data sets: name → f(n, seed) -> (n, 13) float64 matrix.
DATA = {
    "census_like": lambda n, seed: census_like(n, seed=seed).to_numpy(np.float64),
    "gaussian": lambda n, seed: correlated_gaussian(n, 13, seed=seed),
}


def reference_path(n: int, k: int, seed: int, data: str = "census_like") -> Path:
    return CACHE / f"exact_{data}_n{n}_k{k}_seed{seed}.npy"


def cached_reference_il(n: int, k: int = 10, seed: int = 0, data: str = "census_like"):
    """Exact MDAV's information loss on the data set ``data`` (n records, seed), from the cached
    labels, or None."""
    path = reference_path(n, k, seed, data)
    if not path.exists():
        return None
    from daskmicro import information_loss

    return information_loss(DATA[data](n, seed), np.load(path))


def exact_labels(n: int, k: int = 10, seed: int = 0, data: str = "census_like"):
    path = reference_path(n, k, seed, data)
    if path.exists():
        return np.load(path), None
    X = DATA[data](n, seed)
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
    ap.add_argument("--data", choices=sorted(DATA), default="census_like")
    a = ap.parse_args()
    labels, seconds = exact_labels(a.n, a.k, a.seed, a.data)
    print(f"exact MDAV {a.data} n={a.n} k={a.k}: {'cached' if seconds is None else f'{seconds:.1f} s'}")
