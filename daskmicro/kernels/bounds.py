"""The range of values the kernels accept, and the one check that enforces it.

Distances are sums of squares: a value of magnitude 1e150 squares to 1e300, still below the
float64 maximum (≈1.8e308) with room for sums over many records and columns.  Beyond it squared
distances overflow to inf, the centroid search and the distortion sums become meaningless (a
release of inf/NaN cells, an information loss of 0), so every public kernel entry point refuses
such values — as the CLI and :func:`daskmicro.anonymize` do for QI columns — with one line that
names the argument, never a value.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError

__all__ = ["MAX_ABS", "check_values"]

#: Largest magnitude accepted in a data matrix: squares and sums of squares of ~1e150 stay far
#: from float64 overflow.  Shared by the kernels, :func:`daskmicro.anonymize` and the lake runs.
MAX_ABS = 1e150


def check_values(X: np.ndarray, name: str = "X") -> np.ndarray:
    """Return the float64 array ``X`` after checking that every value is finite and within ±MAX_ABS.

    One pass for the maximum and one for the minimum, no temporary array; NaN fails both
    comparisons, so the common case costs two reductions.  Raises
    :class:`~daskmicro.errors.InputError` (a ``ValueError``) naming ``name``.
    """
    if X.size == 0:
        return X
    hi, lo = X.max(), X.min()
    if hi <= MAX_ABS and lo >= -MAX_ABS:
        return X
    if not np.isfinite(X).all():
        raise InputError(f"{name} contains NaN or infinite values")
    raise InputError(f"{name} has values beyond ±{MAX_ABS:.0e}: squared distances would overflow; "
                     "rescale it (e.g. to other units) first")
