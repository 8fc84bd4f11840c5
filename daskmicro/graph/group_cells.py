"""Every group's cells (:mod:`daskmicro.graph.executor`): one task for a small group, the
partitioned pipeline (:func:`daskmicro.graph.pipeline.run_pipeline`) for a large one.

Small groups share tasks.  A run with many strata (or missingness patterns) has many small
groups; selecting each group from every piece of the input would cost pieces × groups tasks, each
reading a whole piece.  Instead each piece is split once, on its worker, by a group code per
record — the grouping the pre-scan counted (:func:`daskmicro.strata.group_codes`) — into the
*batches* of the groups it holds: consecutive groups in key order, up to :data:`BATCH_ROWS`
records each.  A batch is one task that forms its groups' cells one after another, each group on
its own records in global row id order, exactly as a task of its own would.  Tasks and transfers
grow with pieces × batches, and only the pieces that hold a batch's groups (the pre-scan's counts
say which) send it anything.  In a re-release a group's new records are batched the same way
(its records published before keep their frozen cells, :mod:`daskmicro.graph.series`).
"""

from __future__ import annotations

import functools
import operator
import uuid
from dataclasses import replace

import numpy as np
import pandas as pd

from ..io.qi import qi_frame_matrix
from ..io.source import RID
from ..release.publish import canonical_values
from ..runplan import GroupResult
from ..strata import group_codes, group_mask, publish_strata, rows_by_code
from .improve_stage import stage_figures

__all__ = ["BATCH_ROWS", "form_cells", "split_piece", "run_batch"]

#: Small groups run together in tasks of up to this many records (a group of more runs alone).
BATCH_ROWS = 20_000


def _select(df, strata, qi, group):
    return df[group_mask(df, strata, qi, group)]


def _run_one_task(gp, qi, *parts):
    """One group as one task (its :class:`~daskmicro.runplan.GroupPlan`), records in global row id
    order (independent of the chunking); its info holds the range of the published values of the
    QI columns ``qi`` (the bins of the report's release figures)."""
    df = pd.concat(parts, ignore_index=True).sort_values(RID, kind="stable").reset_index(drop=True)
    return _one_group(df, gp, qi)


def _one_group(df, gp, qi):
    from ..release.run_figures import group_range
    from .group_task import one_task

    out, info = one_task(df, gp)
    return out, replace(info, figures=[group_range(out, qi)])


def split_piece(df: pd.DataFrame, strata: list, qi: list, spec, frozen=None) -> dict:
    """One piece cut by batch: ``{batch: (its records, their group positions)}``.  ``spec`` is
    ``(where, batch_of, fresh)``: the group position of each (stratum key tuple, pattern) that is
    batched, the batch of each group position (−1: not batched), and the observed QIs of each
    group of a re-release whose new records only are batched (``frozen``: the series' frozen
    cells, which hold its records published before)."""
    from ..series.frozen import NONE, known_cells

    where, batch_of, fresh = spec
    codes = group_codes(df, strata, qi, where)
    held = np.unique(batch_of[codes[codes >= 0]])   # every batch this piece holds a group of gets a part
    if fresh:
        for i, rows in rows_by_code(codes).items():
            if i in fresh:   # records published before keep their frozen cells: not this group's task
                codes[rows[known_cells(df.iloc[rows], fresh[i], tuple(qi), frozen) != NONE]] = -1
    found = rows_by_code(np.where(codes >= 0, batch_of[np.maximum(codes, 0)], -1))
    empty = np.zeros(0, dtype=np.int64)   # (a re-release's part may be empty: its records all published before)
    return {b: (df.iloc[found.get(b, empty)], codes[found.get(b, empty)]) for b in held.tolist()}


def run_batch(gps: list, positions: list, qi: list, units: dict, *parts):
    """The cells of a batch of groups (their plans ``gps``, at group ``positions``, ascending) from
    the pieces' ``(records, group positions)`` parts: (their release, (one figures entry per group —
    None for a group with no observed QI, whose records pass through —, the SSE of each group of
    ``units``, ``{position: (mean, sd, constant)}`` of a re-release's group, in its z-units)))."""
    from .group_task import batch_task

    df = pd.concat([p[0] for p in parts], ignore_index=True)
    codes = np.concatenate([p[1] for p in parts])
    order = np.lexsort((df[RID].to_numpy(), codes))   # by group, then global row id
    df, codes = df.take(order).reset_index(drop=True), codes[order]
    spans = list(zip(np.searchsorted(codes, positions, "left").tolist(),
                     np.searchsorted(codes, positions, "right").tolist()))
    for gp, (a, b) in zip(gps, spans):
        if b - a != gp.group.n:
            raise RuntimeError(f"{gp.group.label}: {b - a} records found where the pre-scan counted {gp.group.n}")
    out, infos = batch_task(df, spans, gps, qi)
    sses = {}
    if units:
        from ..release.run_figures import published_matrix

        for gp, i, (a, b) in zip(gps, positions, spans):
            if i in units:
                mean, sd, constant = units[i]
                obs = list(gp.group.observed)
                z = (qi_frame_matrix(df.iloc[a:b], obs) - published_matrix(out.iloc[a:b], obs)) / sd
                sses[i] = float(np.sum(z[:, ~constant] ** 2))
    return out, (infos, sses)


def _selection(pieces, held, i, group, strata, qi, n) -> list:
    """Group ``i``'s records, lazily: one delayed selection per piece that holds some of them."""
    import dask

    if group.n == n:
        return list(pieces)
    select = dask.delayed(_select, pure=True)
    return [select(p, strata, qi, group) for p, h in zip(pieces, held) if i in h]


def _batches(plans: list, skip, n: int) -> list:
    """Group positions run in shared tasks, cut into batches (lists of positions)."""
    out, members, rows = [], [], 0
    for i, gp in enumerate(plans):
        g = gp.group
        if i in skip or g.n == n or (g.observed and not gp.one_task):
            continue
        if members and rows + g.n > BATCH_ROWS:
            out.append(members)
            members, rows = [], 0
        members.append(i)
        rows += g.n
    return out + ([members] if members else [])


def _run_batches(client, pieces, plans, batches, strata, qi, fresh, frozen):
    """Each batch as one task: (release futures, figures futures), one per batch.  ``pieces``: each
    input piece with the positions of the groups it holds.  ``fresh``: the
    :class:`~daskmicro.series.frozen.GroupFreeze` of each batched group of a re-release, whose
    new records only are batched (``frozen``: the series' frozen cells, on the workers)."""
    import dask

    batch_of = np.full(len(plans), -1, dtype=np.int64)
    where = {}
    for b, members in enumerate(batches):
        for i in members:
            batch_of[i] = b
            g = plans[i].group
            where.update({(key, g.pattern): i for key in g.strata})
    observed = {i: list(gf.group.observed) for i, gf in fresh.items()}
    # the constants by name: hashing them (thousands of groups' plans) would cost the client more than the tasks
    run = uuid.uuid4().hex
    spec = dask.delayed((where, batch_of, observed), name=f"batch-spec-{run}", traverse=False)
    split = dask.delayed(split_piece, pure=True)
    batch = dask.delayed(run_batch, pure=True)
    held = [h for _, h in pieces]
    splits = {j: split(p, strata, qi, spec, frozen if fresh else None) for j, (p, h) in enumerate(pieces)
              if any(batch_of[i] >= 0 for i in h)}
    tasks = []
    for b, members in enumerate(batches):
        mine = set(members)
        parts = [s[b] for j, s in splits.items() if mine & held[j]]
        units = {i: (fresh[i].mean, fresh[i].sd, fresh[i].constant) for i in members if i in fresh}
        gps = dask.delayed(([plans[i] for i in members], units), name=f"batch-plans-{run}-{b}", traverse=False)
        tasks.append(batch(gps[0], members, qi, gps[1], *parts))
    done = client.compute(tasks)
    return ([client.submit(operator.itemgetter(0), d) for d in done],
            [client.submit(operator.itemgetter(1), d) for d in done])


def _pipeline_group(client, gp, sel, meta, seed, progress):
    """A large group through the partitioned pipeline (its :class:`~daskmicro.runplan.GroupPlan`);
    (release pieces, figures of its cells)."""
    import dask.dataframe as dd

    from .pipeline import PipelineConfig, ReleaseOptions, run_pipeline

    g, m = gp.group, gp.method
    sub = dd.from_delayed(sel, meta=meta, verify_meta=False)
    # check=False: the group's release is not checked on its own; the run's release is, as published
    # (written files, or the collected frame, stratum columns included) before anything is committed
    cfg = PipelineConfig.from_settings(gp.pipeline, m, gp.k)
    pub, details = run_pipeline(client, sub, list(g.observed), cfg, ReleaseOptions(seed, figures=True, check=False),
                                progress, participation=gp.participation)
    reference_il = None
    if gp.reference_k is not None:  # asked for: the same pipeline at plain k
        plain_cfg = PipelineConfig.from_settings(gp.pipeline, m, gp.reference_k)
        _, plain = run_pipeline(client, sub, list(g.observed), plain_cfg, ReleaseOptions(seed, check=False))
        reference_il = plain["information_loss"]
    t = details.pop("timings")  # the run's timings hold them once (one timing model)
    pca = details.get("pca") or {}
    prob = details.get("probabilistic")
    partials = prob.pop("partials") if prob is not None else None
    info = GroupResult(
        n=details["n"], m_used=details["m_used"], method=m, cells=pub.cells, min_cell_size=pub.min_cell_size,
        max_cell_size=pub.max_cell_size, cell_size_counts=pub.cell_size_counts,
        information_loss=details["information_loss"],
        seconds=sum(t.get(s, 0.0) for s in ("top_level", "macroaggregation", "split", "fan_out", "refine", "improve",
                                            "cells")),
        constant_columns=details["constant_columns"], dtype_changes={}, n_components=pca.get("n_components"),
        eigenvalues=pca.get("eigenvalues"), pca_energy_loss=pca.get("energy_loss"),
        macrocell_sse=details["macrocell_sse"] if details["macrocells"] > 1 else None, nu=details["nu"],
        n_distal=details["distal_macrocells"], figures=details.pop("figures", None), pipeline=details,
        information_loss_at_k=reference_il, failure_partials=partials,
        expected_distortion=prob.get("expected_distortion") if prob is not None else None,
        improve=stage_figures(details.get("improve")))
    return pub.chunks, info  # per input chunk: the release stage cuts them into its pieces


def form_cells(client, source, plan, lay_, stage, series=None):
    """Every group's cells (``lay_``: the executor's layout of the run): one task for a small group
    (small groups share tasks, see the module docstring), the pipeline for a large one; in a
    re-release, the records published before keep their frozen cells and a group's new records
    run as a group of their own (:mod:`daskmicro.graph.series`).  Returns the release pieces
    (futures or delayed, still keyed by row id), the groups' figures, their inputs, the meta."""
    import dask
    from dask.delayed import Delayed

    from . import series as gs
    qi, strata, n = list(plan.qi), lay_.strata, lay_.n
    live = [i for i in range(len(source.files)) if lay_.rows[i]]
    pieces = [source.read_task(i, source.columns, int(lay_.row0s[i])) for i in live]
    held = [lay_.holds[i] for i in live]   # per piece: the positions of the groups it holds
    frozen, freezes = None, {}
    if series is not None:
        # a partition column is published as a stratum: a record that moved partition is another record
        series.columns = list(dict.fromkeys([*strata, *series.columns]))
        series.published, series.strata, series.labels = (gs.published(source.columns, qi, strata, plan.release.hidden),
                                                          strata, lay_.labels)
        frozen = client.scatter(series.frozen.for_workers(), broadcast=True) if series.rerelease else None
        pieces = gs.fingerprinted(client, pieces, series, qi, frozen)
        if frozen is not None:
            freezes = gs.plan_groups(client, pieces, lay_.plans, strata, qi, lay_.k, series, frozen)
    meta = client.compute(dask.delayed(operator.methodcaller("head", 0))(pieces[0])).result()
    plans, fresh = list(lay_.plans), {}
    for i, gf in freezes.items():   # a re-release's group: its new records form cells of their own
        if gf.new and gf.group.observed:
            new_plan = plan.group_plan(replace(gf.group, n=gf.new), lay_.k)   # the method at their count
            if new_plan.one_task:
                plans[i], fresh[i] = new_plan, gf
    batches = _batches(plans, set(freezes) - set(fresh), n)
    releases, figures = (_run_batches(client, list(zip(pieces, held)), plans, batches, strata, qi, fresh, frozen)
                         if batches else ([], []))
    batched = {i for members in batches for i in members}
    infos, inputs, sse = [], [], {}
    for i, gp in enumerate(lay_.plans):
        g = gp.group
        # the group's pieces, built when asked: read again only for the report's reference
        inputs.append(functools.partial(_selection, pieces, held, i, g, strata, qi, n))
        if i in batched:
            infos.append(None)
            continue
        sel = inputs[-1]()
        if not g.observed:  # every QI missing: the records pass through
            releases.extend(sel)
            infos.append(None)
            continue
        if i in freezes:  # records published before keep their frozen cells
            gf = freezes[i]
            if not gf.new:
                infos.append(None)
                continue
            sel, g_new = gs.new_selection(pieces, gf, strata, qi, frozen)
            gp = plan.group_plan(g_new, lay_.k)   # the group's method at the count of its new records
        rels, info = _group_cells(client, gp, sel, meta, plan, stage)
        releases.extend(rels)
        infos.append(info)
        if i in freezes:
            sse[i] = gs.new_sse(client, rels, freezes[i], sel)
    infos = [i.result() if hasattr(i, "result") else i for i in infos]
    for members, (found, sses) in zip(batches, client.gather(figures)):   # one round trip for every batch
        for i, info in zip(members, found):
            infos[i] = info
        sse.update({i: [value] for i, value in sses.items()})
    if freezes:
        frames, partials = gs.frozen_pieces(client, pieces, freezes, strata, qi, frozen)
        releases.extend(frames)
        for i, gf in freezes.items():
            total = sum(f.result() if hasattr(f, "result") else f for f in sse.get(i, []))
            infos[i] = gs.group_result(gf, partials, infos[i], total, meta.dtypes)
    if lay_.labels:
        releases = [dask.delayed(publish_strata, pure=True)(r, strata, lay_.labels) if isinstance(r, Delayed)
                    else client.submit(publish_strata, r, strata, lay_.labels) for r in releases]
    # one bit pattern per published value (−0.0 → 0.0, one NaN): the file holds what was counted
    published = list(dict.fromkeys(strata + qi))
    releases = [dask.delayed(canonical_values, pure=True)(r, published) if isinstance(r, Delayed)
                else client.submit(canonical_values, r, published) for r in releases]
    if series is not None:
        releases = gs.recorded(releases, series, client, qi)
        meta = meta.drop(columns=[c for c in (*gs.FP, gs.CELL) if c in meta.columns])
    return releases, infos, inputs, meta


def _group_cells(client, gp, sel, meta, plan, stage):
    """One group's cells (its :class:`~daskmicro.runplan.GroupPlan`): (release pieces, figures)."""
    qi = list(plan.qi)
    if gp.one_task:
        pair = client.submit(_run_one_task, gp, qi, *client.compute(sel))
        return [client.submit(operator.itemgetter(0), pair)], client.submit(operator.itemgetter(1), pair)
    # lazy: each part is built where it is split
    return _pipeline_group(client, gp, sel, meta, plan.release.seed, stage)
