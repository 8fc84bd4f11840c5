"""The points of a trade-off sweep and the setting recommended among them.

A point is one tried setting with its running time relative to exact MDAV (τ = t′/t) and its
relative distortion increment (δ = (D − D_MDAV)/D_MDAV).  :func:`recommend_setting` picks the fastest
point within a distortion budget; the sweep (:func:`daskmicro.tuning.tradeoff.sweep`), its page and
the run report's sweep plot (:mod:`daskmicro.report`) all recommend through it.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from ..errors import ParameterError

__all__ = ["check_points", "recommend_setting"]


def check_points(points: Iterable[Mapping]) -> list[dict]:
    """The sweep points as plain dicts (``setting``, ``relative_time`` τ, ``relative_distortion`` δ);
    raises ParameterError on a missing or non-finite figure or an empty sweep."""
    checked = []
    for i, point in enumerate(points):
        try:
            t = float(point["relative_time"])
            d = float(point["relative_distortion"])
        except (KeyError, TypeError, ValueError):
            raise ParameterError(
                f"points[{i}] needs numeric 'relative_time' and 'relative_distortion' (and a 'setting')"
            ) from None
        if not (math.isfinite(t) and math.isfinite(d)):
            raise ParameterError(f"points[{i}] has a non-finite relative_time or relative_distortion")
        checked.append({"setting": point.get("setting", i), "relative_time": t, "relative_distortion": d})
    if not checked:
        raise ParameterError("points is empty: a sweep needs at least one setting")
    return checked


def recommend_setting(points: Iterable[Mapping], budget: float | None) -> dict | None:
    """The fastest sweep point whose relative distortion increment is within ``budget``.

    Parameters
    ----------
    points : iterable of mapping
        Each with ``setting``, ``relative_time`` (τ, time relative to exact MDAV) and
        ``relative_distortion`` (δ = (D − D_MDAV)/D_MDAV), as fractions.
    budget : float or None
        Largest acceptable δ; None returns None.

    Returns
    -------
    dict or None
        The chosen point (ties on time broken by lower δ), or None when none fits the budget.
    """
    pts = check_points(points)
    if budget is None:
        return None
    fits = [p for p in pts if p["relative_distortion"] <= float(budget)]
    if not fits:
        return None
    return min(fits, key=lambda p: (p["relative_time"], p["relative_distortion"]))
