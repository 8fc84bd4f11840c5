"""What ran, in words: the method of a run as the terminal summary, the JSON report's readers and the
HTML page name it — the method that formed the cells, the layout of the pipeline, and the quality's
improvement pass when one changed them.  Pure functions of the report dict
(:meth:`daskmicro.report.Report.exact_dict` or its published form), so that every place says the same.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["method_text", "improvement_text", "is_exact_mdav"]

_NAMES = {
    "mdav": "exact MDAV",
    "pca-mdav": "PCA-MDAV",
    "pcl": "PCL started from MDAV's cells",
    "partitioned": "the partitioned pipeline",
    "proximal-distal": "Algorithm C, the proximal/distal method",
    "incremental": "the incremental method (a base stage, then the increment at the close)",
    "mixed": "one method per group (listed with the groups)",
}


def _layout(r: Mapping) -> str:
    """Which kernel ran in the macrocells of a pipeline run."""
    p = r.get("pipeline") if isinstance(r.get("pipeline"), Mapping) else {}
    macro, distal = p.get("macrocells"), p.get("distal_macrocells")
    if macro is None or distal is None:
        return ""
    macro, distal = int(macro), int(distal)
    if distal >= macro:
        text = "MDAV in every macrocell"
    elif distal == 0:
        text = "PCA-MDAV in every macrocell"
    else:
        text = f"MDAV in {distal:,} of {macro:,} macrocells, PCA-MDAV in the others"
    refine = p.get("refine") if isinstance(p.get("refine"), Mapping) else None
    if refine:
        text += ", PCL refinement of each partition"
    return f" ({text})"


def improvement_text(imp: Mapping | None) -> str:
    """The quality's improvement pass in words ("" when none ran)."""
    if not imp:
        return ""
    what = "moves and swaps of records between neighbouring cells"
    if int(imp.get("pcl_iter") or 0):
        what += f", {int(imp['pcl_iter'])} PCL iteration(s)"
        if int(imp.get("post_sweeps") or 0):
            what += " and moves again"
    quality = f"quality '{imp['quality']}'" if imp.get("quality") else "the run's quality"
    if imp.get("groups") is not None and imp.get("of") is not None and int(imp["groups"]) < int(imp["of"]):
        quality += f", {int(imp['groups'])} of {int(imp['of'])} groups"
    if not imp.get("changed"):
        return f"; the improvement pass of {quality} ({what}) found nothing to change"
    return f", then improved by {quality}: {what}"


def is_exact_mdav(r: Mapping) -> bool:
    """Whether the run's cells are exact MDAV's: method mdav, and no improvement changed them."""
    imp = r.get("improvement") if isinstance(r.get("improvement"), Mapping) else None
    return r.get("method") == "mdav" and not (imp and imp.get("changed"))


def method_text(r: Mapping) -> str:
    """The method of the run in words, with the pipeline's layout and the improvement pass."""
    method = str(r.get("method", "?"))
    text = _NAMES.get(method, method)
    if method in ("partitioned", "proximal-distal"):
        text += _layout(r)
    imp = r.get("improvement") if isinstance(r.get("improvement"), Mapping) else None
    return text + improvement_text(imp)
