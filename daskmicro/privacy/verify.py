"""Checks run on every release before it leaves the library.

* :func:`verify_k_anonymity` — every published quasi-identifier (QI) tuple occurs at least ``k``
  times in the release;
* :func:`verify_rows` — no record was lost or duplicated (rows in = rows out).

The checks look only at the published table, never at the partition that produced it, so they
can catch a bug anywhere upstream.  Results and error messages hold counts only, never values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..errors import ParameterError, VerificationError
from ..kernels.tuplehash import FLOAT_BITS, combine_rows, first_of_each, mix_bits

__all__ = [
    "KAnonymityCheck",
    "RowCheck",
    "VerificationError",
    "verify_k_anonymity",
    "verify_rows",
]


@dataclass(frozen=True)
class KAnonymityCheck:
    """Outcome of :func:`verify_k_anonymity`.

    Attributes
    ----------
    ok : bool
        True when every published QI tuple occurs at least ``k`` times.
    k : int
        The anonymity parameter checked against.
    min_count : int
        Smallest number of times a published QI tuple occurs (0 for an empty release).
    n_tuples : int
        Number of distinct published QI tuples.
    n_violating_tuples : int
        Number of distinct QI tuples occurring fewer than ``k`` times.
    n_violating_records : int
        Number of records carrying one of those tuples.
    """

    ok: bool
    k: int
    min_count: int
    n_tuples: int
    n_violating_tuples: int
    n_violating_records: int

    def __bool__(self) -> bool:
        return self.ok

    def raise_if_failed(self) -> "KAnonymityCheck":
        """Raise :class:`VerificationError` unless the check passed; return ``self`` otherwise."""
        if not self.ok:
            raise VerificationError(
                f"k-anonymity check failed: {self.n_violating_tuples} of {self.n_tuples} published QI tuples "
                f"({self.n_violating_records} records) occur fewer than k = {self.k} times "
                f"(smallest count {self.min_count})"
            )
        return self

    def to_dict(self) -> dict:
        """Plain, JSON-serialisable dictionary of the fields."""
        return asdict(self)


@dataclass(frozen=True)
class RowCheck:
    """Outcome of :func:`verify_rows`.

    Attributes
    ----------
    ok : bool
        True when the release has exactly as many rows as the input.
    rows_in, rows_out : int
        Row counts of the input and of the release.
    """

    ok: bool
    rows_in: int
    rows_out: int

    def __bool__(self) -> bool:
        return self.ok

    def raise_if_failed(self) -> "RowCheck":
        """Raise :class:`VerificationError` unless the check passed; return ``self`` otherwise."""
        if not self.ok:
            raise VerificationError(
                f"row count check failed: {self.rows_in} records in, {self.rows_out} records out"
            )
        return self

    def to_dict(self) -> dict:
        """Plain, JSON-serialisable dictionary of the fields."""
        return asdict(self)


def _check_release(release, qi: Sequence) -> list:
    if not isinstance(release, pd.DataFrame):
        raise ParameterError(f"release must be a pandas DataFrame, got {type(release).__name__}")
    if isinstance(qi, str):
        qi = [qi]
    qi = list(qi)
    if not qi:
        raise ParameterError("qi must name at least one quasi-identifier column")
    missing = [c for c in qi if c not in release.columns]
    if missing:
        raise ParameterError(f"QI column(s) not in the release: {', '.join(map(str, missing))}")
    return qi


def verify_k_anonymity(release: pd.DataFrame, qi: Sequence, k: int, *, strata: Sequence = ()) -> KAnonymityCheck:
    """Check that every published tuple (stratum columns + quasi-identifiers) occurs at least ``k`` times.

    Parameters
    ----------
    release : pandas.DataFrame
        The table as it is published: pass the values as written (read back from the file),
        since the check compares them in their own dtype, never through a float64 copy.
    qi : list of column labels
        The quasi-identifier columns.  Missing values count as values, so a NaN cannot hide a
        small group.
    k : int
        Anonymity parameter, ≥ 1.
    strata : list of column labels, optional
        Published stratum columns: part of the tuple an intruder sees, so they are counted with
        the QIs (a record alone in its stratum is unique however its QIs look).

    Returns
    -------
    KAnonymityCheck
        Truthy when the release is k-anonymous; call :meth:`KAnonymityCheck.raise_if_failed` to
        turn a failure into a :class:`VerificationError`.

    Examples
    --------
    >>> import pandas as pd
    >>> release = pd.DataFrame({"age": [30.5, 30.5, 41.0], "income": [10.0, 10.0, 12.0]})
    >>> check = verify_k_anonymity(release, ["age", "income"], k=2)
    >>> bool(check), check.min_count, check.n_violating_records
    (False, 1, 1)
    """
    qi = _check_release(release, qi)
    strata = [] if strata is None else ([strata] if isinstance(strata, str) else list(strata))
    _check_release(release, strata or qi)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ParameterError(f"k must be an integer ≥ 1, got {k!r}")
    columns = list(dict.fromkeys(strata + qi))
    if len(release) == 0:
        return KAnonymityCheck(ok=True, k=int(k), min_count=0, n_tuples=0, n_violating_tuples=0,
                               n_violating_records=0)
    return check_tuple_counts(tuple_counts(release, columns), int(k))


def verify_rows(original_n: int, release: pd.DataFrame) -> RowCheck:
    """Check that the release holds as many rows as the input (no record lost or duplicated).

    Parameters
    ----------
    original_n : int
        Number of records in the input.
    release : pandas.DataFrame or int
        The release, or its row count.

    Returns
    -------
    RowCheck
        Truthy when the counts match.
    """
    rows_out = int(release) if isinstance(release, (int, np.integer)) else len(release)
    return RowCheck(ok=int(original_n) == rows_out, rows_in=int(original_n), rows_out=rows_out)


# --------------------------------------------------------------------------- distributed form
# The same check as verify_k_anonymity over a release held in many partitions.  Each partition
# counts its tuples by a 64-bit hash of the tuple, keeping one representative per hash (the
# per-column hashes, which are exact for numbers) and checking that every row with that hash
# carries exactly that representative; merges (on the workers) check representatives against
# each other.  So two different tuples can never be counted
# together: a hash collision is detected and reported, not silently merged.  Only the final
# KAnonymityCheck travels to the client.


class TupleCounts:
    """Per-hash counts and representative tuples of a set of release rows (sorted by hash).

    ``tuples`` holds, per distinct tuple, the per-column 64-bit hashes of its values in their
    published dtype (rows × columns, uint64).  For numbers the per-column hash is a bijection of
    the value's bits (pandas' ``hash_array`` mixes the 1–8 bytes of the value with invertible
    steps), so two different published numbers never compare equal here, whatever float64
    would make of them.
    """

    __slots__ = ("hashes", "counts", "tuples", "collision")

    def __init__(self, hashes, counts, tuples, collision=False):
        self.hashes, self.counts, self.tuples, self.collision = hashes, counts, tuples, collision

    def __sizeof__(self) -> int:
        # what a worker holds, for Dask's spilling: a release's per-file counts are about as
        # large as its QIs (one distinct tuple per row, (m + 2) × 8 bytes each)
        return object.__sizeof__(self) + self.hashes.nbytes + self.counts.nbytes + self.tuples.nbytes


def _group(hashes, counts, tuples, collision):
    """Rows with equal hashes grouped (sorted by hash, the first row of each hash its
    representative, as ``np.unique`` gives them; their counts summed) and every row checked
    against its representative (:func:`daskmicro.kernels.tuplehash.first_of_each`)."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if hashes.size == 0:
        return TupleCounts(hashes, counts, tuples, collision)
    tuples = np.ascontiguousarray(tuples)
    first, summed, clash = first_of_each(np.ascontiguousarray(hashes), counts, tuples.T)
    order = np.argsort(hashes[first])   # distinct hashes: no ties
    first = first[order]
    return TupleCounts(hashes[first], summed[order], tuples[first], collision or clash)


def _native(values: np.ndarray) -> np.ndarray:
    """``values`` contiguous, in this machine's byte order (the bits a value has here)."""
    values = np.ascontiguousarray(values)
    return values if values.dtype.isnative else values.astype(values.dtype.newbyteorder("="))


def _hash_numbers(values: np.ndarray, out: np.ndarray) -> None:
    """pandas' per-value hash of a NumPy number column of at most 8 bytes (``hash_array``: the
    value's bits widened to 64 — a float's NaNs and −0.0 made one — then mixed by invertible steps),
    in ``out``, in one compiled pass (:func:`daskmicro.kernels.tuplehash.mix_bits`)."""
    values = _native(values)
    width = values.dtype.itemsize
    out[:] = values.view(f"u{width}")
    mix_bits(out, _FLOAT_MASKS[width] if values.dtype.kind == "f" else _INTEGER_MASKS, out)


def hash_floats(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`_hash_numbers` of a float array, in ``out`` (uint64, allocated when None)."""
    values = np.asarray(values)
    out = np.empty(values.shape, dtype=np.uint64) if out is None else out
    _hash_numbers(values, out)
    return out


_FLOAT_MASKS = {w: np.array(m, dtype=np.uint64) for w, m in FLOAT_BITS.items()}
_INTEGER_MASKS = np.zeros(4, dtype=np.uint64)


#: The hash of a missing value of a column that is not a NumPy float column (None, NaN, NA, NaT):
#: pandas hashes them as the text of their name — an object column's None as "None" and NaN as
#: "nan", a string column's NA as "<NA>", the str column of a file read back its null as "nan" —,
#: so a null published beside that text would be counted with it.
MISSING_HASH = np.uint64(0x6D697373696E6721)


def _hash_column(values, out: np.ndarray) -> None:
    """The uint64 hash of each value of one column, in its own dtype (a Series or an ndarray), in
    ``out``; a missing value of a column that is not a NumPy float one hashes as :data:`MISSING_HASH`."""
    dtype = getattr(values, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind in "fiub" and dtype.itemsize <= 8:
        _hash_numbers(np.asarray(values), out)   # a bool as 0 or 1, as pandas hashes it
        return
    if not isinstance(values, (pd.Series, pd.Index)):
        values = pd.Series(values, copy=False)
    out[:] = pd.util.hash_pandas_object(values, index=False, categorize=False).to_numpy()
    missing = pd.isna(values).to_numpy(dtype=bool)
    if missing.any():
        out[missing] = MISSING_HASH


def column_hashes(part, columns: list, n: int | None = None) -> np.ndarray:
    """Per-column uint64 hashes (columns × rows, each column contiguous) of the values as they are,
    in their own dtype.

    ``part`` is a DataFrame, or a mapping of the columns to Series or arrays (``n`` rows).
    Missing values hash alike within a column (a NaN cannot hide a small group); nothing is
    converted to float64 first, so integers beyond 2^53, float16/float32 values and strings are
    compared exactly as published.  NumPy number columns are hashed as pandas hashes them, in one
    compiled pass each (:func:`_hash_numbers`).
    """
    n = len(part) if n is None else int(n)
    H = np.empty((len(columns), n), dtype=np.uint64)
    for j, c in enumerate(columns):
        _hash_column(part[c], H[j])
    return H


def _combine(H: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row from its per-column hashes (columns × rows)."""
    h = np.empty(H.shape[1], dtype=np.uint64)
    combine_rows(np.ascontiguousarray(H), h)
    return h


def tuple_counts(part, columns: list, n: int | None = None) -> TupleCounts:
    """Occurrences of each published tuple (``columns``: stratum columns and QIs) in one partition
    (a DataFrame, or a mapping of columns to Series or arrays of ``n`` rows).

    Rows are grouped by their 64-bit hash (sorted, the first row of a hash its representative, as
    ``np.unique`` gives them) and every row is checked against the first row of its hash, column by
    column: two different tuples under one hash are flagged, never counted together
    (:func:`daskmicro.kernels.tuplehash.first_of_each`, one pass).  Only the representatives are
    copied row by row and sorted (about n / k of them)."""
    n = len(part) if n is None else int(n)
    H = column_hashes(part, list(columns), n)
    hashes = _combine(H)
    if n == 0:
        return TupleCounts(hashes, np.empty(0, np.int64), np.empty((0, H.shape[0]), np.uint64))
    first, counts, collision = first_of_each(hashes, np.ones(n, np.int64), H)
    order = np.argsort(hashes[first])   # distinct hashes: no ties
    first = first[order]
    return TupleCounts(hashes[first], counts[order], np.ascontiguousarray(H[:, first].T), collision)


def _spread(h: np.ndarray) -> np.ndarray:
    """Each row hash through the splitmix64 finaliser, so that a sum of them is a multiset hash."""
    with np.errstate(over="ignore"):
        z = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def tuple_fingerprint(part, columns: list, n: int | None = None) -> int:
    """A 64-bit hash of the multiset of published tuples of one partition (the rows' hashes of
    :func:`tuple_counts`, spread, summed modulo 2^64): equal for the same tuples in any order and
    any cut into partitions (fingerprints of parts add up), and, but for a 2^-64 chance, different
    for any other multiset.  Used to check that files as read back hold exactly the tuples counted
    before they were written."""
    n = len(part) if n is None else int(n)
    if n == 0:
        return 0
    return int(np.sum(_spread(_combine(column_hashes(part, list(columns), n))), dtype=np.uint64))


def counts_fingerprint(counts: TupleCounts) -> int:
    """:func:`tuple_fingerprint` of the rows that ``counts`` counted."""
    if counts.hashes.size == 0:
        return 0
    with np.errstate(over="ignore"):
        return int(np.sum(_spread(counts.hashes) * counts.counts.astype(np.uint64), dtype=np.uint64))


def add_fingerprints(*prints: int) -> int:
    """Fingerprints of several parts added (modulo 2^64): the fingerprint of their union."""
    return sum(int(f) for f in prints) % (1 << 64)


def merge_tuple_counts(*parts: TupleCounts) -> TupleCounts:
    """Sum per-partition tuple counts (a combine step of the tree reduction)."""
    parts = [p for p in parts if p.hashes.size]
    if not parts:
        return TupleCounts(np.empty(0, np.uint64), np.empty(0, np.int64), np.empty((0, 0), np.uint64))
    if len(parts) == 1:
        return parts[0]
    return _group(
        np.concatenate([p.hashes for p in parts]),
        np.concatenate([p.counts for p in parts]),
        np.concatenate([p.tuples for p in parts]),
        any(p.collision for p in parts),
    )


def add_tuple_counts(total: TupleCounts, part: TupleCounts) -> TupleCounts:
    """``total`` with the counts of ``part`` added: when every tuple of ``part`` is already in
    ``total`` (same hash, same per-column hashes) the counts are added in place of a copy, at a cost
    that grows with ``part`` only (plus one copy of the counts); otherwise the two are merged.
    The result is the same as :func:`merge_tuple_counts` either way."""
    if part.hashes.size == 0:
        return total
    if total.hashes.size == 0 or total.tuples.shape[1] != part.tuples.shape[1]:
        return merge_tuple_counts(total, part)
    pos = np.searchsorted(total.hashes, part.hashes)
    inside = pos < total.hashes.size
    found = np.zeros(part.hashes.size, dtype=bool)
    found[inside] = total.hashes[pos[inside]] == part.hashes[inside]
    if not found.all() or not np.array_equal(total.tuples[pos], part.tuples):
        return merge_tuple_counts(total, part)
    counts = total.counts.copy()
    np.add.at(counts, pos, part.counts)
    return TupleCounts(total.hashes, counts, total.tuples, total.collision or part.collision)


def check_no_collision(counts: TupleCounts) -> None:
    """Raise if two different published tuples of ``counts`` share a 64-bit hash (no verdict then)."""
    if counts.collision:
        raise VerificationError("k-anonymity check inconclusive: two different QI tuples share a 64-bit hash")


def check_tuple_counts(counts: TupleCounts, k: int) -> KAnonymityCheck:
    """The k-anonymity verdict from merged tuple counts."""
    check_no_collision(counts)
    values = counts.counts
    small = values < k
    return KAnonymityCheck(
        ok=not bool(small.any()) and values.size > 0,
        k=int(k),
        min_count=int(values.min()) if values.size else 0,
        n_tuples=int(values.size),
        n_violating_tuples=int(small.sum()),
        n_violating_records=int(values[small].sum()),
    )


# --------------------------------------------------------------------------- bounded merges
# Merged counts of a whole release hold one entry per published tuple (about n/k): proportional
# to the data, too large for one task at scale.  A tuple's hash fixes its bucket (a range of the
# hash space), so the counts of different buckets never meet: each bucket is merged and checked
# on its own, and only the verdicts (a few numbers each) are combined.

#: Rows of the release per hash bucket of the distributed check: a bucket holds at most this many
#: distinct tuples (about this / k for a k-anonymous release).
COUNT_BUCKET_ROWS = 2_000_000


def count_buckets(n_rows: int) -> int:
    """Hash buckets of the distributed check of a release of ``n_rows`` rows."""
    return max(1, -(-int(n_rows) // COUNT_BUCKET_ROWS))


def split_tuple_counts(counts: TupleCounts, n_buckets: int) -> list:
    """``counts`` cut into ``n_buckets`` by equal ranges of the hash (the counts are sorted by hash)."""
    if n_buckets == 1:
        return [counts]
    bucket = (((counts.hashes >> np.uint64(32)) * np.uint64(n_buckets)) >> np.uint64(32)).astype(np.int64)
    cuts = np.searchsorted(bucket, np.arange(n_buckets + 1))
    # copies, not views: each bucket is kept (or spilled) on its own, without pinning the whole
    return [TupleCounts(counts.hashes[a:b].copy(), counts.counts[a:b].copy(), counts.tuples[a:b].copy(),
                        counts.collision)
            for a, b in zip(cuts[:-1], cuts[1:])]


def bucket_verdict(counts: TupleCounts, k: int):
    """One bucket's verdict: (KAnonymityCheck, distinct tuple sizes, how many tuples of each size)."""
    sizes, number = np.unique(counts.counts, return_counts=True)
    return check_tuple_counts(counts, k), sizes, number


def combine_verdicts(k: int, *verdicts):
    """The release's verdict from its buckets' (:func:`bucket_verdict`): the KAnonymityCheck and the
    tuple sizes (distinct sizes, tuples of each), exactly as one merge of all counts gives them."""
    checks = [v[0] for v in verdicts]
    n_tuples = sum(c.n_tuples for c in checks)
    mins = [c.min_count for c in checks if c.n_tuples]
    check = KAnonymityCheck(
        ok=n_tuples > 0 and all(c.n_violating_tuples == 0 for c in checks), k=int(k),
        min_count=min(mins) if mins else 0, n_tuples=n_tuples,
        n_violating_tuples=sum(c.n_violating_tuples for c in checks),
        n_violating_records=sum(c.n_violating_records for c in checks))
    sizes = np.concatenate([v[1] for v in verdicts]) if verdicts else np.empty(0, np.int64)
    number = np.concatenate([v[2] for v in verdicts]) if verdicts else np.empty(0, np.int64)
    uniq, inv = np.unique(sizes, return_inverse=True)
    return check, (uniq, np.bincount(inv, weights=number, minlength=uniq.size).astype(np.int64))
