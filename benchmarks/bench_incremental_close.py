"""What an nn-fixed survey does after its close: the release assembled from its pieces, written and checked.

An ``increment="nn-fixed"`` run (:mod:`daskmicro.graph.incremental_fixed`) publishes and counts every
record before the close as pieces — for each base chunk and each late file, one (frame, row ids)
piece per output partition.  After the close each output partition is assembled from its pieces
(sorted by the seeded key), written and read back by :func:`daskmicro.io.lake.write_parts`.

This benchmark builds that state on a LocalCluster of 2 workers — ``--base-chunks`` base chunks
and ``--late-files`` late files of census-sized records (13 columns, cells of 10 equal tuples),
split by the real :func:`~daskmicro.release.publish.split_chunk` — and times the step after the
close, the same data, alternating, in one run:

* ``one piece per file, recounted``: every piece kept as it was published, each file's tuples
  counted as read back and the counts merged by hash bucket on the workers (``bucketed_verdict``);
* ``merged, recounted``: the pieces merged as the run merges them while the survey is open
  (:func:`~daskmicro.graph.incremental_fixed.merge_pieces`: the base chunks' into one, every
  :data:`~daskmicro.graph.incremental_fixed.MERGE_LATE` late files' into one, each key range on
  one worker), counted again as read back;
* ``merged, fingerprint`` (what the run does): the same layout, each file as read back checked to
  hold exactly the tuples counted before the close
  (:func:`~daskmicro.privacy.verify.tuple_fingerprint`), no second count.

    .venv/bin/python benchmarks/bench_incremental_close.py --n 4000000
"""

from __future__ import annotations

from _common import print_machine_info  # first: pins thread pools to one thread before numpy is imported

import argparse
import tempfile
import time

import dask
import dask.dataframe as dd
import distributed
import numpy as np
import pandas as pd

from daskmicro.graph.incremental_fixed import MERGE_LATE, merge_pieces, merged_layout
from daskmicro.graph.release import bucketed_verdict
from daskmicro.io.lake import write_parts
from daskmicro.privacy.verify import add_fingerprints, tuple_fingerprint
from daskmicro.release.publish import release_bucket, split_chunk
from daskmicro.runtime.cluster import local_cluster

M, K, SEED = 13, 10, 0


def _records(i: int, rows: int) -> pd.DataFrame:
    """``rows`` published records: cells of K equal tuples."""
    cells = np.random.default_rng(i).normal(size=(-(-rows // K), M)).round(3)
    return pd.DataFrame(np.repeat(cells, K, axis=0)[:rows], columns=[f"q{j}" for j in range(M)])


def _published(i: int, rows: int, row0: int, n_out: int) -> list:
    df = _records(i, rows)
    return split_chunk(df, df.to_numpy(), row0, list(df.columns), SEED, n_out)


def _piece(pieces: list, b: int):
    return pieces[b]


def published_pieces(client, n: int, base_chunks: int, late_files: int, nu: float, merged: bool) -> list:
    """The pieces at the close: per published chunk, the futures of its piece of each output partition."""
    n_late = int(n * nu)
    n_base = n - n_late
    out, row0, done = [], 0, 1
    for i in range(base_chunks + late_files):
        rows = n_base // base_chunks if i < base_chunks else n_late // late_files
        res = client.submit(_published, i, rows, row0, base_chunks, pure=False)
        out.append([client.submit(_piece, res, b, pure=False) for b in range(base_chunks)])
        row0 += rows
        if merged and i == base_chunks - 1:   # as publish_base, then FixedIncrementalGraph.collect, merge them
            out = [merge_pieces(client, out)]
        elif merged and i >= base_chunks:
            out, done = merged_layout(client, out, done)
    distributed.wait([f for lst in out for f in lst])
    return out


def _piece_print(piece, columns: list) -> int:
    return tuple_fingerprint(piece[0], columns)


def after_close(client, pieces: list, n_out: int, counted: bool) -> tuple:
    """(seconds, rows written): the partitions assembled, written, read back and checked."""
    kwargs = {"seed": SEED, "keep_row_id": False}
    meta = release_bucket(*split_chunk(_records(0, 0), np.empty((0, M)), 0, [f"q{j}" for j in range(M)], SEED, 1),
                          **kwargs)
    expected = None
    if counted:   # what the run counted before the close, made here before the clock starts
        columns = list(meta.columns)
        expected = add_fingerprints(*client.gather(client.map(_piece_print, [f for p in pieces for f in p],
                                                               columns=columns)))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        bucket = dask.delayed(release_bucket, pure=True)
        delayed = [bucket(*[p[b] for p in pieces], **kwargs) for b in range(n_out)]
        parts = dd.from_delayed(delayed, meta=meta, verify_meta=False).to_delayed()
        files, checks, _ = write_parts(client, parts, tmp, list(meta.columns), counted=counted)
        rows = sum(f["rows"] for f in files)
        if counted:   # the files as read back hold exactly the tuples counted before the close
            ok = add_fingerprints(*client.gather(checks)) == expected
        else:
            check, _ = bucketed_verdict(client, checks, K, rows)
            ok = check.ok
        seconds = time.perf_counter() - t0
    assert ok
    return seconds, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--base-chunks", type=int, default=15, help="base chunks = output partitions")
    ap.add_argument("--late-files", type=int, default=400)
    ap.add_argument("--nu", type=float, default=0.28, help="share of late records")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    print_machine_info()
    print(f"n = {args.n:,} × {M}, {args.base_chunks} base chunks (output partitions), {args.late_files} late files, "
          f"ν = {args.nu:g}, MERGE_LATE = {MERGE_LATE}, 2 workers")
    variants = {"one piece per file, recounted": (False, False), "merged, recounted": (True, False),
                "merged, fingerprint": (True, True)}
    times: dict[str, list] = {name: [] for name in variants}
    pieces_per_part = {}
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        for _ in range(args.rounds):   # alternating, the same data each time
            for name in times:
                merged, counted = variants[name]
                pieces = published_pieces(client, args.n, args.base_chunks, args.late_files, args.nu, merged)
                pieces_per_part[name] = len(pieces)
                seconds, rows = after_close(client, pieces, args.base_chunks, counted)
                assert rows == args.n, (rows, args.n)
                times[name].append(seconds)
                del pieces
    print(f"{'layout at the close, check':32s} {'pieces per partition':>21s} {'assembled + written (s)':>24s}")
    first = min(times["one piece per file, recounted"])
    for name, ts in times.items():
        print(f"{name:32s} {pieces_per_part[name]:21d} {min(ts):24.2f}   ratio {min(ts) / first:.2f}   "
              f"(rounds: {', '.join(f'{t:.2f}' for t in ts)})")


if __name__ == "__main__":
    main()
