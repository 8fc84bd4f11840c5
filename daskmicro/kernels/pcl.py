"""PCL, the probability-constrained Lloyd algorithm, for k-anonymous micro- and macroaggregation.

Implements Rebollo-Monedero, Forné & Soriano, *An algorithm for k-anonymous microaggregation and
clustering inspired by the design of distortion-optimized quantizers* (Data & Knowledge Engineering 2011,
§3.2–3.5; summarised in *Efficient k-Anonymous Microaggregation … via PCA*, §II-A).  Pure numpy / numba / scipy; no Dask.

The problem (§3.1) is a quantizer design with probability constraints: cells q = 0 … K−1 with
reconstruction values x̂_q, every cell holding at least k records (K = ⌊n/k⌋ by default, like
MDAV), minimising the squared error.  PCL alternates (§3.3)

1. cost adjustment — find cell costs c(q) such that the cost-sensitive nearest-neighbour rule
   meets the size constraints (§3.2);
2. the cost-sensitive nearest-neighbour step q(x) = argmin_q ‖x − x̂_q‖² + c(q), an additively
   weighted Voronoi partition (§3.2, Eq. 4);
3. the centroid step x̂_q = E[X | q] (§3.2, Eq. 3);

until the distortion stops decreasing.  Steps 1–2 are solved together here: the costs that make
the weighted nearest-neighbour rule meet the constraints are the dual prices of a transportation
problem, which :mod:`._auction` solves exactly (to within n·ε) by an ε-scaling auction.  The
paper instead adjusts c(q) with a Levenberg–Marquardt variant on the cell-probability function;
that function is piecewise constant in the costs for a finite sample, which is why the paper
needs the noisy variant to make derivatives useful and still reports an occasional defective
cell.  The auction needs no derivatives, works on sparse candidate lists so that thousands of
cells stay cheap (a dense K × K Jacobian, as in ``scipy.optimize.root(method="lm")``, does not),
always returns cells of exactly the required sizes, and keeps the noiseless variant's distortion
monotone non-increasing up to the auction's tolerance n·ε = 10⁻⁶·SSE_start.

The lower bound "at least k" is modelled with K·k mandatory slots (k per cell) plus
r = n − K·k free slots whose holders join their nearest reconstruction value.

**Noisy variant** (§3.4, for small k).  Each record is replaced by a cloud of ``n_noisy``
samples (the record itself plus Gaussian perturbations with standard deviation σ), the
constraints are scaled by the cloud size, and the three steps above run on the clouds; σ shrinks
geometrically (factor ``cooling``) after every iteration.  Overlapping clouds smooth the
partition so that centroids can move past the local optima where plain Lloyd iterations stall
with tiny cells; once σ is negligible the noiseless iterations finish on the records themselves.

**Initialisation and refinement.**  ``init="mdav"`` starts from exact MDAV (its centroids and
its partition); ``"random"`` from K distinct random records; an array of labels starts from that
partition (refinement mode).  The best feasible partition seen — the starting one included —
is returned, so a refinement is never worse than its start.  §3.5's hierarchical prepartitioning
is left to the caller (the Dask pipeline calls ``pcl`` per partition).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import InputError, ParameterError
from ._auction import EPS_NOISY, Adjuster, AuctionSettings, cell_means, sse_of
from ._pcl_repair import repair_cells
from .mdav import as_records, mdav

__all__ = ["PCLInfo", "NoiseSettings", "LloydSettings", "pcl", "refine_partition"]

#: Largest k for which ``noisy=None`` selects the noisy variant (§3.4: noise is meant for
#: microaggregation, small k; on Census it lowers the SSE by a further 4–10 % at k = 3 … 10).
NOISY_K_MAX = 10
#: ... and only while the clouds hold at most this many samples (n·n_noisy; ~0.5 GB of work arrays).
NOISY_MAX_SAMPLES = 2_000_000
#: Defaults of :func:`pcl`: nearest reconstruction values tried per sample, and the relative SSE
#: decrease below which the iterations stop.
N_CANDIDATES = 8
TOL = 1e-4
_SIGMA_START = 2.0  # default σ₀ in units of the rms within-cell spread per coordinate (tuned on Census)
_SIGMA_END = 0.02  # the noisy stage ends when σ falls below this fraction of σ₀


@dataclass
class PCLInfo:
    """Diagnostics of a :func:`pcl` run.

    Attributes
    ----------
    n_cells : int
        K, the number of cells.
    init : str
        ``"mdav"``, ``"random"`` or ``"labels"``.
    noisy : bool
        Whether the noisy variant (§3.4) ran.
    n_noisy_iter : int
        Iterations of the noisy stage (σ cooling).
    n_iter : int
        Noiseless iterations (cost adjustment, assignment, centroids).
    converged : bool
        True when the relative SSE decrease fell below ``tol`` before ``max_iter``.
    sse_start : float
        SSE of the starting partition (MDAV's, the given one, or the order-based partition
        used as a feasible fallback for random initialisation).
    sse_history : ndarray
        SSE after every noiseless iteration (non-increasing up to n·ε for the noiseless
        algorithm started from a partition).
    sse : float
        SSE of the returned partition (the best seen).
    n_repaired : int
        Cells that ended below k and were repaired (only if the auction hit its bid cap).
    costs : ndarray (K,)
        Cell costs c(q) of the last cost adjustment, up to an additive constant (mean 0).
    sigma_history : ndarray
        σ of every noisy iteration.
    n_bids : int
        Total auction bids (a measure of the cost-adjustment work).
    """

    n_cells: int
    init: str
    noisy: bool
    n_noisy_iter: int = 0
    n_iter: int = 0
    converged: bool = False
    sse_start: float = float("nan")
    sse_history: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sse: float = float("nan")
    n_repaired: int = 0
    costs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sigma_history: np.ndarray = field(default_factory=lambda: np.zeros(0))
    n_bids: int = 0


@dataclass(frozen=True)
class NoiseSettings:
    """The noisy stage's settings (§3.4): samples per record (``n_noisy``), the geometric factor
    applied to σ after every iteration (``cooling``), the starting σ (None: from the starting SSE),
    and the nearest reconstruction values tried per sample (``n_candidates``)."""

    n_noisy: int
    cooling: float
    sigma: float | None
    n_candidates: int


@dataclass(frozen=True)
class LloydSettings:
    """The noiseless stage's settings (§3.3): at most ``max_iter`` iterations, stopping when one
    lowers the SSE by less than the fraction ``tol``, each assignment by an auction run as
    ``auction`` says."""

    max_iter: int
    tol: float
    auction: AuctionSettings


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _check_params(n, k, max_iter, tol, noisy, noise: NoiseSettings, seed):
    n_noisy, cooling, sigma, n_candidates = noise.n_noisy, noise.cooling, noise.sigma, noise.n_candidates
    if not _is_int(k) or k < 2:
        raise ParameterError(f"k must be an integer ≥ 2, got {k!r}")
    if k > n:
        raise ParameterError(f"k = {k} exceeds the number of records n = {n}")
    if not _is_int(max_iter) or max_iter < 0:
        raise ParameterError(f"max_iter must be an integer ≥ 0, got {max_iter!r}")
    if not _is_real(tol) or not 0 <= tol < 1:
        raise ParameterError(f"tol must be a number in [0, 1), got {tol!r}")
    if noisy is not None and not isinstance(noisy, (bool, np.bool_)):
        raise ParameterError(f"noisy must be None, True or False, got {noisy!r}")
    if not _is_int(n_noisy) or n_noisy < 2:
        raise ParameterError(f"n_noisy must be an integer ≥ 2, got {n_noisy!r}")
    if not _is_real(cooling) or not 0 < cooling < 1:
        raise ParameterError(f"cooling must be a number in (0, 1), got {cooling!r}")
    if sigma is not None and (not _is_real(sigma) or not np.isfinite(sigma) or sigma <= 0):
        raise ParameterError(f"sigma must be None or a positive number, got {sigma!r}")
    if not _is_int(n_candidates) or n_candidates < 1:
        raise ParameterError(f"n_candidates must be an integer ≥ 1, got {n_candidates!r}")
    if seed is not None and not _is_int(seed):
        raise ParameterError(f"seed must be an integer or None, got {seed!r}")


def _start_labels(init, n, k):
    """Validate an ``init`` array of labels; return it renumbered 0 … K−1."""
    labels = np.asarray(init)
    if labels.shape != (n,):
        raise ParameterError(f"init labels must have one entry per record ({n}), got shape {labels.shape}")
    if labels.dtype.kind not in "iu":
        if labels.dtype.kind != "f" or not np.all(np.isfinite(labels)) or np.any(labels != np.round(labels)):
            raise ParameterError("init labels must be integer cell ids")
    if labels.size and labels.min() < 0:
        raise ParameterError("init labels must be non-negative cell ids")
    _, labels = np.unique(labels.astype(np.int64), return_inverse=True)
    labels = labels.astype(np.int64).ravel()
    smallest = int(np.bincount(labels).min())
    if smallest < k:
        raise ParameterError(f"init labels form a cell of {smallest} records, fewer than k = {k}")
    return labels


# --------------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------------


def _order_partition(X, K, k):
    """A feasible partition for random initialisation: runs of the first principal axis."""
    n = X.shape[0]
    Xc = X - X.mean(axis=0)
    _, vecs = np.linalg.eigh(Xc.T @ Xc)
    order = np.argsort(Xc @ vecs[:, -1], kind="stable")
    sizes = np.full(K, k, dtype=np.int64)
    sizes[-1] += n - K * k  # the surplus joins the last run
    labels = np.empty(n, dtype=np.int64)
    labels[order] = np.repeat(np.arange(K), sizes)
    return labels


# --------------------------------------------------------------------------------------------
# the algorithm
# --------------------------------------------------------------------------------------------


def pcl(
    X,
    k,
    *,
    init="mdav",
    n_cells=None,
    max_iter=100,
    tol=TOL,
    noisy=None,
    n_noisy=16,
    cooling=0.85,
    sigma=None,
    n_candidates=N_CANDIDATES,
    seed=0,
    auction_eps=1e-6,
    return_info=False,
):
    """k-anonymous micropartition by the probability-constrained Lloyd algorithm (PCL).

    Section 3 of the PCL paper (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*): §3.2 cost-sensitive
    nearest-neighbour and centroid steps, §3.3 the PCL iteration, §3.4 the noisy variant for
    small k.  See the module docstring for how the cost adjustment is solved (an exact
    ε-scaling auction for the transportation problem instead of Levenberg–Marquardt).

    Parameters
    ----------
    X : array_like (n, m)
        Records, in the space where Euclidean distance is meant (z-score first).  Finite.
    k : int
        Minimum cell size, 2 ≤ k ≤ n.  Large k (hundreds to thousands) gives clustering /
        macroaggregation.
    init : {"mdav", "random"} or array_like of int (n,)
        Starting point: exact MDAV's partition, K distinct random records as reconstruction
        values, or a given partition (refinement mode; every cell must hold ≥ k records, and
        the number of cells is kept).
    n_cells : int, optional
        K for ``init="random"`` (at most ⌊n/k⌋, the default).  MDAV and a given partition fix K.
    max_iter : int
        Maximum number of noiseless iterations (0 returns the start).
    tol : float
        Stop when an iteration lowers the SSE by less than this fraction.
    noisy : bool, optional
        Run the noisy variant first.  Default: noisy when k ≤ 10 (``NOISY_K_MAX``), ``init``
        is not a partition — refinement (``init=labels``) is noiseless unless ``noisy=True`` —
        and n·n_noisy ≤ 2·10⁶ (``NOISY_MAX_SAMPLES``).  The noisy stage costs roughly
        ``n_noisy`` × 25 noiseless iterations and memory for n·n_noisy samples.
    n_noisy : int
        Samples per record in the noisy variant (the record itself included).
    cooling : float in (0, 1)
        Geometric factor applied to the noise standard deviation after every noisy iteration.
    sigma : float, optional
        Initial noise standard deviation; default 2·√(SSE_start / (n·m)), twice the rms spread
        of a coordinate within a starting cell.  The noisy stage runs until σ < 0.02·σ₀.
    n_candidates : int
        Nearest reconstruction values considered per sample in the assignment (the sample's
        current cell is always considered too).
    seed : int or None
        Seed of the random initialisation and of the noise; the result is deterministic for a
        fixed seed.
    auction_eps : float in (0, 1]
        Final ε of the noiseless stage's auction, in units of the starting mean squared error
        per record: each assignment is within n·ε of the optimal one for its reconstruction
        values.  10⁻⁶ makes the assignment step exact for practical purposes; coarser values
        cost far fewer bids (the improvement pass uses 0.25: on 100 000 Gaussian records a PCL
        iteration ended at the same SSE with 0.1 as with 10⁻⁶, on a fifth of the bids).
    return_info : bool
        Also return a :class:`PCLInfo`.

    Returns
    -------
    labels : ndarray of int64 (n,)
        Cell ids 0 … K−1; every cell holds at least k records.
    info : PCLInfo
        Only with ``return_info=True``.
    """
    try:
        X = as_records(X)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    n, m = X.shape
    noise = NoiseSettings(n_noisy, cooling, sigma, n_candidates)
    _check_params(n, k, max_iter, tol, noisy, noise, seed)
    if not _is_real(auction_eps) or not 0 < auction_eps <= 1:
        raise ParameterError(f"auction_eps must be a number in (0, 1], got {auction_eps!r}")
    k = int(k)
    rng = np.random.default_rng(seed)

    kind, labels, K = _start(X, k, init, n_cells)
    C_lab, _ = cell_means(X, labels, K)
    sse0 = sse_of(X, labels, C_lab)
    C = X[np.sort(rng.choice(n, size=K, replace=False))] if kind == "random" else C_lab

    if noisy is None:  # refinement stays cheap unless asked: the pipeline calls it per partition
        noisy = k <= NOISY_K_MAX and kind != "labels" and n * n_noisy <= NOISY_MAX_SAMPLES
    noisy = bool(noisy) and K > 1
    info = PCLInfo(n_cells=K, init=kind, noisy=noisy, sse_start=sse0)
    if K == 1 or max_iter == 0 or sse0 == 0.0:  # nothing to iterate, or nothing to improve
        info.sse, info.sse_history = sse0, np.array([sse0])
        return (labels, info) if return_info else labels

    scale = sse0 / n  # mean squared error per record: the unit of the auction's ε

    if noisy:
        C = _noisy_stage(X, k, C, labels, scale, noise, rng, info)

    lloyd = LloydSettings(max_iter, tol, AuctionSettings(n_candidates, eps_final=float(auction_eps)))
    best_labels, _ = _noiseless_stage(X, k, C, labels, sse0, info, lloyd)
    return (best_labels, info) if return_info else best_labels


def _start(X, k, init, n_cells):
    """(kind, starting labels, K) of :func:`pcl`: ``init`` and ``n_cells`` checked, the start formed."""
    n = X.shape[0]
    if isinstance(init, str):
        if init not in ("mdav", "random"):
            raise ParameterError(f"init must be 'mdav', 'random' or an array of labels, got {init!r}")
        kind = init
    else:
        kind = "labels"
    if n_cells is not None:
        if kind != "random":
            raise ParameterError("n_cells applies only to init='random' (MDAV and given labels fix the cell count)")
        if not _is_int(n_cells) or not 1 <= n_cells <= n // k:
            raise ParameterError(f"n_cells must be an integer in [1, n // k = {n // k}], got {n_cells!r}")

    if kind == "labels":
        labels = _start_labels(init, n, k)
        K = int(labels.max()) + 1
    elif kind == "mdav":
        labels = mdav(X, k)
        K = int(labels.max()) + 1
    else:
        K = int(n_cells) if n_cells is not None else n // k
        labels = _order_partition(X, K, k)
    return kind, labels, K


def _noiseless_stage(X, k, C, labels, best_sse, info, lloyd: LloydSettings, graph=None):
    """Noiseless PCL (§3.3) from the (possibly annealed) reconstruction values ``C`` (one per cell
    of ``labels``, whose SSE is ``best_sse``: its mean per record is the auction's unit of ε);
    returns the best labels seen (``labels`` themselves unless an iteration improves on
    ``best_sse``) and the cells' last neighbour lists (None with few cells), and fills ``info``.
    ``graph``: starting neighbour lists of the cells (see :meth:`._auction.Adjuster.assign`)."""
    n, K = X.shape[0], C.shape[0]
    max_iter, tol = lloyd.max_iter, lloyd.tol
    best_labels = labels
    adj = Adjuster(K, k, n, best_sse / n, lloyd.auction, graph=graph)
    history = []
    backbone = labels
    home = None  # first iteration: searched from the starting cells (see _auction._candidates)
    prev = np.inf
    for it in range(max_iter):
        new = adj.assign(X, C, home, backbone)
        if adj.failed:  # bid cap hit: repair, consider the result, stop
            new, fixed = repair_cells(X, new, K, k)
            info.n_repaired += fixed
            s = sse_of(X, new, cell_means(X, new, int(new.max()) + 1)[0])
            history.append(s)
            info.n_iter = it + 1
            if s < best_sse:
                best_labels, best_sse = new, s
            break
        C, cnt = cell_means(X, new, K)
        s = sse_of(X, new, C)
        history.append(s)
        info.n_iter = it + 1
        if s < best_sse:
            best_labels, best_sse = new, s
        if s >= prev * (1.0 - tol):
            info.converged = True
            break
        prev = s
        backbone, home = new, adj.nearest
    info.sse_history = np.array(history)
    info.sse = best_sse
    info.n_cells = int(best_labels.max()) + 1  # fewer than K only if a repair dissolved a cell
    info.costs = adj.costs()
    info.n_bids += adj.bids
    return best_labels, adj.graph


def refine_partition(X, labels, k: int, max_iter: int, auction: AuctionSettings = AuctionSettings(N_CANDIDATES),
                     graph=None):
    """Noiseless PCL iterations (§3.3) from a partition: ``pcl(X, k, init=labels, noisy=False,
    max_iter=max_iter, n_candidates=auction.n_candidates, auction_eps=auction.eps_final)``, with the
    cells' neighbour lists passed in and out so that a caller that has them (the improvement pass)
    does not search them again, and the rest of the auction's schedule settable: its first ε (same
    unit as the final one; default 0.25) and whether iterations after the first scale ε down again
    from the first ε (``rescale_warm``; False: one phase at the final ε from the previous
    iteration's prices).

    ``X`` float64 (n, m) and ``labels`` int64 cells 0 … K−1 of ≥ k records each, as checked by
    the caller; ``graph`` (K, L) int64 neighbour lists or None.  Returns (labels, PCLInfo,
    graph), the graph None with few cells (≤ ``EXACT_MAX_CELLS``: exact candidates).
    """
    K = int(labels.max()) + 1
    C, _ = cell_means(X, labels, K)
    sse0 = sse_of(X, labels, C)
    info = PCLInfo(n_cells=K, init="labels", noisy=False, sse_start=sse0)
    if K == 1 or max_iter == 0 or sse0 == 0.0:
        info.sse, info.sse_history = sse0, np.array([sse0])
        return labels, info, graph
    auction = replace(auction, n_candidates=int(auction.n_candidates), eps_final=float(auction.eps_final))
    best, graph = _noiseless_stage(X, k, C, labels, sse0, info, LloydSettings(int(max_iter), TOL, auction), graph)
    return best, info, graph


def _noisy_stage(X, k, C, labels, scale, noise: NoiseSettings, rng, info):
    """§3.4: Lloyd iterations on clouds of noisy samples with geometrically cooled variance,
    from the reconstruction values ``C`` (one per cell of ``labels``)."""
    n, m = X.shape
    K, n_noisy, cooling, sigma = C.shape[0], noise.n_noisy, noise.cooling, noise.sigma
    sigma0 = float(sigma) if sigma is not None else _SIGMA_START * float(np.sqrt(scale / m))
    adj = Adjuster(K, k, n, scale, AuctionSettings(noise.n_candidates, eps_final=EPS_NOISY), cloud=n_noisy)
    backbone = np.repeat(labels, n_noisy)
    # fresh draws every iteration (§3.4: previous noisy samples are replaced); reusing one set
    # of draws rescaled by σ was measured to anneal worse on Census (+1 % SSE at k = 5)
    base = np.repeat(X, n_noisy, axis=0)
    exact = np.arange(0, n * n_noisy, n_noisy)
    home = None
    s = sigma0
    sigmas = []
    while s >= _SIGMA_END * sigma0:
        P = base + s * rng.standard_normal(base.shape)
        P[exact] = X  # every cloud keeps its record
        cell = adj.assign(P, C, None if home is None else np.repeat(home, n_noisy), backbone)
        home = adj.nearest[exact]
        C_new, cnt = cell_means(P, cell, K)
        # a cell that lost its cloud mass entirely (only if the auction was cut short) keeps x̂_q
        C = np.where(cnt[:, None] > 0, C_new, C)
        sigmas.append(s)
        s *= cooling
    info.n_noisy_iter = len(sigmas)
    info.sigma_history = np.array(sigmas)
    info.n_bids += adj.bids
    return C
