"""The run's summary on a terminal, in a statistician's words: what was protected (records, QIs, k,
the groups and their sizes), how much information was kept (the information loss rounded, in the
one unit, with its plain word, and the comparison with exact MDAV when the report holds one), the
checks, and where the files are.  How Dask ran it (stage times, the pipeline's layout, kernel load
or compile, the microaggregation time) only with ``verbose``.

One builder for every entry — ``daskmicro anonymize``, ``daskmicro run``, ``daskmicro demo`` and the
API's :meth:`daskmicro.report.Report.summary` — as a pure function of a report dict: the published
one (:meth:`~daskmicro.report.Report.to_dict`, the committed ``_report.json``), so that the summary
says what the published report says and no exact figure it rounds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from .coarse import information_loss_text, public_risk
from .describe import layout_text, mdav_comparison, method_text
from .risk_text import risk_lines

__all__ = ["summary_lines", "summary_text", "group_sizes_text", "where_lines"]

#: More QI columns than this are counted, not named, on the summary's first line.
NAMED_QIS = 6


def _qis(r: Mapping) -> str:
    qi = [str(c) for c in r.get("qi") or []]
    m = int(r.get("m", len(qi)))
    what = f"{m} QI column{'s' if m != 1 else ''}"
    return f"{what} ({', '.join(qi)})" if qi and len(qi) <= NAMED_QIS else what


def group_sizes_text(r: Mapping) -> str:
    """``"600 groups of 5 records"`` or ``"540 groups of 5–9 records (most of 5)"``."""
    groups, low, high = int(r.get("cells", 0)), r.get("min_cell_size"), r.get("max_cell_size")
    text = f"{groups:,} group{'s' if groups != 1 else ''}"
    if low is None or high is None:
        return text
    if int(low) == int(high):
        return f"{text} of {int(low):,} records"
    text += f" of {int(low):,}–{int(high):,} records"
    counts = r.get("cell_size_counts") if isinstance(r.get("cell_size_counts"), Mapping) else None
    if counts:
        size = max(counts.items(), key=lambda item: (int(item[1]), -int(item[0])))[0]
        text += f" (most of {int(size):,})"
    return text


def _protected(r: Mapping) -> list:
    k = r.get("k")
    strata = list((r.get("strata") or {}).get("columns") or [])
    lines = [f"protected {int(r.get('n', 0)):,} records on {_qis(r)} at k = {k}"]
    what = "combination of QI values" + (f" (with the stratum columns {', '.join(map(str, strata))})" if strata else "")
    lines.append(f"  every published {what} is shared by at least {k} records: "
                 f"{group_sizes_text(r)}")
    if strata:
        n = len((r.get("strata") or {}).get("groups") or [])
        lines.append(f"  microaggregated within each of {n:,} strata of {', '.join(map(str, strata))}")
    return lines


def _comparison(r: Mapping) -> str | None:
    """The line of the comparison with exact MDAV, as the report decides it (:func:`mdav_comparison`)."""
    found = mdav_comparison(r)
    how = r.get("reference") if isinstance(r.get("reference"), Mapping) else {}
    if found is None:
        if how.get("kind") in ("exact", "sample"):
            return "  compared with exact MDAV (the reference method): in the private run record, not published"
        return None
    word, amount = found
    if word == "constant":
        return None
    if word == "same":
        return "  compared with exact MDAV (the reference method): the same groups"
    if word == "within":
        return "  compared with exact MDAV (the reference method): the same information loss (within 0.05 %)"
    return f"  compared with exact MDAV (the reference method): {100 * amount:.2f} % {word} information loss"


def _information(r: Mapping) -> list:
    il = r.get("information_loss")
    lines = []
    if il is not None:
        lines.append(f"  information loss: {information_loss_text(float(il))}; the exact value is in the private "
                     "run record")
    comparison = _comparison(r)
    if comparison:
        lines.append(comparison)
    lines.append(f"  method: {method_text(r, plain=True)}")
    pca = r.get("pca") if isinstance(r.get("pca"), Mapping) else {}
    if r.get("method") == "pca-mdav" and pca.get("n_components") is not None:
        lines.append(f"  principal components kept: {pca['n_components']} of {r.get('m_used')}")
    if r.get("constant_columns"):
        lines.append(f"  constant QI columns left unchanged: {', '.join(map(str, r['constant_columns']))}")
    return lines


def _dask(r: Mapping) -> list:
    """How Dask ran it: ``verbose`` only."""
    lines = []
    if r.get("seconds") is not None:
        lines.append(f"  microaggregation time: {float(r['seconds']):.2f} s")
    c = r.get("compile") if isinstance(r.get("compile"), Mapping) else None
    if c is not None:
        lines.append(f"  kernel compile: {float(c['seconds']):.2f} s before the stages (first run on this machine; "
                     f"cached in {c.get('cache_dir') or 'numba default'})" if c.get("compiled") else
                     f"  kernels loaded from the cache: {float(c['seconds']):.2f} s before the stages")
    p = r.get("pipeline") if isinstance(r.get("pipeline"), Mapping) else None
    if p and p.get("partitions") is not None:
        lines.append(f"  layout: {p.get('top_cells')} top cell(s), {p['partitions']} partition(s), "
                     f"{p.get('distal_macrocells')} of {p.get('macrocells')} macrocells distal, "
                     f"{p.get('workers')} worker(s)" + (f"; {layout_text(r)}" if layout_text(r) else ""))
        refine = p.get("refine") if isinstance(p.get("refine"), Mapping) else None
        if refine:
            lines.append(f"  refinement: {refine.get('method')}, ≤ {refine.get('max_iter')} iterations per partition")
    return lines


def _probabilistic_lines(prob: Mapping) -> list:
    """The p-probabilistic mode (*p-Probabilistic k-Anonymous Microaggregation …*, §VI-A)."""
    pi = prob.get("participation")
    what = f"π = {pi:g}" if isinstance(pi, (int, float)) else f"π_j from column {prob.get('participation_column')!r}"
    size = f", effective anonymity n_min = {prob['n_min']}" if prob.get("n_min") is not None else ""
    if prob.get("bounds"):   # per-record π: published as bounds rounded up (daskmicro.privacy.failure_bounds)
        figures = (f"  cell failure q̄: max ≤ {prob['cell_failure_max']:g}, mean ≤ {prob['cell_failure_mean']:g}; "
                   f"table failure t̄ ≤ {prob['table_failure']:g}; expected unprotected records "
                   f"≤ {prob['expected_unprotected']:g} (bounds; exact figures in the private run record)")
    else:
        figures = (f"  cell failure q̄: max {prob['cell_failure_max']:.3g}, mean {prob['cell_failure_mean']:.3g}; "
                   f"table failure t̄ = {prob['table_failure']:.3g}; expected unprotected records "
                   f"{prob['expected_unprotected']:.3g}")
    return [f"  p-probabilistic: {what}, p̄ = {prob['max_cell_failure']:g}{size}", figures]


def _series_line(series: Mapping) -> str:
    """The release ledger."""
    if not series.get("recorded"):
        return "  release ledger: off (a trial run: not recorded, must not be published)"
    if series.get("republished"):
        return (f"  release ledger: {series['republished']:,} records republished with their frozen values "
                f"({series['merged_cells']:,} frozen groups merged), {series['new']:,} new records "
                f"({series['new_cells']:,} new groups)")
    what = "a new series" if series.get("new_series") else "the first release of its records"
    return f"  release ledger: recorded as {what}"


def _verification(r: Mapping) -> str:
    v = r.get("verification") if isinstance(r.get("verification"), Mapping) else {}
    check = v.get("k_anonymity") if isinstance(v.get("k_anonymity"), Mapping) else {}
    checked = check.get("k") or r.get("k")    # n_min under constant participation
    what = "stratum + QI tuple" if (r.get("strata") or {}).get("columns") else "QI tuple"
    verdict = "passed" if v.get("passed") else "FAILED"
    return f"  verification {verdict}: every published {what} occurs ≥ {checked} times, rows in = rows out"


def summary_lines(r: Mapping, verbose: bool = False) -> list:
    """The summary of the run whose report dict is ``r`` (published, or the private exact one: the
    information loss is printed rounded either way), one string per line."""
    lines = _protected(r) + _information(r)
    if verbose:
        lines += _dask(r)
    if r.get("probabilistic"):
        lines += _probabilistic_lines(r["probabilistic"])
    if r.get("series"):
        lines.append(_series_line(r["series"]))
    risk = r.get("risk") if isinstance(r.get("risk"), Mapping) else None
    if risk:
        public = risk if "rounding" in risk else public_risk(risk)
        if public is not None:
            lines += risk_lines(public, r.get("k") or 1)
    lines.append(_verification(r))
    return lines


def summary_text(r: Mapping, verbose: bool = False) -> str:
    """:func:`summary_lines` as one text."""
    return "\n".join(summary_lines(r, verbose))


def where_lines(release, report=None, *, files: int | None = None, page=None, version: int | None = None) -> list:
    """Where the files are: the release (``files``: a directory of that many files, committed with
    ``_SUCCESS``, or as ``version`` of a Delta table), its JSON report, and its HTML page (``page``: written there; else the command that
    writes it and where, as :func:`daskmicro.report.find_report` places it).  A release on an object
    store (a URL) is named as it is, with the report copy given (``report``) if any."""
    from ..io.objectstore import is_remote

    how = "committed with _SUCCESS" if version is None else f"version {version} of the Delta table"
    if is_remote(str(release)) or (report is not None and is_remote(str(report))):
        files_text = f"/ ({files or 0:,} file(s), {how})" if files is not None else ""
        lines = [f"release: {release}{files_text}"]
        if report is not None:
            lines.append(f"report:  {report}")
            page_at = (str(report)[:-len(".json")] if str(report).endswith(".json") else str(report)) + ".html"
            lines.append(f"page:    not written; 'daskmicro report {report}' writes it as {page_at}")
        return lines
    release = Path(str(release))
    if files is not None:
        report = Path(str(report)) if report is not None else release / "_report.json"
        lines = [f"release: {release}/ ({files:,} file(s), {how})"]
        source, target = release, release.with_name(release.name + ".report.html")
    else:
        lines = [f"release: {release}"]
        report = None if report is None else Path(str(report))
        beside = release.with_name(release.stem + ".report.json")
        source = release if report is None or report == beside else report
        target = beside.with_suffix(".html") if source == release else report.with_suffix(".html")
    if report is not None:
        lines.append(f"report:  {report}")
    if page is not None:
        lines.append(f"page:    {page}")
    elif report is not None:
        lines.append(f"page:    not written; 'daskmicro report {source}' writes it as {target}")
    return lines
