"""The memory allocator of the processes a run computes in: large temporaries reused, not mapped afresh.

glibc's ``malloc`` serves a request above its *mmap threshold* with a fresh ``mmap`` and gives it back
with ``munmap`` when freed, so the next such array is page-faulted and zeroed again.  By default the
threshold is dynamic: it starts at 128 KiB and rises to the size of each mapped block freed (up to 32 MiB
on 64-bit), after which arrays of that size are reused from the heap.  Setting any of glibc's malloc
variables turns that adjustment off, and Dask's nanny sets one in every worker it starts
(``distributed.nanny.pre-spawn-environ``: ``MALLOC_TRIM_THRESHOLD_=65536``, so that freed memory goes
back to the system).  Every array over 128 KiB is then mapped and faulted in again each time: the
kernels' per-partition and per-iteration work arrays (MDAV's walk lists and tree rebuilds, the
improvement pass's cell-major copies) cost a third more in such a worker than in a plain process —
one 250,000-record top cell (macroaggregation, MDAV in ten partitions, the improvement pass) took
2.1–2.6 s in a worker against 1.55–1.75 s in a plain process, and 1.6–1.7 s in the worker with the
threshold raised (``benchmarks/README.md``).

:func:`reusing` sets the threshold at :data:`MMAP_THRESHOLD` (glibc's ceiling, 32 MiB) while a kernel
task runs, and the trim threshold — how much free memory the top of a heap may hold before glibc gives it
back, 64 KiB under the nanny's variable, so that the heap a task grows is handed back and faulted in
again over and over — at :data:`TRIM_THRESHOLD` (1 GiB); after the task it puts glibc's 128 KiB and the
environment's trim threshold back and calls ``malloc_trim``, so that what the task freed goes back to the
system as Dask intends.  (Set for the whole process, the other stages' freed pieces stayed in the heaps,
and a 16M run's peak rose from 3590 to 4937 MiB, 5589 MiB at the 32 MiB ceiling.)  One 500,000-record
top cell of ``quality="high"`` in a worker (Gaussian, k = 10): 150 000–200 000 page faults and 0.9–1.1 s
of system time with a 4 MiB threshold and the nanny's trim threshold, 70 000–80 000 and 0.4–0.7 s with
both raised (what remains: arrays over 32 MiB, always mapped).
It does nothing where no malloc variable pinned the threshold (glibc adjusts it by itself there),
where the environment names ``MALLOC_MMAP_THRESHOLD_`` (the owner chose), off Linux or on another C
library.  Used by the pipeline's kernel tasks (:mod:`daskmicro.graph.improve_stage`, :mod:`daskmicro.graph.fanout`).
The settings are the process's: in a worker of several threads a task that ends puts both back while
another may still run — which costs that task speed, never a result.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

__all__ = ["reusing", "MMAP_THRESHOLD"]

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt``, the value :func:`reusing` gives it while a
#: kernel task runs (bytes: glibc's ceiling on 64-bit), and glibc's own fixed value, put back after.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024
_GLIBC_THRESHOLD = 128 * 1024
#: glibc's ``M_TRIM_THRESHOLD``, the value :func:`reusing` gives it while a kernel task runs (bytes), and
#: glibc's default, put back after where the environment did not name one.
_M_TRIM_THRESHOLD = -1
TRIM_THRESHOLD = 1024 * 1024 * 1024
_GLIBC_TRIM = 128 * 1024
#: The variables that turn glibc's dynamic threshold off (Dask's nanny sets the first).
_PINNING = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def _libc():
    if not sys.platform.startswith("linux") or os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None:
        return None
    if not any(os.environ.get(v) is not None for v in _PINNING):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    except (OSError, AttributeError):  # not glibc
        return None
    return libc


@contextlib.contextmanager
def reusing():
    """Inside: arrays up to :data:`MMAP_THRESHOLD` come from the heap and are reused (see the module
    docstring); after: glibc's 128 KiB threshold again and the heaps' free memory given back.
    Yields whether it changed anything.  Never raises of its own."""
    libc = _libc()
    if libc is None:
        yield False
        return
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", "")
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    try:
        yield True
    finally:
        libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, int(trim) if trim.isdigit() else _GLIBC_TRIM)
        libc.malloc_trim(0)
