"""The float32 pass of the MDAV index (:mod:`._blocktree`): distances measured in float32 that
may only *discard* records, with a rigorous bound on their rounding.

:func:`query` puts a query point in the index's frame and returns the error radii; the cut
functions turn a float64 threshold into a float32 one that never discards a record an exact
float64 distance would keep; :func:`min_bits`/:func:`max_bits` let a whole block be skipped
with one vectorised integer reduction.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import float32, njit, types
from numba.extending import intrinsic

from ._blocktree import SAFE_HI

_RHO = 2.0**-23  # twice float32's unit roundoff: bounds every float32 rounding below
_TINY = 1e-37  # absolute slack for float32 subnormals


@njit(cache=True, inline="always")
def block_dist(Yb, j, c, q32, acc):
    """float32 squared distances from q32 to the c live records of block j, into acc[:c] (one
    SIMD loop; in the blocks' frame, see :func:`query`).

    The loops run to c rounded up to 32 (the blocks are padded): the slots past c hold stale
    values nobody reads, and no scalar remainder loop runs (it took up to a third of a scan)."""
    c = min((c + 31) & -32, acc.shape[0])
    for i in range(c):
        acc[i] = float32(0.0)
    for d in range(q32.shape[0]):
        qd = q32[d]
        row = Yb[j, d]
        for i in range(c):
            t = row[i] - qd
            acc[i] += t * t


@njit(cache=True, nogil=True)
def query(T, q):
    """Put q in the index's frame (into the qr scratch, float64, for the node bounds, and the q32
    scratch, float32, for the blocks); return the error radii ``(A, E)``.

    The float32 distance between a record x and q, computed by :func:`block_dist`, and the exact
    distance D in the blocks' frame satisfy (rounding of the inputs, the differences, the
    squares and the sum, each by at most float32's unit roundoff u = 2⁻²⁴; ρ = 2u):

        (D(1 − ρ) − A)(1 − γ) ≤ √acc ≤ (D(1 + ρ) + A)(1 + γ),   A = ρ(‖x‖ + ‖q‖) + tiny,
        γ = (m + 2)ρ,

    so the float32 pass only discards records that an exact float64 distance would discard too
    (:func:`near_cut`, :func:`far_cut`); the records it keeps are measured in float64.  (The
    rotation to the frame is float64 and V is orthonormal to ~m·2⁻⁵³: its errors are far inside
    ρ − u.)

    The node bounds are computed in float64 on rotated coordinates, each within
    E = (m + 4)·√m·2⁻⁴⁹·(‖q‖ + max ‖x‖) of the exact ones (a length-m float64 dot product per
    coordinate, m coordinates): searches compare them with thresholds widened by E
    (:func:`near_node_cut`, :func:`far_node_cut`).
    """
    shift, scal, q32, V, qr = T[22], T[23], T[24], T[25], T[27]
    m = q.shape[0]
    nq = 0.0
    for e in range(m):
        v = 0.0
        for d in range(m):
            v += (q[d] - shift[d]) * V[d, e]
        qr[e] = v
        q32[e] = float32(v * scal[0])
        nq += v * v
    nq = np.sqrt(nq) * SAFE_HI
    E = (m + 4) * np.sqrt(m) * 2.0**-49 * (nq + scal[2])
    return error_radius(scal[1], nq * scal[0]), E


@njit(cache=True, inline="always")
def error_radius(xbound, qnorm):
    """A of :func:`query` from bounds on ‖x‖ and ‖q‖ in the scaled frame."""
    return _RHO * (xbound + qnorm) + _TINY


@njit(cache=True, inline="always")
def near_node_cut(tau, E):
    """A node whose computed lower bound exceeds this holds no record within √tau."""
    if tau == np.inf:
        return np.inf
    b = np.sqrt(tau) * (1.0 + 1e-12) + E
    return b * b * (1.0 + 1e-12)


@njit(cache=True, inline="always")
def far_node_cut(best, E):
    """A node whose computed upper bound is below this holds no record as far as √best."""
    if best < 0.0:
        return -1.0
    b = max(np.sqrt(best) * (1.0 - 1e-12) - E, 0.0)
    return b * b * (1.0 - 1e-12)


@intrinsic
def as_bits(typingctx, v):
    """The bit pattern of a float32 as an int32: non-negative floats order like their bits."""
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@njit(cache=True, inline="always")
def min_bits(acc, c):
    """min(acc[:c]) as bits; an integer reduction vectorises where a float one may not.

    acc holds sums of squares: non-negative, and finite whenever a cut is finite (the blocks'
    frame keeps every coordinate below 1)."""
    b = acc.view(np.int32)
    v = b[0]
    for i in range(1, c):
        v = min(v, b[i])
    return v


@njit(cache=True, inline="always")
def max_bits(acc, c):
    """max(acc[:c]) as bits (see :func:`min_bits`)."""
    b = acc.view(np.int32)
    v = b[0]
    for i in range(1, c):
        v = max(v, b[i])
    return v


@njit(cache=True, inline="always")
def near_cut(m, scale, tau, A):
    """float32 threshold: a record whose float32 distance exceeds it is further than √tau."""
    if tau == np.inf:
        return float32(np.inf)
    g = (m + 2) * _RHO
    b = (np.sqrt(tau) * scale * (1.0 + _RHO) + A) * (1.0 + g)
    return float32(b * b * (1.0 + 2.0**-20))


@njit(cache=True, inline="always")
def far_cut(m, scale, best, A):
    """float32 threshold: a record whose float32 distance is below it is nearer than √best."""
    if best <= 0.0:
        return float32(-1.0)
    g = (m + 2) * _RHO
    b = (np.sqrt(best) * scale * (1.0 - _RHO) - A) * (1.0 - g)
    if b <= 0.0:
        return float32(-1.0)
    return float32(b * b * (1.0 - 2.0**-20))
