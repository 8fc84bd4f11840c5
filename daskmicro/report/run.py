"""The report of one anonymization run: what was done, how much it cost, and the checks it passed.

A :class:`Report` holds parameters, aggregate metrics and verification results — never a data
value — so it can be archived and compared across runs.  The object holds the shuffle ``seed``,
the input's paths and the exact information loss, but its published form
(:meth:`Report.to_dict`: the JSON and HTML reports) does not: with the seed anyone could undo the
shuffle of the release rows, and with the exact information loss (or any other exact figure of
the original spread) and the release anyone could work out the within-cell sum of squares
(:mod:`daskmicro.report.coarse`).  The published report gives the information loss rounded to a
fixed grid; the exact figures go to the private run record (:meth:`Report.run_record`,
:mod:`daskmicro.io.runrecord`).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from .describe import method_text

__all__ = ["Report", "PRIVATE_PATHS", "PRIVATE_LAKE"]

#: Paths of a run that locate the input: kept in the private run record only.
PRIVATE_PATHS = ("input", "source")
#: Parts of a directory release's record that identify the input files (paths, sizes, times).
PRIVATE_LAKE = ("input",)


def _version() -> str:
    from .._version import __version__

    return __version__


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _check_dict(check) -> dict | None:
    if check is None:
        return None
    return check.to_dict() if hasattr(check, "to_dict") else dict(check)


@dataclass
class Report:
    """Summary of an anonymization run, returned by :func:`daskmicro.anonymize.anonymize`.

    Attributes
    ----------
    n : int
        Number of records (rows in = rows out).
    m : int
        Number of quasi-identifier (QI) columns named by the user.
    m_used : int
        Number of QI columns handed to the kernel (``m`` minus the constant columns).
    k : int
        Anonymity parameter.
    method : str
        The method that formed the cells: ``"mdav"``, ``"pca-mdav"``, ``"pcl"``, ``"partitioned"``,
        ``"proximal-distal"``, ``"incremental"``, or ``"mixed"`` for groups run by different methods;
        the published report adds ``method_text``, what ran in words
        (:func:`daskmicro.report.describe.method_text`, the improvement pass included).
    qi : list of str
        The QI column names, in the order given.
    cells : int
        Number of cells of the micropartition.
    min_cell_size, max_cell_size : int
        Smallest and largest cell (between k and 2k − 1 for MDAV).
    information_loss : float
        IL = 100·SSE/SST on the columnwise z-scored QI columns, exact (the published report gives
        it rounded, :mod:`daskmicro.report.coarse`).
    seconds : float
        Wall time of the microaggregation proper (kernel only, not I/O or validation).
    seed : int
        Seed of the row shuffle (drawn from OS entropy when not given, and recorded here so the
        run can be reproduced).
    constant_columns : list of str
        Zero-variance QI columns: published unchanged, left out of the kernel's input.
    dtype_changes : dict
        ``{column: {"from": dtype, "to": dtype}}`` for QI columns whose dtype changed (integer
        columns become float64, since centroids are not integers in general).
    energy_loss, n_components, eigenvalues
        PCA-MDAV only: the energy-loss bound ε² asked for (or None), the number of principal
        components kept and the eigenvalue spectrum of the z-scored QI covariance.
    k_anonymity, rows
        Results of :func:`~daskmicro.privacy.verify_k_anonymity` and
        :func:`~daskmicro.privacy.verify_rows` on the release.
    keep_row_id : bool
        Whether the release holds a ``row_id`` column mapping back to input positions.
    paths : dict
        Input, output and report paths when run from the CLI.
    pipeline : dict, optional
        Runs on a cluster: the layout (top cells, partitions, macrocells, ν, K, partition size),
        the sorted macrocell SSE curve, the proximal PCA, timings per stage and the worker count.
    quality, improvement, options
        The run's ``quality`` setting; the improvement pass that ran (its settings, the groups it ran
        on and whether it changed any cell; None when none ran); every option of the run as given
        (the configuration without the seed and the paths).
    version : str
        daskmicro version that produced the release.
    created : str
        UTC time stamp (ISO 8601) of the run.

    The optional fields below default to None and appear in :meth:`exact_dict` only when set; the
    HTML report (:func:`daskmicro.report.render_html`) shows a section for each one present.  The
    published :meth:`to_dict` leaves out, or keeps only the counts and labels of, those that are
    figures of the original spread: the reference IL and δ, the macrocell SSE curve, utility and
    risk measures, the PCA spectrum (:func:`daskmicro.report.coarse.public_report`).

    timings : dict, optional
        ``{stage: seconds}`` wall time per pipeline stage, in execution order.
    reference_information_loss : float, optional
        IL of exact MDAV on the same data (or estimated on a sample), to report the relative
        distortion increment δ = (D − D_ref)/D_ref.
    cell_size_counts : dict, optional
        ``{cell size: number of cells}``, the cell-size histogram.
    macrocell_sse : list of float, optional
        SSE of each macrocell of the proximal/distal prepartition (*Efficient k-Anonymous Microaggregation … via PCA*, §IV-B, Fig. 13).
    nu, n_distal : float, int, optional
        Fraction of macrocells declared distal and their number C_D.
    incremental, probabilistic : dict, optional
        Incremental-mode timings (τ₀, τ₊, Δτ, δ, …) and p-probabilistic failure metrics.
    utility, risk : dict, optional
        Utility measures (:func:`daskmicro.kernels.utility.utility_measures`) and disclosure-risk
        measures (:func:`daskmicro.privacy.risk.disclosure_risk`) of the release.
    performance_report : str, optional
        Path of the Dask performance report (HTML) of the run.
    reference : dict, optional
        How ``reference_information_loss`` was obtained (:func:`daskmicro.report.reference.attach_reference`):
        ``kind`` ("exact", "sample" or "self"), ``label`` and, on a sample, its size and the ratio.
    release_figures : dict, optional
        Each QI's histogram in the release, on bins from its smallest to its largest published
        value, and the release's correlation matrix (:func:`daskmicro.kernels.figures.publish`):
        figures of the published values only.
    """

    n: int
    m: int
    k: int
    method: str
    qi: list
    cells: int
    min_cell_size: int
    max_cell_size: int
    information_loss: float
    seconds: float
    seed: int
    m_used: int = 0
    constant_columns: list = field(default_factory=list)
    dtype_changes: dict = field(default_factory=dict)
    energy_loss: float | None = None
    n_components: int | None = None
    eigenvalues: list | None = None
    pca_energy_loss: float | None = None
    k_anonymity: Any = None
    rows: Any = None
    keep_row_id: bool = False
    paths: dict = field(default_factory=dict)
    pipeline: dict | None = None
    version: str = field(default_factory=_version)
    created: str = field(default_factory=utc_now)
    timings: dict | None = None
    compile: dict | None = None     # kernel compile / cache load before the stages (daskmicro.runtime.warmup)
    reference_information_loss: float | None = None
    cell_size_counts: dict | None = None
    macrocell_sse: list | None = None
    nu: float | None = None
    n_distal: int | None = None
    incremental: dict | None = None
    probabilistic: dict | None = None
    utility: dict | None = None
    risk: dict | None = None
    performance_report: str | None = None
    reference: dict | None = None
    strata: dict | None = None      # strata / missing-pattern groups (daskmicro.strata)
    lake: dict | None = None        # directory releases: input fingerprint, configuration, files (daskmicro.plan)
    release_figures: dict | None = None  # per-QI histograms and correlations of the release (kernels.figures)
    series: dict | None = None      # the release ledger: recorded or not, records republished with frozen values
    quality: str | None = None      # the run's quality setting ("balanced" or "high")
    improvement: dict | None = None  # the improvement pass that ran (settings, groups, whether it changed cells)
    options: dict | None = None     # every option of the run as given (no seed, no path)

    @property
    def distortion(self) -> float:
        """Normalized distortion D = SSE/SST = IL/100."""
        return self.information_loss / 100.0

    @property
    def verified(self) -> bool:
        """True when both release checks ran and passed."""
        return bool(self.k_anonymity) and bool(self.rows)

    def published_columns(self) -> list:
        """The columns of a published tuple: the stratum columns (published, so part of what an
        intruder sees) followed by the QI columns."""
        strata = list((self.strata or {}).get("columns") or [])
        return list(dict.fromkeys(strata + list(self.qi)))

    def to_dict(self) -> dict:
        """The published report as a JSON-serialisable dictionary: parameters, metrics, checks; no
        data values, no shuffle seed, no input paths, the information loss rounded and no other
        figure of the original spread (:meth:`run_record` holds those; see
        :func:`daskmicro.report.coarse.public_report`)."""
        from .coarse import public_report

        return public_report(self.exact_dict())

    def exact_dict(self) -> dict:
        """Every figure of the run as a JSON-serialisable dictionary, the exact information loss and
        the other figures of the original spread included: private (:meth:`run_record`), never
        published.  Like :meth:`to_dict`, no seed and no input paths."""
        out = {
            "daskmicro_version": self.version,
            "created": self.created,
            "n": int(self.n),
            "m": int(self.m),
            "m_used": int(self.m_used),
            "k": int(self.k),
            "method": self.method,
            "method_text": method_text({"method": self.method, "pipeline": self.pipeline,
                                        "improvement": self.improvement}),
            "qi": [str(c) for c in self.qi],
            "cells": int(self.cells),
            "min_cell_size": int(self.min_cell_size),
            "max_cell_size": int(self.max_cell_size),
            "information_loss": float(self.information_loss),
            "distortion": float(self.distortion),
            "seconds": float(self.seconds),
            "constant_columns": [str(c) for c in self.constant_columns],
            "dtype_changes": {str(c): dict(v) for c, v in self.dtype_changes.items()},
            "keep_row_id": bool(self.keep_row_id),
        }
        if self.method == "pca-mdav":
            out["pca"] = {
                "energy_loss_bound": None if self.energy_loss is None else float(self.energy_loss),
                "energy_loss": None if self.pca_energy_loss is None else float(self.pca_energy_loss),
                "n_components": None if self.n_components is None else int(self.n_components),
                "eigenvalues": None if self.eigenvalues is None else [float(v) for v in self.eigenvalues],
            }
        out["verification"] = {
            "passed": self.verified,
            "k_anonymity": _check_dict(self.k_anonymity),
            "rows": _check_dict(self.rows),
        }
        if self.quality is not None:
            out["quality"] = str(self.quality)
        out["improvement"] = None if self.improvement is None else dict(self.improvement)
        if self.options is not None:
            out["options"] = dict(self.options)
        if self.pipeline:
            out["pipeline"] = self.pipeline
        if self.strata is not None:
            out["strata"] = self.strata
        if self.lake is not None:  # the fingerprint and the files written; the input's identity is private
            out["lake"] = {key: value for key, value in self.lake.items() if key not in PRIVATE_LAKE}
            if isinstance(out["lake"].get("configuration"), dict):
                out["lake"]["configuration"] = {key: value for key, value in out["lake"]["configuration"].items()
                                                if key != "seed"}
        out.update(self._optional_dict())
        paths = {str(key): str(value) for key, value in (self.paths or {}).items() if key not in PRIVATE_PATHS}
        if paths:
            out["paths"] = paths
        return out

    def run_record(self) -> dict:
        """What the published report leaves out (:mod:`daskmicro.io.runrecord`): the shuffle seed, the
        input's paths and identity, the configuration as given, and the exact report
        (:meth:`exact_dict`: the exact information loss and the other figures of the original
        spread).  Private: never written to an output."""
        return {"format": "daskmicro-run-record/1", "created": self.created, "daskmicro_version": self.version,
                "seed": int(self.seed), "paths": {str(key): str(value) for key, value in (self.paths or {}).items()},
                "lake": self.lake, "report": self.exact_dict()}

    def _optional_dict(self) -> dict:
        out = {}
        if self.timings is not None:
            out["timings"] = {str(stage): float(sec) for stage, sec in self.timings.items()}
        if self.compile is not None:
            out["compile"] = {"seconds": float(self.compile["seconds"]),
                              "workers": {str(w): float(v) for w, v in self.compile.get("workers", {}).items()},
                              "cache_dir": self.compile.get("cache_dir"), "compiled": bool(self.compile.get("compiled")),
                              "kernel_sets": list(self.compile.get("kernel_sets", []))}
        if self.reference_information_loss is not None:
            out["reference_information_loss"] = float(self.reference_information_loss)
        if self.cell_size_counts is not None:
            counts = sorted((int(size), int(number)) for size, number in self.cell_size_counts.items())
            out["cell_size_counts"] = {str(size): number for size, number in counts}
        if self.macrocell_sse is not None:
            out["macrocell_sse"] = [float(v) for v in self.macrocell_sse]
        if self.nu is not None:
            out["nu"] = float(self.nu)
        if self.n_distal is not None:
            out["n_distal"] = int(self.n_distal)
        for name in ("incremental", "probabilistic", "utility", "risk", "series"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.to_dict() if hasattr(value, "to_dict") else dict(value)
        if self.performance_report is not None:
            out["performance_report"] = str(self.performance_report)
        if self.reference is not None:
            out["reference"] = dict(self.reference)
        if self.release_figures is not None:
            out["release_figures"] = self.release_figures
        return out

    def to_json(self, path) -> None:
        """Write :meth:`to_dict` as indented JSON to ``path`` atomically."""
        from ..io.tables import write_json_atomic

        write_json_atomic(self.to_dict(), path)

    def summary(self, verbose: bool = False) -> str:
        """The run in a statistician's words, for a terminal (:mod:`daskmicro.report.terminal`, the
        one summary of every entry): what the published report says, the information loss rounded;
        ``verbose`` adds how Dask ran it (microaggregation time, kernel load, the pipeline's layout)."""
        from .terminal import summary_text

        return summary_text(self.to_dict(), verbose=verbose)
