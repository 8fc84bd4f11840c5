"""Compile the numba kernels a run needs before the run's stages start.

Two callers:

* ``daskmicro warmup`` (:func:`warm_up`) compiles every kernel ahead, into the cache dir chosen by
  :mod:`daskmicro.runtime.compile_cache`, e.g. while a Docker image is built;
* every run (:func:`warm`, called on each worker process by the executor before its stages) compiles,
  or loads from the cache, the kernels of the methods it runs. Its time is reported apart from the
  stages, so a first run's compile no longer shows up as microaggregation time.

**One compile per machine.** The kernels are cut into *units* (the compiled pieces of exact MDAV, then
one unit per other method), listed leaf first with the units each one calls. The worker processes of a
machine share the cache dir; each takes a unit only when no other process holds its lock file
(``fcntl.flock`` in ``<cache dir>/.locks``) nor the lock of a unit it calls, compiles it and writes it
to the cache, and moves on to the next unit otherwise; it waits only when every unit left is busy
elsewhere, and then loads what the others compiled from the cache. So N workers starting on an empty
cache share the compile instead of each doing all of it, and a process that finds the cache warm only
loads.

A unit compiles its kernels for the argument types runs use (C-contiguous float64 records, int64
labels and scalars, never an integer literal): ``tests/test_compile_units.py`` checks that a run after
the warm-up compiles nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .compile_cache import cache_dir, configure

__all__ = ["warm_up", "warm", "warm_workers", "run_units", "lock_dir", "Unit", "units", "kernel_sets", "KERNEL_SETS", "STEPS", "COSTS"]


def _records(n: int = 240, m: int = 4) -> np.ndarray:
    return np.ascontiguousarray(np.random.default_rng(0).normal(size=(n, m)), dtype=np.float64)


def _pca():
    from ..kernels.algorithm_c import algorithm_c
    from ..kernels.pca import pca_mdav

    pca_mdav(_records(), 3, n_components=2)
    algorithm_c(_records(), 3, K=60, nu=0.5, n_components=1)


def _partitioned():
    from ..kernels.chunked import distances, free_sums, rank_sample
    from ..kernels.macro import cell_stats, dd_colsum, nested_mdav, sq_dist

    Z = _records()
    cell_stats(Z, nested_mdav(Z, [60, 20])[-1])
    dd_colsum(Z)
    sq_dist(Z, Z[0].copy())
    W = Z.astype(np.float32)   # the top level's working copy, its int8 labels
    labels = np.full(W.shape[0], -1, dtype=np.int8)
    free_sums(W, labels)
    rank_sample(distances(W, labels, 0, W[0].copy()))


def _pcl():
    from ..kernels.partition_pcl import nested_pcl
    from ..kernels.pcl import pcl

    Z = _records()
    pcl(Z, 3, max_iter=2)
    pcl(Z, 2, max_iter=2, noisy=True, n_noisy=2)  # the noisy stage (small k)
    nested_pcl(Z, [60], 2)


def _improve():
    from ..kernels.improve import improve

    Z = _records()
    labels = np.arange(Z.shape[0], dtype=np.int64) // 3  # cells of 3 without MDAV: compiles alongside it
    improve(Z, labels, 3, sweeps=2, neighbours=4)  # first search, a sweep, a descent round


def _polish():
    from ..kernels._auction import EXACT_MAX_CELLS
    from ..kernels.improve import polish

    Z = _records(3 * (EXACT_MAX_CELLS + 1))  # enough cells for the searched candidates of PCL's step
    labels = np.arange(Z.shape[0], dtype=np.int64) // 3
    polish(Z, labels, 3, 1, 4, pcl_iter=1, post_sweeps=1)


def _incremental():
    from ..kernels.increment import increment
    from ..kernels.mdav import mdav

    Z = _records()
    base = mdav(Z[:160], 3).astype(np.int64)
    for method in ("2mdav", "nn", "nn-split-mid", "nn-split-end"):
        increment(method, Z[:160], base, Z[160:], 3)
    increment("nn-split-mid", Z[:160], base, Z[160:], 3, inertial=True)


@dataclass(frozen=True)
class Unit:
    """A piece to compile: ``run()`` compiles it (or loads it from the cache); ``deps``: units it calls;
    ``cost``: its compile time relative to the others (for the order, see :func:`units`)."""

    name: str
    run: Callable[[], None]
    deps: tuple = ()
    cost: float = 1.0


#: compile seconds of each unit, one process, empty cache, on the 2-core development machine (numba
#: 0.68); only their ratios matter: they order the units so that the longest chain starts first
COSTS = {"mdav.tree": 8.2, "mdav.nearest": 3.9, "mdav.remove": 0.9, "mdav.farthest": 1.4,
         "mdav.rebuild-list": 1.4, "mdav.from-centroid": 0.8, "mdav.from-record": 1.2, "mdav.take-cell": 1.0,
         "mdav": 4.6, "partitioned": 0.2, "pca": 0.1, "pcl": 2.0, "improve": 3.1, "incremental": 1.2,
         "polish": 2.5, "figures": 0.5, "figures-moments": 0.3,
         "tuple-hash": 0.4, "tuple-rows": 0.1, "tuple-groups": 0.7,
         "tuple-merge": 0.7}


def _mdav_units() -> list[Unit]:
    """Exact MDAV's units, and those of the release's check (every run's verification counts the
    published tuples and summarises the release as read back)."""
    from ..kernels.figures import compile_units as figures_units
    from ..kernels.mdav import compile_units
    from ..kernels.tuplehash import compile_units as tuple_units

    return [Unit(name, (lambda d=disp, s=sig: d.compile(s)), tuple(deps), COSTS.get(name, 1.0))
            for name, disp, sig, deps in compile_units() + figures_units() + tuple_units()]


#: kernel set → its units beyond exact MDAV's (every set needs MDAV), leaf first
KERNEL_SETS: dict[str, list[Unit]] = {
    "mdav": [],
    "partitioned": [Unit("partitioned", _partitioned, ("mdav",), COSTS["partitioned"])],
    "pca": [Unit("pca", _pca, ("mdav", "partitioned"), COSTS["pca"])],
    "pcl": [Unit("pcl", _pcl, ("mdav", "partitioned"), COSTS["pcl"])],
    "improve": [Unit("improve", _improve, (), COSTS["improve"])],
    "polish": [Unit("polish", _polish, ("improve", "pcl"), COSTS["polish"])],
    "incremental": [Unit("incremental", _incremental, ("mdav",), COSTS["incremental"])],
}

#: (name, step) of ``daskmicro warmup``, in the order they run
STEPS: list[tuple[str, Callable[[], None]]] = [
    ("mdav", lambda: warm(["mdav"])),
    ("partitioned", lambda: warm(["partitioned"])),
    ("pca-mdav", lambda: warm(["pca"])),
    ("pcl", lambda: warm(["pcl"])),
    ("improve", lambda: warm(["improve"])),
    ("polish", lambda: warm(["polish"])),
    ("incremental", lambda: warm(["incremental"])),
]


def kernel_sets(methods: Iterable[str], nu: float | None = None, refine: str | None = None,
                macro: str | None = None, improve: bool = False, polish: bool = False) -> list[str]:
    """The kernel sets a run needs: ``methods`` are the methods its groups run (auto resolved)."""
    methods = set(methods)
    sets = ["mdav"]
    if methods & {"partitioned", "pca-mdav", "pcl"} or refine or macro == "pcl":
        sets.append("partitioned")
    if "pca-mdav" in methods or ("partitioned" in methods and nu is not None and nu < 1):
        sets.append("pca")
    if "pcl" in methods or refine == "pcl" or macro == "pcl":
        sets.append("pcl")
    if improve:
        sets.append("improve")
    if polish:  # the improvement pass with PCL iterations (quality "high")
        sets.append("polish")
    return sets


def units(sets: Iterable[str]) -> list[Unit]:
    """The units of the kernel sets ``sets``, leaf first, each once."""
    mdav = _mdav_units()
    out = list(mdav)

    def add(s):
        if s not in KERNEL_SETS:
            raise ValueError(f"unknown kernel set {s!r}; known: {', '.join(KERNEL_SETS)}")
        for u in KERNEL_SETS[s]:
            for d in u.deps:  # the sets a unit calls come first
                if d in KERNEL_SETS and all(v.name != d for v in out):
                    add(d)
            if u not in out:
                out.append(u)

    for s in sets:
        add(s)
    return _longest_chain_first(out)


def _longest_chain_first(pieces: list[Unit]) -> list[Unit]:
    """``pieces`` by decreasing length (in cost) of the longest chain of units from each one to the
    end, the units it calls included: the list scheduling that keeps the processes sharing a compile
    busy together, instead of one of them compiling the MDAV loop alone at the end while the other
    waits. A unit's chain is longer than that of every unit calling it, so the order stays leaf first;
    a unit name that is a kernel set (``"mdav"`` for a set's dependence) means every unit of that set."""
    by = {u.name: u for u in pieces}

    def calls(u: Unit):
        for d in u.deps:
            if d in by:
                yield by[d]
            elif d in KERNEL_SETS:
                yield from (v for v in pieces if v in KERNEL_SETS[d])

    callers: dict[str, list[Unit]] = {u.name: [] for u in pieces}
    for u in pieces:
        for v in calls(u):
            callers[v.name].append(u)
    chain: dict[str, float] = {}

    def length(u: Unit) -> float:
        if u.name not in chain:
            chain[u.name] = u.cost + max((length(c) for c in callers[u.name]), default=0.0)
        return chain[u.name]

    return sorted(pieces, key=lambda u: (-length(u), pieces.index(u)))


@contextlib.contextmanager
def _unit_lock(lock_dir: Path | None, name: str, block: bool):
    """Hold the machine-wide lock of unit ``name``; yields False when ``block`` is False and another
    process holds it. Without a lock dir (or fcntl) it always yields True."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no coordination, every process compiles what it lacks
        fcntl = None
    if lock_dir is None or fcntl is None:
        yield True
        return
    try:
        f = open(lock_dir / f"{name}.lock", "a+")
    except OSError:
        yield True
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError:  # a file system without locks: compile anyway
            yield True
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def lock_dir() -> Path | None:
    where = cache_dir()
    if not where:
        return None
    try:
        import numba

        # numba keys its cache files by the kernels' source files, so two copies of the package (two
        # virtual environments) sharing a cache dir compile apart: their locks are apart too
        here = hashlib.sha1(str(Path(__file__).resolve().parents[1]).encode()).hexdigest()[:12]
        path = Path(where) / ".locks" / numba.__version__ / here
        path.mkdir(parents=True, exist_ok=True)
        return path
    except (OSError, ImportError):
        return None


def warm(sets: Iterable[str] = ("mdav",), lock: bool = True, marks: str | None = None) -> dict:
    """Compile (or load from the cache) the units of the kernel sets ``sets`` in this process.

    Returns ``{"seconds", "compiled": [units compiled here], "loaded": [units loaded from the cache],
    "cache_dir", "pid"}``. Safe to call in many processes at once (see the module's doc). ``marks``: the
    folder where each unit done is marked (:mod:`daskmicro.runtime.compile_progress`)."""
    configure()
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        on_done = None
        if marks is not None:
            from numba.core import event

            from .compile_progress import Marks

            m = Marks(marks)
            stack.enter_context(event.install_listener("numba:compile", m.listener()))
            on_done = m.done
        done = run_units(units(sets), lock_dir() if lock else None, on_done)
    return {"seconds": time.perf_counter() - t0, "compiled": [n for n, c in done.items() if c],
            "loaded": [n for n, c in done.items() if not c], "cache_dir": cache_dir(), "pid": os.getpid()}


def warm_workers(client, sets: list[str], progress: Callable[[str, float], None] | None = None) -> dict:
    """:func:`warm` on every worker process of ``client`` (a Dask client, or the in-process executor)
    before a run's stages, so that no stage time holds a compile. Returns the report's ``compile`` entry:
    the wall seconds, each worker's seconds, the cache dir, whether anything was compiled rather than
    loaded, and the kernel sets; ``progress("kernel compile" | "kernel load", seconds)``. On a live
    progress line, a compile shows its units done (:func:`daskmicro.runtime.compile_progress.watch`)."""
    from .compile_progress import watch

    t0 = time.perf_counter()
    with watch(progress, lambda: len(units(sets))) as marks:
        # a worker lost meanwhile is no reason to fail the run: its replacement compiles in its first task
        ran = client.run(warm, sets, on_error="return", **({"marks": marks} if marks else {}))
    per_worker = {w: r for w, r in ran.items() if isinstance(r, dict)}
    seconds = time.perf_counter() - t0
    results = list(per_worker.values())
    out = {"seconds": seconds, "workers": {str(w): r["seconds"] for w, r in per_worker.items()},
           "cache_dir": next((r["cache_dir"] for r in results if r.get("cache_dir")), None),
           "compiled": any(r["compiled"] for r in results), "kernel_sets": list(sets)}
    if progress is not None:
        progress("kernel compile" if out["compiled"] else "kernel load", seconds)
    return out


#: Units already run in this process: their kernels are compiled or loaded here, so a later run
#: (a long-lived worker's next run) neither takes their locks nor calls them again.
_RUN_HERE: set[str] = set()


def run_units(pieces: list[Unit], lock_dir: Path | None,
              on_done: Callable[[str, bool], None] | None = None) -> dict[str, bool]:
    """Run every unit of ``pieces`` (leaf first) once in this process, sharing the work with the other
    processes that use ``lock_dir``: a process takes the units that neither another process nor a unit
    they call is busy with, goes round again while that makes progress, and only then waits (for the
    first unit left). A lock is never held while waiting for another, so this cannot deadlock.
    Returns unit → whether numba compiled anything for it here (False: a cache load, or a unit this
    process had run before); ``on_done(unit, compiled)`` as each unit is done, and at once for those run before."""
    from numba.core import event

    by = {u.name: u for u in pieces}
    done: dict[str, bool] = {u.name: False for u in pieces if u.name in _RUN_HERE}
    report = on_done or (lambda name, compiled: None)
    for name in done:
        report(name, False)

    def attempt(u: Unit, block: bool) -> bool:
        if u.name in done:
            return True
        if not all(attempt(by[d], block) for d in u.deps if d in by):
            return False
        with _unit_lock(lock_dir, u.name, block) as got:
            if not got:
                return False
            with event.install_recorder("numba:compile") as rec:
                u.run()
            done[u.name] = bool(rec.buffer)
            _RUN_HERE.add(u.name)
        report(u.name, done[u.name])
        return True

    pending = list(pieces)
    while pending:
        left = [u for u in pending if not attempt(u, False)]
        if len(left) == len(pending):  # everything left is busy elsewhere: wait for the first
            attempt(left[0], True)
            left = [u for u in left if u.name not in done]
        pending = left
    return done


def warm_up(progress: Callable[[str, float], None] | None = None, jobs: int = 1) -> tuple[str | None, float]:
    """Compile every kernel (``daskmicro warmup``); return (numba cache dir, seconds).

    With ``jobs`` > 1, that many processes (at most one per unit) share the compile first (as a machine's
    workers do, see the module's doc); the steps then load what they compiled. ``progress(name, seconds)`` after each step,
    and ``progress("N processes", seconds)`` after the shared compile."""
    configure()
    t0 = time.perf_counter()
    jobs = min(int(jobs), len(units(list(KERNEL_SETS))))  # one process per unit at most: more share nothing
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(warm, [list(KERNEL_SETS)] * jobs))
        if progress is not None:
            progress(f"{jobs} processes", time.perf_counter() - t0)
    for name, step in STEPS:
        t = time.perf_counter()
        step()
        if progress is not None:
            progress(name, time.perf_counter() - t)
    return cache_dir(), time.perf_counter() - t0
