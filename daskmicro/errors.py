"""Exceptions raised on bad input, bad parameters and failed release checks.

All three subclass a built-in so that existing ``except ValueError`` code keeps working, and all
carry a one-line message that names the offending column, file or parameter — never a data value.
"""

from __future__ import annotations

__all__ = ["InputError", "ParameterError", "VerificationError", "redact", "describe"]

import re


class InputError(ValueError):
    """The input table cannot be used: missing, unreadable, empty, or with unusable QI values."""


class ParameterError(ValueError):
    """A parameter (``k``, ``qi``, ``method``, …) is out of range or inconsistent with the data."""


class VerificationError(Exception):
    """A release failed a privacy or integrity check (k-anonymity, row count); it must not be published."""


# A number (integer, decimal, scientific, hex) or a quoted literal inside another library's message.
_VALUE = re.compile(r"""(?x)
    '(?:[^'\\]|\\.)*' | "(?:[^"\\]|\\.)*"             # quoted literals
  | (?<![A-Za-z_])[-+]?0[xX][0-9a-fA-F]+                      # hex
  | (?<![A-Za-z_0-9.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?  # decimal / scientific
""")


def redact(text: str) -> str:
    """``text`` on one line with every number and quoted literal replaced by ``…``.

    For messages of other libraries (pyarrow, pandas, numpy, …), which may quote the value that
    failed (``Integer value 4611686018427387904 not in range``): daskmicro's own messages name
    columns, files, parameters and counts, but a value of the data must never reach stderr, a
    log or a report.
    """
    return _VALUE.sub("…", " ".join(str(text).split()))


def describe(exc: BaseException) -> str:
    """One line for an exception raised by another library: its type and redacted message."""
    text = redact(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
