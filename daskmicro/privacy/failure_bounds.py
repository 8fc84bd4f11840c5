"""Published bounds of the failure figures of a run with per-record participation.

With one π_j per record (a column of the input, never published), every failure figure of the
cells — q̄_c, their largest and mean value, the table failure t̄, the expected unprotected records,
the record failures r̄ and r̄′, the mean π — is an exact function of the π_j.  Exact, a handful of
them solve for the π_j: a table of one cell of two records gives both from its q̄_c and mean π
(q̄ = π₁ + π₂ − 2π₁π₂), one of three from its q̄_c, unprotected records and mean π (the elementary
symmetric functions of the three), and someone who knows every other record does the same for the
last cell.  So where the run publishes them (:func:`public_failures`), each failure figure is an
upper bound rounded up to one significant digit (:func:`upper_bound`), and at least p̄/10
(:func:`bound_floor`): it still shows the guarantee — every cell's failure ≤ p̄, none above it — and
fixes a figure only to within its leading digit, which leaves every π_j a wide interval.  The floor:
a bound far below p̄ says more about the π_j than the guarantee does (a cell of two records with
q̄ ≤ 2·10⁻⁵ has both π within 4·10⁻⁵ of 1, and q̄ = 0 says that k of its records have π = 1), so
figures below p̄/10 are published as p̄/10.  The mean π is not published at all: Σ_j π_j / N is
one linear equation in the π_j — with the other records known it gives the last one exactly, and
rounded to one decimal it still confines it to an interval of width 0.1·N, tight for a small table
— and no reader needs it to read the guarantee.  Nor are each cell's expected active records Σπ
or the smallest and largest π_j (two records' values).  The exact figures stay in the private run
record.

A constant π is one number the user gave: its figures are functions of π and the cell sizes
alone, both published, and are not changed here.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal
from typing import Mapping

__all__ = ["bound_floor", "upper_bound", "cell_failure_bound", "public_failures", "BOUNDS_NOTE", "WITHHELD"]

#: The note a published section carries in place of its exact figures.
BOUNDS_NOTE = ("per-record participation: each failure figure is an upper bound rounded up to one "
               "significant digit, at least p̄/10 (p̄ where rounding up would pass it); the exact figures are in "
               "the private run record")

#: Figures of a per-record participation section never published: two records' π, the mean π (a
#: linear equation in the π_j) and each worst cell's Σπ.
WITHHELD = ("participation_min", "participation_mean", "participation_max")

#: Failure figures of the cells (each ≤ p̄ when the run released anything).
_CELL_FIGURES = ("cell_failure_max", "cell_failure_mean")
#: Failure figures of the table: probabilities (≤ 1) and the expected unprotected records.
_TABLE_FIGURES = ("table_failure", "record_failure", "record_failure_given_active")


def bound_floor(pbar: float) -> float:
    """The smallest published bound of a run of p̄ = ``pbar``: p̄/10."""
    return float(pbar) / 10.0


def upper_bound(value: float, least: float = 0.0) -> float:
    """``value`` rounded up to one significant digit (0.1146 → 0.2, 0.0813 → 0.09, 12.3 → 20),
    at least ``least``; never below ``value``."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"a failure figure must be finite, got {value!r}")
    if value <= least:
        return float(least)
    # the shortest decimal that reads back as ``value``, rounded up: its nearest float is ≥ ``value``
    # (0.2 stays 0.2, though the float 0.2 lies a little above the decimal)
    shortest = Decimal(repr(value))
    digits = shortest.adjusted()
    leading = shortest.scaleb(-digits).to_integral_value(rounding=ROUND_CEILING)   # a shift, then up
    return float(leading.scaleb(digits))


def cell_failure_bound(value: float, pbar: float) -> float:
    """The published bound of a cell failure figure ``value`` under p̄ = ``pbar``:
    :func:`upper_bound` and at least :func:`bound_floor`, but p̄ itself where rounding up would pass p̄
    while ``value`` ≤ p̄."""
    value, pbar = float(value), float(pbar)
    bound = upper_bound(value, bound_floor(pbar))
    return pbar if value <= pbar < bound else bound


def _worst_cells(cells, pbar: float) -> list:
    """Worst cells as published: size and bound of the failure, equal pairs merged (with their
    number of cells), largest bound first — no Σπ, no order among cells of one bound and size."""
    merged: dict = {}
    for cell in cells or []:
        if not isinstance(cell, Mapping):
            continue
        key = (int(cell["size"]), cell_failure_bound(cell["cell_failure"], pbar))
        merged[key] = merged.get(key, 0) + int(cell.get("cells", 1))
    return [{"size": size, "cell_failure": bound, "cells": count}
            for (size, bound), count in sorted(merged.items(), key=lambda item: (-item[0][1], -item[0][0]))]


def public_failures(section: Mapping) -> dict:
    """The published form of a run's ``probabilistic`` section.

    With per-record participation (``participation == "per-record"``): the cell failure figures
    as :func:`cell_failure_bound`, the table failure, record failures and expected unprotected
    records as :func:`upper_bound` (at least :func:`bound_floor`; probabilities at most 1), the
    worst cells as size and bound (:func:`_worst_cells`), the π figures of :data:`WITHHELD` left out, and ``bounds`` saying so.
    Counts and parameters (cells, sizes, k, p̄, cells above p̄) are kept.  A constant π's section
    is returned as it is.
    """
    out = dict(section)
    if out.get("participation") != "per-record":
        return out
    pbar = float(out["max_cell_failure"])
    for key in WITHHELD:
        out.pop(key, None)
    for key in _CELL_FIGURES:
        if out.get(key) is not None:
            out[key] = cell_failure_bound(out[key], pbar)
    for key in _TABLE_FIGURES:
        if out.get(key) is not None:
            out[key] = min(1.0, upper_bound(out[key], bound_floor(pbar)))
    if out.get("expected_unprotected") is not None:
        out["expected_unprotected"] = upper_bound(out["expected_unprotected"], bound_floor(pbar))
    if "worst_cells" in out:
        out["worst_cells"] = _worst_cells(out["worst_cells"], pbar)
    out["bounds"] = BOUNDS_NOTE
    return out
