"""Compiled loops of the k-anonymity check's tuple counts (:mod:`daskmicro.privacy.verify`).

The check counts the published tuples by a 64-bit hash of each row: every value hashed as pandas'
``hash_array`` hashes it (the value's bits widened to 64, a float's NaNs and −0.0 made one, then
the splitmix64 finaliser), the columns' hashes folded into one per row, and the rows grouped by
that hash with every row compared, column by column, with the first row of its hash so that two
different tuples under one hash are flagged and never counted together.  In NumPy each of these
steps is a dozen passes over the column and a stable sort of every row; here each is one pass,
and the grouping is a hash table (only the distinct tuples, about n / k of them, are sorted
afterwards).  The results are the NumPy code's, bit for bit.  No Dask here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["mix_bits", "combine_rows", "first_of_each", "FLOAT_BITS", "compile_units"]

_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)
_SEED = np.uint64(0x9E3779B97F4A7C15)

#: per float width in bytes: (exponent mask, mantissa mask, bits of −0.0, bits of NumPy's NaN)
FLOAT_BITS = {
    2: (0x7C00, 0x3FF, 0x8000, 0x7E00),
    4: (0x7F800000, 0x7FFFFF, 0x80000000, 0x7FC00000),
    8: (0x7FF0000000000000, 0x000FFFFFFFFFFFFF, 0x8000000000000000, 0x7FF8000000000000),
}


@njit(cache=True, nogil=True)
def mix_bits(bits, masks, out):
    """pandas' per-value hash of values whose bits (widened to uint64) are ``bits``, into ``out``.

    ``masks`` = (exponent mask, mantissa mask, −0.0, NaN) of a float width (:data:`FLOAT_BITS`):
    every NaN, whatever its sign and payload, hashes as NumPy's NaN and −0.0 as 0.0; all zeros for
    an integer column (its bits as they are)."""
    exp, man, negzero, nan = masks[0], masks[1], masks[2], masks[3]
    floating = exp != np.uint64(0)
    for i in range(bits.size):
        x = bits[i]
        if floating:
            if (x & exp) == exp and (x & man) != np.uint64(0):
                x = nan
            elif x == negzero:
                x = np.uint64(0)
        x ^= x >> _S30
        x *= _C1
        x ^= x >> _S27
        x *= _C2
        x ^= x >> _S31
        out[i] = x


@njit(cache=True, nogil=True)
def combine_rows(H, out):
    """One 64-bit hash per row (``out``) from its per-column hashes ``H`` (columns × rows)."""
    m, n = H.shape
    for i in range(n):
        out[i] = _SEED
    for c in range(m):
        for i in range(n):
            x = out[i] ^ H[c, i]
            x *= _C1
            x ^= x >> _S31
            out[i] = x


@njit(cache=True, nogil=True)
def first_of_each(hashes, weights, H):
    """The rows grouped by their hash: (the first row of each hash, in the order the hashes first
    occur; the sum of the ``weights`` of its rows; whether a row differs in any column hash of
    ``H`` (columns × rows, either memory order) from the first row of its hash — two different
    tuples under one hash)."""
    n = hashes.size
    size = 16
    while size < 2 * n:
        size *= 2
    mask = np.uint64(size - 1)
    slots = np.full(size, -1, np.int64)
    first = np.empty(n, np.int64)
    counts = np.zeros(n, np.int64)
    d = 0
    collision = False
    for i in range(n):
        h = hashes[i]
        s = h & mask
        while True:
            j = slots[s]
            if j < 0:
                slots[s] = d
                first[d] = i
                counts[d] = weights[i]
                d += 1
                break
            r = first[j]
            if hashes[r] == h:
                counts[j] += weights[i]
                if not collision:
                    for c in range(H.shape[0]):
                        if H[c, r] != H[c, i]:
                            collision = True
                            break
                break
            s = (s + np.uint64(1)) & mask
    return first[:d], counts[:d], collision


def compile_units():
    """The compiled pieces of this module, as :func:`daskmicro.kernels.mdav.compile_units` lists its
    own: ``(name, dispatcher, argument types, names of the pieces it calls)``."""
    from numba import typeof

    u1, i1 = typeof(np.zeros(1, np.uint64)), typeof(np.zeros(1, np.int64))
    u2, u2f = typeof(np.zeros((1, 1), np.uint64)), typeof(np.zeros((1, 1), np.uint64).T)
    return [("tuple-hash", mix_bits, (u1, u1, u1), ()),
            ("tuple-rows", combine_rows, (u2, u1), ()),
            ("tuple-groups", first_of_each, (u1, i1, u2), ()),
            ("tuple-merge", first_of_each, (u1, i1, u2f), ())]
