"""k-anonymous release of a pandas DataFrame by microaggregation of its quasi-identifiers.

:func:`anonymize` is the one-call entry point behind ``daskmicro anonymize``: validate, z-score the
quasi-identifier (QI) columns, form cells of at least k records with a kernel (exact MDAV,
PCA-MDAV or PCL), replace each record's QI values by its cell centroid in the original units, shuffle
the rows with a recorded seed, verify the result, and return it with a :class:`~daskmicro.report.Report`.
"""

from __future__ import annotations

import secrets
import time
from typing import Sequence

import numpy as np
import pandas as pd

from .errors import InputError, ParameterError
from .io.qi import check_qi_dtype, qi_column, repeated, unknown_columns
from .graph.pipeline import DEFAULT_MAX_TASK_ROWS, check_options, check_pcl_options
from .kernels import centroids, check_k, information_loss, mdav, standardize
from .privacy.verify import verify_k_anonymity, verify_rows
from .publish import ROW_ID, replace_qi
from .reference import attach_reference, check_reference
from .report.run import Report
from .kernels.bounds import MAX_ABS  # noqa: F401  (largest QI magnitude accepted; importable from here too)

__all__ = ["METHODS", "anonymize"]

#: Microaggregation methods accepted by :func:`anonymize`.
METHODS = ("auto", "mdav", "pca-mdav", "partitioned", "proximal-distal", "pcl")

#: ``method="auto"`` runs exact MDAV in process up to this many records.
AUTO_EXACT_ROWS = 100_000


def _is_dask_frame(obj) -> bool:
    try:
        import dask.dataframe as dd
    except ImportError:  # pragma: no cover - dask is a dependency
        return False
    return isinstance(obj, dd.DataFrame)


def anonymize(
    df,
    qi: Sequence,
    k: int,
    method: str = "auto",
    energy_loss: float | None = None,
    n_components: int | None = None,
    seed: int | None = None,
    keep_row_id: bool = False,
    *,
    K: int | None = None,
    nu: float | None = None,
    partition_size: int | None = None,
    task_rows: int | None = None,
    max_task_rows: int | None = None,
    sse_threshold: float | None = None,
    client=None,
    progress=None,
    participation=None,
    max_cell_failure: float | None = None,
    plain_k_reference: bool | None = None,
    reference: str | None = None,
    strata=None,
    missing: str = "refuse",
    merge_small_strata: bool = False,
    refine: str | None = None,
    refine_iter: int | None = None,
    macro: str | None = None,
    macro_iter: int | None = None,
):
    """Publish a k-anonymous version of ``df`` by microaggregating its quasi-identifier columns.

    A pandas DataFrame with ``method="mdav"``, ``"pca-mdav"`` or ``"pcl"`` and no ``client`` (nor
    ``refine`` / ``macro``) is processed in this process.  Everything else runs on a Dask cluster
    (:mod:`daskmicro.graph.pipeline`): ``client`` if given, else the current default client, else
    a LocalCluster started for the run; a Dask DataFrame input gives a Dask DataFrame release
    (backed by verified, persisted partitions), a pandas input a pandas release.

    Parameters
    ----------
    df : pandas.DataFrame or dask.dataframe.DataFrame
        The records, one per row; at least ``k`` rows.
    qi : list of column labels
        The quasi-identifier columns: numeric (integer or float, not bool), without missing or
        infinite values.  A single label is accepted as a one-column list.
    k : int
        Anonymity parameter, 2 ≤ k ≤ number of rows: every published QI tuple is shared by at
        least ``k`` records.
    method : {"auto", "mdav", "pca-mdav", "partitioned", "proximal-distal"}, default "auto"
        ``"mdav"``: exact MDAV (:func:`daskmicro.kernels.mdav`).  ``"pca-mdav"``: cells found by
        MDAV in the space of the leading principal components (``daskmicro.kernels.pca.pca_mdav``).
        ``"partitioned"``: the scalable pipeline — macroaggregation, proximal/distal split and one
        task per partition of ``partition_size`` … 2·``partition_size``−1 records.
        ``"proximal-distal"``: Algorithm C of the PCA paper as published (two partitions).
        ``"pcl"``: the probability-constrained Lloyd algorithm started from MDAV
        (:func:`daskmicro.kernels.pcl.pcl`, PCL paper §3.3–3.4; noisy variant for k ≤ 10 on up to
        125,000 records): lower distortion than MDAV at a much higher cost; one task, limited
        to ``max_task_rows`` records like ``"mdav"``.
        ``"auto"``: exact MDAV up to 100,000 records, ``"partitioned"`` beyond.
    energy_loss : float in [0, 1), optional
        PCA-MDAV only: keep the fewest components whose discarded eigenvalue energy fraction is at
        most ``energy_loss`` (ε²).  Exclusive with ``n_components``.
    n_components : int, optional
        PCA-MDAV only: number of principal components to keep.  Exclusive with ``energy_loss``.
    seed : int, optional
        Seed (≥ 0) of the row shuffle.  When None a seed is drawn from OS entropy; either way it
        is recorded in the report so the run can be reproduced.
    keep_row_id : bool, default False
        Add a ``row_id`` column holding each record's position in ``df``, to map the release back
        to the input.  Off by default: row ids are linking information.
    K : int, optional
        Macrocell size (> k) of the partitioned and proximal-distal methods (default 1000).
    nu : float in [0, 1], optional
        Fraction of macrocells, those of highest SSE, that are distal (MDAV); the rest are
        proximal (PCA-MDAV).  Default 1.0 (MDAV everywhere) for "partitioned", 0.4 for
        "proximal-distal".  ν = 0 is PCA-MDAV everywhere.
    partition_size : int, optional
        "partitioned": records per partition, at least K (default 50,000).  Larger partitions
        cost more time and less distortion.
    task_rows : int, optional
        "partitioned": records per top-level task (default 250,000).
    max_task_rows : int, optional
        Largest input the one-task methods accept (default 1,000,000).
    sse_threshold : float, optional
        Instead of ``nu``: macrocells whose SSE (z-space) exceeds it are distal.
    client : distributed.Client, optional
        Cluster to run on.
    progress : callable, optional
        Cluster runs: called as ``progress(stage, seconds)`` when each pipeline stage ends.
    participation : float or column label, optional
        p-Probabilistic k-anonymity (seed 003 §V): the probability π in (0, 1] that each record
        takes part, or the name of a column holding one π_j in (0, 1] per record (not a QI; it is
        published unchanged).  Constant π: the method runs with k replaced by the effective
        anonymity n_min, with any method.  Per-record π_j: methods "mdav" and "pca-mdav" in
        process only; each cell is grown until its own failure probability q̄ ≤ p̄.  Needs
        ``max_cell_failure``; see :mod:`daskmicro.anonymize_probabilistic`.
    max_cell_failure : float in (0, 1), optional
        With ``participation``: the acceptable cell failure p̄, the largest probability that a cell
        ends with between 1 and k − 1 participants.
    plain_k_reference : bool, optional
        With ``participation``: also run the same method with plain k (π = 1) and report the
        distortion ratio.  Default: only for in-process runs of at most 50,000 records.
    reference : {"auto", "exact", "sample"} or None, default None
        Also compute the information loss of exact MDAV on the same data, for the report's
        relative distortion increment (:func:`daskmicro.reference.attach_reference`): "exact" on
        all records, "sample" estimated on a seeded sample of 20,000, "auto" exact up to 20,000
        records.  None (the default) computes nothing.
    strata : list of column labels, optional
        Microaggregate independently inside each stratum (records sharing these columns' values),
        as sdcMicro's ``strata_variables``; see :mod:`daskmicro.strata`.  pandas input only.
    missing : {"refuse", "separate"}, default "refuse"
        Missing QI values (NaN, NA, None) are refused with the column and count, or, with
        ``"separate"``, each missingness pattern is microaggregated on its observed columns and the
        gaps are kept.  pandas input only for ``"separate"``.
    merge_small_strata : bool, default False
        Merge a stratum with fewer than k records into a neighbour instead of refusing it.
    refine : {None, "pcl"}, optional
        Refinement stage (runs on the cluster): every partition's cells are improved by noiseless
        PCL started from them — never worse than before.  Recorded in ``report.pipeline["refine"]``
        (SSE before/after, iterations) and ``report.timings["refine"]``.
    refine_iter : int, optional
        Bound on PCL iterations per partition of the refinement stage (default 2).
    macro : {"mdav", "pcl"}, optional
        Macroaggregation inside each top-level task: nested MDAV (default) or nested MDAV refined
        by PCL with K in the thousands (cells ≥ K, not bounded by 2K−1).
    macro_iter : int, optional
        Bound on PCL iterations per macroaggregation level with ``macro="pcl"`` (default 2).

    Returns
    -------
    release : pandas.DataFrame
        Same columns in the same order (plus ``row_id`` if asked) and as many rows as ``df``,
        shuffled, with a fresh ``RangeIndex``.  QI columns hold cell centroids in original units;
        every other column is unchanged in values and dtype.
    report : Report
        Parameters, cell sizes, information loss, timing, seed and the verification results.

    Raises
    ------
    InputError
        ``df`` is not a DataFrame, has no rows, or a QI column is non-numeric or holds NaN/inf.
    ParameterError
        Unknown or repeated QI columns, ``k`` out of range, unknown method, bad PCA options.
    VerificationError
        The release failed its k-anonymity or row-count check (a bug; nothing is returned).

    Notes
    -----
    * QI columns are z-scored (population standard deviation) before the kernel sees them, so
      distances do not depend on units; centroids are the means of the *original* values.
    * Zero-variance QI columns identify no one: they are left out of the kernel's input,
      published unchanged, and listed in ``report.constant_columns``.  If every QI column is
      constant, cells are still formed (MDAV on a zero matrix) and the release equals the input
      apart from the shuffle.
    * Integer QI columns become float64, recorded in ``report.dtype_changes``: centroids are not
      integers in general, and rounding them would add distortion the report would not show.
      Float columns keep their dtype (float32 centroids are rounded to float32; equal centroids
      stay equal, so k-anonymity is unaffected).
    * The row order is shuffled because the input order may correlate with identity; the index
      of ``df`` is not carried over for the same reason.  With the recorded seed the shuffle can
      be undone, so keep the report with the data owner.

    Examples
    --------
    >>> from daskmicro.datasets import load_census
    >>> census = load_census()
    >>> release, report = anonymize(census, qi=list(census.columns), k=5, seed=0)
    >>> round(report.information_loss, 2), report.min_cell_size >= 5
    (9.09, True)
    """
    method = _check_method(method)
    seed = _check_seed(seed)
    reference = check_reference(reference)
    pipeline_options = check_options(K, nu, partition_size, task_rows, max_task_rows, sse_threshold)
    pcl_options = _check_pcl_stage_options(refine, refine_iter, macro, macro_iter)
    if (refine is not None or macro is not None) and (
        strata or missing == "separate" or participation is not None or max_cell_failure is not None
    ):
        raise ParameterError("refine and macro cannot be combined with strata, missing='separate' or participation yet")
    if missing not in ("refuse", "separate"):
        raise ParameterError(f"missing must be 'refuse' or 'separate', got {missing!r}")
    if (strata or missing == "separate") and (participation is not None or max_cell_failure is not None):
        raise ParameterError("participation cannot be combined with strata or missing='separate'")
    if strata or missing == "separate":
        from .strata import anonymize_stratified

        opts = dict(K=K, nu=nu, partition_size=partition_size, task_rows=task_rows, max_task_rows=max_task_rows,
                    sse_threshold=sse_threshold)
        return anonymize_stratified(df, qi, k, method, energy_loss, n_components, seed, keep_row_id, strata,
                                    missing, merge_small_strata, opts, client)
    if participation is not None or max_cell_failure is not None or plain_k_reference is not None:
        from .anonymize_probabilistic import anonymize_probabilistic

        release, report = anonymize_probabilistic(
            df, qi, k, method, energy_loss, n_components, seed, keep_row_id, pipeline_options, client, progress,
            participation, max_cell_failure, plain_k_reference,
        )
        attach_reference(report, df, report.qi, reference)
        return release, report
    if _is_dask_frame(df) or client is not None or method in ("partitioned", "proximal-distal") or (
        method == "auto" and isinstance(df, pd.DataFrame) and len(df) > AUTO_EXACT_ROWS
    ) or pcl_options[0] is not None or pcl_options[2] != "mdav":
        from .anonymize_cluster import anonymize_on_cluster

        release, report = anonymize_on_cluster(
            df, qi, k, method, energy_loss, n_components, seed, keep_row_id, pipeline_options, client, progress,
            pcl_options=pcl_options,
        )
        attach_reference(report, df, report.qi, reference)
        return release, report
    if any(v is not None for v in pipeline_options[:3]):
        raise ParameterError(f"K, nu and partition_size apply to the partitioned and proximal-distal methods, not {method!r}")
    if method == "auto":
        method = "mdav"
    n = _check_frame(df)
    qi = _check_qi(df, qi)
    k = _check_k(n, k)
    max_rows = pipeline_options[4] or DEFAULT_MAX_TASK_ROWS
    if method == "pcl" and n > max_rows:
        raise ParameterError(
            f"method 'pcl' runs in one task and is limited to max_task_rows = {max_rows:,} records (got {n:,}); "
            "use method='partitioned' with refine='pcl', or raise max_task_rows"
        )
    energy_loss, n_components = _check_pca_options(method, energy_loss, n_components)
    if keep_row_id and ROW_ID in df.columns:
        raise ParameterError(f"keep_row_id: the input already has a column named {ROW_ID!r}")

    constant, varying, Xv, Z = _qi_space(df, qi, n_components)

    pca_info = None
    start = time.perf_counter()
    if method == "pca-mdav" and Xv.shape[1]:
        pca_mdav, pca_reduce = _pca_kernels()
        labels = pca_mdav(Z, k, energy_loss=energy_loss, n_components=n_components)
        seconds = time.perf_counter() - start
        pca_info = pca_reduce(Z, energy_loss=energy_loss, n_components=n_components)
    elif method == "pcl":
        from .kernels.pcl import pcl

        labels = pcl(Z, k, init="mdav", seed=0)
        seconds = time.perf_counter() - start
    else:
        labels = mdav(Z, k)
        seconds = time.perf_counter() - start
    labels = np.asarray(labels, dtype=np.int64)

    release, dtype_changes = _publish_shuffled(df, varying, Xv, labels, seed, keep_row_id)

    k_check = verify_k_anonymity(release, qi, k).raise_if_failed()
    row_check = verify_rows(n, release).raise_if_failed()

    sizes = np.bincount(labels)
    sizes = sizes[sizes > 0]
    report = Report(
        n=n,
        m=len(qi),
        m_used=len(varying),
        k=k,
        method=method,
        qi=list(qi),
        cells=int(sizes.size),
        min_cell_size=int(sizes.min()),
        max_cell_size=int(sizes.max()),
        information_loss=information_loss(Xv, labels) if Xv.shape[1] else 0.0,
        seconds=seconds,
        seed=seed,
        constant_columns=[c for c, const in zip(qi, constant) if const],
        dtype_changes=dtype_changes,
        energy_loss=energy_loss,
        n_components=None if pca_info is None else int(pca_info.n_components),
        eigenvalues=None if pca_info is None else [float(v) for v in np.asarray(pca_info.eigenvalues)],
        pca_energy_loss=None if pca_info is None else float(pca_info.energy_loss),
        k_anonymity=k_check,
        rows=row_check,
        keep_row_id=bool(keep_row_id),
    )
    attach_reference(report, df, qi, reference)
    return release, report


# --------------------------------------------------------------------------- validation


def _check_frame(df) -> int:
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"input must be a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise InputError("input has no rows")
    return len(df)


def _check_qi(df: pd.DataFrame, qi) -> list:
    if qi is None:
        raise ParameterError("qi must name at least one quasi-identifier column")
    if isinstance(qi, str) or not isinstance(qi, (list, tuple, pd.Index, np.ndarray)):
        qi = [qi]
    qi = list(qi)
    if not qi:
        raise ParameterError("qi must name at least one quasi-identifier column")
    twice = repeated(qi)
    if twice:
        raise ParameterError(f"QI column(s) named more than once: {_names(twice)}")
    unknown = [c for c in qi if c not in df.columns]
    if unknown:
        raise unknown_columns(unknown, df.columns)
    ambiguous = [c for c in qi if int((df.columns == c).sum()) > 1]
    if ambiguous:
        raise InputError(f"QI column name(s) occurring more than once in the input: {_names(ambiguous)}")
    for c in qi:
        check_qi_dtype(c, df[c].dtype)
    return qi


def _qi_space(df: pd.DataFrame, qi: list, n_components):
    """(constant mask, varying column names, X of the varying columns, their z-scores) of the QI columns.

    Constant columns carry no information: they are left out of the cells' space and published
    unchanged.  With none varying, Z is one column of zeros (every record alike).
    """
    X = _qi_matrix(df, qi)
    constant = X.max(axis=0) == X.min(axis=0)
    varying = [c for c, const in zip(qi, constant) if not const]
    if n_components is not None and n_components > len(varying):
        raise ParameterError(
            f"n_components = {n_components} exceeds the number of non-constant QI columns ({len(varying)})"
        )
    Xv = X[:, ~constant]
    Z = standardize(Xv)[0] if Xv.shape[1] else np.zeros((len(df), 1))
    return constant, varying, Xv, Z


def _publish_shuffled(df: pd.DataFrame, varying, Xv, labels, seed, keep_row_id):
    """The release (QIs replaced by centroids) in a row order shuffled with ``seed``; (release, dtype changes)."""
    release, dtype_changes = _publish(df, varying, Xv, labels)
    perm = np.random.default_rng(seed).permutation(len(df))
    release = release.take(perm).reset_index(drop=True)
    if keep_row_id:
        release[ROW_ID] = perm.astype(np.int64)
    return release, dtype_changes


def _qi_matrix(df: pd.DataFrame, qi: list) -> np.ndarray:
    """The QI columns as a float64 matrix, refusing missing and infinite values (counts only)."""
    X = np.empty((len(df), len(qi)), dtype=np.float64)
    missing, infinite = [], []
    for j, c in enumerate(qi):
        X[:, j] = qi_column(df[c], c)  # exact float64, or refused (integers beyond ±2^53)
        n_nan = int(np.isnan(X[:, j]).sum())
        n_inf = int(np.isinf(X[:, j]).sum())
        if n_nan:
            missing.append(f"{c!r} ({n_nan})")
        if n_inf:
            infinite.append(f"{c!r} ({n_inf})")
    if missing:
        raise InputError(f"QI column(s) with missing (NaN) values: {', '.join(missing)}; impute or drop them first")
    if infinite:
        raise InputError(f"QI column(s) with infinite values: {', '.join(infinite)}")
    huge = [repr(c) for j, c in enumerate(qi) if np.abs(X[:, j]).max(initial=0.0) > MAX_ABS]
    if huge:
        raise InputError(f"QI column(s) with values beyond ±{MAX_ABS:.0e}: {', '.join(huge)}; squared distances "
                         "would overflow: rescale them (e.g. to other units) first")
    return X


def _check_k(n: int, k) -> int:
    try:
        return check_k(n, k)
    except ValueError as exc:
        raise ParameterError(str(exc)) from None


def _check_method(method) -> str:
    name = str(method).strip().lower().replace("_", "-") if isinstance(method, str) else method
    if name not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    return name


def _check_pca_options(method: str, energy_loss, n_components):
    if method not in ("pca-mdav", "partitioned", "proximal-distal"):
        for name, value in (("energy_loss", energy_loss), ("n_components", n_components)):
            if value is not None:
                raise ParameterError(f"{name} applies only to method 'pca-mdav', not {method!r}")
        return None, None
    if energy_loss is not None and n_components is not None:
        raise ParameterError("give either energy_loss or n_components, not both")
    if energy_loss is not None:
        if isinstance(energy_loss, bool) or not isinstance(energy_loss, (int, float, np.integer, np.floating)):
            raise ParameterError(f"energy_loss must be a number in [0, 1), got {energy_loss!r}")
        energy_loss = float(energy_loss)
        if not 0.0 <= energy_loss < 1.0:
            raise ParameterError(f"energy_loss must be in [0, 1), got {energy_loss}")
    if n_components is not None:
        if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) or n_components < 1:
            raise ParameterError(f"n_components must be an integer ≥ 1, got {n_components!r}")
        n_components = int(n_components)
    return energy_loss, n_components


def _check_pcl_stage_options(refine, refine_iter, macro, macro_iter):
    """(refine, refine_iter, macro, macro_iter) checked; the iteration bounds need their stage."""
    if refine_iter is not None and refine is None:
        raise ParameterError("refine_iter applies only with refine='pcl'")
    if macro_iter is not None and (not isinstance(macro, str) or macro.lower() != "pcl"):
        raise ParameterError("macro_iter applies only with macro='pcl'")
    return check_pcl_options(refine, refine_iter, "mdav" if macro is None else macro, macro_iter)


def _check_seed(seed) -> int:
    if seed is None:
        return secrets.randbits(63)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _names(columns) -> str:
    return ", ".join(repr(c) for c in columns)


def _pca_kernels():
    try:
        from .kernels.pca import pca_mdav, pca_reduce
    except ImportError as exc:
        raise ParameterError(f"method 'pca-mdav' is not available in this installation ({exc})") from None
    return pca_mdav, pca_reduce


# --------------------------------------------------------------------------- release


def _publish(df: pd.DataFrame, columns: list, X: np.ndarray, labels: np.ndarray):
    """Copy of ``df`` with ``columns`` replaced by per-cell means of ``X``; returns it and dtype changes."""
    if not columns:
        return df.copy(), {}
    return replace_qi(df, columns, centroids(X, labels)[labels])
