"""Time/distortion trade-off sweeps: ν, K and m̃ of Algorithm C tried on a sample.

Rebollo-Monedero et al. (*Efficient k-Anonymous Microaggregation … via PCA*, §V, Figs. 11–12, 14 and 21) choose the
fraction ν of distal macrocells (equivalently C_D = round(ν·C)) and the number m̃ of principal
components by plotting, for every candidate, the running time relative to exact MDAV,
τ = t′/t, against the distortion increment over exact MDAV.  :func:`sweep` does the same on a
seeded sample of a table: exact MDAV on the sample is the reference, and every setting of the
grid ν × K × (m̃ or ε²) runs Algorithm C (:func:`daskmicro.kernels.algorithm_c.algorithm_c`) on
the same sample, in this process, one thread, timed like the reference.

Two distortion increments are reported: ``delta_D`` = D′ − D, the paper's ΔD (an increment of
normalized distortion), and ``relative_distortion`` δ = (D′ − D)/D, the relative increment the
run reports use.  A distortion *budget* bounds δ; the recommended setting is the fastest one
within it (:func:`daskmicro.tuning.points.recommend_setting`).
"""

from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError

__all__ = ["sweep", "sweep_points", "DEFAULT_NU", "DEFAULT_SAMPLE", "INCREMENTS"]

#: What a budget bounds: δ = (D′ − D)/D ("relative") or ΔD = D′ − D ("absolute").
INCREMENTS = ("relative", "absolute")

#: ν values scanned when none are given: 0, 0.1, …, 1.
DEFAULT_NU = tuple(round(0.1 * i, 1) for i in range(11))
#: Rows of the sample when none is given.
DEFAULT_SAMPLE = 20_000
#: Macrocell size when none is given (the paper's value on Large Census), for samples of at
#: least 10·K records; smaller samples use n/10 so that there are about ten macrocells.
DEFAULT_K = 1000

_COLUMNS = [
    "setting", "nu", "K", "n_components", "energy_loss_bound", "exact", "macrocells", "n_distal",
    "m_tilde", "energy_loss", "seconds", "relative_time", "information_loss", "distortion", "delta_D",
    "relative_distortion", "cells", "min_cell_size", "max_cell_size", "recommended",
]


# --------------------------------------------------------------------------- validation


def _number_list(values, name: str, kind=float) -> list:
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        values = [values]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ParameterError(f"{name} must hold numbers, got {v!r}")
        if kind is int and float(v) != int(v):
            raise ParameterError(f"{name} must hold integers, got {v!r}")
        if not math.isfinite(float(v)):
            raise ParameterError(f"{name} must hold finite numbers, got {v!r}")
        v = kind(v)
        if v not in out:
            out.append(v)
    if not out:
        raise ParameterError(f"{name} is empty: give at least one value")
    return out


def _check_lists(nu, K, n_components, energy_loss) -> None:
    _number_list(DEFAULT_NU if nu is None else nu, "nu")
    for name, values in (("K", K), ("n_components", n_components), ("energy_loss", energy_loss)):
        if values is not None:
            _number_list(values, name, int if name != "energy_loss" else float)


def _check_grid(k, nu, K, n_components, energy_loss, n, m_used):
    nu = _number_list(DEFAULT_NU if nu is None else nu, "nu")
    bad = [v for v in nu if not 0.0 <= v <= 1.0]
    if bad:
        raise ParameterError(f"nu must lie in [0, 1], got {bad[0]}")
    if K is None:
        K = [DEFAULT_K if n >= 10 * DEFAULT_K else max(k + 1, n // 10)]
    K = _number_list(K, "K", int)
    for v in K:   # K > k is a rule of the run each setting stands for (_validated)
        if v > n:
            raise ParameterError(f"K = {v} exceeds the sample of {n} records")
    if n_components is not None and energy_loss is not None:
        raise ParameterError("give either n_components or energy_loss, not both")
    if n_components is not None:
        n_components = _number_list(n_components, "n_components", int)
        for v in n_components:
            if not 1 <= v <= m_used:
                raise ParameterError(f"n_components must be between 1 and the {m_used} non-constant QI columns, got {v}")
        pca = [("n_components", v) for v in n_components]
    else:
        energy_loss = _number_list([0.1] if energy_loss is None else energy_loss, "energy_loss")
        bad = [v for v in energy_loss if not 0.0 <= v < 1.0]
        if bad:
            raise ParameterError(f"energy_loss must lie in [0, 1), got {bad[0]}")
        pca = [("energy_loss", v) for v in energy_loss]
    return nu, K, pca


def run_options(k: int, nu: float, K, choice) -> dict:
    """The options of a run (a :class:`~daskmicro.config.RunConfig`) whose cells are a setting of the
    sweep on all the records: ν = 1 is exact MDAV, ν = 0 MDAV with PCA on every record (Algorithm B),
    in between the proximal-distal pipeline (Algorithm C) with that K, ν and PCA bound."""
    opts = {} if choice is None else {choice[0]: choice[1]}
    if nu == 1.0:
        return {"method": "mdav"}
    if nu == 0.0:
        return {"method": "pca-mdav", **opts}
    return {"method": "proximal-distal", "K": int(K), "nu": float(nu), **opts}


def _validated(qi, k, settings) -> None:
    """Every setting is checked as the run it stands for: the one run description's fields and rules
    (K > k, one PCA bound, …) refuse what a run would refuse, in the same words."""
    from ..config import RunConfig

    for _, v, K_, choice in settings:
        RunConfig.build(qi=list(qi), k=k, seed=0, ledger="off", **run_options(k, v, K_, choice))


def _settings(nu, K, pca):
    """The grid, without duplicates: ν = 1 is exact MDAV whatever K and m̃; ν = 0 ignores K."""
    many_K, many_pca = len(K) > 1, len(pca) > 1
    out, seen = [], set()
    for K_ in K:
        for v in nu:
            for kind, value in pca:
                key = (v, None if v in (0.0, 1.0) else K_, None if v == 1.0 else (kind, value))
                # ν = 0 runs no macroaggregation, so its K is irrelevant (recorded as missing)
                if key in seen:
                    continue
                seen.add(key)
                label = "MDAV (ν = 1)" if v == 1.0 else f"ν={v:g}"
                if many_K and 0.0 < v < 1.0:
                    label += f" K={K_}"
                if many_pca and v < 1.0:
                    label += f" m̃={value}" if kind == "n_components" else f" ε²={value:g}"
                out.append((label, v, key[1], key[2]))
    return out


# --------------------------------------------------------------------------- the sweep


def _best_of(repeat, fn):
    best, result = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def _warm_up(Z, k):
    """Compile (or load) the numba kernels on a small slice so that no timing includes it."""
    from ..kernels.algorithm_c import algorithm_c
    from ..kernels.mdav import mdav

    small = Z[: min(Z.shape[0], max(8 * k, 200))]
    if small.shape[0] >= 4 * k + 4:
        mdav(small, k)
        algorithm_c(small, k, K=small.shape[0] // 4, nu=0.5, n_components=1)


def sweep(
    df,
    qi: Sequence,
    k: int,
    *,
    nu=None,
    K=None,
    n_components=None,
    energy_loss=None,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    budget: float | None = None,
    repeat: int = 1,
    increment: str = "relative",
    progress=None,
) -> pd.DataFrame:
    """Scan settings of Algorithm C on a sample: relative time τ vs distortion increment.

    Implements the parameter scans of *Efficient k-Anonymous Microaggregation … via PCA*, §V (m̃: Figs. 11–12; ν or C_D: Figs. 14 and 21) for
    any table.  Exact MDAV (Algorithm A) on the sample is the reference; each setting runs MDAV
    with PCA on proximal data (Algorithm C, §IV-B) on the same z-scored sample.

    Parameters
    ----------
    df : pandas.DataFrame or dask.dataframe.DataFrame
        The table; only the QI columns of the sampled rows are read into memory.
    qi : list of column labels
        Numeric quasi-identifier columns.
    k : int
        Anonymity parameter, 2 ≤ k ≤ sample size.
    nu : float or list of float in [0, 1], optional
        Fractions of distal macrocells (default 0, 0.1, …, 1).  ν = 1 is exact MDAV (the
        reference setting, δ = 0); ν = 0 is MDAV with PCA on every record (Algorithm B).
    K : int or list of int, optional
        Macrocell sizes, each > k and ≤ the sample size (default 1000, or n/10 for samples
        under 10,000 records).
    n_components : int or list of int, optional
        m̃ values for the proximal PCA; exclusive with ``energy_loss``.
    energy_loss : float or list of float in [0, 1), optional
        ε² bounds choosing m̃ (default 0.1).
    sample : int, default 20,000
        Rows of the seeded sample (the whole table when it is smaller).
    seed : int, default 0
        Seed of the sample.
    budget : float, optional
        Largest acceptable distortion increment (a fraction: 0.01 = 1 %), on δ or on ΔD as
        ``increment`` says; marks the fastest setting within it in the ``recommended`` column.
    repeat : int, default 1
        Each timing is the best of this many runs.
    increment : {"relative", "absolute"}, default "relative"
        The increment the budget bounds and the plot shows: δ = (D′ − D)/D, or the paper's
        ΔD = D′ − D (Figs. 14 and 21).
    progress : callable, optional
        Called as ``progress(row_dict)`` after each setting.

    Returns
    -------
    pandas.DataFrame
        One row per setting with ``setting``, ``nu``, ``K``, ``n_components``,
        ``energy_loss_bound``, ``exact``, ``macrocells`` (C), ``n_distal`` (C_D), ``m_tilde``,
        ``energy_loss`` (attained ε²), ``seconds``, ``relative_time`` (τ), ``information_loss``,
        ``distortion`` (D′), ``delta_D`` (D′ − D), ``relative_distortion`` (δ), cell counts and
        ``recommended``.  ``result.attrs`` holds the sample size, the table size, the seed, the
        reference run (``reference``: information loss, seconds) and the budget.

    Raises
    ------
    ParameterError
        Empty or out-of-range lists, K ≤ k, a sample smaller than k, bad seed or repeat.
    InputError
        Non-numeric QI columns, missing or infinite values.
    """
    from ..io.qi import qi_matrix
    from ..config import check_k_for, check_seed
    from ..io.frames import is_dask_frame
    from ..io.qi import check_qi
    from ..kernels import information_loss, mdav, standardize
    from ..kernels.algorithm_c import algorithm_c
    from .points import recommend_setting
    from .sampling import check_sample_size, qi_sample

    if not (isinstance(df, pd.DataFrame) or is_dask_frame(df)):
        raise InputError(f"input must be a pandas or Dask DataFrame, got {type(df).__name__}")
    qi = check_qi(df, qi)
    sample = check_sample_size(sample, "sample")
    seed = check_seed(seed)
    repeat = check_sample_size(repeat, "repeat")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
        raise ParameterError(f"k must be an integer ≥ 2, got {k!r}")
    if sample < k:
        raise ParameterError(f"sample = {sample} is smaller than k = {k}")
    if increment not in INCREMENTS:
        raise ParameterError(f"increment must be one of {', '.join(INCREMENTS)}, got {increment!r}")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget < 0:
            raise ParameterError(f"budget must be a number ≥ 0 (a fraction of D), got {budget!r}")
    _check_lists(nu, K, n_components, energy_loss)   # cheap, before the data are read

    frame, n_total = qi_sample(df, qi, sample, seed)
    X = qi_matrix(frame, qi)
    n = X.shape[0]
    k = check_k_for(n, k)
    varying = X.max(axis=0) != X.min(axis=0)
    if not varying.any():
        raise InputError("every QI column is constant on the sample: there is nothing to microaggregate")
    Z = np.ascontiguousarray(standardize(X[:, varying])[0])
    m_used = int(varying.sum())
    nus, Ks, pca = _check_grid(k, nu, K, n_components, energy_loss, n, m_used)
    settings = _settings(nus, Ks, pca)
    _validated(qi, k, settings)

    _warm_up(Z, k)
    t_ref, ref_labels = _best_of(repeat, lambda: mdav(Z, k))
    il_ref = information_loss(Z, ref_labels, standardized=True)
    rows = []
    for label, v, K_, choice in settings:
        opts = {} if choice is None else {choice[0]: choice[1]}
        if v == 1.0:
            # ν = 1 is exact MDAV: the reference run itself (τ = 1, δ = 0 by definition)
            seconds, res = t_ref, _exact_result(ref_labels)
        else:
            seconds, res = _best_of(repeat, lambda: algorithm_c(Z, k, K=K_, nu=v, **opts))
        il = information_loss(Z, res.labels, standardized=True)
        sizes = np.bincount(res.labels)
        row = {
            "setting": label, "nu": v, "K": K_,
            "n_components": opts.get("n_components"), "energy_loss_bound": opts.get("energy_loss"),
            "exact": v == 1.0, "macrocells": res.macrocells, "n_distal": res.n_distal,
            "m_tilde": res.n_components, "energy_loss": res.energy_loss, "seconds": seconds,
            "relative_time": seconds / t_ref if t_ref > 0 else math.nan,
            "information_loss": il, "distortion": il / 100.0, "delta_D": (il - il_ref) / 100.0,
            "relative_distortion": (il - il_ref) / il_ref if il_ref > 0 else 0.0,
            "cells": int(sizes.size), "min_cell_size": int(sizes.min()), "max_cell_size": int(sizes.max()),
        }
        rows.append(row)
        if progress is not None:
            progress(row)
    result = pd.DataFrame(rows, columns=_COLUMNS)
    for col in ("K", "n_components", "m_tilde"):
        result[col] = result[col].astype("Int64")
    best = recommend_setting(sweep_points(result, increment), budget) if budget is not None else None
    result["recommended"] = result["setting"] == (best["setting"] if best else None)
    result.attrs.update({
        "k": int(k), "qi": [str(c) for c in qi], "m_used": m_used,
        "constant_columns": [str(c) for c, v in zip(qi, varying) if not v],
        "n_input": int(n_total), "sample_size": int(n), "seed": int(seed), "repeat": int(repeat),
        "budget": None if budget is None else float(budget), "increment": increment,
        "reference": {"method": "mdav", "information_loss": float(il_ref), "distortion": float(il_ref) / 100,
                      "seconds": float(t_ref), "cells": int(ref_labels.max()) + 1},
        "recommended": None if best is None else best["setting"],
        # the recommended setting as the options of a run on all the records (RunConfig fields)
        "recommended_options": None if best is None else
        next(run_options(k, v, K_, c) for label, v, K_, c in settings if label == best["setting"]),
    })
    return result


def _exact_result(labels):
    from ..kernels.algorithm_c import AlgorithmCResult

    return AlgorithmCResult(labels=labels, macrocells=1, n_distal=1, n_components=None, energy_loss=None,
                            macrocell_sse=np.zeros(1))


def sweep_points(result: pd.DataFrame, increment: str | None = None) -> list[dict]:
    """The rows of a :func:`sweep` result as points for :func:`~daskmicro.report.plots.sweep_plot`.

    The points' ``relative_distortion`` is δ, or ΔD when ``increment`` (default: the sweep's
    own, ``result.attrs["increment"]``) is "absolute".
    """
    increment = increment or result.attrs.get("increment", "relative")
    column = "delta_D" if increment == "absolute" else "relative_distortion"
    return [
        {"setting": str(s), "relative_time": float(t), "relative_distortion": float(d)}
        for s, t, d in zip(result["setting"], result["relative_time"], result[column])
    ]
