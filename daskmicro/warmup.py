"""Compile every numba kernel a run can need, ahead of the run (issue 18): ``daskmicro warmup``.

Each step calls a kernel entry on a tiny input of the dtypes and layouts runs use (C-contiguous float64
records, int64 labels), so numba compiles the same specializations a run would and writes them to the cache
dir chosen by :mod:`daskmicro.compile_cache`. A later process — the CLI, a LocalCluster worker, a pod started
from an image warmed at build time — loads them instead of compiling.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .compile_cache import cache_dir, configure

__all__ = ["warm_up", "STEPS"]


def _records(n: int = 240, m: int = 4) -> np.ndarray:
    return np.ascontiguousarray(np.random.default_rng(0).normal(size=(n, m)), dtype=np.float64)


def _mdav():
    from .kernels.mdav import mdav

    mdav(_records(), 3)


def _pca_mdav():
    from .kernels.pca import pca_mdav

    pca_mdav(_records(), 3, n_components=2)


def _partitioned():
    from .kernels.algorithm_c import algorithm_c
    from .kernels.macro import dd_colsum, nested_mdav, sq_dist

    Z = _records()
    algorithm_c(Z, 3, K=60, nu=0.5, n_components=1)
    nested_mdav(Z, [60, 20])
    dd_colsum(Z)
    sq_dist(Z, Z[0].copy())


def _pcl():
    from .kernels.partition_pcl import nested_pcl
    from .kernels.pcl import pcl

    Z = _records()
    pcl(Z, 3, max_iter=2)
    pcl(Z, 2, max_iter=2, noisy=True, n_noisy=2)  # the noisy stage (small k)
    nested_pcl(Z, [60], 2)


def _improve():
    from .kernels.improve import improve
    from .kernels.mdav import mdav

    Z = _records()
    improve(Z, mdav(Z, 3), 3, sweeps=2, neighbours=4)  # first search, a sweep, a descent round


def _incremental():
    from .kernels.incremental import increment
    from .kernels.mdav import mdav

    Z = _records()
    base = mdav(Z[:160], 3).astype(np.int64)
    for method in ("2mdav", "nn", "nn-split-mid", "nn-split-end"):
        increment(method, Z[:160], base, Z[160:], 3)
    increment("nn-split-mid", Z[:160], base, Z[160:], 3, inertial=True)


#: (name, step) in the order they run.
STEPS: list[tuple[str, Callable[[], None]]] = [
    ("mdav", _mdav),
    ("pca-mdav", _pca_mdav),
    ("partitioned", _partitioned),
    ("pcl", _pcl),
    ("improve", _improve),
    ("incremental", _incremental),
]


def warm_up(progress: Callable[[str, float], None] | None = None) -> tuple[str | None, float]:
    """Run every step; return (numba cache dir, seconds). ``progress(name, seconds)`` after each step."""
    configure()
    t0 = time.perf_counter()
    for name, step in STEPS:
        t = time.perf_counter()
        step()
        if progress is not None:
            progress(name, time.perf_counter() - t)
    return cache_dir(), time.perf_counter() - t0
