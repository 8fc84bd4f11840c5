"""Macroaggregation, proximal/distal split and per-partition fan-out on a Dask cluster.

The shape of Algorithm C (``001_4020e12e98fa2147.txt`` §IV-B) made to scale:

1. **top level** — when there are more than ``task_rows`` records, MDAV at a very large size
   K₀ ≈ ``task_rows`` over the chunked data (:func:`graph.macro.chunked_mdav`) cuts them into
   top cells of one task each, and the rows are shuffled into those tasks;
2. **macroaggregation** inside each top cell: nested MDAV, first at ``partition_size`` (the
   groups that become partitions), then at ``K`` (the macrocells, when the split needs them);
3. **split** — the fraction ν of macrocells with the highest SSE is distal, the rest proximal;
   the PCA of all proximal records is fitted from per-top-cell moments (one reduction);
4. **fan-out** — one task per partition (a group's proximal or distal macrocells), each running a
   registered method: PCA-MDAV on the proximal side, MDAV on the distal side by default.

The paper's own two-partition mode (``layout="two-partition"``) is the same with a single top
cell and a single group: all proximal records in one task, all distal records in another.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from ..kernels import chunked as ck
from ..kernels import partition as kp
from ..kernels.pca import pca_basis
from .macro import chunked_mdav

__all__ = ["FanoutConfig", "FanoutResult", "top_cells", "fan_out"]


@dataclass
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
    parts: list | None = None     # futures of each partition's (row ids, Z) when keep_parts


def top_cells(client, blocks, row0s, lengths, n: int, task_rows: int, timings: dict):
    """Futures of :class:`~daskmicro.kernels.partition.TopCell`, one per top cell."""
    import time

    live = [i for i, L in enumerate(lengths) if L]
    blocks = [blocks[i] for i in live]
    row0s = [row0s[i] for i in live]
    n_top = max(1, n // task_rows)
    t0 = time.perf_counter()
    if n_top == 1:
        pieces = client.map(_whole, blocks, row0s)
        tops = [client.submit(kp.concat_pieces, *pieces)]
    else:
        labels, n_top = chunked_mdav(client, blocks, row0s, n, n // n_top)
        split = client.map(ck.split_rows, blocks, labels, row0s, n_groups=n_top)
        tops = []
        for t in range(n_top):
            parts = [client.submit(operator.getitem, s, t) for s in split]
            tops.append(client.submit(kp.concat_pieces, *parts))
    timings["top_level"] = time.perf_counter() - t0
    return tops


def _whole(Z, row0):
    return np.arange(row0, row0 + Z.shape[0], dtype=np.int64), Z


def fan_out(client, tops: list, cfg: FanoutConfig, timings: dict) -> FanoutResult:
    import time

    t0 = time.perf_counter()
    split_needed = 0.0 < cfg.nu < 1.0 or cfg.sse_threshold is not None or cfg.partition_size is None
    macro_K = cfg.K if split_needed else None
    tops = client.map(kp.macroaggregate, tops, partition_size=cfg.partition_size, K=macro_K, macro=cfg.macro,
                      macro_iter=cfg.macro_iter)
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
        moments = client.gather(client.map(kp.proximal_moments, tops, distal_by_top))
        cnt = sum(mo[0] for mo in moments)
        s1 = np.sum([mo[1] for mo in moments], axis=0)
        s2 = np.sum([mo[2] for mo in moments], axis=0)
        mean = s1 / cnt
        cov = s2 / cnt - np.outer(mean, mean)
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
                results.append(client.submit(kp.run_partition, part, method, cfg.k, params))
                if cfg.keep_parts:
                    parts.append(part)
                partitions.append((t, int(g), side, rows))
    client.gather(client.map(_n_cells, results))  # wait, surfacing any task error here
    timings["fan_out"] = time.perf_counter() - t0
    return FanoutResult(
        results=results,
        partitions=partitions,
        n_top=len(tops),
        macro_sse=sse,
        macro_size=size,
        n_distal_macro=int(distal.sum()),
        pca=pca,
        timings=timings,
        parts=parts if cfg.keep_parts else None,
    )


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
