"""Effective anonymity of p-probabilistic k-anonymous microaggregation (Algorithm A).

Implements §V (Table I) and §VI-A (Algorithm A) of Rebollo-Monedero et al., *p-Probabilistic
k-Anonymous Microaggregation for the Anonymization of Surveys with Uncertain Participation*
(Information Sciences 2017).

A cell is designed before the survey: each of its n records j takes part (is *active*) with
probability π_j, independently.  With K_n active records, k-anonymity fails when 0 < K_n < k.
Algorithm A grows a cell one record at a time and keeps the PMF p_n(0..k−1) of K_n by

    p_n = π̄_n · p_{n−1} + π_n · ShiftDown(p_{n−1}),        p_0 = (1, 0, …, 0),

which yields the attained cell failure q̄ = P{0 < K_n < k}, the expected number of unprotected
records u = E[K_n | 0 < K_n < k], and the record failures r̄ = u·q̄/n and r̄′ (given active).

Numerical stability.  The paper takes q̄ = P_n(k−1) − p_n(0), a difference of two numbers that
are close when q̄ is tiny.  Here q̄ is the sum p_n(1) + … + p_n(k−1) of non-negative terms, each
produced by the recursion from additions of non-negative numbers only, so its relative error stays
at a few ulps whatever q̄ is (10⁻¹⁷ included).  The vector is rescaled by powers of 2⁶⁰⁰ when it
becomes small, so long cells with small π do not underflow; comparisons with p̄ are made on logs.

Effective anonymity.  Table I defines n_min as the smallest n ≥ k such that a cell of *at least*
that size is p-probabilistically k-anonymous.  Algorithm A stops at the first n ≥ k with
q̄ ≤ p̄; the two agree unless q̄ rises again after n (possible only in the pathological regime
the paper sets aside, e.g. tiny π).  Adding record j+1 changes q̄ by π_{j+1}(p_n(0) − p_n(k−1)),
and p_n(k−1)/p_n(0) (an elementary symmetric polynomial of the odds π_i/π̄_i) never decreases as
records are added.  So this module stops at the first n ≥ k with q̄ ≤ p̄ *and* p_n(k−1) ≥ p_n(0):
from there q̄ cannot increase, whatever records are added.  This is Table I's definition, the
value of Table III in every case, and it lets a cell grow beyond n_min (MDAV cells hold up to
2·n_min − 1 records) without losing the guarantee.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ParameterError

__all__ = [
    "EffectiveAnonymity",
    "CellFailure",
    "effective_anonymity",
    "cell_failure",
    "table_failure",
    "check_participation",
    "check_max_cell_failure",
    "check_anonymity",
]

#: Longest cell the search for n_min will try under constant participation (no table size given).
MAX_CELL_SIZE = 1_000_000

_RESCALE_BELOW = 2.0**-600
_RESCALE_BY = 2.0**600
_LOG_RESCALE = 600 * math.log(2.0)


# --------------------------------------------------------------------------- validation


def check_anonymity(k) -> int:
    """Validate the anonymity parameter k (an integer ≥ 2)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ParameterError(f"k must be an integer ≥ 2, got {k!r}")
    if k < 2:
        raise ParameterError(f"k must be ≥ 2, got {k}")
    return int(k)


def check_max_cell_failure(max_cell_failure) -> float:
    """Validate the acceptable cell failure p̄, a number in the open interval (0, 1)."""
    if isinstance(max_cell_failure, bool) or not isinstance(max_cell_failure, (int, float, np.integer, np.floating)):
        raise ParameterError(f"max_cell_failure must be a number in (0, 1), got {max_cell_failure!r}")
    value = float(max_cell_failure)
    if not (0.0 < value < 1.0):
        raise ParameterError(f"max_cell_failure must be in (0, 1), got {value!r}")
    return value


def check_participation(participation, name: str = "participation"):
    """Validate π: a number in (0, 1], or a 1-D array of such numbers (one per record).

    Returns a float for a scalar and a float64 array otherwise.
    """
    if isinstance(participation, bool):
        raise ParameterError(f"{name} must be a probability in (0, 1], got {participation!r}")
    if isinstance(participation, (int, float, np.integer, np.floating)):
        value = float(participation)
        if not (0.0 < value <= 1.0):
            raise ParameterError(f"{name} must be in (0, 1], got {value!r}")
        return value
    try:
        arr = np.asarray(participation, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number in (0, 1] or an array of them") from None
    if arr.ndim != 1:
        raise ParameterError(f"{name} must be a number or a 1-D array (one probability per record), got {arr.ndim} dimensions")
    if arr.size == 0:
        raise ParameterError(f"{name} is empty")
    n_nan = int(np.isnan(arr).sum())
    if n_nan:
        raise ParameterError(f"{name} has {n_nan} missing (NaN) value(s)")
    bad = int(((arr <= 0.0) | (arr > 1.0)).sum())
    if bad:
        raise ParameterError(f"{name} has {bad} value(s) outside (0, 1]")
    return arr


# --------------------------------------------------------------------------- the recursion


class ActiveCount:
    """PMF of the number K_n of active records of a growing cell, truncated to 0 … k−1.

    ``p_n(j) = v[j]·exp(log_scale)``; Algorithm A steps 4–6 (ShiftDown recursion), kept scaled.
    """

    __slots__ = ("k", "n", "v", "log_scale")

    def __init__(self, k: int):
        self.k = k
        self.n = 0
        self.v = np.zeros(k)
        self.v[0] = 1.0
        self.log_scale = 0.0

    def copy(self) -> "ActiveCount":
        other = ActiveCount.__new__(ActiveCount)
        other.k, other.n, other.v, other.log_scale = self.k, self.n, self.v.copy(), self.log_scale
        return other

    def add(self, pi: float) -> None:
        """Add one record with participation probability ``pi``."""
        v = self.v
        new = v * (1.0 - pi)
        new[1:] += pi * v[:-1]
        self.v = new
        self.n += 1
        top = new.max()
        if 0.0 < top < _RESCALE_BELOW:
            new *= _RESCALE_BY
            self.log_scale -= _LOG_RESCALE

    def log_failure(self) -> float:
        """log q̄, q̄ = P{0 < K_n < k} (−inf when failure is impossible)."""
        s = float(self.v[1:].sum())
        return math.log(s) + self.log_scale if s > 0.0 else -math.inf

    def failure(self) -> float:
        """q̄ = P{0 < K_n < k}."""
        lf = self.log_failure()
        return math.exp(lf) if lf > -math.inf else 0.0

    def unprotected(self) -> float:
        """u = E[K_n | 0 < K_n < k] (0 when failure is impossible)."""
        s = float(self.v[1:].sum())
        return float(np.dot(np.arange(self.k), self.v)) / s if s > 0.0 else 0.0

    def non_increasing(self) -> bool:
        """True when no added record can raise q̄ any more: p_n(k−1) ≥ p_n(0)."""
        return bool(self.v[-1] >= self.v[0])

    def satisfies(self, log_pbar: float) -> bool:
        """n ≥ k, q̄ ≤ p̄ and q̄ non-increasing from here on (Table I's n_min condition)."""
        return self.n >= self.k and self.log_failure() <= log_pbar and self.non_increasing()


def _loo_below(pis: np.ndarray, k: int) -> np.ndarray:
    """P{K_{−j} ≤ k−2} for every record j of a cell: the chance that the others leave it unprotected.

    Given I_j = 1, k-anonymity fails iff 0 < 1 + K_{−j} < k, i.e. K_{−j} ≤ k−2, with K_{−j} the
    active records other than j.  Prefix PMFs and suffix CMFs combine in O(n·k) with positive sums only.
    """
    n, w = pis.size, k - 1
    pre = np.zeros((n + 1, w))
    pre_s = np.zeros(n + 1)
    pre[0, 0] = 1.0
    for j in range(n):
        v = pre[j] * (1.0 - pis[j])
        v[1:] += pis[j] * pre[j, :-1]
        s = pre_s[j]
        top = v.max()
        if 0.0 < top < _RESCALE_BELOW:
            v *= _RESCALE_BY
            s -= _LOG_RESCALE
        pre[j + 1], pre_s[j + 1] = v, s
    suf = np.zeros((n + 1, w))
    suf_s = np.zeros(n + 1)
    suf[n, 0] = 1.0
    for j in range(n - 1, -1, -1):
        v = suf[j + 1] * (1.0 - pis[j])
        v[1:] += pis[j] * suf[j + 1, :-1]
        s = suf_s[j + 1]
        top = v.max()
        if 0.0 < top < _RESCALE_BELOW:
            v *= _RESCALE_BY
            s -= _LOG_RESCALE
        suf[j], suf_s[j] = v, s
    cdf = np.cumsum(suf, axis=1)
    # record j: Σ_a prefix_{j}(a) · suffixCDF_{j+1}(k−2−a)
    body = np.einsum("ja,ja->j", pre[:-1], cdf[1:, ::-1])
    with np.errstate(under="ignore"):
        return body * np.exp(pre_s[:-1] + suf_s[1:])


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CellFailure:
    """Failure metrics of one cell under a participation model (§VI-A).

    Attributes
    ----------
    n : int
        Number of records in the cell.
    cell_failure : float
        Attained cell failure q̄ = P{0 < K_n < k}.
    unprotected : float
        u = E[K_n | 0 < K_n < k], expected number of unprotected records given failure (0 when
        q̄ = 0).
    record_failure : float
        r̄ = u·q̄/n, probability that a record drawn uniformly from the cell is active and
        unprotected.
    record_failure_given_active : float
        r̄′ = (1/n)·Σ_j r̄_j/π_j, probability that a participating respondent is unprotected
        (r̄/π under constant participation).
    """

    n: int
    cell_failure: float
    unprotected: float
    record_failure: float
    record_failure_given_active: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EffectiveAnonymity:
    """Result of :func:`effective_anonymity` (Algorithm A and the table metrics of §VI-A).

    Attributes
    ----------
    k : int
        Target anonymity.
    participation : float or None
        Constant participation π, or None when one π_j per record was given.
    max_cell_failure : float
        Acceptable cell failure p̄.
    n_min : int
        Effective anonymity: the smallest n ≥ k for which every cell of at least n records
        (in the given order, for per-record π_j) has q̄ ≤ p̄.
    cell_failure, unprotected, record_failure, record_failure_given_active : float
        q̄, u, r̄, r̄′ of a cell of n_min records (see :class:`CellFailure`).
    n_records : int or None
        Table size N, when known.
    n_cells : int or None
        |C| = ⌊N / n_min⌋ cells (constant π and N given).
    last_cell_size : int or None
        n′ = N − (|C| − 1)·n_min, the size of the last cell, which takes the remainder.
    last_cell_failure : float or None
        q̄′, attained failure of that last cell.
    table_failure : float or None
        t̄ = 1 − q^{|C|−1}·q′, probability that at least one cell of the table fails.
    """

    k: int
    participation: float | None
    max_cell_failure: float
    n_min: int
    cell_failure: float
    unprotected: float
    record_failure: float
    record_failure_given_active: float
    n_records: int | None = None
    n_cells: int | None = None
    last_cell_size: int | None = None
    last_cell_failure: float | None = None
    table_failure: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def table_failure(cell_failures) -> float:
    """Table failure t̄ = 1 − Π_c (1 − q̄_c): the chance that at least one cell fails (§VI-A).

    Computed as −expm1(Σ log1p(−q̄_c)), accurate when every q̄_c is tiny.
    """
    q = np.asarray(cell_failures, dtype=np.float64)
    if q.size and (np.isnan(q).any() or q.min() < 0.0 or q.max() > 1.0):
        raise ParameterError("cell_failures must be probabilities in [0, 1]")
    if q.size and q.max() >= 1.0:
        return 1.0
    return float(-np.expm1(np.log1p(-q).sum())) + 0.0   # + 0.0: no cell can fail gives 0, not -0


def _metrics(state: ActiveCount, pis: np.ndarray | None, pi: float | None) -> CellFailure:
    n = state.n
    q = state.failure()
    u = state.unprotected()
    r = u * q / n
    if pis is None:
        r_active = r / pi
    else:
        r_active = float(_loo_below(pis, state.k).mean()) if q > 0.0 else 0.0
    return CellFailure(n=n, cell_failure=q, unprotected=u, record_failure=r, record_failure_given_active=r_active)


def cell_failure(k, participation, n: int | None = None) -> CellFailure:
    """Failure metrics q̄, u, r̄, r̄′ of one cell (§VI-A, Algorithm A steps 4–8, without the search).

    Parameters
    ----------
    k : int
        Target anonymity, ≥ 2.
    participation : float or array_like
        π of every record of the cell (a scalar needs ``n``), or one π_j per record of the cell.
    n : int, optional
        Cell size, required with a scalar ``participation``; must match the array length otherwise.

    Returns
    -------
    CellFailure
    """
    k = check_anonymity(k)
    part = check_participation(participation)
    if np.isscalar(part):
        if n is None or isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"n must be a positive integer (the cell size) with a constant participation, got {n!r}")
        pis, pi = None, part
        state = ActiveCount(k)
        for _ in range(int(n)):
            state.add(pi)
    else:
        if n is not None and n != part.size:
            raise ParameterError(f"n = {n} differs from the number of participation values ({part.size})")
        pis, pi = part, None
        state = ActiveCount(k)
        for p in pis:
            state.add(float(p))
    return _metrics(state, pis, pi)


def effective_anonymity(k, participation, max_cell_failure, n_records: int | None = None) -> EffectiveAnonymity:
    """Effective anonymity n_min and failure metrics (Algorithm A of §VI-A, Table I of §V).

    Parameters
    ----------
    k : int
        Target anonymity, ≥ 2: a cell fails when 0 < K_n < k of its records take part.
    participation : float or array_like
        Participation probability π in (0, 1] of every record, or one π_j per record in the order
        in which records would join a cell (the recursion runs over them in that order, up to
        N = ``len(participation)`` records).
    max_cell_failure : float
        Acceptable cell failure p̄ in (0, 1).  Accurate down to 10⁻¹⁷ and below.
    n_records : int, optional
        Table size N.  With constant π it bounds n_min and yields the table failure t̄ of a table
        of ⌊N/n_min⌋ cells (the last one taking the remainder).  With per-record π_j it must equal
        ``len(participation)`` if given.

    Returns
    -------
    EffectiveAnonymity
        n_min, q̄, u, r̄, r̄′ and, for constant π with ``n_records``, |C|, n′, q̄′ and t̄.

    Raises
    ------
    ParameterError
        k < 2, π outside (0, 1] or missing, p̄ outside (0, 1), or no cell of at most N records
        (at most ``MAX_CELL_SIZE`` without N) meets p̄, e.g. k larger than the table.

    Examples
    --------
    >>> r = effective_anonymity(10, 0.75, 1e-4, n_records=10_000)
    >>> r.n_min, round(r.cell_failure * 1e5, 2), round(r.table_failure, 4)
    (25, 4.31, 0.0171)
    """
    k = check_anonymity(k)
    pbar = check_max_cell_failure(max_cell_failure)
    part = check_participation(participation)
    constant = np.isscalar(part)
    if n_records is not None:
        if isinstance(n_records, bool) or not isinstance(n_records, (int, np.integer)) or n_records < 1:
            raise ParameterError(f"n_records must be a positive integer, got {n_records!r}")
        n_records = int(n_records)
        if not constant and n_records != part.size:
            raise ParameterError(
                f"n_records = {n_records} differs from the number of participation values ({part.size})"
            )
    limit = (n_records if n_records is not None else MAX_CELL_SIZE) if constant else part.size
    if k > limit:
        raise ParameterError(f"k = {k} exceeds the number of records N = {limit}")

    log_pbar = math.log(pbar)
    state = ActiveCount(k)
    while True:
        state.add(part if constant else float(part[state.n]))
        if state.satisfies(log_pbar):
            break
        if state.n >= limit:
            what = "participation π = %g" % part if constant else "the given participation π_j"
            bound = f"N = {limit} records" if (n_records is not None or not constant) else f"{limit:,} records"
            raise ParameterError(
                f"k = {k} cannot be met with max_cell_failure = {pbar:g} and {what}: "
                f"no cell of at most {bound} keeps its failure probability that low"
            )
    n_min = state.n
    base = _metrics(state, None if constant else part[:n_min], part if constant else None)
    result = dict(
        k=k,
        participation=part if constant else None,
        max_cell_failure=pbar,
        n_min=n_min,
        cell_failure=base.cell_failure,
        unprotected=base.unprotected,
        record_failure=base.record_failure,
        record_failure_given_active=base.record_failure_given_active,
        n_records=n_records if n_records is not None else (None if constant else part.size),
    )
    if constant and n_records is not None:
        n_cells = n_records // n_min
        last = n_records - (n_cells - 1) * n_min
        tail = state.copy()
        while tail.n < last:
            tail.add(part)
        q_last = tail.failure()
        log_success = (n_cells - 1) * math.log1p(-base.cell_failure) + math.log1p(-q_last)
        result.update(
            n_cells=n_cells,
            last_cell_size=last,
            last_cell_failure=q_last,
            table_failure=float(-math.expm1(log_success)),
        )
    return EffectiveAnonymity(**result)
