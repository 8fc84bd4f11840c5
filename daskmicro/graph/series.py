"""The release ledger in a run's graph: fingerprints in, frozen cells looked up, pieces recorded.

Thin Dask wiring around :mod:`daskmicro.series` (fingerprints, frozen cells) and
:mod:`daskmicro.io.ledger` (the ledger's files).  Every input piece gets its records' keyed
fingerprints on the worker that reads it, and every published piece writes its ledger rows from
the task that builds it.  In a re-release (the series has records), for each group with records
published before:

1. every piece counts, on its worker, the group's new records and its records per frozen cell
   (the frozen cells are sent to every worker once), and sums the values of the columns published
   as they are of its records published before, which the client compares with those recorded
   (:mod:`daskmicro.series.content`);
2. the client merges the frozen cells below k (counts and published values only), and refuses
   the re-release when a group would grow by 1 to k − 1 new records, when part of a published
   cell is missing, or when its records published before are fewer than k in all;
3. every piece publishes its records of frozen cells with the frozen values, on its worker; the
   group's new records run the group's method as any group does — one task, or the partitioned
   pipeline — on their own, forming cells of at least k.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..io.ledger import Ledger, ledger_rows, record_piece, write_columns, write_rows
from ..io.source import RID
from ..kernels.moments import combine_moments
from ..release.publish import replace_qi
from ..runplan import GroupResult
from ..series.content import carried, check_content, compared_entries, now_sums, passed_through, scan_content
from ..series.fingerprint import FP, fingerprints, split_key, with_fingerprints
from ..series.frozen import (CELL, Frozen, GroupFreeze, check_growth, check_whole_cells, classify, frozen_rows,
                              merge_cells, scan_group)
from ..series.link import check_links, held_links, link_key, link_sets, missing_records, scan_links
from ..strata import group_mask, group_rows, publish_strata, rows_mask
from .local import Done

__all__ = ["SeriesRun", "published", "survey_links", "discarded_on_failure", "series_report", "fingerprinted", "recorded", "plan_groups", "new_selection", "frozen_pieces", "new_sse",
           "group_result"]


@dataclass
class SeriesRun:
    """A run's side of its ledger series: hashing keys, fingerprint columns, frozen cells, and the
    staging directory its pieces are recorded into.  The keys and the stage are None until the run
    first keys anything with the ledger's secret (:meth:`keyed`)."""

    keys: tuple | None
    columns: list
    frozen: Frozen
    stage: Path | None
    new_series: bool
    pending: list = field(default_factory=list)   # (piece, future of its ledger rows) not yet collected
    published: list | None = None   # the columns the release publishes as they are (None: not known)
    carried: object = None          # the sums it carries forward for the columns it leaves out
    after: int = 0                  # the series' newest release when the run read it
    alone: list | None = None       # the QIs of a series it starts, which no other series may share
    strata: list = field(default_factory=list)   # the release's strata (partition columns included)
    labels: dict = field(default_factory=dict)   # how its merged strata are published (strata.merged_labels)
    ledger: Ledger | None = None    # the ledger, and the series' folder and description in it
    folder: Path | None = None
    desc: dict | None = None
    secret: bytes | None = None     # the ledger's secret (None: it had none when the run read it)

    @property
    def rerelease(self) -> bool:
        return len(self.frozen) > 0 and not self.new_series

    def keyed(self, plan):
        """``plan`` with the release's row order keyed by the ledger's secret (:meth:`RunPlan.keyed_order`),
        this run's hashing keys and its staging directory: the secret made now where the ledger has
        none, or read where another run made it meanwhile (:meth:`Ledger.key`).  Called where the run
        first keys anything, after every check it makes before reading its records whole: a run
        refused before leaves the ledger as it was."""
        from ..errors import ParameterError, describe

        try:
            secret = self.ledger.key()
            if self.secret is not None and secret != self.secret:
                raise ParameterError("ledger (--ledger): its key was replaced while this run ran: "
                                     f"{self.ledger.path / 'key'}; nothing was written or recorded")
            self.stage = self.ledger.stage()
        except OSError as exc:
            raise ParameterError(f"ledger (--ledger): cannot use {self.ledger.path}: {describe(exc)}") from None
        self.secret, self.keys = secret, split_key(secret)
        return plan.keyed_order(self.keys)

    def collect(self) -> None:
        """Write the ledger rows that workers sharing no disk with the client sent back
        (:func:`recorded`), one piece at a time; a failed task fails the run before anything is
        committed."""
        for index, future in self.pending:
            write_rows(self.stage, index, future.result())
            future.release()
        self.pending = []

    def commit(self) -> None:
        """The verified release's pieces become a release of the ledger, with the columns it
        published as they are (a release that does not know them is recorded without, and its
        cells cannot be re-released with such columns); refused unless the ledger's key on disk is
        the one the release was keyed with."""
        if self.published is not None:
            write_columns(self.stage, self.published, self.carried)
        Ledger.commit(self.folder, self.stage, self.after, self.alone, self.desc, self.secret)

    def discard(self) -> None:
        Ledger.discard(self.stage)


@contextmanager
def discarded_on_failure(series):
    """The ledger's staged pieces are removed when the run fails (``series`` None: a trial run)."""
    try:
        yield
    except BaseException:
        if series is not None:
            series.discard()
        raise


def published(columns, qi, strata, hidden) -> list:
    """The input's columns a release publishes as they are: neither QIs (frozen values), strata
    (part of every fingerprint) nor withheld; their values of every published cell are compared
    and recorded (:mod:`daskmicro.series.content`)."""
    return passed_through(columns, [*qi, *strata, *hidden, RID])


def series_report(series, infos) -> dict:
    """The report's ``series`` section: counts only."""
    if series is None:
        return {"recorded": False}
    counts = ("republished", "new", "merged_cells", "new_cells")
    out = {"recorded": True, "new_series": bool(series.new_series), **dict.fromkeys(counts, 0)}
    for info in infos:
        for key, value in (getattr(info, "series", None) or {}).items():
            if key in counts:
                out[key] += int(value)
    return out


def fingerprinted(client, pieces, sr: SeriesRun, qi, frozen_future=None) -> list:
    """The pieces with their records' fingerprints — and, in a re-release, their frozen cells: found
    once per piece on its worker and held there (24 bytes a record), joined to the piece wherever
    it is read again."""
    import dask

    if frozen_future is None:
        add = dask.delayed(with_fingerprints, pure=True)
        return [add(p, sr.columns, sr.keys) for p in pieces]
    look = dask.delayed(_classify_piece, pure=True)
    held = client.compute([look(p, sr.columns, sr.keys, tuple(qi), frozen_future) for p in pieces])
    held = [h.result() if isinstance(h, Done) else h for h in held]   # in process: the values themselves
    attach = dask.delayed(_attach, pure=True)
    return [attach(p, h) for p, h in zip(pieces, held)]


def _classify_piece(df, columns, keys, qi, frozen):
    fp = fingerprints(df, columns, keys)
    keyed = pd.DataFrame({FP[0]: fp["hi"], FP[1]: fp["lo"]})
    keyed[list(qi)] = df[list(qi)].to_numpy(np.float64, na_value=np.nan)
    return fp["hi"], fp["lo"], classify(keyed, tuple(qi), frozen)


def _attach(df, held):
    out = df.copy()
    out[FP[0]], out[FP[1]], out[CELL] = held
    return out


def recorded(releases, sr: SeriesRun, client, qi) -> list:
    """Every published piece's ledger rows, and the piece without its fingerprints.  Where every
    worker sees the ledger's staging directory (this process, a cluster on one machine or a
    shared disk), the piece's own task writes them.  Else (workers that share no disk with the
    client) a task of their own returns them, for :meth:`SeriesRun.collect` to write here; the
    pieces are then computed as futures, so that they are computed once for both."""
    import dask
    from dask.delayed import Delayed

    stage = str(sr.stage)
    if all(client.run(os.path.isdir, stage).values()):
        rec = dask.delayed(record_piece, pure=True)
        return [rec(r, stage, i, list(qi), FP, (CELL,), sr.published, sr.strata) if isinstance(r, Delayed)
                else client.submit(record_piece, r, stage, i, list(qi), FP, (CELL,), sr.published, sr.strata)
                for i, r in enumerate(releases)]
    out = []
    for i, r in enumerate(releases):
        r = client.compute(r) if isinstance(r, Delayed) else r
        sr.pending.append((i, client.submit(ledger_rows, r, list(qi), FP, sr.published, sr.strata,
                                            link_key(sr.keys))))
        out.append(client.submit(_without, r, (*FP, CELL)))
    return out


def _without(df, columns):
    return df.drop(columns=[c for c in columns if c in df.columns])


# --------------------------------------------------------------------------- per piece


def _scan_piece(df, groups, strata, qi, frozen, entries, labels, link):
    """One input piece's share of every group (by group index), its sums of the columns
    published as they are and of its strata as published (``labels``: merged strata) over its
    records published before (:func:`scan_content`), and the link hashes of its new records
    (``link``: the column sets and key, :func:`scan_links`; None: none)."""
    out, by_index = {}, dict(groups)
    for i, rows in group_rows(df, strata, list(qi), groups).items():
        out[i] = scan_group(df[rows_mask(len(df), rows)], list(by_index[i].observed), tuple(qi), frozen)
    links = {}
    if link is not None and link[0]:
        cell = df[CELL].to_numpy(np.uint64) if CELL in df.columns else classify(df, tuple(qi), frozen)
        links = scan_links(df, cell, *link)
    return out, scan_content(publish_strata(df, strata, labels), tuple(qi), frozen, entries), links


def _select_new(df, g, strata, qi, frozen):
    from ..series.frozen import NONE, known_cells

    sub = df[group_mask(df, strata, list(qi), g)]
    return sub[known_cells(sub, list(g.observed), tuple(qi), frozen) == NONE]


def _frozen_stats(df, freezes, strata, qi, frozen):
    """One piece's share of each re-released group: records per root cell, records published before,
    SSE in the group's z-units."""
    partials = {}
    found = group_rows(df, strata, list(qi), [(gf.index, gf.group) for gf in freezes])
    for gf in freezes:
        if gf.index not in found:
            continue
        rows, values, roots, _, known = frozen_rows(df, gf, rows_mask(len(df), found[gf.index]), tuple(qi), frozen)
        if not len(rows):
            continue
        observed = list(gf.group.observed)
        X = df[observed].to_numpy(np.float64)[rows]
        z = ((X - values) / gf.sd)[:, ~gf.constant]
        partials[gf.index] = {"roots": np.bincount(roots, minlength=len(gf.roots)), "sse": float(np.sum(z * z)),
                              "known": known}
    return partials


def _frozen_frame(df, freezes, strata, qi, frozen):
    """One piece's records published before, published with their frozen values."""
    frames = []
    found = group_rows(df, strata, list(qi), [(gf.index, gf.group) for gf in freezes])
    for gf in freezes:
        if gf.index not in found:
            continue
        rows, values, _, _, _ = frozen_rows(df, gf, rows_mask(len(df), found[gf.index]), tuple(qi), frozen)
        if len(rows):
            frames.append(replace_qi(df.iloc[rows], list(gf.group.observed), values)[0])
    return pd.concat(frames, ignore_index=True) if frames else df.iloc[:0]


def _sse_new(release, observed, mean, sd, constant, *parts):
    """SSE (the group's z-units) of a group's new records, their published values joined by row id."""
    original = pd.concat(parts, ignore_index=True)[[RID] + observed]
    joined = original.merge(release[[RID] + observed], on=RID, suffixes=("", "__published"))
    X = joined[observed].to_numpy(np.float64)
    P = joined[[f"{c}__published" for c in observed]].to_numpy(np.float64)
    z = ((X - P) / sd)[:, ~constant]
    return float(np.sum(z * z))


# --------------------------------------------------------------------------- the client's part


def plan_groups(client, pieces, plans, strata, qi, k, series: SeriesRun, frozen_future) -> dict:
    """For each group with records published before, its :class:`GroupFreeze` (by group index).
    Every piece is scanned once, on its worker, before any work: the re-release is refused here if
    a published cell is not whole, a group grows by fewer than k, or a published cell's columns
    published as they are changed (:func:`check_content`)."""
    import dask

    frozen = series.frozen
    groups = [(i, gp.group) for i, gp in enumerate(plans)]   # all-missing ones counted too: checked, not frozen
    entries = compared_entries(frozen, series.published or [], series.strata)
    link = _link_args(series, qi)
    scan = dask.delayed(_scan_piece, pure=True)
    both = client.gather(client.compute([scan(p, groups, strata, tuple(qi), frozen_future, entries, series.labels,
                                              link) for p in pieces]))
    scans = [s for s, _, _ in both]
    found = [s[i] for s in scans for i, _ in groups if i in s]
    cells = np.concatenate([f["cells"] for f in found]) if found else np.empty(0, np.uint64)
    check_whole_cells(frozen, cells, np.concatenate([f["counts"] for f in found]) if found else np.empty(0, np.int64),
                      np.concatenate([f["sums"] for f in found]) if found else np.empty(0, np.uint64))
    if link is not None:
        _check_links(series, cells, sum(p["new"] for p in found), [lk for _, _, lk in both])
    present, now = now_sums([c for _, c, _ in both], entries)
    check_content(frozen, present, now, series.published or [])
    out = _freezes(scans, groups, qi, k, frozen)
    merged = [gf.cells for gf in out.values()]
    series.carried = carried(frozen, present, np.concatenate(merged) if merged else np.empty(0, np.uint64),
                             np.concatenate([gf.cells[gf.roots] for gf in out.values()]) if merged
                             else np.empty(0, np.uint64), series.published or [], series.strata)
    return out


def _link_args(series: SeriesRun, qi):
    """What the pieces' scans need to hash their new records' rows (:func:`scan_links`): None in a
    series identified by an id column (a record whose QIs were revised keeps its fingerprint), or
    one publishing no column as it is."""
    if not series.published or not set(qi) <= set(series.columns):
        return None
    return link_sets(series.frozen, series.published), link_key(series.keys)


def _check_links(series: SeriesRun, present: np.ndarray, new: int, parts: list) -> None:
    """Refuse a re-release whose new records could be linked to the records of published cells
    now missing by their rows of the columns published as they are (:func:`check_links`)."""
    missing = missing_records(series.frozen, present)
    if not new or not missing:
        return
    hashes = {}
    for part in parts:
        for columns, h in part.items():
            hashes[columns] = np.union1d(hashes.get(columns, np.empty(0, np.uint64)), h)
    folder = series.folder
    check_links(series.frozen, missing, series.published, new, hashes,
                lambda number, cells: Ledger.links(folder, number, cells))


def survey_links(series: SeriesRun, qi, n: int):
    """What the pieces of an incremental survey of ``n`` records compare their rows with: (the
    link hashes of the series' records per column set, their key, the published groups), or None.
    A survey holds no record published before in its series (each piece refuses one), so every
    published cell is missing from it, and a record whose QIs were revised would be one of its new
    records (:func:`check_links`); refused here when the rows cannot be compared."""
    args = _link_args(series, qi)
    if args is None or series.new_series or not len(series.frozen):
        return None
    missing = missing_records(series.frozen, np.empty(0, np.uint64))
    if not missing:
        return None
    folder, read_ = series.folder, {}

    def read(number, cells):
        if number not in read_:
            read_[number] = Ledger.links(folder, number, cells)
        return read_[number]

    check_links(series.frozen, missing, series.published, n, {}, read)   # rows that cannot be compared
    return held_links(series.frozen, missing, read), args[1], sum(len(c) for c in missing.values())


def _freezes(scans, groups, qi, k, frozen) -> dict:
    """Every group's :class:`GroupFreeze` from the pieces' scans (the growth rule checked)."""
    out = {}
    for i, g in groups:
        parts = [s[i] for s in scans if i in s]
        cells = np.concatenate([p["cells"] for p in parts]) if parts else np.empty(0, np.uint64)
        if not g.observed:   # published as they are: only whole cells and ≥ k new records
            check_growth(g.label, k, sum(p["new"] for p in parts), None)
            continue
        if not len(cells):
            continue   # nothing published before: the group runs as in a first release
        counts = np.concatenate([p["counts"] for p in parts])
        cells, inv = np.unique(cells, return_inverse=True)
        counts = np.bincount(inv, weights=counts, minlength=len(cells)).astype(np.int64)
        mo = combine_moments([p["moments"] for p in parts])
        mean, sd = mo.mean, mo.std()
        constant = mo.constant | ~(sd > 0)
        sd = np.where(constant, 1.0, sd)
        cols = [list(qi).index(c) for c in g.observed]
        values = frozen.cell_values(cells)[:, cols]
        roots, size = merge_cells(values, counts, k, mean, sd)
        new = sum(p["new"] for p in parts)
        alive = np.flatnonzero(roots == np.arange(len(roots)))
        check_growth(g.label, k, new, int(size[alive].sum()) if len(alive) == 1 and size[alive[0]] < k else None)
        out[i] = GroupFreeze(index=i, group=g, cells=cells, roots=roots, values=values, mean=mean, sd=sd,
                             constant=constant, new=new)
    return out


def new_selection(pieces, gf: GroupFreeze, strata, qi, frozen_future):
    """The pieces of a group's new records that form cells of their own, and the group with their count."""
    import dask

    sel = dask.delayed(_select_new, pure=True)
    return [sel(p, gf.group, strata, tuple(qi), frozen_future) for p in pieces], replace(gf.group, n=gf.new)


def frozen_pieces(client, pieces, freezes: dict, strata, qi, frozen_future):
    """Per piece: its published records of frozen cells (lazy: built where they are written), and
    the groups' counts from every piece (computed now)."""
    import dask

    [decided] = client.scatter([list(freezes.values())], broadcast=True)
    stats = dask.delayed(_frozen_stats, pure=True)
    partials = client.gather(client.compute([stats(p, decided, strata, tuple(qi), frozen_future)
                                             for p in pieces]))
    frame = dask.delayed(_frozen_frame, pure=True)
    return [frame(p, decided, strata, tuple(qi), frozen_future) for p in pieces], partials


def new_sse(client, release_parts, gf: GroupFreeze, sel):
    """Futures of the SSE of a group's new records (one per release part; a one-task group has one)."""
    from dask.delayed import Delayed

    observed = list(gf.group.observed)
    if all(isinstance(r, Delayed) for r in release_parts) and len(release_parts) == len(sel):
        return [client.compute(_delayed_sse(r, observed, gf, s)) for r, s in zip(release_parts, sel)]
    [release] = release_parts   # one task: one part
    return [client.submit(_sse_new, release, observed, gf.mean, gf.sd, gf.constant, *client.compute(sel))]


def _delayed_sse(release, observed, gf, sel_piece):
    import dask

    return dask.delayed(_sse_new, pure=True)(release, observed, gf.mean, gf.sd, gf.constant, sel_piece)


def group_result(gf: GroupFreeze, partials: list, new_info, sse_new: float, dtypes: dict) -> GroupResult:
    """One re-released group's figures: its frozen cells and the cells of its new records."""
    from ..kernels import figures as kf

    mine = [p[gf.index] for p in partials if gf.index in p]
    roots = np.sum([p["roots"] for p in mine], axis=0) if mine else np.zeros(len(gf.roots), np.int64)
    used = gf.values[gf.alive[roots[gf.alive] > 0]]
    sizes = roots[gf.alive]
    sizes = sizes[sizes > 0]
    counts = {int(s): int(c) for s, c in zip(*np.unique(sizes, return_counts=True))}
    if new_info is not None:
        for s, c in new_info.cell_size_counts.items():
            counts[int(s)] = counts.get(int(s), 0) + int(c)
    n = gf.group.n
    m_var = int(np.sum(~gf.constant))
    sse = sum(p["sse"] for p in mine) + sse_new
    il = 100.0 * sse / (n * m_var) if m_var else 0.0
    observed = list(gf.group.observed)
    # the bins' range of the release figures: the frozen values published and the new cells' range
    figures = [(tuple(observed), kf.value_range(used))] + list((new_info.figures or []) if new_info is not None else [])
    republished = int(sum(p["known"] for p in mine))
    return GroupResult(
        n=n, m_used=m_var, method=new_info.method if new_info is not None else "frozen",
        cells=int(sum(counts.values())), min_cell_size=min(counts), max_cell_size=max(counts), cell_size_counts=counts,
        information_loss=il, seconds=new_info.seconds if new_info is not None else 0.0,
        constant_columns=[c for c, v in zip(observed, gf.constant) if v],
        dtype_changes={c: {"from": str(dtypes[c]), "to": "float64"} for c in observed
                       if not pd.api.types.is_float_dtype(dtypes[c])},
        figures=figures,
        series={"republished": republished, "new": n - republished, "frozen_cells": int(len(sizes)),
                "merged_cells": int(len(gf.roots) - len(gf.alive)),
                "new_cells": int(new_info.cells) if new_info is not None else 0})
