"""The release ledger: a private, append-only record of what each release published.

One directory per ledger — by default ``$XDG_STATE_HOME/daskmicro/ledger/``
(``~/.local/state/daskmicro/ledger/`` when the variable is unset), or the ``DASKMICRO_LEDGER``
environment variable, or the run's ``ledger`` option — owner-only (0700 / 0600)::

    LEDGER/key                               the secret of the keyed fingerprints (never leaves)
    LEDGER/series/SID/series.json            the series: its QIs, strata and id column
    LEDGER/series/SID/rNNNNNN/records-I.parquet   fingerprint → cell id, link hash, one file per release piece
    LEDGER/series/SID/rNNNNNN/cells-I.parquet     cell id → the published QI values
    LEDGER/series/SID/rNNNNNN/content-I.parquet   cell id → keyed sums of its other published columns
    LEDGER/series/SID/rNNNNNN/columns.json        the columns the release published as they are

A *series* is one choice of QIs, strata and id column: releases of the same records in one
series republish frozen values (:mod:`daskmicro.series.frozen`).  The pieces of a release are
written by the tasks that build them, into a hidden staging directory (``LEDGER/.stage-*``), and
become a release of the ledger (one rename) once the release is verified — before the release
itself is committed, so that a release on disk is always in the ledger.

Opening a ledger reads it only.  Its directory and key are made where a run first keys anything
with the secret (:meth:`Ledger.key`: after every check a run makes before it reads its records
whole), and a series' folder with its ``series.json`` when its first release is recorded
(:meth:`Ledger.commit`): a run refused before leaves the ledger as it was.  Two runs making the
key at once make one: the key is written whole, under the ledger's lock, and the other run reads
it; a release is recorded only while the key on disk is the one it was keyed with.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .recovery import OWNER, owner_record, sweep_owned

__all__ = ["Ledger", "default_ledger", "read_key", "record_piece", "ledger_rows", "write_rows", "write_columns",
           "cell_ids", "OFF"]

OFF = "off"
_KEY_BYTES = 32


def default_ledger() -> str:
    """The ledger a run uses when none is given: ``DASKMICRO_LEDGER`` (a path, or ``off`` in any
    case and spacing, as ``--ledger`` and ``series.ledger`` read it), else the user's state directory."""
    env = os.environ.get("DASKMICRO_LEDGER")
    if env and env.strip():
        return "off" if env.strip().lower() == "off" else env
    from .runrecord import state_dir

    return str(state_dir() / "ledger")


def cell_ids(values: np.ndarray) -> np.ndarray:
    """A 64-bit id of each row of published values (rows × QIs; −0.0 is 0.0, NaNs are one value)."""
    v = np.array(values, dtype=np.float64, copy=True)
    v[v == 0] = 0.0
    v[np.isnan(v)] = np.nan
    rows = np.ascontiguousarray(v).view(f"S{8 * v.shape[1]}").ravel().astype(object) if v.shape[1] else None
    if rows is None:
        return np.ones(len(v), np.uint64)
    ids = pd.util.hash_array(rows, categorize=False)
    ids[ids == 0] = 1  # 0 means "no cell"
    return ids


def ledger_rows(df: pd.DataFrame, qi: list, fp_columns, columns=None, strata=(), link_key=None) -> dict:
    """The ledger rows of one published release piece: ``{"records": fingerprint → cell id,
    "cells": cell id → published QI values}`` (Arrow tables), and ``"content"``: per cell, the keyed
    sums of the ``columns`` it publishes as they are and of its ``strata`` as published
    (:mod:`daskmicro.series.content`; none when ``columns`` is None).  With ``link_key``, each
    record's link hash over ``columns`` (:mod:`daskmicro.series.link`) too."""
    import pyarrow as pa

    values = df[qi].to_numpy(np.float64, na_value=np.nan)
    ids = cell_ids(values)
    records = {"hi": df[fp_columns[0]].to_numpy(np.uint64), "lo": df[fp_columns[1]].to_numpy(np.uint64), "cell": ids}
    if columns and link_key is not None:
        from ..series.link import LINK, link_hashes

        records[LINK] = link_hashes(df, columns, link_key)
    records = pa.table(records)
    first = np.unique(ids, return_index=True)[1]
    cells = {"cell": ids[first]}
    cells.update({f"q{j}": values[first, j] for j in range(len(qi))})
    out = {"records": records, "cells": pa.table(cells)}
    if columns is not None:
        from ..series.content import content_table

        out["content"] = pa.table(content_table(df, ids, fp_columns, columns, strata))
    return out


def write_rows(stage, index: int, rows: dict) -> None:
    """Write a piece's :func:`ledger_rows` into the staging directory (idempotent: the same files
    again for the same piece), owner-only."""
    import pyarrow.parquet as pq

    folder = Path(stage)
    for name, table in rows.items():
        tmp = folder / f".{name}-{index:06d}.{uuid.uuid4().hex[:8]}"
        pq.write_table(table, tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, folder / f"{name}-{index:06d}.parquet")


def record_piece(df: pd.DataFrame, stage: str, index: int, qi: list, fp_columns, drop=(), columns=None,
                 strata=()) -> pd.DataFrame:
    """Write the ledger rows of one published release piece into the staging directory this
    process sees (a task's side effect, idempotent); returns the piece without its fingerprints
    (nor the other run-only columns in ``drop``).  ``columns``: those it publishes as they are;
    ``strata``: its stratum columns, as published."""
    write_rows(stage, index, ledger_rows(df, qi, fp_columns, columns, strata, _link_key(stage)))
    return df.drop(columns=[c for c in (*fp_columns, *drop) if c in df.columns])


def _link_key(stage):
    """The link hashes' key of the ledger holding a staging directory (``LEDGER/.stage-*``;
    None where there is no key: no link hash recorded, a later re-release treats it as no trace)."""
    from ..series.fingerprint import split_key
    from ..series.link import link_key

    key = read_key(Path(stage).parent / "key")
    return link_key(split_key(key)) if key is not None else None


def write_columns(stage, columns, carried=None) -> None:
    """Write, into a release's staging directory, the columns it publishes as they are and the sums
    it carries forward for the columns it leaves out (:func:`daskmicro.series.content.carried`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(stage)
    if carried is not None and len(carried):
        tmp = folder / f".content-carried.{uuid.uuid4().hex[:8]}"
        pq.write_table(pa.Table.from_pandas(carried, preserve_index=False), tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, folder / "content-carried.parquet")
    tmp = folder / f".columns.{uuid.uuid4().hex[:8]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"published": sorted(columns)}))
    os.replace(tmp, folder / "columns.json")


def read_key(path) -> bytes | None:
    """The secret of a ledger's key file (None where there is none)."""
    from ..errors import ParameterError

    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ParameterError(f"ledger (--ledger): its key is damaged (not one written by daskmicro): {path}") from None


@contextmanager
def _locked(root: Path):
    """The ledger's lock (``LEDGER/.lock``), held exclusively."""
    import fcntl

    with os.fdopen(os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass
class Ledger:
    """A ledger directory (owner-only; made when a run first keys anything with its secret)."""

    path: Path

    @classmethod
    def open(cls, path) -> "Ledger":
        """The ledger at ``path``, read only: nothing is made here."""
        p = Path(path).expanduser()
        if p.exists() and not p.is_dir():
            from ..errors import ParameterError

            raise ParameterError(f"ledger (--ledger): not a directory: {p}")
        return cls(p)

    def secret(self) -> bytes | None:
        """The ledger's secret, None while it has none (no release recorded yet).  A ledger holding
        releases without their key is refused: their records could not be recognised again."""
        key = read_key(self.path / "key")
        if key is None and any(self.path.glob("series/*/r[0-9]*")):
            from ..errors import ParameterError

            raise ParameterError(f"ledger (--ledger): it holds releases but not their key ({self.path / 'key'}): "
                                 "records published before could not be recognised; restore the key")
        return key

    def key(self) -> bytes:
        """The ledger's secret, made now (with the ledger's directory) if it has none.  Made under the
        ledger's lock and written whole before it takes its name: a run that reads it reads the one
        secret every run keys with."""
        from .journal import fsync_dir

        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.path, 0o700)
        path = self.path / "key"
        with _locked(self.path):
            found = read_key(path)
            if found is not None:
                return found
            secret = secrets.token_bytes(_KEY_BYTES)
            tmp = self.path / f".key.{uuid.uuid4().hex[:8]}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secret.hex())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            fsync_dir(self.path)
        return secret

    def series(self, qi, strata, id_column) -> tuple:
        """(folder, description) of a series; the folder is made when its first release is recorded."""
        desc = {"qi": list(qi), "strata": list(strata), "id_column": id_column}
        sid = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
        return self.path / "series" / sid, desc

    def stage(self) -> Path:
        """A staging directory for a release's pieces (the ledger's key made first: :meth:`key`),
        with an owner file naming this process; the staging directories of runs that died (killed
        before they could remove theirs) are removed first (:meth:`sweep`)."""
        self.sweep()
        stage = self.path / f".stage-{uuid.uuid4().hex}"
        stage.mkdir(mode=0o700)
        (stage / OWNER).write_text(json.dumps(owner_record()), encoding="utf-8")
        return stage

    def sweep(self) -> list:
        """Remove the staging directories whose run is gone (:func:`~daskmicro.io.recovery.sweep_owned`);
        returns the names removed."""
        return sweep_owned(p for p in self.path.glob(".stage-*") if _stage_name(p.name))

    def overlapping(self, qi, folder: Path) -> list:
        """Other series of this ledger holding releases whose QIs share a column with ``qi``: their
        QI lists (the same people released with other QIs could be intersected)."""
        out = []
        for other in sorted((self.path / "series").glob("*/series.json")):
            if other.parent == folder or not self.releases(other.parent):
                continue
            desc = json.loads(other.read_text())
            if set(desc.get("qi", ())) & set(qi):
                out.append(list(desc["qi"]))
        return out

    @staticmethod
    def releases(folder: Path) -> list:
        return sorted(p for p in folder.glob("r[0-9]*") if p.is_dir())

    @staticmethod
    def load(folder: Path, qi):
        """The frozen cells of a series (:class:`daskmicro.series.frozen.Frozen`): each fingerprint's
        cell in the latest release holding it (the last row of that release holding it), and the
        published values of those cells.

        The releases are read newest first: an older release's fingerprints count only where no
        later release holds them (:func:`_newest_first`), and the cells are read from the releases
        that gave a fingerprint its cell, then from the others only while a cell is still missing.
        A series that republishes its records release after release is thus read in about the time
        of its last release plus one pass over the older releases' fingerprints."""
        import pyarrow.parquet as pq

        from ..series.fingerprint import FP_DTYPE
        from ..series.frozen import Frozen

        releases = Ledger.releases(folder)[::-1]
        hi, lo, cell, origin, rows, rows_lo = _newest_first(
            [[pq.read_table(f, columns=["hi", "lo", "cell"]) for f in sorted(r.glob("records-*.parquet"))]
             for r in releases])
        if not hi.size:
            return Frozen.empty(qi)
        gave = set(origin.tolist())   # the releases that gave a fingerprint its cell, read first
        cells = _cells_named(np.unique(cell), [releases[i] for i in sorted(gave)]
                             + [r for i, r in enumerate(releases) if i not in gave], len(qi))
        order = np.lexsort((lo, hi))
        fps = np.empty(hi.size, FP_DTYPE)
        fps["hi"], fps["lo"] = hi[order], lo[order]
        numbers = np.array([int(r.name[1:]) for r in releases], np.int64)
        recorded, content = _content_of(releases, origin, cell)
        return Frozen(fps, cell[order], cells["cell"].to_numpy(np.uint64),
                      cells[[f"q{j}" for j in range(len(qi))]].to_numpy(np.float64), tuple(qi), rows, rows_lo,
                      numbers[origin[order]], content, recorded)

    @staticmethod
    def links(folder: Path, number: int, cells: np.ndarray):
        """The link hashes release ``number`` of a series recorded for the records of ``cells``
        (distinct; None when it recorded none: a ledger written before they were)."""
        import pyarrow.parquet as pq

        from ..series.link import LINK

        out = []
        for f in sorted((folder / f"r{number:06d}").glob("records-*.parquet")):
            if LINK not in pq.read_schema(f).names:
                return None
            t = pq.read_table(f, columns=["cell", LINK])
            keep = np.isin(t.column("cell").to_numpy().astype(np.uint64), cells)
            out.append(np.unique(t.column(LINK).to_numpy().astype(np.uint64)[keep]))
        return np.unique(np.concatenate(out)) if out else None

    @staticmethod
    def latest(folder: Path) -> int:
        """The number of the series' newest release (0 when it has none)."""
        done = Ledger.releases(folder)
        return int(done[-1].name[1:]) if done else 0

    @staticmethod
    def commit(folder: Path, stage: Path, after: int, alone=None, desc=None, secret=None) -> Path:
        """The staged pieces become the series' next release after release ``after`` — the newest
        one when the run read the series (one rename); the series' folder and its ``series.json``
        (``desc``) are made with its first release.  Refused, the stage removed, when another
        run recorded a release of the series since: this release was made from frozen cells that
        no longer hold every release, and both together could be intersected (two fresh
        aggregations of the same new records).  ``alone``: the QIs of a series this release
        starts, which no other series may share (:meth:`overlapping`): refused the same way when
        another run started one meanwhile.  ``secret``: the key the release was keyed with, refused
        unless it is the ledger's key on disk.  The checks and the claim hold the ledger's lock."""
        from ..errors import ParameterError
        from .journal import fsync_dir, fsync_tree

        (stage / OWNER).unlink(missing_ok=True)   # the release holds its pieces only (its stage now fresh: never swept)
        fsync_tree(stage)
        target = folder / f"r{after + 1:06d}"
        root = folder.parent.parent
        with _locked(root):
            refusal = _refusal(root, folder, alone, secret)
            if refusal is not None:
                Ledger.discard(stage)
                raise ParameterError(refusal)
            _made_series(folder, desc)
            try:
                os.mkdir(target, 0o700)   # the number claimed: one run only
            except FileExistsError:
                Ledger.discard(stage)
                raise ParameterError(
                    "ledger (--ledger): another release of this series was recorded while this one ran; this release "
                    "was made without it, and the two could be compared to give records back: nothing was written "
                    "or recorded; run it again (one release of a series at a time)") from None
            os.rename(stage, target)   # onto the empty directory just claimed
        for d in (folder, folder.parent, root):
            fsync_dir(d)
        return target

    @staticmethod
    def discard(stage) -> None:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def _refusal(root: Path, folder: Path, alone, secret) -> str | None:
    """Why a release may not be recorded now (:meth:`Ledger.commit`, under the ledger's lock), or None."""
    if secret is not None and read_key(root / "key") != secret:
        return ("ledger (--ledger): its key is not the one this release was keyed with (it was replaced or removed "
                f"while this run ran: {root / 'key'}): nothing was written or recorded; run it again")
    if alone is not None and Ledger(root).overlapping(alone, folder):
        return ("ledger (--ledger): another run recorded a release with other QIs, strata or id column sharing QI "
                "columns with these while this one ran; the two could be intersected: nothing was written or "
                "recorded; run it again (it is then refused unless --new-series)")
    return None


def _made_series(folder: Path, desc) -> None:
    """A series' folder, with its ``series.json`` (``desc``) where it has none (owner-only)."""
    for d in (folder.parent, folder):
        d.mkdir(exist_ok=True, mode=0o700)
        os.chmod(d, 0o700)
    if desc is None or (folder / "series.json").is_file():
        return
    tmp = folder / f".series.{uuid.uuid4().hex[:8]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(desc, indent=1))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / "series.json")


def _last_rows(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Mask of the last row of each fingerprint (hi, lo) among these rows."""
    twice = pd.Index(hi).duplicated(keep=False)   # hashed on the first 64 bits; exact below
    keep = ~twice
    if twice.any():
        rows = np.flatnonzero(twice)
        sub = pd.DataFrame({"hi": hi[rows], "lo": lo[rows]})
        keep[rows[~sub.duplicated(["hi", "lo"], keep="last").to_numpy()]] = True
    return keep


def _found(hi: np.ndarray, lo: np.ndarray, kept_hi: np.ndarray, kept_lo: np.ndarray, index) -> np.ndarray:
    """Mask of the fingerprints (hi, lo) among the kept ones (each kept fingerprint once);
    ``index``: ``pd.Index(kept_hi)``, kept by the caller between releases."""
    if not kept_hi.size:
        return np.zeros(hi.size, bool)
    if index.is_unique:
        pos = index.get_indexer(hi)
        found = pos >= 0
        found[found] = kept_lo[pos[found]] == lo[found]
        return found
    # two kept fingerprints share their first 64 bits: look up on all 128
    pos = pd.MultiIndex.from_arrays([kept_hi, kept_lo]).get_indexer(pd.MultiIndex.from_arrays([hi, lo]))
    return pos >= 0


def _newest_first(releases: list) -> tuple:
    """(hi, lo, cell, release, rows, rows_lo) of every fingerprint of ``releases`` (each a list of Arrow
    tables of hi, lo, cell; newest release first): its row in the newest release holding it, the
    last such row; ``release`` is that release's position in the list; ``rows``: the cell of every
    row of the newest release holding each fingerprint (records with the same fingerprint — equal
    stratum and QIs, or a repeated id — are several rows, possibly of several cells) and the second
    half of each such row's fingerprint."""
    hi = np.empty(0, np.uint64)
    lo, cell, origin, rows, rows_lo = hi.copy(), hi.copy(), np.empty(0, np.int64), hi.copy(), hi.copy()
    index = pd.Index(hi)   # of the kept fingerprints' first 64 bits, rebuilt when some are added
    for i, tables in enumerate(releases):
        if not tables or not sum(t.num_rows for t in tables):
            continue
        h, l, c = (np.concatenate([t.column(name).to_numpy() for t in tables]).astype(np.uint64, copy=False)
                   for name in ("hi", "lo", "cell"))
        fresh = ~_found(h, l, hi, lo, index)
        rows, rows_lo = np.concatenate([rows, c[fresh]]), np.concatenate([rows_lo, l[fresh]])
        new = _last_rows(h, l) & fresh
        if new.any():
            hi, lo, cell = np.concatenate([hi, h[new]]), np.concatenate([lo, l[new]]), np.concatenate([cell, c[new]])
            origin = np.concatenate([origin, np.full(int(new.sum()), i, np.int64)])
            index = pd.Index(hi)
    return hi, lo, cell, origin, rows, rows_lo


def _cells_named(wanted: np.ndarray, releases: list, m: int) -> pd.DataFrame:
    """The cells ``wanted`` (sorted uint64 ids), one row each in id order, read from ``releases``
    in the order given until every one is found (each cell's values from the first release read
    that holds it; a cell's published values never change)."""
    import pyarrow.parquet as pq

    got, have = [], np.empty(0, np.uint64)
    for r in releases:
        if have.size == wanted.size:
            break
        for f in sorted(r.glob("cells-*.parquet")):
            t = pq.read_table(f).to_pandas()
            ids = t["cell"].to_numpy(np.uint64)
            take = np.isin(ids, wanted) & ~np.isin(ids, have)
            if take.any():
                t = t[take].drop_duplicates("cell")
                got.append(t)
                have = np.union1d(have, t["cell"].to_numpy(np.uint64))
    if not got:
        return pd.DataFrame({"cell": np.empty(0, np.uint64), **{f"q{j}": np.empty(0) for j in range(m)}})
    return pd.concat(got, ignore_index=True).sort_values("cell", kind="stable")


def _content_of(releases: list, origin: np.ndarray, cell: np.ndarray) -> tuple:
    """Of each release that is the latest holding some fingerprint (``origin``: positions in
    ``releases``, ``cell``: each fingerprint's cell there): the columns it published as they are
    (None where it recorded none: a ledger written before they were recorded), and the sums it
    recorded for those cells (:data:`daskmicro.series.content.LONG`)."""
    import pyarrow.parquet as pq

    from ..series.content import aggregate, empty_long, long_form

    recorded, frames = {}, []
    for i in np.unique(origin):
        r = releases[int(i)]
        number = int(r.name[1:])
        meta = r / "columns.json"
        recorded[number] = json.loads(meta.read_text())["published"] if meta.is_file() else None
        wanted = np.unique(cell[origin == i])
        for f in sorted(r.glob("content-*.parquet")):
            t = pq.read_table(f).to_pandas()
            t = t[np.isin(t["cell"].to_numpy(np.uint64), wanted)]
            if len(t):
                frames.append(long_form(t, number))
    if not frames:
        return recorded, empty_long()
    return recorded, aggregate(pd.concat(frames, ignore_index=True))


def _stage_name(name: str) -> bool:
    """Whether ``name`` is one :meth:`Ledger.stage` makes: ``.stage-`` and 32 hex digits."""
    rest = name[len(".stage-"):]
    return name.startswith(".stage-") and len(rest) == 32 and all(ch in "0123456789abcdef" for ch in rest)
