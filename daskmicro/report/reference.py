"""Information loss of exact MDAV on the same data, as the yardstick of a run's report.

The relative distortion increment δ = (D − D_MDAV)/D_MDAV (*Efficient k-Anonymous Microaggregation … via PCA*, §V,
and its conclusion on ΔD/D_ref) needs the distortion of exact MDAV (Algorithm A) on the data
that was released.  :func:`attach_reference` fills ``report.reference_information_loss``:

* ``"exact"`` — exact MDAV on every record (memory O(n·m), time roughly quadratic in n);
* ``"sample"`` — on a seeded sample, the run's own method and exact MDAV both run (in this
  process, :func:`daskmicro.kernels.algorithm_c.algorithm_c` for the cluster layouts, scaled to
  the sample); their ratio r = IL_method / IL_MDAV on the sample turns the run's IL into the
  estimate IL / r, reported with the ratio and the sample size, labelled "estimated on a sample";
* ``"auto"`` — exact up to ``max_exact_rows`` (20,000) records, the sample beyond.

A run whose cells *are* exact MDAV's (method "mdav", and no improvement pass of ``quality="high"``
changed them) is its own reference (``"self"``): nothing is recomputed.  Any other run, exact MDAV
improved afterwards included, is compared with exact MDAV computed here; on a sample the run's
method is repeated with its improvement pass.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ParameterError
from .describe import is_exact_mdav

__all__ = ["REFERENCE_CHOICES", "EXACT_MAX_ROWS", "check_reference", "self_reference", "attach_reference"]

REFERENCE_CHOICES = ("auto", "exact", "sample")
#: ``reference="auto"`` runs exact MDAV on all records up to this many.
EXACT_MAX_ROWS = 20_000
#: Rows of the sample of ``reference="sample"`` (and of "auto" beyond EXACT_MAX_ROWS).
SAMPLE_ROWS = 20_000


def check_reference(reference):
    """``None`` or one of :data:`REFERENCE_CHOICES`; anything else is refused."""
    if reference is None:
        return None
    name = str(reference).strip().lower() if isinstance(reference, str) else reference
    if name not in REFERENCE_CHOICES:
        raise ParameterError(f"reference must be one of {', '.join(REFERENCE_CHOICES)} or None; got {reference!r}")
    return name


def _method_labels(Z, report, n_total):
    """Labels of the run's method on the sample ``Z`` (``n_total``: rows of the whole table), the
    run's improvement pass included when one ran."""
    labels, info = _formed_labels(Z, report, n_total)
    imp = report.improvement
    if imp:
        from ..kernels.improve import polish

        labels = polish(Z, labels, report.k, int(imp["sweeps"]), int(imp["neighbours"]), int(imp["pcl_iter"]),
                        int(imp["post_sweeps"]))
        info = {**info, "improvement": {key: imp[key] for key in ("sweeps", "neighbours", "pcl_iter", "post_sweeps")}}
    return labels, info


def _formed_labels(Z, report, n_total):
    """Labels of the run's method on the sample, before any improvement pass."""
    from ..kernels import mdav
    from ..kernels.algorithm_c import algorithm_c
    from ..kernels.pca import pca_mdav

    k, method, s = report.k, report.method, Z.shape[0]
    pca = {"energy_loss": report.energy_loss} if report.energy_loss is not None else (
        {"n_components": min(int(report.n_components), Z.shape[1])} if report.n_components else {})
    info = {}
    if method == "mdav":
        return mdav(Z, k), info
    if method == "pcl":
        from ..kernels.pcl import pcl

        return pcl(Z, k, init="mdav", seed=0), info
    if method == "pca-mdav":
        return pca_mdav(Z, k, **pca), info
    p = report.pipeline or {}
    nu = float(p.get("nu") if p.get("nu") is not None else (report.nu if report.nu is not None else 1.0))
    scale = s / max(n_total, 1)
    # the layout in miniature: as many macrocells and partitions as the full run, fewer records each
    K = p.get("K") or 1000
    K_s = max(k + 1, int(round(K * scale)))
    part = None
    if method == "partitioned" and p.get("partition_size"):
        part = max(K_s, k, int(round(p["partition_size"] * scale)))
    info = {"K": K_s, "partition_size": part, "nu": nu}
    res = algorithm_c(Z, k, K=K_s, nu=nu, partition_size=part, **pca)
    return res.labels, info


def self_reference(report) -> dict | None:
    """When the run's cells are exact MDAV's (or no QI varies), the run is its own reference: that
    record, also set on ``report``; else None (the reference has to be computed)."""
    if not (report.m_used == 0 or is_exact_mdav({"method": report.method, "improvement": report.improvement})):
        return None
    label = ("no QI column varies: no cell changes any value" if report.m_used == 0 else
             "the run is exact MDAV" if not report.improvement else
             "the run is exact MDAV (the improvement pass changed no cell)")
    record = {"kind": "self", "label": label, "information_loss": float(report.information_loss), "seconds": 0.0}
    report.reference_information_loss, report.reference = record["information_loss"], record
    return record


def attach_reference(report, df, qi, reference="auto", *, max_exact_rows: int = EXACT_MAX_ROWS,
                     sample_rows: int = SAMPLE_ROWS, seed: int = 0) -> dict | None:
    """Compute the reference information loss of exact MDAV and record it in ``report``.

    Parameters
    ----------
    report : Report
        The run's report (method, k, information loss, pipeline layout); updated in place:
        ``reference_information_loss`` and ``reference`` (how it was obtained).
    df : pandas.DataFrame or dask.dataframe.DataFrame
        The *input* of the run.
    qi : list
        Its QI columns (constant ones are left out as in the run).
    reference : {"auto", "exact", "sample"} or None
        See the module docstring; None does nothing.
    max_exact_rows, sample_rows, seed
        Threshold of "auto", sample size and sample seed.

    Returns
    -------
    dict or None
        The ``report.reference`` record: ``kind`` ("exact", "sample" or "self"), ``label``,
        ``information_loss``, ``seconds`` and, for a sample, ``sample_size``, ``ratio``,
        ``method_information_loss`` and ``mdav_information_loss`` on the sample.
    """
    from ..io.qi import qi_matrix
    from ..kernels import information_loss, mdav, standardize
    from ..tuning.sampling import qi_sample

    reference = check_reference(reference)
    if reference is None:
        return None
    n = int(report.n)
    record = self_reference(report)
    if record is not None:
        return record
    exact = reference == "exact" or (reference == "auto" and n <= max_exact_rows) or sample_rows >= n
    t0 = time.perf_counter()
    varying = [c for c in qi if c not in set(report.constant_columns)]
    frame, n_total = qi_sample(df, varying, n if exact else sample_rows, seed)
    X = qi_matrix(frame, varying)
    keep = X.max(axis=0) != X.min(axis=0)
    Z = np.ascontiguousarray(standardize(X[:, keep])[0]) if keep.any() else np.zeros((X.shape[0], 1))
    il_mdav = information_loss(Z, mdav(Z, report.k), standardized=True)
    if exact:
        record = {"kind": "exact", "label": f"exact MDAV on all {n:,} records", "information_loss": float(il_mdav)}
    else:
        labels, layout = _method_labels(Z, report, n_total)
        il_method = information_loss(Z, labels, standardized=True)
        ratio = il_method / il_mdav if il_mdav > 0 else 1.0
        record = {
            "kind": "sample",
            "label": f"estimated on a sample of {Z.shape[0]:,} records",
            "information_loss": float(report.information_loss / ratio) if ratio > 0 else float(il_mdav),
            "sample_size": int(Z.shape[0]), "sample_seed": int(seed), "ratio": float(ratio),
            "method_information_loss": float(il_method), "mdav_information_loss": float(il_mdav),
            **({"sample_layout": layout} if layout else {}),
        }
    record["seconds"] = time.perf_counter() - t0
    report.reference_information_loss = record["information_loss"]
    report.reference = record
    return record
