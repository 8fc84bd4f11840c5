"""Records that come back as new ones: linked to withdrawn records by their published rows.

Without an id column a record is its stratum and QI values: a record whose QIs were all revised is
a new record, and when every record of a published cell comes back revised the cell counts as
withdrawn whole and its records are aggregated afresh.  Anyone holding both releases can then link
a record's old and new rows by the columns published as they are (an exact amount, a kept key) and
intersect its old and new cells: single records.

The ledger records, for every published row, a *link hash*: a keyed 64-bit hash of the record's
row over the columns its release published as they are (sorted; values hashed as fingerprints hash
them, numbers as numbers), not mixed with its fingerprint, so that two records' rows can be
compared, and keyed with the ledger's secret, so that a hash cannot be tested against guessed
values without it.  A re-release holding both new records and records missing since the release
that last published them is refused when a new record's row over the columns that release
published equals a missing record's (:func:`check_links`).  The whole row is compared: when the
release that published the missing records published a column this one leaves out, the rows
cannot be compared and the re-release is refused.  No Dask.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .fingerprint import value_hashes
from .frozen import NONE, Frozen

__all__ = ["LINK", "link_key", "link_hashes", "link_sets", "scan_links", "missing_records", "check_links",
           "linked_error", "held_links", "count_links"]

#: The column of a release's records files holding each row's link hash.
LINK = "link"
_TAG = np.uint64(0x6C696E6B5F726F77)   # "link_row": a link hash is no fingerprint of the same values


def link_key(keys) -> str:
    """The 16-character key of link hashes, derived from a ledger's fingerprint keys
    (:func:`daskmicro.series.fingerprint.split_key`)."""
    import base64
    import hashlib

    digest = hashlib.sha256(("daskmicro link|" + "|".join(keys)).encode()).digest()
    return base64.b64encode(digest).decode("ascii")[:16]


def link_hashes(df: pd.DataFrame, columns, key: str) -> np.ndarray:
    """The link hash of every row of ``df`` over ``columns`` (keyed with ``key``, 16 characters)."""
    cols = sorted(columns)
    n = len(df)
    if not n:
        return np.empty(0, np.uint64)
    mat = np.empty((n, len(cols) + 2), np.uint64)
    mat[:, 0], mat[:, 1] = _TAG, np.uint64(len(cols))
    for j, c in enumerate(cols):
        mat[:, 2 + j] = value_hashes(df[c])
    rows = np.ascontiguousarray(mat).view(f"S{8 * mat.shape[1]}").ravel().astype(object)
    return pd.util.hash_array(rows, hash_key=key, categorize=False)


def link_sets(frozen: Frozen, published) -> list:
    """The column sets a re-release publishing ``published`` as they are hashes its new records
    over: those of the releases holding records, when it publishes all of their columns."""
    now = set(published or ())
    sets = {tuple(sorted(c)) for c in (frozen.recorded or {}).values() if c}
    return sorted(s for s in sets if set(s) <= now)


def scan_links(df: pd.DataFrame, cell: np.ndarray, sets, key: str) -> dict:
    """One piece's link hashes of its new records (``cell`` :data:`NONE`), per column set (distinct)."""
    new = df.iloc[np.flatnonzero(cell == NONE)]
    return {s: np.unique(link_hashes(new, s, key)) for s in sets} if len(new) else {}


def missing_records(frozen: Frozen, present: np.ndarray) -> dict:
    """The cells published before none of whose records is present now (``present``: the frozen
    cells found), per number of the latest release holding their records."""
    if not len(frozen) or frozen.origin is None:
        return {}
    gone = ~np.isin(frozen.cell_of, np.asarray(present, np.uint64))
    out = {}
    for number in np.unique(frozen.origin[gone]):
        out[int(number)] = np.unique(frozen.cell_of[gone & (frozen.origin == number)])
    return out


def check_links(frozen: Frozen, missing: dict, published, new: int, new_hashes: dict, read) -> None:
    """Refuse a re-release holding ``new`` new records and the records of the cells ``missing``
    (:func:`missing_records`) when a new record could be linked to a missing one by its row over
    the columns published as they are.  ``new_hashes``: the new records' link hashes per column set
    (:func:`link_sets`, sorted tuples); ``read(number, cells)``: the link hashes the ledger holds of
    those cells' records in that release (None when it holds none).  Counts only in the message,
    never values."""
    published = set(published or ())
    if not new or not missing or not published:
        return
    linked = unknown = blind = 0
    for number, cells in missing.items():
        columns = (frozen.recorded or {}).get(number)
        if columns is None:
            unknown += len(cells)
            continue
        common = published & set(columns)
        if not common:
            continue   # nothing both releases publish as it is: no row to link
        if common != set(columns):
            blind += len(cells)
            continue
        held = read(number, cells)
        if held is None:
            unknown += len(cells)
            continue
        linked += int(np.isin(new_hashes.get(tuple(sorted(columns)), np.empty(0, np.uint64)), held).sum())
    if not (linked or unknown or blind):
        return
    why = (f"{linked} of them share their row of the columns published as they are with a missing record"
           if linked else
           "the ledger holds no trace of the missing records' columns published as they are (a ledger written by "
           "an earlier version)" if unknown else
           "the missing records were published with columns this release leaves out: their rows cannot be compared")
    raise linked_error(new, sum(len(c) for c in missing.values()), why)


def linked_error(new: int, missing: int, why: str):
    """The refusal of :func:`check_links` (counts only)."""
    from ..errors import ParameterError

    return ParameterError(
        f"{new} record(s) not published before in this series and {missing} published "
        f"group(s) now missing; {why}: records whose QIs were revised would be aggregated afresh and linked to their "
        "earlier rows by those columns, the two releases intersected; identify records by a column of distinct "
        "values (--id-column, which starts another series: --new-series only if the earlier releases were "
        "withdrawn)")


def held_links(frozen: Frozen, missing: dict, read) -> dict:
    """The link hashes of the records of the ``missing`` cells (:func:`missing_records`) per column
    set of the release that last published them (sorted tuples), read by ``read(number, cells)``."""
    out: dict = {}
    for number, cells in missing.items():
        columns = (frozen.recorded or {}).get(number)
        held = read(number, cells) if columns else None
        if held is not None:
            key = tuple(sorted(columns))
            out[key] = np.union1d(out.get(key, np.empty(0, np.uint64)), held)
    return out


def count_links(df: pd.DataFrame, held: dict, key: str) -> int:
    """How many rows of ``df`` (records new to the series) share their row of a column set of
    ``held`` (:func:`held_links`) with a missing record."""
    return sum(int(np.isin(link_hashes(df, columns, key), hashes).sum()) for columns, hashes in held.items())
