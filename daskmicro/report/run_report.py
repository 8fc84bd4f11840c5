"""The one report of a run (:mod:`daskmicro.plan`): groups' figures, verdicts as published,
participation failure figures, the exact-MDAV reference.

A run of one group is reported by that group's figures (cells, information loss, pipeline
layout, PCA spectrum); a run split into strata or missingness groups by their record-weighted
means, with a ``strata`` section listing the groups (names and counts, never QI values).
"""

from __future__ import annotations

import contextlib
import time

from ..errors import VerificationError
from ..release.run_figures import report_figures
from ..strata import strata_summary
from .run import Report

__all__ = ["build_report", "group_report", "run_options"]


def group_report(cfg, info, qi, k_used: int) -> Report:
    """A :class:`Report` of one group's cells (a :class:`~daskmicro.runplan.GroupResult`; verdicts
    are filled in by the caller)."""
    return Report(
        n=info.n, m=len(qi), m_used=info.m_used, k=int(k_used), method=info.method, qi=list(qi),
        cells=info.cells, min_cell_size=info.min_cell_size, max_cell_size=info.max_cell_size,
        information_loss=float(info.information_loss), seconds=float(info.seconds), seed=int(cfg.seed),
        constant_columns=list(info.constant_columns), dtype_changes=dict(info.dtype_changes or {}),
        energy_loss=cfg.energy_loss, n_components=info.n_components, eigenvalues=info.eigenvalues,
        pca_energy_loss=info.pca_energy_loss, keep_row_id=bool(cfg.keep_row_id), pipeline=info.pipeline,
        cell_size_counts=dict(info.cell_size_counts or {}) or None,
        macrocell_sse=info.macrocell_sse, nu=info.nu, n_distal=info.n_distal,
        quality=cfg.quality, improvement=_improvement(cfg, [info]),
    )


def _improvement(cfg, infos) -> dict | None:
    """The improvement pass of the run's ``quality`` as it ran: its settings, on how many of the
    groups, and whether it changed any cell (None when it ran on none)."""
    done = [i for i in infos if i is not None]
    ran = [i.improve for i in done if i.improve]
    if not ran:
        return None
    first = ran[0]
    return {"quality": cfg.quality, "sweeps": first["sweeps"], "neighbours": first["neighbours"],
            "pcl_iter": first["pcl_iter"], "post_sweeps": first["post_sweeps"], "groups": len(ran), "of": len(done),
            "changed": any(bool(i.get("changed")) for i in ran)}


def run_options(cfg) -> dict:
    """Every option of the run as given, for the report: the configuration without the shuffle seed
    (with it anyone could undo the shuffle) and without the paths and addresses of the cluster."""
    out = {key: value for key, value in cfg.fingerprint_dict().items() if key != "seed"}
    out["workers"] = cfg.workers
    return out


def _dtype_changes(source, qi, labels, frame=None) -> dict:
    out = {}
    for c in qi:
        name = source.dtype_name(c)
        now = "float64" if frame is None else str(frame[c].dtype)
        if name != now and not (frame is None and name.lower().startswith(("float", "halffloat", "double"))):
            out[c] = {"from": name, "to": now}
    out.update({c: {"from": source.dtype_name(c), "to": "string (merged strata labels)"} for c in labels})
    return out


def build_report(cfg, ex, source, client) -> Report:
    """The run's report from the executor's result (:class:`daskmicro.graph.executor.Execution`)."""
    qi = list(cfg.qi)
    reports = [None if i is None else group_report(cfg, i, qi, ex.k) for i in ex.infos]
    done = [r for r in reports if r is not None]
    single = len(ex.groups) == 1 and len(done) == 1 and not ex.strata and cfg.missing != "separate" \
        and done[0].n == ex.n
    if single:
        report = done[0]
        report.m = len(qi)
    else:
        n_agg = sum(r.n for r in done)
        report = Report(
            n=ex.n, m=len(qi), m_used=max((r.m_used for r in done), default=0), k=int(ex.k),
            method=(done[0].method if len({r.method for r in done}) == 1 else "mixed") if done else str(cfg.method),
            qi=qi, cells=sum(r.cells for r in done), min_cell_size=min((r.min_cell_size for r in done), default=0),
            max_cell_size=max((r.max_cell_size for r in done), default=0),
            information_loss=sum(r.information_loss * r.n for r in done) / n_agg if n_agg else 0.0,
            seconds=sum(r.seconds for r in done), seed=int(cfg.seed),
            constant_columns=sorted({c for r in done for c in r.constant_columns}, key=str),
            k_anonymity=None, rows=None, keep_row_id=bool(cfg.keep_row_id),
        )
        if ex.strata or cfg.missing == "separate" or len(ex.groups) > 1:
            report.strata = strata_summary(list(ex.strata), cfg.missing, cfg.merge_small_strata, ex.groups, reports)
        sizes, counts = ex.tuple_sizes
        report.cell_size_counts = {int(s): int(c) for s, c in zip(sizes, counts)}
    report.k_anonymity, report.rows, report.seed = ex.k_check, ex.rows_check, int(cfg.seed)
    report.keep_row_id = bool(cfg.keep_row_id)
    if ex.incremental is None:   # a survey's changes are the stages' own (its source has no schema)
        report.dtype_changes = _dtype_changes(source, qi, ex.labels, ex.frame)
    report.timings = dict(ex.timings)
    report.compile = ex.compile
    report.release_figures = report_figures(ex.figures, qi, ex.bins, ex.k)
    report.probabilistic = _probabilistic(cfg, ex)
    report.quality, report.options = cfg.quality, run_options(cfg)
    report.improvement = _improvement(cfg, ex.infos)
    report.risk = getattr(ex, "risk", None)   # disclosure risk on a sample (published as rounded rates)
    # the pieces live on the run's cluster: computed through its client, the default one or not
    with getattr(client, "as_current", contextlib.nullcontext)():
        _reference(cfg, report, ex, reports, client)
    report.k = int(cfg.k)
    if ex.incremental is not None:   # both stages' schedule and times, τ and δ against one-pass runs
        report.incremental = ex.incremental
        report.reference_information_loss = ex.incremental.get("reference_information_loss")
    return report


# --------------------------------------------------------------------------- participation (*p-Probabilistic k-Anonymous Microaggregation …*, §VI-A)


def _check_failures(prob: dict, pbar: float) -> None:
    bad = prob["cells_above_max_cell_failure"]
    if bad:
        raise VerificationError(
            f"{bad} cell(s) fail with probability above max_cell_failure = {pbar:g}; nothing is released")


def _plain_k_ratio(prob: dict, parts: list) -> None:
    """IL at plain k (π = 1) and the distortion ratio, when every group computed it."""
    ref = [i for i in parts if i.information_loss_at_k is not None]
    if not ref or len(ref) != len(parts):
        return
    n = sum(i.n for i in ref)
    il_k = sum(i.information_loss_at_k * i.n for i in ref) / n
    il = sum(i.information_loss * i.n for i in ref) / n
    prob["information_loss_at_k"] = float(il_k)
    prob["distortion_ratio"] = float(il / il_k) if il_k > 0 else None


def _probabilistic(cfg, ex) -> dict | None:
    if cfg.participation is None:
        return None
    from ..privacy.failures import cell_failure_summary

    pbar = cfg.max_cell_failure
    base = {"mode": "per-record participation" if cfg.per_record_participation else "constant participation",
            "k": int(cfg.k), "max_cell_failure": pbar}
    if not cfg.per_record_participation:
        sizes, counts = ex.tuple_sizes
        prob = {**base, "participation": cfg.participation, "n_min": int(ex.k)}
        prob.update(cell_failure_summary(cfg.k, pbar, sizes, counts, participation=cfg.participation, n=ex.n))
        _plain_k_ratio(prob, [i for i in ex.infos if i is not None])
    else:
        from ..privacy.failures import merge_cell_failure

        parts = [i for i in ex.infos if i is not None]
        partials = [p for i in parts for p in (i.failure_partials or [])]
        if not partials or any(i.failure_partials is None for i in parts):
            raise VerificationError("a group has no participation figures; nothing is released")
        prob = {**base, "participation": "per-record", "participation_column": str(cfg.participation)}
        prob.update(merge_cell_failure(partials, cfg.k, pbar))
        n_parts = sum(i.n for i in parts)
        dist = [i for i in parts if i.expected_distortion is not None]
        if dist and len(dist) == len(parts):
            prob["expected_distortion"] = float(sum(i.expected_distortion * i.n for i in dist) / n_parts)
        _plain_k_ratio(prob, parts)
        if prob["min_cell_size"] < cfg.k:
            raise VerificationError(f"a cell holds fewer than k = {cfg.k} records; nothing is released")
    _check_failures(prob, pbar)
    return prob


# --------------------------------------------------------------------------- reference


def _reference(cfg, report, ex, reports, client) -> None:
    """Exact MDAV's information loss on the released records (:mod:`daskmicro.report.reference`): per
    group, and the record-weighted mean for a run split into groups."""
    if cfg.reference is None:
        return
    from ..io.frames import pieces_frame
    from .reference import attach_reference, self_reference

    started = time.perf_counter()
    parts = [(g, sel, r) for g, sel, r in zip(ex.groups, ex.inputs, reports) if r is not None and g.observed]

    def reference(g, sel, r):  # the group's pieces are read again only when its reference is computed
        return self_reference(r) or attach_reference(r, pieces_frame(sel(), ex.meta, in_process=client is None),
                                                     list(g.observed), cfg.reference)

    if len(parts) == 1 and (parts[0][2].n == report.n):
        g, sel, r = parts[0]
        rec = reference(g, sel, r)
        report.reference_information_loss, report.reference = r.reference_information_loss, rec
    elif parts:
        per = []
        for g, sel, r in parts:
            rec = reference(g, sel, r)
            per.append({"group": g.label, "n": int(r.n), "kind": rec["kind"],
                        "information_loss": float(rec["information_loss"]),
                        "method_information_loss": float(r.information_loss), "seconds": float(rec["seconds"])})
        total = sum(p["n"] for p in per)
        sampled = sum(p["kind"] == "sample" for p in per)
        selves = sum(p["kind"] == "self" for p in per)
        if selves == len(per):   # every group's cells are exact MDAV's: the run is its own reference
            kind, label = "self", f"the run is exact MDAV in each of its {len(per)} groups"
        elif sampled:
            kind, label = "sample", f"record-weighted mean over {len(per)} groups, {sampled} estimated on a sample"
        else:
            kind, label = "exact", f"record-weighted mean over {len(per)} groups, exact MDAV on each"
        record = {"kind": kind, "label": label,
                  "information_loss": sum(p["n"] * p["information_loss"] for p in per) / total,
                  "seconds": sum(p["seconds"] for p in per)}
        if kind != "self":   # a run that is its own reference in every group repeats the strata's list
            record["groups"] = per
        report.reference_information_loss = record["information_loss"]
        report.reference = record
    else:
        report.reference = {"kind": "none", "label": "no group has an observed quasi-identifier"}
    report.timings["reference"] = time.perf_counter() - started
