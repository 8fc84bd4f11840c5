"""Checks of single values in a workflow spec, each naming the key path it reads.

Every ``as_*`` helper takes ``(value, path)`` and returns the value normalised, or raises
:class:`SpecError` with ``workflow spec: PATH: what was expected, got VALUE``.  The section checks
(:mod:`daskmicro.workflow.sections`) and :func:`daskmicro.workflow.workflow_spec.parse_spec` build on them.
"""

from __future__ import annotations

import math
import os
import string
from pathlib import Path

from ..errors import ParameterError

__all__ = ["SpecError", "PLACEHOLDERS", "fail", "show", "as_mapping", "as_str", "as_bool", "as_int", "as_float",
           "as_columns", "as_duration", "as_template", "as_path"]

#: Placeholders allowed in input/output/report paths and filter values, filled per run.
PLACEHOLDERS = ("name", "slot", "date", "yesterday", "time")


class SpecError(ParameterError):
    """A workflow spec is malformed; the message names the key path and what was expected."""


def fail(path: str, message: str):
    raise SpecError(f"workflow spec: {path}: {message}" if path else f"workflow spec: {message}")


def show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value) -> str:
    """What a document is, without its content (a data file given as the spec holds records)."""
    if isinstance(value, str):
        return f"a text of {len(value):,} character(s)"
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value):,} item(s)"
    return f"a {type(value).__name__}"


def as_mapping(value, path: str, allowed) -> dict:
    if not isinstance(value, dict):
        got = show(value) if path else f"{_kind(value)} (is it a data file? a spec is a YAML mapping)"
        fail(path, f"expected a mapping with keys {', '.join(allowed)}, got {got}")
    unknown = [str(k) for k in value if k not in allowed]
    if unknown and not path and len(unknown) == len(value):   # no spec key at all: not a spec; its keys unsaid
        fail(path, f"expected a mapping with keys {', '.join(allowed)}, got {_kind(value)} with none of them "
                   "(is it a data file?)")
    if unknown:
        where = f"{path}: " if path else ""
        raise SpecError(f"workflow spec: {where}unknown key(s) {', '.join(repr(u) for u in unknown)} "
                        f"(expected one of: {', '.join(allowed)})")
    return value


def as_str(value, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        fail(path, f"expected a non-empty string, got {show(value)}")
    return value.strip()


def as_bool(value, path: str) -> bool:
    if not isinstance(value, bool):
        fail(path, f"expected true or false, got {show(value)}")
    return value


def as_int(value, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        fail(path, f"expected an integer ≥ {minimum}, got {show(value)}")
    return int(value)


def as_float(value, path: str, low: float, high: float, *, low_open=False, high_open=False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        x = float(value)
        ok = (x > low if low_open else x >= low) and (x < high if high_open else x <= high)
    if not ok:
        lo, hi = ("(" if low_open else "[") + f"{low:g}", f"{high:g}" + (")" if high_open else "]")
        what = f"a number > {low:g}" if high == math.inf else f"a number in {lo}, {hi}"
        fail(path, f"expected {what}, got {show(value)}")
    return float(value)


def as_columns(value, path: str) -> list[str]:
    if isinstance(value, str):  # names exactly as written: " x" names the column " x"
        value = value.split(",")
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        fail(path, f"expected a list of column names (or one comma-separated string), got {show(value)}")
    cols = list(value)
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        fail(path, f"column(s) named twice: {', '.join(dup)}")
    return cols


def as_duration(value, path: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    from .durations import parse_duration

    try:
        seconds = parse_duration(value) if isinstance(value, str) else None
    except ParameterError:
        seconds = None
    if seconds is None or not seconds > 0:
        fail(path, f"expected a duration such as 90, 45s, 10m, 2h or 1h30m, got {show(value)}")
    return float(seconds)


def as_template(value, path: str) -> str:
    text = as_str(value, path)
    try:
        fields = [f for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
        specs = [(spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:
        fail(path, f"bad placeholder in {text!r} ({exc}); write literal braces as {{{{ and }}}}")
    bad = [f for f in fields if f not in PLACEHOLDERS]
    known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    if bad:
        fail(path, f"unknown placeholder {{{bad[0]}}} (known: {known})")
    dressed = [(f, s, c) for f, (s, c) in zip(fields, specs) if s or c]
    if dressed:
        f, s, c = dressed[0]
        fail(path, f"placeholder {{{f}{'!' + c if c else ''}{':' + s if s else ''}}} takes no conversion or format: "
                   f"write {{{f}}} (known: {known})")
    return text


def as_path(value, path: str, base: Path) -> str:
    """A path of the spec, relative to its directory; a URL (``s3://…``, ``file://…``) as written."""
    from ..io.objectstore import is_url

    text = as_template(value, path)
    if is_url(text):
        return text
    p = Path(os.path.expanduser(text))
    return str(p if p.is_absolute() else base / p)
