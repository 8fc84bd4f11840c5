"""The cluster part of a lake run (:mod:`daskmicro.lake_run`): pre-scan, groups, write, verify.

Every task is submitted with its inputs as futures, so the scheduler knows how to recompute
any result lost with a worker: a worker killed mid-run costs time, not the release, which is
the same bytes because nothing depends on which worker ran what.
"""

from __future__ import annotations

import operator
import sys
import time

import numpy as np
import pandas as pd

from .errors import InputError, ParameterError, VerificationError
from .io import commit as cm
from .io import layout as lay
from .io.source import RID, read_piece, scan_piece
from .strata import group_mask, merged_labels, plan_groups, publish_strata, strata_summary

__all__ = ["execute"]


def _stage(name, t0):
    print(f"  {name:<17} {time.perf_counter() - t0:7.2f} s", file=sys.stderr, flush=True)


def _prescan(client, source, qi, keys):
    futures = [client.submit(scan_piece, *source.piece_args(i), qi=qi, keys=keys, pure=False)
               for i in range(len(source.files))]
    return client.gather(futures)


def _check_scan(scans, qi, missing):
    n = sum(s["rows"] for s in scans)
    if n == 0:
        raise InputError("input has no rows" + (" after --filter" if True else ""))
    miss = np.sum([s["missing"] for s in scans], axis=0)
    pinf = np.sum([s["posinf"] for s in scans], axis=0)
    ninf = np.sum([s["neginf"] for s in scans], axis=0)
    big = np.max([s["maxabs"] for s in scans], axis=0)
    if (pinf + ninf).any():
        cols = ", ".join(f"{c!r} (+inf {int(p)}, -inf {int(q)})" for c, p, q in zip(qi, pinf, ninf) if p + q)
        raise InputError(f"QI column(s) with infinite values: {cols}")
    from .lake_run import MAX_ABS

    huge = [repr(c) for c, v in zip(qi, big) if v > MAX_ABS]
    if huge:
        raise InputError(f"QI column(s) with values beyond ±{MAX_ABS:.0e}: {', '.join(huge)}; squared distances "
                         "would overflow: rescale them first")
    if missing == "refuse" and miss.any():
        cols = ", ".join(f"{c!r} ({int(v)})" for c, v in zip(qi, miss) if v)
        raise InputError(f"QI column(s) with missing values: {cols}; impute or drop them, or use --missing separate")
    return n


def _select(df, strata, qi, group):
    return df[group_mask(df, strata, qi, group)]


def _run_small(observed, k, method, energy_loss, n_components, seed, *parts):
    """One group as one task: exact MDAV or PCA-MDAV in process on the worker."""
    from .anonymize import anonymize

    df = pd.concat(parts, ignore_index=True)
    # order the records by global row id: the result must not depend on how the input was cut
    df = df.sort_values(RID, kind="stable").reset_index(drop=True)
    release, report = anonymize(df, observed, k, method, energy_loss, n_components, seed, False)
    return release, report


def _release_of(pair):
    return pair[0]


def _empty_like(df):
    return df.iloc[:0]


def execute(client, source, qi, args, method, strata, partition_by, missing, rows_per_file, seed, output,
            lake_out, participation=None):
    """Run a lake job on ``client``; returns (report, written files).

    ``participation`` (a constant-π :class:`~daskmicro.anonymize_probabilistic.ParticipationModel`)
    makes the release p-probabilistically k-anonymous: every group is microaggregated with cells
    of n_min records (``003`` §V-B), the written release is verified against n_min, and the
    failure figures of its published tuples (§VI-A) must stay within p̄ before anything is
    committed.
    """
    import dask.dataframe as dd

    from .anonymize import anonymize
    from .lake_run import SMALL_GROUP_ROWS, _worker_memory, check_memory

    t0 = time.perf_counter()
    keys = list(dict.fromkeys(strata + partition_by))
    scans = _prescan(client, source, qi, keys)
    n = _check_scan(scans, qi, missing)
    k = args.k
    if participation is not None:
        from .anonymize_probabilistic import _n_min

        k = _n_min(args.k, participation.constant, participation.max_cell_failure, n)
    counts = {}
    for s in scans:
        for combo, c in s["combos"].items():
            skey = tuple(combo[keys.index(col)] for col in strata)
            counts[(skey, combo[-1])] = counts.get((skey, combo[-1]), 0) + c
    groups = plan_groups(counts, strata, qi, k, args.merge_small_strata)
    labels = merged_labels(groups, strata)   # merged strata publish one label (strata.merged_labels)
    part_counts = _partition_counts(scans, keys, strata, partition_by, labels)
    wmem = _worker_memory(client)
    for g in groups:
        one_task = method in ("mdav", "pca-mdav") or (method == "auto" and g.n <= SMALL_GROUP_ROWS)
        m = "mdav" if method == "auto" and one_task else ("partitioned" if method == "auto" else method)
        max_rows = args.max_task_rows or 1_000_000
        if m in ("mdav", "pca-mdav") and g.n > max_rows:
            raise ParameterError(f"method {m!r} runs {g.label} (n = {g.n:,}) in one task, more than max_task_rows = "
                                 f"{max_rows:,}; use --method partitioned")
        check_memory(m, g.n, len(g.observed), wmem, g.label)
    _stage("pre-scan", t0)

    t0 = time.perf_counter()
    row0s = np.concatenate([[0], np.cumsum([s["rows"] for s in scans])[:-1]]).astype(np.int64)
    cols = source.columns
    # the pieces stay lazy: each task that needs one reads it, so the table is never held whole
    import dask
    from dask.delayed import Delayed

    read = dask.delayed(read_piece, pure=True)
    pieces = [read(*source.piece_args(i), columns=cols, row0=int(row0s[i]))
              for i in range(len(source.files)) if scans[i]["rows"]]
    meta = client.compute(dask.delayed(_empty_like)(pieces[0])).result()
    select = dask.delayed(_select, pure=True)
    releases, reports, inputs = [], [], []
    for g in groups:
        sel = pieces if g.n == n else [select(p, strata, qi, g) for p in pieces]
        inputs.append(sel)
        if not g.observed:  # every QI missing: nothing to aggregate, the records pass through
            releases.extend(sel)
            reports.append(None)
            continue
        one_task = method in ("mdav", "pca-mdav") or (method == "auto" and g.n <= SMALL_GROUP_ROWS)
        if one_task:
            m = "mdav" if method == "auto" else method
            pair = client.submit(_run_small, g.observed, k, m, args.energy_loss, args.n_components, seed,
                                 *client.compute(sel))
            releases.append(client.submit(_release_of, pair))
            reports.append(client.submit(operator.itemgetter(1), pair))
        else:
            sub = dd.from_delayed(sel, meta=meta, verify_meta=False)
            rel, rep = anonymize(sub, g.observed, k, "partitioned" if method == "auto" else method,
                                 args.energy_loss, args.n_components, seed, False, K=args.K, nu=args.nu,
                                 partition_size=args.partition_size, task_rows=args.task_rows,
                                 max_task_rows=args.max_task_rows, client=client,
                                 refine=getattr(args, "refine", None), refine_iter=getattr(args, "refine_iter", None),
                                 macro=getattr(args, "macro", None), macro_iter=getattr(args, "macro_iter", None))
            releases.extend(rel.to_delayed())  # lazy: each part is built where it is split for writing
            reports.append(rep)
    reports = [r.result() if hasattr(r, "result") else r for r in reports]
    if labels:
        releases = [dask.delayed(publish_strata, pure=True)(r, strata, labels) if isinstance(r, Delayed)
                    else client.submit(publish_strata, r, strata, labels) for r in releases]
    _stage("microaggregation", t0)

    t0 = time.perf_counter()
    if lake_out:  # exact file sizes: cut keys by rank (io/layout)
        keyed = [read(*source.piece_args(i), columns=list(dict.fromkeys(partition_by + (strata if labels else []))),
                      row0=int(row0s[i])) for i in range(len(source.files)) if scans[i]["rows"]]
        if labels:
            keyed = [dask.delayed(publish_strata, pure=True)(p, strata, labels) for p in keyed]
        files = lay.plan_files(partition_by, part_counts, rows_per_file,
                               _file_cuts(client, keyed, seed, partition_by, rows_per_file))
    else:
        files = lay.plan_files(partition_by, part_counts, n)
    schema = _promised_schema(source, qi, partition_by, args.keep_row_id, labels)
    expected = cm.row_checksum(np.arange(n, dtype=np.int64))
    published = list(dict.fromkeys(strata + qi))  # the tuple an intruder sees: stratum columns + QIs
    if lake_out:
        staging = cm.open_staging(output, [rel for rel, _, _ in files.values()])
        inflight: list = []
        try:
            listing = _write_and_verify(client, releases, files, schema, published, k, seed, partition_by,
                                        args.keep_row_id, staging, n, expected, inflight)
            prob = _probabilistic(args.k, participation, k, listing.pop("tuple_sizes"), n)
        except BaseException:
            cm.discard_staging(staging, client, inflight)  # cancel the writes first, then remove
            raise
        k_check, rows_check = listing.pop("k_check"), listing.pop("rows_check")
    else:
        frame, k_check, rows_check, sizes = _collect(client, releases, schema, published, k, seed, args.keep_row_id, n,
                                                     expected)
        prob = _probabilistic(args.k, participation, k, sizes, n)
    _stage("write + verify", t0)
    report = _report(n, qi, args, method, seed, groups, reports, strata, missing, k_check, rows_check, source)
    report.dtype_changes.update({c: {"from": str(source.schema.field(c).type), "to": "string (merged strata labels)"}
                                 for c in labels})
    # the reference runs exact MDAV at the cell size the run used (n_min under participation)
    _reference(report, groups, inputs, reports, meta, getattr(args, "reference", None))
    report.k = int(args.k)
    report.probabilistic = prob
    if lake_out:
        report.lake = {"staging": staging, "files": listing["files"]}
    else:
        report.lake = {"frame": frame, "files": []}
    return report, report.lake["files"]


def _reference(report, groups, inputs, reports, meta, reference):
    """Exact MDAV's information loss on the released records (:mod:`daskmicro.reference`).

    A run split into strata (or missing-value groups) anonymizes each group on its own, with its
    own z-scoring, and reports the record-weighted mean of the groups' IL; its reference is the
    same mean over exact MDAV run on each group (exact, or estimated on a sample for large
    groups, as ``reference`` says).  Groups with no observed QI are left out of both.
    """
    if reference in (None, "none"):
        return
    import dask.dataframe as dd

    from .reference import attach_reference

    started = time.perf_counter()
    parts = [(g, sel, r) for g, sel, r in zip(groups, inputs, reports) if r is not None and g.observed]
    if len(parts) == 1 and parts[0][2] is report:
        g, sel, _ = parts[0]
        attach_reference(report, dd.from_delayed(sel, meta=meta, verify_meta=False), list(g.observed), reference)
    elif parts:
        per = []
        for g, sel, r in parts:
            rec = attach_reference(r, dd.from_delayed(sel, meta=meta, verify_meta=False), list(g.observed), reference)
            per.append({"group": g.label, "n": int(r.n), "kind": rec["kind"],
                        "information_loss": float(rec["information_loss"]), "method_information_loss":
                        float(r.information_loss), "seconds": float(rec["seconds"])})
        total = sum(p["n"] for p in per)
        sampled = sum(p["kind"] == "sample" for p in per)
        label = (f"record-weighted mean over {len(per)} groups, exact MDAV on each" if not sampled else
                 f"record-weighted mean over {len(per)} groups, {sampled} estimated on a sample")
        record = {"kind": "sample" if sampled else "exact", "label": label,
                  "information_loss": sum(p["n"] * p["information_loss"] for p in per) / total,
                  "seconds": sum(p["seconds"] for p in per), "groups": per}
        report.reference_information_loss = record["information_loss"]
        report.reference = record
    else:
        report.reference = {"kind": "none", "label": "no group has an observed quasi-identifier"}
    if report.timings is not None:
        report.timings["reference"] = time.perf_counter() - started


def _partition_counts(scans, keys, strata, partition_by, labels) -> dict:
    """Records per output partition value tuple, merged strata under their published label."""
    out = {}
    for s in scans:
        for combo, c in s["combos"].items():
            skey = tuple(combo[keys.index(col)] for col in strata)
            pkey = tuple(labels[col].get(skey, None if combo[keys.index(col)] is None else str(combo[keys.index(col)]))
                         if col in labels else combo[keys.index(col)] for col in partition_by)
            out[pkey] = out.get(pkey, 0) + c
    return out


def _promised_schema(source, qi, partition_by, keep_row_id, labels=None):
    import pyarrow as pa

    fields = []
    for f in source.schema:
        if f.name in partition_by:
            continue
        if f.name in (labels or {}):
            f = pa.field(f.name, pa.string())
        fields.append(pa.field(f.name, pa.float64()) if f.name in qi and pa.types.is_integer(f.type) else f)
    if keep_row_id:
        fields.append(pa.field("row_id", pa.int64()))
    return pa.schema(fields)


def _tree(client, futures, combine, arity=8):
    while len(futures) > 1:
        futures = [client.submit(combine, *futures[i:i + arity]) for i in range(0, len(futures), arity)]
    return futures[0]


def _file_cuts(client, keyed, seed, partition_by, rows_per_file) -> dict:
    """Cut keys of every output partition for files of exactly ``rows_per_file`` rows (io/layout)."""
    import dask

    hist = dask.delayed(lay.key_histogram, pure=True)
    level = [hist(p, seed, partition_by) for p in keyed]
    while len(level) > 1:
        level = [dask.delayed(lay.merge_histograms, pure=True)(*level[i:i + 8]) for i in range(0, len(level), 8)]
    wanted = lay.cut_ranges(client.compute(level[0]).result(), rows_per_file)
    if not any(wanted.values()):
        return {key: np.empty(0, np.uint64) for key in wanted}
    ranges = [dask.delayed(lay.keys_in_ranges, pure=True)(p, seed, partition_by, wanted) for p in keyed]
    merged = client.compute(dask.delayed(lay.merge_range_keys, pure=True)(*ranges)).result()
    return lay.cut_keys(wanted, merged)


def _write_and_verify(client, releases, files, schema, columns, k, seed, partition_by, keep_row_id, staging, n,
                      expected, inflight):
    """Write the buckets, then re-read every file and count its published tuples (``columns``:
    stratum columns + QIs) in the written dtypes."""
    from .privacy.verify import RowCheck, check_tuple_counts, merge_tuple_counts

    import dask
    from dask.delayed import Delayed

    split = dask.delayed(lay.split_piece, pure=True)
    splits = [client.compute(split(r, seed, partition_by, files)) if isinstance(r, Delayed)
              else client.submit(lay.split_piece, r, seed, partition_by, files) for r in releases]
    inflight.extend(splits)
    written, paths, keys = [], [], []
    for key in sorted(files, key=lambda t: tuple((v is None, "" if v is None else v) for v in t)):
        rel, nb, _ = files[key]
        for b in range(nb):
            path = staging / rel / f"part-{b:05d}.parquet"
            picks = [client.submit(lay.pick, s, (key, b)) for s in splits]
            written.append(client.submit(cm.write_bucket, str(path), schema, keep_row_id, *picks))
            inflight.append(written[-1])
            paths.append(path)
            keys.append(key)
    results = client.gather(written)
    del splits
    keep = [(p, r, dict(zip(partition_by, key))) for p, r, key in zip(paths, results, keys) if r["rows"]]
    checks = [client.submit(cm.verify_file, str(p), schema, columns, const, pure=False) for p, _, const in keep]
    inflight.extend(checks)
    rows_read = sum(client.gather([client.submit(operator.itemgetter(0), c) for c in checks]))
    same = client.gather([client.submit(operator.itemgetter(1), c) for c in checks])
    counts = _tree(client, [client.submit(operator.itemgetter(2), c) for c in checks], merge_tuple_counts)
    k_check = client.submit(check_tuple_counts, counts, k).result()
    cm.check_written(results, n, expected, same, k_check, rows_read)
    sizes = client.submit(_tuple_sizes, counts).result()
    listing = [{"path": str(p.relative_to(staging)), "rows": r["rows"], "bytes": p.stat().st_size}
               for p, r, _ in keep]
    return {"files": listing, "k_check": k_check, "rows_check": RowCheck(ok=True, rows_in=n, rows_out=rows_read),
            "tuple_sizes": sizes}


def _tuple_sizes(counts):
    """(distinct sizes, number of tuples of each size) of merged tuple counts."""
    return np.unique(counts.counts, return_counts=True)


def _probabilistic(k, participation, n_min, sizes, n):
    """The p-probabilistic section of the report from the published tuples' sizes; refuses above p̄."""
    if participation is None:
        return None
    from .anonymize_probabilistic import _check_failures, _model_dict, cell_failure_summary

    pi, pbar = participation.constant, participation.max_cell_failure
    prob = _model_dict(k, participation, n_min, None)
    prob.update(cell_failure_summary(k, pbar, sizes[0], sizes[1], participation=pi, n=n))
    _check_failures(prob, pbar)
    return prob


def _collect(client, releases, schema, columns, k, seed, keep_row_id, n, expected):
    """Single-file output: the release in one frame, rows in key order, checked in memory (the
    file written from it is verified again as read back, :class:`~daskmicro.io.tables.AtomicBatch`)."""
    from .privacy.verify import check_tuple_counts, tuple_counts, verify_rows
    from .publish import ROW_ID, shuffle_keys

    from dask.delayed import Delayed

    futures = [client.compute(r) if isinstance(r, Delayed) else r for r in releases]
    df = pd.concat(client.gather(futures), ignore_index=True)
    rids = df[RID].to_numpy(dtype=np.int64)
    if cm.row_checksum(rids) != expected or len(df) != n:
        raise VerificationError("the release does not hold each input row exactly once")
    df = df.take(np.argsort(shuffle_keys(seed, rids), kind="stable")).reset_index(drop=True)
    if keep_row_id:
        df[ROW_ID] = df[RID].to_numpy(dtype=np.int64)
    df = df[schema.names]
    counts = tuple_counts(df, list(columns))
    k_check = check_tuple_counts(counts, k).raise_if_failed()
    sizes = _tuple_sizes(counts)
    return df, k_check, verify_rows(n, df).raise_if_failed(), sizes


def _report(n, qi, args, method, seed, groups, reports, strata, missing, k_check, rows_check, source):
    from .report.run import Report

    done = [r for r in reports if r is not None]
    if len(groups) == 1 and len(done) == 1 and not strata and missing != "separate" and done[0].n == n:
        # one group holding every row: its own report (timings, cell sizes, macrocell SSE, PCA
        # spectrum, ...) is the run's, with the verdicts of what was written
        report = done[0]
        report.k_anonymity, report.rows, report.seed = k_check, rows_check, seed
        report.keep_row_id = bool(args.keep_row_id)
        report.dtype_changes = {c: {"from": str(source.schema.field(c).type), "to": "float64"} for c in qi
                                if str(source.schema.field(c).type).startswith(("int", "uint"))}
        return report
    n_agg = sum(r.n for r in done)
    report = Report(
        n=n, m=len(qi), m_used=max((r.m_used for r in done), default=0), k=int(args.k),
        method=(done[0].method if len({r.method for r in done}) == 1 else "mixed") if done else str(method), qi=list(qi),
        cells=sum(r.cells for r in done), min_cell_size=min((r.min_cell_size for r in done), default=0),
        max_cell_size=max((r.max_cell_size for r in done), default=0),
        information_loss=sum(r.information_loss * r.n for r in done) / n_agg if n_agg else 0.0,
        seconds=sum(r.seconds for r in done), seed=seed,
        constant_columns=sorted({c for r in done for c in r.constant_columns}),
        dtype_changes={c: {"from": str(source.schema.field(c).type), "to": "float64"} for c in qi
                       if str(source.schema.field(c).type).startswith(("int", "uint"))},
        k_anonymity=k_check, rows=rows_check, keep_row_id=bool(args.keep_row_id),
    )
    if strata or missing == "separate" or len(groups) > 1:
        report.strata = strata_summary(strata, missing, args.merge_small_strata, groups, reports)
    elif done and done[0].pipeline:
        report.pipeline = done[0].pipeline
    return report
