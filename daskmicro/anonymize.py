"""The Python entries of a run: :func:`anonymize` (a pandas or Dask DataFrame in, the release
out) and :func:`anonymize_file` (a file or Parquet lake in, a committed release out).

Both only turn their keywords into a :class:`~daskmicro.config.RunConfig` (validated once) and
hand it to the one planner (:func:`daskmicro.plan.run`), as the CLI and workflow specs do: z-score
the quasi-identifier (QI) columns, form cells of at least k records, replace each record's QI
values by its cell centroid in the original units, shuffle the rows with a recorded seed, verify
the release as published and report.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from .config import AUTO_EXACT_ROWS, METHODS, RunConfig
from .errors import InputError, ParameterError
from .io.frames import is_dask_frame
from .io.qi import check_qi
from .kernels.bounds import MAX_ABS  # the largest QI magnitude accepted, importable from here too
from .plan import RunPaths, run

__all__ = ["METHODS", "AUTO_EXACT_ROWS", "MAX_ABS", "anonymize", "anonymize_file"]


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
    risk: bool = False,
    qi_except=None,
    strata=None,
    missing: str = "refuse",
    merge_small_strata: bool = False,
    quality: str = "balanced",
    refine: str | None = None,
    refine_iter: int | None = None,
    macro: str | None = None,
    macro_iter: int | None = None,
    memory_limit=None,
    spill_directory=None,
    ledger=None,
    new_series: bool = False,
    id_column=None,
    drop=None,
    keep=None,
):
    """Publish a k-anonymous version of ``df`` by microaggregating its quasi-identifier columns.

    Every option composes with every other through the one planner (:mod:`daskmicro.plan`), except
    the combinations refused with a one-line reason in the README's table
    (:func:`daskmicro.config.rules_table`).  A small pandas run of one-task groups with no
    ``client`` runs the plan in this process; everything else runs on a Dask cluster: ``client``
    if given, else the current default client, else a LocalCluster started for the run.  A Dask
    DataFrame input gives a Dask DataFrame release (partitions built and verified on the workers,
    as many as the input's), a pandas input a pandas release.

    Parameters
    ----------
    df : pandas.DataFrame or dask.dataframe.DataFrame
        The records, one per row; at least ``k`` rows.
    qi : list of column labels, or "all-numeric"
        The quasi-identifier columns: numeric (integer or float, not bool), without missing or
        infinite values.  A single label is accepted as a one-column list.  ``"all-numeric"``: every
        integer or float column of the input, but those of ``qi_except`` and the columns with another
        role (strata, ``id_column``, the participation column, ``drop`` and ``keep``); a numeric
        column named like an identifier (``record_id``) must then be named in ``qi_except``.
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
        "partitioned": records per partition, at least K (default 25,000).  Larger partitions
        cost more time and less distortion.
    task_rows : int, optional
        "partitioned": records per top-level task (default 250,000 with ``quality`` "balanced",
        500,000 with "high").
    max_task_rows : int, optional
        Largest input the one-task methods accept (default 1,000,000).
    sse_threshold : float, optional
        Instead of ``nu``: macrocells whose SSE (z-space) exceeds it are distal.
    client : distributed.Client, optional
        Cluster to run on.  Without one, a small run of one-task groups runs the same plan in
        this process; anything else uses the default client or a LocalCluster started for the run.
    progress : callable, optional
        Called as ``progress(stage, seconds)`` when each stage of the run ends (the same stages
        and figures as ``report.timings``).
    participation : float or column label, optional
        p-Probabilistic k-anonymity (*p-Probabilistic k-Anonymous Microaggregation …*, §V): the probability π in (0, 1] that each record
        takes part, or the name of a column holding one π_j in (0, 1] per record (not a QI; it is
        published unchanged).  Constant π: the method runs with k replaced by the effective
        anonymity n_min, with any method.  Per-record π_j: methods "mdav", "pca-mdav" and
        "partitioned" (cells grown inside every partition) on any input; each cell is grown
        until its own failure probability q̄ ≤ p̄ (refused with PCL cells and "proximal-distal",
        see the README's combination table).  Needs ``max_cell_failure``.
    max_cell_failure : float in (0, 1), optional
        With ``participation``: the acceptable cell failure p̄, the largest probability that a cell
        ends with between 1 and k − 1 participants.
    plain_k_reference : bool, optional
        With ``participation``: also run the same method with plain k (π = 1) and report the
        distortion ratio.  Default: for one-task groups of at most 50,000 records.
    reference : {"auto", "exact", "sample"} or None, default None
        Also compute the information loss of exact MDAV on the same data, for the report's
        relative distortion increment (:func:`daskmicro.report.reference.attach_reference`): "exact" on
        all records, "sample" estimated on a seeded sample of 20,000, "auto" exact up to 20,000
        records.  None (the default) computes nothing.
    risk : bool, default False
        Also measure the disclosure risk of the release against ``df``
        (:mod:`daskmicro.privacy.risk_sample`): record linkage and interval disclosure on a uniform
        sample of at most 10,000 records with every QI observed.  ``report.risk`` holds the exact
        counts; the published report (``report.to_dict()``, the page, the summary) the rates rounded to
        whole percentage points (coarser on a sample under 1,000 records, none under 20), in plain
        sentences.  Refused with method "incremental".
    qi_except : list of column labels, optional
        With ``qi="all-numeric"``: the numeric columns that are not QIs (each must be a column of
        the input; a near miss gets a hint).  Refused with a list of QIs.
    strata : list of column labels, optional
        Microaggregate independently inside each stratum (records sharing these columns' values),
        as sdcMicro's ``strata_variables``; see :mod:`daskmicro.strata`.  Any input, any method.
    missing : {"refuse", "separate"}, default "refuse"
        Missing QI values (NaN, NA, None) are refused with the column and count, or, with
        ``"separate"``, each missingness pattern is microaggregated on its observed columns and the
        gaps are kept.
    merge_small_strata : bool, default False
        Merge a stratum with fewer than k records into a neighbour instead of refusing it.
    quality : {"balanced", "high"}, default "balanced"
        What the run spends on distortion after the cells are formed
        (:data:`daskmicro.config.QUALITY`).  ``"balanced"``: the partitioned pipeline improves
        each top cell's cells jointly by moves and swaps between neighbouring cells (a few passes;
        every cell stays ≥ k, the SSE only falls), which brings it to exact MDAV's distortion;
        one-task methods run as named.  ``"high"``: passes with more neighbours, then two PCL
        iterations (a joint reassignment of all records under the size constraint) and two more
        passes, over top cells twice as large, also after the one-task methods (exact MDAV
        included) — 10–15 % less distortion than exact MDAV for about twice the balanced time.
        Recorded in ``report.pipeline["improve"]``.
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
    memory_limit : int or str, optional
        Memory limit of each worker of the LocalCluster the run starts (bytes, or a size such as
        ``"3GiB"``); Dask spills held results to disk past 60 % of it.  Default: from the task
        size (:func:`daskmicro.runtime.cluster.worker_memory_limit`).  Setting it runs the plan on a
        LocalCluster; refused with ``client=`` (its workers keep their own limits).
    spill_directory : path, optional
        Where those workers spill (their local directory); default: Dask's temporary directory.
    ledger : path, True, False or "off", optional
        The release ledger (:mod:`daskmicro.io.ledger`) that records what each release published:
        None or True: ``DASKMICRO_LEDGER``, else ``$XDG_STATE_HOME/daskmicro/ledger``; a path: that
        directory; False or "off": a trial run that records nothing (its release must not be
        published).  Records published before are republished with their frozen cell values
        (docs/series.md).
    new_series : bool, default False
        Aggregate records published before afresh (a new series): this release and earlier ones
        together can give their values back.
    id_column : column label, optional
        A column that identifies a record across releases (read, never published); default: a
        record is identified by its stratum and QI values.
    drop : list of column labels, optional
        Columns left out of the release (direct identifiers).
    keep : list of column labels, optional
        Columns published as they are although they look like identifiers.  Every column
        published as it is (not a QI, stratum or dropped) is refused when its name looks like an
        identifier, or when it holds text, integers, dates or whole-number floats distinct for
        nearly every record (:mod:`daskmicro.privacy.identifiers`; booleans and floats with
        fractional values are left alone), unless it is kept here.

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
    if not isinstance(df, pd.DataFrame) and not is_dask_frame(df):
        raise InputError(f"input must be a pandas or Dask DataFrame, got {type(df).__name__}")
    if isinstance(df, pd.DataFrame) and len(df) == 0:
        raise InputError("input has no rows")
    cfg = RunConfig.build(
        qi=qi if qi_except is not None or _all_numeric(qi) else check_qi(df, qi), qi_except=qi_except, k=k, method=method, energy_loss=energy_loss, n_components=n_components, seed=seed,
        keep_row_id=keep_row_id, K=K, nu=nu, partition_size=partition_size, task_rows=task_rows,
        max_task_rows=max_task_rows, sse_threshold=sse_threshold, participation=participation,
        max_cell_failure=max_cell_failure, plain_k_reference=plain_k_reference, reference=reference, risk=risk,
        strata=strata, missing=missing, merge_small_strata=merge_small_strata, quality=quality, refine=refine,
        refine_iter=refine_iter, macro=macro, macro_iter=macro_iter, memory_limit=memory_limit,
        spill_directory=spill_directory, ledger=ledger, new_series=new_series, id_column=id_column,
        drop=drop, keep=keep,
    )
    if isinstance(df, pd.DataFrame) and cfg.k > len(df):
        raise ParameterError(f"k = {cfg.k} exceeds the number of records n = {len(df)}")
    outcome = run(cfg, df, client=client, progress=progress)
    return outcome.release, outcome.report


def _all_numeric(qi) -> bool:
    from .config import ALL_NUMERIC

    return isinstance(qi, str) and qi.strip().lower() == ALL_NUMERIC


def anonymize_file(input, output, qi, k: int, *, report=None, client=None, progress=None, storage_options=None,
                   **options):
    """Publish a k-anonymous release of a file or Parquet lake into ``output``: the Python twin of
    ``daskmicro anonymize INPUT OUTPUT``.

    ``input`` is a ``.parquet`` / ``.csv`` file or a directory of Parquet files, local, a
    ``file://`` URL or an ``s3://BUCKET/KEY``, ``abfs://CONTAINER/KEY`` (``az://``) or ``gs://BUCKET/KEY``
    object or prefix (read by the workers; credentials and endpoint from the environment's chain, or
    ``storage_options``, the keyword arguments of the store's file system — s3fs, adlfs, gcsfs —,
    which are never recorded: :mod:`daskmicro.io.objectstore`); ``output`` a
    ``.parquet`` file (written with its JSON report, ``report`` or ``OUTPUT.report.json``) or a
    directory (committed with ``_SUCCESS``, its report inside; ``report`` is a copy), local or on an
    object store (any of those schemes): ``s3://BUCKET/KEY.parquet`` one object PUT whole on the condition checked before
    the run (:mod:`daskmicro.io.objectfile`), ``s3://BUCKET/PREFIX`` a directory release committed
    there by its ``_SUCCESS`` object (:mod:`daskmicro.io.objectcommit`); ``report`` may be an
    object there too, and ``storage_options`` apply to every URL.  ``options`` are those of :func:`anonymize` plus the
    lake options (``filters``, ``columns``, ``drop``, ``partition_by``, ``rows_per_file``,
    ``table_format`` — ``"parquet"`` or ``"delta"``, a new version of a Delta table, local or at an
    ``s3://`` prefix (:mod:`daskmicro.io.deltastore`) —,
    ``force``, ``overwrite``, ``workers``, ``scheduler``, ``dask_report``, ``risk``, ``memory_limit``,
    ``spill_directory``).  Returns the
    :class:`~daskmicro.report.Report` (None when a committed release of the same input and
    options already holds: nothing to do).
    """
    cfg = RunConfig.build(qi=qi, k=k, **options)
    paths = RunPaths(input=input, output=output, report_path=report, storage_options=storage_options)
    outcome = run(cfg, paths=paths, client=client, progress=progress)
    return outcome.report
