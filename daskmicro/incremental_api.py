"""The Python entry of an incremental survey run: :func:`anonymize_incremental`.

It only turns its keywords into a :class:`~daskmicro.config.RunConfig` with method
``"incremental"`` (validated once) and hands it to the one planner (:func:`daskmicro.plan.run`),
as ``daskmicro anonymize --method incremental`` and a workflow spec's ``method: incremental`` do.
The two stages are those of *Incremental k-Anonymous Microaggregation in Large-Scale Electronic
Surveys With Optimized Scheduling* (§III-B; :mod:`daskmicro.incremental`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from .config import RunConfig
from .errors import InputError
from .incremental.options import BASE_METHODS, FIXED_INCREMENTS, INCREMENTS, PIPELINE_OPTIONS, IncrementalOptions
from .io.objectstore import is_url
from .io.survey import SurveyTimeoutError
from .plan import RunPaths, run

__all__ = ["anonymize_incremental", "BASE_METHODS", "INCREMENT_METHODS", "SurveyTimeoutError"]

#: Increment algorithms (§IV-A, §IV-D) and the fixed increment of a partitioned base.
INCREMENT_METHODS = INCREMENTS + FIXED_INCREMENTS


def anonymize_incremental(
    source,
    qi,
    k: int,
    *,
    nu: float | None = None,
    zeta: float | None = None,
    close_at=None,
    base_method="mdav",
    increment: str = "2mdav",
    seed: int | None = None,
    client=None,
    reference: bool = False,
    timeout: float | None = None,
    progress: Callable | None = None,
    time_column=None,
    time_model=None,
    expected_rows: int | None = None,
    base_options: dict | None = None,
    memory_limit=None,
    spill_directory=None,
    output=None,
    report=None,
    ledger=None,
    new_series: bool = False,
    id_column=None,
    drop=None,
    keep=None,
    overwrite: bool = False,
    storage_options: dict | None = None,
):
    """Anonymize a survey in two time-delayed stages: a base stage while it runs, an increment at the close.

    The base stage's Dask work is submitted as soon as the fraction 1 − ν of the records has
    arrived; the increment stage is submitted when the survey closes; both run on the same
    cluster (§III-B of *Incremental k-Anonymous Microaggregation … With Optimized Scheduling*).  The release combines both micropartitions,
    is verified (k-anonymity, rows in = rows out) and only then returned.

    Parameters
    ----------
    source : path, URL or pandas.DataFrame
        A Parquet lake directory being filled (by :class:`~daskmicro.io.arrivals.ArrivalSimulator`
        or a collector): a file counts once it is in the directory (for a simulated lake, once the
        survey clock passes its arrival time), and the survey closes with the ``_closed.json``
        marker or at ``close_at``.  Or an ``s3://BUCKET/PREFIX`` whose objects land the same way
        (:mod:`daskmicro.io.objectsurvey`: an object counts once it is listed, complete).  Or a DataFrame with an arrival-time column ``time_column``
        (POSIX seconds or datetimes): a record has arrived once the clock passes its time.
    qi : list of column labels
        Numeric quasi-identifier columns (no missing or infinite values).
    k : int
        Anonymity parameter, 2 ≤ k ≤ number of records.
    nu : float in [0, 1), optional
        Data ratio ν: the fraction of the records left to the increment stage.  Default: ν* of
        §IV-B from ``zeta``, else from the time model (``time_model`` or, when absent, a short
        calibration run on a worker) and the survey's duration.
    zeta : float, optional
        Arrivals coefficient ζ (survey duration / one-pass running time) for ν* (closed form for
        quadratic stages, §IV-B, or the numerical optimum for the time model's exponent β).
    close_at : float or datetime, optional
        When the survey closes (POSIX seconds or a datetime), whatever the lake's marker says.
        For a DataFrame source the default is its last arrival time.
    base_method : {"mdav", "pca-mdav", "partitioned"} or callable, default "mdav"
        Base microaggregation: exact MDAV or PCA-MDAV in one task, or ``f(Z, k) -> labels`` on
        z-scored records (also used for 2MDAV's increment run; a callable must be importable by
        the workers); or "partitioned": the partitioned pipeline across the cluster, the
        increment then adjoined per base partition (:mod:`daskmicro.graph.incremental_pipeline`),
        and the release a Dask DataFrame on the given ``client`` (pandas when the run starts its
        own cluster), verified before it is returned.
    increment : {"2mdav", "nn", "nn-split-mid", "nn-split-end", "nn-fixed"}, default "2mdav"
        Increment algorithm (:func:`daskmicro.kernels.increment.increment`).  2MDAV needs at
        least k increment records; with fewer, "nn" is used and the report says so.  "nn-fixed"
        (partitioned base only): late records join their nearest base cell, whose centroid is
        left as it is, so the release is published and counted before the close
        (:mod:`daskmicro.graph.incremental_fixed`).
    seed : int, optional
        Seed of the row shuffle of the release (drawn and recorded when None).
    client : distributed.Client, optional
        Cluster to run on; default the current client, else a LocalCluster for the run.
    reference : bool, default False
        After the release, also run one-pass microaggregation of all the records, to report
        its time t_ref, the relative times τ₀, τ₊, τ₋, Δτ and the distortion loss δ (§III-B.4).
    timeout : float, optional
        Seconds (from the call) to wait for the base fraction and for the close.  When passed,
        the stages are cancelled and :class:`~daskmicro.io.survey.SurveyTimeoutError` is raised;
        nothing is released.
    progress : callable, optional
        Called as ``progress(event, seconds since the call)`` at each step.
    time_column : column label, optional
        DataFrame source: the arrival-time column (read to schedule the stages, never published).
    time_model : schedule.TimeModel or (a, beta), optional
        Running time ``t(n) = a·nᵝ`` seconds of the base method, for ν* when neither ``nu``
        nor ``zeta`` is given, and as the predicted t_ref of the report.
    expected_rows : int, optional
        Lake without a simulator manifest: the total number of records of the survey.
    base_options : dict, optional
        ``base_method="partitioned"`` only: options of the pipeline (K, partition_size, task_rows,
        nu — the distal fraction of the macrocells, not the data ratio —, energy_loss, n_components).
        Without ``nu`` (data ratio) its time model is calibrated by timing the pipeline itself.
    memory_limit, spill_directory : optional
        The workers of the LocalCluster the run starts: memory limit (bytes or a size such as
        ``"4GiB"``) and where they spill, as for :func:`daskmicro.anonymize`; refused with a
        ``client`` (its workers keep their own).
    output, report : path or URL, optional
        Write the release instead of returning it, committed as every run's is: a ``.parquet``
        file with its JSON report (``report`` or ``OUTPUT.report.json``) in one atomic batch, or
        a directory with ``_SUCCESS``; on an object store an ``s3://…/NAME.parquet`` object or an
        ``s3://BUCKET/PREFIX`` committed by its ``_SUCCESS`` object, and ``report`` an ``s3://``
        object.  ``overwrite`` replaces an earlier release there.
    storage_options : dict, optional
        s3fs's keyword arguments for every ``s3://`` URL of the run (credentials, endpoint); never
        recorded.  Default: the environment's chain.
    ledger, new_series, id_column : optional
        The release ledger, as for :func:`daskmicro.anonymize`: the release is recorded in its
        series; a survey holding records published before in the series is refused.
    drop, keep : list of column labels, optional
        Columns left out of the release; columns published as they are although they look like
        identifiers (as for :func:`daskmicro.anonymize`).

    Returns
    -------
    release : pandas.DataFrame, or None when written to ``output``
        All records, shuffled, QI values replaced by their cell's centroid (original units).
    report : Report
        ``report.incremental`` holds ν, ζ, the measured times (POSIX seconds: base submitted,
        started, ended, close, increment ended, release) and, relative to t_ref, τ₀, τ₊, τ₋, Δτ,
        and δ when ``reference`` is set.

    Raises
    ------
    SurveyTimeoutError
        The base fraction or the close was not reached within ``timeout`` (no release).
    InputError, ParameterError, VerificationError
        Bad source or parameters; a failed release check.
    """
    from .errors import ParameterError

    if isinstance(source, (str, Path)):
        data, input = None, source if is_url(source) else Path(source)
    elif isinstance(source, pd.DataFrame):
        data, input = source, None
    else:
        raise InputError(f"source must be a Parquet lake directory or a pandas DataFrame, got {type(source).__name__}")
    if base_options is not None and not isinstance(base_options, dict):
        raise ParameterError(f"base_options must be a dict of pipeline options, got {type(base_options).__name__}")
    pipeline = dict(base_options or {})
    unknown = [key for key in pipeline if key not in PIPELINE_OPTIONS]
    if unknown:
        raise ParameterError(f"base_options: unknown option(s) {', '.join(map(repr, unknown))}; expected some of "
                             f"{', '.join(PIPELINE_OPTIONS)}")
    if pipeline and base_method != "partitioned":
        raise ParameterError(f"base_options apply to base_method='partitioned', not {base_method!r}")
    options = IncrementalOptions.build(
        nu=nu, zeta=zeta, close_at=close_at, base_method=base_method, increment=increment, reference=reference,
        timeout=timeout, time_column=time_column, time_model=time_model, expected_rows=expected_rows)
    cfg = RunConfig.build(qi=_qi_list(qi), k=k, method="incremental", incremental=options, seed=seed,
                          memory_limit=memory_limit, spill_directory=spill_directory, ledger=ledger,
                          new_series=new_series, id_column=id_column, drop=drop, keep=keep, overwrite=overwrite,
                          **pipeline)
    outcome = run(cfg, data, paths=RunPaths(input=input, output=output, report_path=report,
                                            storage_options=storage_options), client=client, progress=progress)
    return outcome.release, outcome.report


def _qi_list(qi):
    """A single QI label is a list of one (as the earlier signature took it)."""
    return [qi] if isinstance(qi, (str, int)) else qi
