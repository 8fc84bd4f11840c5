"""Honest in-memory sizes for the objects that tasks return (a leaf module: no kernel imports, no Dask).

A worker decides what to keep in memory and what to spill by the size of each result, and the
scheduler places tasks near their large inputs by the same figure.  Dask measures a result with
``dask.sizeof.sizeof``, which knows NumPy arrays, pandas objects and Python containers but falls
back to ``sys.getsizeof`` for any other object: a dataclass holding a 100 MB array counted as
56 bytes.  The cluster then never spilled the top cells or the partition results by its
managed-memory target, only once the process memory was past its spill threshold, and moved them
between workers as if they were free.  :class:`Sized` gives such a class a ``__sizeof__`` that
counts what its fields hold, so ``sys.getsizeof`` (and Dask's fallback) see the real bytes.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["Sized", "deep_nbytes"]


def deep_nbytes(value, _depth: int = 0) -> int:
    """Bytes held by ``value``: arrays by their buffers, containers by their items (a few levels)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return sys.getsizeof(value)
    if _depth >= 4:
        return sys.getsizeof(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(deep_nbytes(v, _depth + 1) for v in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(deep_nbytes(v, _depth + 1) for v in value.values())
    data = getattr(value, "data", None)   # scipy's cKDTree: its points and index
    if isinstance(data, np.ndarray) and hasattr(value, "indices"):
        return int(data.nbytes) + int(np.asarray(value.indices).nbytes) + 2 * int(data.nbytes)
    return sys.getsizeof(value)


class Sized:
    """Mixin: ``sys.getsizeof(obj)`` counts the arrays and containers in the object's attributes."""

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + sum(deep_nbytes(v, 1) for v in vars(self).values())
