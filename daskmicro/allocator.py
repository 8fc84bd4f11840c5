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
2.1–2.2 s in a worker against 1.55–1.75 s in a plain process, and 1.6–1.7 s in the worker once
:func:`tune` had run (``benchmarks/README.md``, "The allocator of Dask's workers").

:func:`tune` sets the threshold at glibc's own ceiling, 32 MiB, where the dynamic rule ends up by itself
after the first large frees; the trim threshold (what Dask set) is left as it is.  It does nothing
where the process's environment already names ``MALLOC_MMAP_THRESHOLD_`` (the owner chose), off Linux
or on another C library.  Called by the warm-up on every process a run computes in
(:func:`daskmicro.warmup.warm`, :func:`daskmicro.graph.incremental.warm_up`).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["tune", "MMAP_THRESHOLD"]

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt`` and the value :func:`tune` gives it (bytes):
#: ``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit, the most glibc accepts.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024


def tune() -> bool:
    """Set this process's mmap threshold to :data:`MMAP_THRESHOLD` (see the module docstring);
    returns whether it was set.  Never raises."""
    if not sys.platform.startswith("linux") or os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None:
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
