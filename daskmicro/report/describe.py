"""What ran, in words: the method of a run as the terminal summary, the JSON report's readers and the
HTML page name it — the method that formed the cells, the layout of the pipeline, and the quality's
improvement pass when one changed them.  Pure functions of the report dict
(:meth:`daskmicro.report.Report.exact_dict` or its published form), so that every place says the same.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["method_text", "layout_text", "improvement_text", "is_exact_mdav", "relative_to_mdav", "mdav_comparison"]

_NAMES = {
    "mdav": "exact MDAV",
    "pca-mdav": "PCA-MDAV",
    "pcl": "PCL started from MDAV's cells",
    "partitioned": "the partitioned pipeline",
    "proximal-distal": "Algorithm C, the proximal/distal method",
    "incremental": "the incremental method (a base stage, then the increment at the close)",
    "mixed": "one method per group (listed with the groups)",
}


def layout_text(r: Mapping) -> str:
    """Which kernel ran in the macrocells of a pipeline run ("" when the report has no layout)."""
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
    return text


def _layout(r: Mapping) -> str:
    text = layout_text(r)
    return f" ({text})" if text else ""


def improvement_text(imp: Mapping | None, groups: str = "cells") -> str:
    """The quality's improvement pass in words ("" when none ran); ``groups``: what the groups of
    records are called ("cells" on the page, "groups" in the terminal summary)."""
    if not imp:
        return ""
    what = f"moves and swaps of records between neighbouring {groups}"
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


def method_text(r: Mapping, plain: bool = False) -> str:
    """The method of the run in words, with the pipeline's layout and the improvement pass;
    ``plain``: without the layout (which kernel ran in the macrocells), and the groups of records
    called groups — the terminal summary's words for a statistician."""
    method = str(r.get("method", "?"))
    text = _NAMES.get(method, method)
    if method in ("partitioned", "proximal-distal") and not plain:
        text += _layout(r)
    imp = r.get("improvement") if isinstance(r.get("improvement"), Mapping) else None
    return text + improvement_text(imp, "groups" if plain else "cells")


def relative_to_mdav(r: Mapping) -> float | None:
    """δ = (IL − IL_MDAV)/IL_MDAV when the report has an exact-MDAV reference, else None (the
    published report never has one: the reference IL is a figure of the original spread)."""
    il, ref = r.get("information_loss"), r.get("reference_information_loss")
    if il is None or ref is None or float(ref) <= 0:
        return None
    return (float(il) - float(ref)) / float(ref)


def mdav_comparison(r: Mapping) -> tuple[str, float | None] | None:
    """The run against exact MDAV, the slow reference method, as the report's figures decide it:
    ``("same", None)`` when the run's cells are exact MDAV's (reference kind "self"),
    ``("constant", None)`` when no QI varies, ``("within", None)`` within 0.05 % of its
    distortion, ``("more", δ)`` or ``("less", −δ)`` with δ the relative increment; None when
    the report holds no comparison (no reference, or the published form, which leaves δ out)."""
    how = r.get("reference") if isinstance(r.get("reference"), Mapping) else {}
    if how.get("kind") == "self":
        return ("constant", None) if r.get("m_used") == 0 else ("same", None)
    delta = relative_to_mdav(r)
    if delta is None:
        return None
    if abs(delta) < 0.0005:
        return "within", None
    return ("more", delta) if delta > 0 else ("less", -delta)
