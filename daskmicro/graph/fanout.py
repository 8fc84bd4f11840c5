"""Macroaggregation, proximal/distal split and per-partition fan-out on a Dask cluster.

The shape of Algorithm C (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B) made to scale:

1. **top level** — when there are more than ``task_rows`` records, MDAV at a very large size
   over the chunked data (:func:`graph.macro_stage.chunked_mdav`) cuts them into a few cells, and
   each cell again (the §VI-B recursion), until the top cells hold about ``task_rows`` records
   each; the rows are shuffled into one task per top cell;
2. **macroaggregation** inside each top cell: nested MDAV, first at ``partition_size`` (the
   groups that become partitions), then at ``K`` (the macrocells, when the split needs them);
3. **split** — the fraction ν of macrocells with the highest SSE is distal, the rest proximal;
   the PCA of all proximal records is fitted from per-top-cell moments (one reduction);
4. **fan-out** — one task per partition (a group's proximal or distal macrocells), each running a
   registered method: PCA-MDAV on the proximal side, MDAV on the distal side by default.  With a
   participation column (``max_cell_failure`` set, the top cells carrying π_j) the cells are grown
   instead until each fails with probability q̄ ≤ p̄ (:func:`~daskmicro.privacy.participation_tasks.grow_partition`),
   in the principal components on the proximal side and in the z-space on the distal side.

The paper's own two-partition mode (``layout="two-partition"``) is the same with a single top
cell and a single group: all proximal records in one task, all distal records in another.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from ..runtime.allocator import reusing
from ..kernels import chunked as ck
from ..kernels import partition as kp
from ..privacy import participation_tasks as kpart
from ..kernels.moments import combine_moments
from ..kernels.pca import pca_basis
from .macro_stage import chunked_mdav, cut_in_task

__all__ = ["FanoutConfig", "FanoutResult", "top_cells", "fan_out"]


@dataclass(frozen=True)
class FanoutConfig:
    k: int
    K: int
    nu: float
    partition_size: int | None        # None: the paper's two-partition layout
    task_rows: int
    proximal_method: str = "pca-mdav"
    distal_method: str = "mdav"
    energy_loss: float | None = None
    n_components: int | None = None
    sse_threshold: float | None = None
    method_params: dict = field(default_factory=dict)
    macro: str = "mdav"           # macroaggregation inside a top cell: "mdav" or "pcl"
    macro_iter: int = 2           # PCL iterations per level when macro == "pcl"
    keep_parts: bool = False      # keep each partition's records for a later refinement stage
    max_cell_failure: float | None = None  # p̄: cells grown under the top cells' participation π_j


@dataclass
class FanoutResult:
    results: list                 # futures of PartitionResult, one per partition
    partitions: list              # (top, group, side, n_rows) per partition
    n_top: int
    macro_sse: np.ndarray         # SSE of every macrocell (z-space)
    macro_size: np.ndarray
    n_distal_macro: int
    pca: dict | None
    timings: dict
    k: int                        # the cell size the partitions' cells were formed at
    parts: list | None = None     # futures of each partition's (row ids, Z) when keep_parts


#: Most cells one level of the top-level recursion cuts a parent into (*Efficient k-Anonymous Microaggregation … via PCA*, §VI-B).  Each level
#: costs about FAN/2 passes over its records, and there are log_FAN(n / task_rows) levels: a small
#: fan keeps the top level O(n log n) instead of O(n² / task_rows) for one flat level.
TOP_FAN = 4
#: Fewest parents of one level whose chunked MDAV may run at once (one client thread each); a
#: cluster of more worker threads gets one driver per thread, so that a level's cuts are not
#: queued behind one another while workers wait.
MAX_DRIVERS = 8
#: Pieces of a parent are joined into chunks of at least this many rows (at most 2 × task_rows,
#: the size of the largest top cell) for the next level.  Every chunk costs a task in each of the
#: level's reductions (about 18 per cut into 4): at 100M rows, 125,000-row chunks made 800 tasks per reduction.
CHUNK_ROWS = 500_000
#: A parent of at most this many times ``task_rows`` records is cut inside one task
#: (:func:`graph.macro_stage.cut_in_task`) instead of by the client's queries: one round trip
#: instead of about twelve.  Its float32 copy is then at most twice the float64 records of the
#: largest top cell (2 × task_rows), which a worker holds anyway in the cells stage.
TASK_CUT_FACTOR = 8


def top_cells(client, ing, task_rows: int, timings: dict):
    """Futures of :class:`~daskmicro.kernels.partition.TopCell`, one per top cell.

    Takes the z-scored chunks from ``ing`` (``ing.blocks`` is cleared, so the workers free them as
    soon as the top cells no longer need them).  With more than ``task_rows`` records, MDAV at a
    very large size over the chunks (:func:`graph.macro_stage.chunked_mdav`) cuts the data into at
    most ``TOP_FAN`` cells, each cell is cut again the same way — the cells of one level in
    parallel — until cells hold about ``task_rows`` records, and the rows are shuffled into one
    task per final cell.  The cells are numbered depth first, so the layout depends only on the
    records, never on the chunking or the number of workers.

    The cuts are computed on a float32 copy of the records (:func:`~daskmicro.kernels.chunked.working_copy`): every pass of
    the top level reads it, and it stays in memory where the rest of each value (:func:`~daskmicro.kernels.chunked.residual`,
    float32 too), read only once per level to follow the cut, goes to disk first when they do not
    all fit.  The float64 chunks are freed once the two are made: 8 bytes per value follow the
    cuts instead of 12, and each top cell's records are the two added back in float64
    (:func:`~daskmicro.kernels.partition.join_split_pieces`), each z-scored value to within
    2⁻⁴⁸ of itself — the chunks themselves when one top cell holds them all.
    """
    import time

    live = [i for i, L in enumerate(ing.lengths) if L]
    blocks = [ing.blocks[i] for i in live]
    ing.blocks = None
    row0s = [ing.row0s[i] for i in live]
    t0 = time.perf_counter()
    if ing.n // task_rows <= 1:
        pieces = client.map(_whole, blocks, row0s)
        blocks.clear()
        tops = [client.submit(kp.concat_pieces, *pieces)]
    else:
        tops = [client.submit(kp.join_split_pieces, [hi for hi, _ in pieces], [lo for _, lo in pieces])
                for pieces in _recursive_cells(client, blocks, row0s, int(ing.n), task_rows)]
    timings["top_level"] = time.perf_counter() - t0
    return tops


def _recursive_cells(client, blocks, row0s, n: int, task_rows: int) -> list:
    """Lists of (row ids, Z) piece futures, one list per final top cell, in depth-first order.

    Level by level: every parent of a level is cut at once — those of at most
    ``TASK_CUT_FACTOR × task_rows`` records each in one task, submitted together; the larger ones
    by the client's queries, at most max(MAX_DRIVERS, the cluster's worker threads) client threads
    driving their chunked MDAV (how many never changes the cells).
    Children still holding at least 2·task_rows records become the next level's parents.  Each
    cell carries its path (child indices from the root), so the final order does not depend on
    which parent finished first.  A parent is (path, working copies, residuals, row ids or first
    row ids, rows); a leaf's pieces are (working copy, residual) pairs; empties ``blocks`` (the
    float64 chunks, freed once split in two).
    """
    from concurrent.futures import ThreadPoolExecutor

    leaves = []
    drivers = max(MAX_DRIVERS, sum(client.nthreads().values()))
    work = client.map(ck.working_copy, blocks)
    level = [((), work, client.map(ck.residual, blocks, work), row0s, n)]
    blocks.clear()
    while level:
        submitted = {i: _submit_cut(client, *parent[1:], task_rows)
                     for i, parent in enumerate(level) if parent[4] <= TASK_CUT_FACTOR * task_rows}
        driven = [i for i in range(len(level)) if i not in submitted]
        cuts = [None] * len(level)
        if driven:
            with ThreadPoolExecutor(max_workers=min(len(driven), drivers)) as pool:
                for i, children in zip(driven, pool.map(lambda i: _cut(client, *level[i][1:], task_rows), driven)):
                    cuts[i] = children
        metas = client.gather([meta for meta, _ in submitted.values()])
        for (i, (_, labels)), (n_cells, counts) in zip(submitted.items(), metas):
            cuts[i] = _split(client, *level[i][1:4], labels, n_cells, counts)
        del submitted, metas
        parents, level = level, []
        for (path, *_), children in zip(parents, cuts):
            for c, (pieces, sizes) in enumerate(children):
                if sum(sizes) // task_rows > 1:
                    level.append((path + (c,), *_join(client, pieces, sizes, task_rows), sum(sizes)))
                else:
                    leaves.append((path + (c,), pieces))
        del parents, cuts
    leaves.sort(key=lambda leaf: leaf[0])
    return [pieces for _, pieces in leaves]


def _cut(client, work, rest, row0s, n: int, task_rows: int) -> list:
    """One parent cut into at most TOP_FAN cells by the client's queries (:func:`_split`'s children)."""
    n_cells = min(TOP_FAN, n // task_rows)
    labels, n_cells = chunked_mdav(client, work, row0s, n, n // n_cells)
    counts = client.gather(client.map(ck.label_counts, labels, n_groups=n_cells))
    return _split(client, work, rest, row0s, labels, n_cells, counts)


def _submit_cut(client, work, rest, row0s, n: int, task_rows: int):
    """One parent's cut into at most TOP_FAN cells as one task: (future of (cells, each chunk's
    count per cell), label futures, one per chunk); nothing waited for."""
    n_cells = min(TOP_FAN, n // task_rows)
    done = client.submit(cut_in_task, list(work), list(row0s), n, n // n_cells)
    every = client.submit(operator.getitem, done, 0)
    labels = client.map(operator.getitem, [every] * len(work), range(len(work)))
    return client.submit(operator.itemgetter(1, 2), done), labels


def _split(client, work, rest, row0s, labels, n_cells: int, counts) -> list:
    """The parent's rows split by cell: per cell, its (working copy, residual) piece futures —
    each a (row ids, values) — and their sizes.

    Empties ``work`` and ``rest``: once the rows are split by cell, the workers may free the
    parent's chunks.
    """
    split32 = client.map(ck.split_rows, work, labels, row0s, n_groups=n_cells)
    split_rest = client.map(ck.split_rows, rest, labels, row0s, n_groups=n_cells)
    work.clear()
    rest.clear()
    del labels
    children = []
    for c in range(n_cells):
        sizes = [int(cnt[c]) for cnt in counts]
        pieces = [(client.submit(operator.getitem, s32, c), client.submit(operator.getitem, sr, c))
                  for s32, sr, size in zip(split32, split_rest, sizes) if size]
        children.append((pieces, [size for size in sizes if size]))
    return children


def _join(client, pieces, sizes, task_rows):
    """A cell's pieces joined into chunks of ≥ min(CHUNK_ROWS, 2 task_rows) rows: (working-copy
    futures, residual futures, row-id futures).

    Empties ``pieces``: once joined, the workers may free them.
    """
    target = max(1, min(CHUNK_ROWS, 2 * task_rows))
    groups, cur, rows = [], [], 0
    for piece, size in zip(pieces, sizes):
        cur.append(piece)
        rows += size
        if rows >= target:
            groups.append(cur)
            cur, rows = [], 0
    if cur:
        groups.append(cur)
    work = [client.submit(ck.join_pieces, *[p32 for p32, _ in g]) for g in groups]
    full = [client.submit(ck.join_pieces, *[lo for _, lo in g]) for g in groups]
    pieces.clear()
    del groups, cur
    blocks32 = [client.submit(operator.getitem, c, 1) for c in work]
    rests = [client.submit(operator.getitem, c, 1) for c in full]
    row0s = [client.submit(operator.getitem, c, 0) for c in work]
    return blocks32, rests, row0s


def _whole(Z, row0):
    return np.arange(row0, row0 + Z.shape[0], dtype=np.int64), Z


def fan_out(client, tops: list, cfg: FanoutConfig, timings: dict) -> FanoutResult:
    """Macroaggregation, split and fan-out of the top cells ``tops`` (futures of TopCell).

    Empties ``tops``: each top cell's records are freed once its macroaggregation has run, and each
    macroaggregated cell once its partitions have been extracted, so that the cluster holds one
    copy of the records at a time (two while a top cell is being cut into its partitions).
    """
    import time

    t0 = time.perf_counter()
    split_needed = 0.0 < cfg.nu < 1.0 or cfg.sse_threshold is not None or cfg.partition_size is None
    macro_K = cfg.K if split_needed else None
    given, tops = tops, client.map(kp.macroaggregate, tops, partition_size=cfg.partition_size, K=macro_K,
                                   macro=cfg.macro, macro_iter=cfg.macro_iter)
    given.clear()
    summaries = client.gather(client.map(kp.macro_summary, tops))
    timings["macroaggregation"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    sse = np.concatenate([s[2] for s in summaries])
    size = np.concatenate([s[1] for s in summaries])
    distal = _distal_macrocells(sse, cfg)
    offsets = np.cumsum([0] + [s[2].size for s in summaries])
    distal_by_top = [distal[offsets[t]:offsets[t + 1]] for t in range(len(tops))]

    pca = None
    prox_params = {}
    needs_pca = cfg.proximal_method == "pca-mdav" and not distal.all()
    if needs_pca:
        # Chan–Golub–LeVeque merge in top-cell order: deterministic, whatever the input chunking
        merged = combine_moments(client.gather(client.map(kp.proximal_moments, tops, distal_by_top)))
        cnt, mean, cov = merged.count, merged.mean, merged.covariance()
        comps, lam, m_tilde, loss = pca_basis(cov, cfg.energy_loss, cfg.n_components)
        prox_params = {"components": comps, "mean": mean}
        pca = {"eigenvalues": lam.tolist(), "n_components": m_tilde, "energy_loss": loss, "records": int(cnt)}
    timings["split"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    results, partitions, parts = [], [], []
    for t, (grp, msize, _, _) in enumerate(summaries):
        d_t = distal_by_top[t]
        for g in np.unique(grp):
            in_g = grp == g
            for side, mask in (("proximal", in_g & ~d_t), ("distal", in_g & d_t)):
                rows = int(msize[mask].sum())
                if rows == 0:
                    continue
                method = cfg.proximal_method if side == "proximal" else cfg.distal_method
                params = dict(cfg.method_params.get(method, {}))
                if side == "proximal":
                    params.update(prox_params)
                part = client.submit(kp.extract, tops[t], int(g), mask)
                if cfg.max_cell_failure is None:
                    results.append(client.submit(_run_partition, part, method, cfg.k, params))
                else:
                    results.append(client.submit(kpart.grow_partition, part, method, cfg.k, cfg.max_cell_failure,
                                                 params))
                if cfg.keep_parts:
                    parts.append(part)
                partitions.append((t, int(g), side, rows))
    n_top = len(tops)
    tops.clear()   # the partitions hold the records now
    client.gather(client.map(_n_cells, results))  # wait, surfacing any task error here
    timings["fan_out"] = time.perf_counter() - t0
    return FanoutResult(
        results=results,
        partitions=partitions,
        n_top=n_top,
        macro_sse=sse,
        macro_size=size,
        n_distal_macro=int(distal.sum()),
        pca=pca,
        timings=timings,
        k=cfg.k,
        parts=parts if cfg.keep_parts else None,
    )


def _run_partition(part, method, k, params):
    with reusing():  # the method's work arrays reused (daskmicro.runtime.allocator)
        return kp.run_partition(part, method, k, params)


def _n_cells(res) -> int:
    return res.n_cells


def _distal_macrocells(sse: np.ndarray, cfg: FanoutConfig) -> np.ndarray:
    """Distal = the ⌈ν·C⌉ macrocells of highest SSE (ties: lower index), or SSE above a threshold."""
    C = sse.size
    if cfg.sse_threshold is not None:
        return sse > cfg.sse_threshold
    n_distal = int(round(cfg.nu * C))
    distal = np.zeros(C, dtype=bool)
    if n_distal:
        order = np.lexsort((np.arange(C), -sse))
        distal[order[:n_distal]] = True
    return distal
