"""Durations as people write them (``90s``, ``2h``, ``1h30m``, ``1.5d``, or plain seconds) and as
the reports print them; used by ``daskmicro plan`` and by workflow specs."""

from __future__ import annotations

import re

from ..errors import ParameterError

__all__ = ["DURATION_RANGE", "parse_duration", "format_duration"]

#: Durations accepted, in seconds.
DURATION_RANGE = (1e-3, 1e12)
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_LONE = re.compile(rf"\s*({_NUMBER})\s*")
_PARTS = re.compile(rf"(?:\s*{_NUMBER}\s*(?:min|d|h|m|s))+\s*")
_PART = re.compile(rf"({_NUMBER})\s*(min|d|h|m|s)")


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90``, ``45s``, ``2h``, ``1h30m``, ``2.5h`` or ``1d 2h``."""
    s = str(text).lower()
    lone = _LONE.fullmatch(s)
    if lone:
        return float(lone.group(1))
    if not _PARTS.fullmatch(s):
        raise ParameterError(f"cannot read duration {text!r}: use e.g. 90, 45s, 2h, 1h30m")
    return sum(float(num) * _UNITS[unit] for num, unit in _PART.findall(s))


def format_duration(seconds: float) -> str:
    """``seconds`` as ``2 h 27 min 30 s`` / ``2 min 33 s`` / ``4.2 s``."""
    if seconds >= 1e9:  # ~32 years: days and minutes no longer mean anything
        return f"{seconds:.3g} s"
    if seconds < 60:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    total = int(round(seconds))
    d, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    mnt, sec = divmod(rest, 60)
    parts = [f"{d} d" if d else "", f"{h} h" if h else "", f"{mnt} min" if mnt else "", f"{sec} s" if sec else ""]
    return " ".join(p for p in parts if p)
