"""The release cut into its published pieces on the workers and verified as published.

Every row carries a seeded key of its global row id (:func:`daskmicro.release.publish.shuffle_keys`); the
pieces are consecutive key ranges, so the release is in one seeded order whatever the chunking or
the number of workers (:mod:`daskmicro.io.layout`).  A directory release is written file by file
and every file read back and counted (:func:`write_and_verify`); a single file or an in-memory
release is one frame (:func:`collect`); the release of a Dask DataFrame input is a Dask DataFrame
whose partitions are built and counted on the workers (:func:`dask_release`).  Every count is over
the stratum columns and QIs together, in the published dtypes.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import VerificationError
from ..io import commit as cm
from ..io import hive
from ..io import layout as lay
from ..io import shuffle as sh
from ..io.formats import used_categories
from ..io.source import RID
from .local import InProcess

__all__ = ["Release", "promised_schema", "file_cuts", "write_and_verify", "collect", "dask_release",
           "tuple_sizes", "bucketed_verdict"]


@dataclass(frozen=True)
class Release:
    """What every release path publishes and checks, whatever its sink: the published columns in
    order (``names``), the QI columns, the tuple an intruder sees (``columns``: stratum columns +
    QIs), the cell size ``k``, the seeded order, whether the row id is published, the ``n`` input
    rows and their checksum (``expected``), the bins of the report's release figures, and the
    collector of the disclosure-risk sample (``tap``: :class:`~daskmicro.graph.risk_stage.RiskTap`,
    or None when the run does not measure risk; each piece is measured in the computation that
    writes or collects it)."""

    names: tuple
    qi: tuple
    columns: tuple
    k: int
    seed: int
    keep_row_id: bool
    n: int
    expected: int
    bins: object = None   # daskmicro.kernels.figures.Bins, or None
    tap: object = None    # daskmicro.graph.risk_stage.RiskTap, or None

def promised_schema(source, qi, partition_by, keep_row_id, labels=None, hidden=()):
    """The Arrow schema of the written files: integer QIs become float64, merged strata text;
    partition columns (published by the directories) and ``hidden`` columns left out.  No field
    keeps the input's field metadata: it is the input's annotation (of a QI, of its original
    values), not the release's, and the single-file release carries none either."""
    import pyarrow as pa

    fields = []
    for f in source.schema:
        if f.name in partition_by or f.name in hidden:
            continue
        f = f.remove_metadata()
        if f.name in (labels or {}):
            f = pa.field(f.name, pa.string())
        fields.append(pa.field(f.name, pa.float64()) if f.name in qi and pa.types.is_integer(f.type) else f)
    if keep_row_id:
        fields.append(pa.field("row_id", pa.int64()))
    return pa.schema(fields)


def worker_threads(client) -> int:
    """Threads of the client's workers, all together."""
    return sum(w.get("nthreads", 1) for w in client.scheduler_info().get("workers", {}).values())


def tree(client, futures, combine, arity=8):
    while len(futures) > 1:
        futures = [client.submit(combine, *futures[i:i + arity]) for i in range(0, len(futures), arity)]
    return futures[0]


def file_cuts(client, keyed, seed, partition_by, rows_per_file) -> dict:
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


def _split_all(client, releases, seed, partition_by, files, tap=None) -> list:
    """Futures of every release piece cut by output file (:func:`daskmicro.io.layout.split_piece`).

    The lazy pieces go to the scheduler in one graph: one ``compute`` per piece would build and
    send the shared upstream graph (every input chunk's split) once per piece, a client cost
    that grows with the square of the number of chunks."""
    import dask
    from dask.delayed import Delayed

    split = dask.delayed(lay.split_piece, pure=True)
    lazy = [i for i, r in enumerate(releases) if isinstance(r, Delayed)]
    out = [None] * len(releases)
    taps = [tap.lazy(releases[i]) for i in lazy] if tap is not None else []
    futures = client.compute([split(releases[i], seed, partition_by, files) for i in lazy] + taps)
    for i, fut in zip(lazy, futures):
        out[i] = fut
    if tap is not None:   # computed with the pieces: the cells are formed once
        tap.parts.extend(futures[len(lazy):])
    for i, r in enumerate(releases):
        if out[i] is None:
            out[i] = client.submit(lay.split_piece, r, seed, partition_by, files)
            if tap is not None:
                tap.submit(r)
    return out


def _file_order(files: dict) -> list:
    """The run's output files in order: ``[(partition value tuple, file in the partition), …]``."""
    order = sorted(files, key=lambda t: tuple((v is None, "" if v is None else v) for v in t))
    return [(key, b) for key in order for b in range(files[key][1])]


def _scatter_all(client, releases, target, inflight, tap=None) -> list:
    """Rows per file of every release chunk, scattered into fragments (pass 1 of
    :mod:`daskmicro.io.shuffle`), at most two chunks per worker thread at a time.

    Given every chunk at once, the scheduler reads input chunks while a worker waits for the
    rows' published values, and the read chunks pile up in memory (measured: 0.6 GB of
    read chunks held in the write stage at 16M rows in 1M-row files); the window bounds what the
    stage holds by the chunk size, whatever the number of chunks.  A chunk is submitted as soon as
    any chunk of the window is done (not the oldest: a slow chunk would leave the other threads
    idle).  ``inflight`` holds the submitted, not yet finished futures."""
    import dask
    from dask.delayed import Delayed
    from distributed import as_completed

    threads = worker_threads(client)
    window = max(2, 2 * threads)
    scatter = dask.delayed(sh.scatter_piece, pure=False)
    out: list = [None] * len(releases)
    index: dict = {}
    done = client.as_completed() if isinstance(client, InProcess) else as_completed(loop=client.loop)

    def submit(i):
        r = releases[i]
        if isinstance(r, Delayed) and tap is not None:   # the risk partial computed with the piece
            f, t = client.compute([scatter(r, i, target), tap.lazy(r)])
            tap.parts.append(t)
        else:
            f = (client.compute(scatter(r, i, target)) if isinstance(r, Delayed)
                 else client.submit(sh.scatter_piece, r, i, target, pure=False))
            if tap is not None:
                tap.submit(r)
        inflight.append(f)
        index[id(f)] = i
        done.add(f)

    following = min(window, len(releases))
    for i in range(following):
        submit(i)
    for f in done:
        out[index.pop(id(f))] = f.result()
        inflight.remove(f)
        if following < len(releases):
            submit(following)
            following += 1
    return out


def write_and_verify(client, releases, files, schema, rel: Release, partition_by, staging, inflight):
    """Write the files through the staging directory (:mod:`daskmicro.io.shuffle`: each release
    chunk scattered into per-file fragments, then each file made from its fragments), then
    re-read every file and count its published tuples (``rel.columns``: stratum columns + QIs) in
    the written dtypes.  Empties ``releases`` once they are scattered; ``inflight`` holds the
    futures still outstanding (for the caller to cancel on failure).  Each file read back is also
    summarised for the report's release figures with ``rel.bins`` (``"figures"`` of the result,
    one summary per piece checked)."""
    from ..privacy.verify import RowCheck

    seed, keep_row_id, n = rel.seed, rel.keep_row_id, rel.n
    order = _file_order(files)
    first: dict = {}
    for j, (key, _) in enumerate(order):
        first.setdefault(key, j)
    store = sh.store_of(staging)   # a run prefix on an object store (io/objectcommit), or None
    directory = sh.location(staging, sh.SHUFFLE_DIR)
    fschema = sh.fragment_schema(schema, keep_row_id)
    target = sh.FragmentTarget(seed, partition_by, files, first, fschema, directory, store)
    sh.open_scratch(staging, sh.SHUFFLE_DIR)
    per_piece = _scatter_all(client, releases, target, inflight, rel.tap)
    # Nothing upstream is needed any more: drop every reference to it (the caller's chunks, whose
    # graphs hold the futures of the rows' published values), so that a worker lost from here on costs
    # only what is still to do, never a recomputation of the cells.
    releases.clear()
    fragments: dict = {}
    for i, rows in enumerate(per_piece):
        for j in rows:
            fragments.setdefault(j, []).append(str(sh.fragment_path(directory, j, i, store)))
    paths = [sh.location(staging, files[key][0], f"part-{b:05d}.parquet") for key, b in order]
    written = [client.submit(sh.write_file, p, schema, keep_row_id, fragments.get(j, []), store, pure=False)
               for j, p in enumerate(paths)]
    inflight.extend(written)
    results = client.gather(written)
    del written  # written and reported: a worker lost later must not run them again (the fragments go now)
    inflight.clear()
    sh.remove_fragments(staging)
    # the partition values as a hive reader reads them: decoded from the directory names written
    keep = [(p, r, _hive_constants(files[key][0])) for p, r, (key, _) in zip(paths, results, order) if r["rows"]]
    k_check, sizes, same, rows_read, summaries, digests = _verify_files(
        client, [(p, c, r["rows"]) for p, r, c in keep], schema, rel, staging, inflight)
    cm.check_written(results, n, rel.expected, same, k_check, rows_read)
    listing = _listing(staging, keep, digests)
    return {"files": listing, "k_check": k_check, "rows_check": RowCheck(ok=True, rows_in=n, rows_out=rows_read),
            "tuple_sizes": sizes, "figures": summaries}


def _listing(staging, keep, digests) -> list:
    """The manifest's files (path in the release, rows, bytes; and on an object store the SHA-256
    of the object, checked against the bytes read back by every verification of it)."""
    if sh.store_of(staging) is None:
        return [{"path": str(Path(p).relative_to(staging)), "rows": r["rows"], "bytes": Path(p).stat().st_size}
                for p, r, _ in keep]
    out = []
    for p, r, _ in keep:
        if any(d != r["sha256"] for d in digests.get(p, [None])):
            raise VerificationError(f"the object read back differs from the bytes written: {staging.url()}/"
                                    f"{staging.relative(p)}")
        out.append({"path": staging.relative(p), "rows": r["rows"], "bytes": r["bytes"], "sha256": r["sha256"]})
    return out


def _hive_constants(rel: str) -> dict:
    """``{column: value}`` of a partition directory ``rel`` as hive readers decode it."""
    return dict(kv for kv in map(hive.parse_segment, rel.split("/") if rel else []) if kv is not None)


#: Fewest rows of a written file checked by one task when the run has fewer files than worker
#: threads: a file is then checked in as many row ranges as there are threads per file, each
#: task reading the file and counting its range (1M-row file, 2 workers: 1.0–1.2 s in one task).
MIN_CHECK_ROWS = 250_000


def check_ranges(rows: list, threads: int) -> list:
    """``[(file, (start, stop))]``: the row ranges the written files (``rows`` per file) are
    checked in — one per file, or, with fewer files than ``threads``, each file cut into up to
    threads / files ranges of at least :data:`MIN_CHECK_ROWS` rows."""
    per = max(1, threads // max(1, len(rows)))
    out = []
    for f, r in enumerate(rows):
        parts = max(1, min(per, r // MIN_CHECK_ROWS))
        cuts = [r * i // parts for i in range(parts + 1)]
        out.extend((f, (a, b)) for a, b in zip(cuts[:-1], cuts[1:]))
    return out


def _verify_files(client, files, schema, rel: Release, staging, inflight):
    """(KAnonymityCheck, tuple sizes, schema as promised per file, rows read, figures' summaries, SHA-256s of
    the bytes read back per file — None for local files) of the written ``files`` (``[(path, hive constants, rows)]``): each re-read and the tuple counts of each of
    its row ranges (:func:`check_ranges`) cut into hash buckets on disk
    (:func:`daskmicro.io.shuffle.scatter_counts`), then each bucket merged and checked on its
    own; the scheduler only ever holds verdicts."""
    from ..privacy.verify import combine_verdicts, count_buckets

    columns, k, figures = list(rel.columns), rel.k, (list(rel.qi), rel.bins)
    n_buckets = count_buckets(rel.n)
    store = sh.store_of(staging)
    directory = sh.location(staging, sh.COUNTS_DIR)
    threads = worker_threads(client)
    ranges = check_ranges([r for _, _, r in files], threads)
    target = sh.CountsTarget(directory, n_buckets, store)
    sh.open_scratch(staging, sh.COUNTS_DIR)
    checks = [client.submit(sh.scatter_counts, str(files[f][0]), schema, columns, files[f][1], target, j,
                            rows, figures, pure=False)
              for j, (f, rows) in enumerate(ranges)]
    inflight.extend(checks)
    got = client.gather(checks)
    inflight.clear()
    by_bucket: dict = {}
    digests: dict = {}
    for j, (_, _, written, _, digest) in enumerate(got):
        for b in written:
            by_bucket.setdefault(b, []).append(j)
        digests.setdefault(str(files[ranges[j][0]][0]), []).append(digest)
    verdicts = [client.submit(sh.bucket_verdict_of, directory, b, js, k, store, pure=False)
                for b, js in by_bucket.items()]
    inflight.extend(verdicts)
    k_check, sizes = client.submit(combine_verdicts, k, *verdicts).result()
    inflight.clear()
    sh.remove_counts(staging)
    return (k_check, sizes, [g[1] for g in got], sum(g[0] for g in got), [g[3] for g in got if g[3] is not None],
            digests)


def _bucket(names, qi, columns, keep_row_id, bins, *pieces):
    """One partition of an in-memory release from its pieces: rows in key order, published
    columns, mixed QI columns as float64; with its rows, row checksum, tuple counts and the
    summary of the report's release figures (``bins``: :class:`~daskmicro.kernels.figures.Bins`)."""
    from ..release.run_figures import piece_figures
    from ..io.qi import qi_column
    from ..privacy.verify import tuple_counts
    from ..release.publish import ROW_ID

    pieces = [p for p in pieces if p is not None and len(p)]
    df = pd.concat(pieces, ignore_index=True).sort_values(lay.KEY_COLUMN, kind="stable").reset_index(drop=True)
    rids = df[RID].to_numpy(dtype=np.int64)
    if keep_row_id:
        df[ROW_ID] = rids
    df = used_categories(df[names])
    for c in qi:
        t = df[c].dtype
        if t == object or (isinstance(t, pd.api.extensions.ExtensionDtype) and df[c].hasnans):
            df[c] = qi_column(df[c], c)
    return df, len(df), cm.row_checksum(rids), tuple_counts(df, list(columns)), piece_figures(df, qi, bins)


def dask_release(client, releases, files, rel: Release):
    """The release of a Dask input as a Dask DataFrame whose partitions (consecutive key ranges,
    so in the one seeded order) are built and verified on the workers and stay there."""
    import dask.dataframe as dd

    from ..privacy.verify import RowCheck

    n = rel.n
    splits = _split_all(client, releases, rel.seed, [], files, rel.tap)
    _, nb, _ = files[()]
    buckets = [client.submit(_bucket, list(rel.names), list(rel.qi), list(rel.columns), rel.keep_row_id, rel.bins,
                             *[client.submit(lay.pick, s, ((), b)) for s in splits]) for b in range(nb)]
    get = operator.itemgetter
    results = client.gather([client.submit(lambda r: (r[1], r[2], r[4]), b) for b in buckets])
    rows = sum(r[0] for r in results)
    checksum = 0
    for r in results:
        checksum = (checksum + r[1]) % (1 << 64)
    if rows != n or checksum != rel.expected:
        raise VerificationError("the release does not hold each input row exactly once")
    k_check, sizes = bucketed_verdict(client, [client.submit(get(3), b) for b in buckets], rel.k, n)
    k_check.raise_if_failed()
    parts = [client.submit(get(0), b) for b in buckets]
    out_meta = client.submit(lambda f: f.iloc[:0], parts[0]).result()
    summaries = [r[2] for r in results if r[2] is not None]
    return (dd.from_delayed(parts, meta=out_meta, verify_meta=False), k_check, RowCheck(ok=True, rows_in=n, rows_out=rows),
            sizes, summaries)


def bucketed_verdict(client, counts, k, n_rows):
    """(KAnonymityCheck, tuple sizes) of per-piece tuple count futures: each piece cut into hash
    buckets (:func:`~daskmicro.privacy.verify.count_buckets`), each bucket merged and checked on
    its own, so that no task holds the counts of the whole release; only verdicts are combined.
    Empties ``counts`` (its pieces are freed once cut into buckets)."""
    from ..privacy.verify import bucket_verdict, combine_verdicts, count_buckets, merge_tuple_counts, split_tuple_counts

    n_buckets = count_buckets(n_rows)
    if n_buckets > 1:
        split = [client.submit(split_tuple_counts, c, n_buckets) for c in counts]
        counts.clear()   # each piece's counts go as soon as they are split (the caller's list)
        buckets = [[client.submit(operator.getitem, s, b) for s in split] for b in range(n_buckets)]
        del split
    else:
        buckets = [list(counts)]
    verdicts = [client.submit(bucket_verdict, tree(client, bucket, merge_tuple_counts), k) for bucket in buckets]
    return client.submit(combine_verdicts, k, *verdicts).result()


def tuple_sizes(counts):
    """(distinct sizes, number of tuples of each size) of merged tuple counts."""
    return np.unique(counts.counts, return_counts=True)


def collect(client, releases, rel: Release):
    """The release in one frame, rows in seeded key order, checked on its values as they are
    (QI columns that are not float become float64, exactly as a file release writes them), and
    the summary of the report's release figures (``bins``: :class:`~daskmicro.kernels.figures.Bins`)."""
    from dask.delayed import Delayed

    from ..release.run_figures import piece_figures
    from ..privacy.verify import check_tuple_counts, tuple_counts, verify_rows
    from ..io.qi import qi_column
    from ..release.publish import ROW_ID, shuffle_keys

    qi, n = list(rel.qi), rel.n
    futures = [client.compute(r) if isinstance(r, Delayed) else r for r in releases]
    for f in futures if rel.tap is not None else ():
        rel.tap.submit(f)
    df = pd.concat(client.gather(futures), ignore_index=True)
    rids = df[RID].to_numpy(dtype=np.int64)
    if cm.row_checksum(rids) != rel.expected or len(df) != n:
        raise VerificationError("the release does not hold each input row exactly once")
    df = df.take(np.argsort(shuffle_keys(rel.seed, rids), kind="stable")).reset_index(drop=True)
    if rel.keep_row_id:
        df[ROW_ID] = df[RID].to_numpy(dtype=np.int64)
    df = used_categories(df[list(rel.names)])   # no category that no published row holds
    for c in qi:  # a column replaced in some groups only (mixed pieces) becomes float64 throughout
        t = df[c].dtype
        if t == object or (isinstance(t, pd.api.extensions.ExtensionDtype) and df[c].hasnans):
            df[c] = qi_column(df[c], c)
    counts = tuple_counts(df, list(rel.columns))
    k_check = check_tuple_counts(counts, rel.k).raise_if_failed()
    summary = piece_figures(df, qi, rel.bins)
    return df, k_check, verify_rows(n, df).raise_if_failed(), tuple_sizes(counts), [] if summary is None else [summary]
