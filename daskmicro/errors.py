"""Exceptions raised on bad input, bad parameters and failed release checks.

All three subclass a built-in so that existing ``except ValueError`` code keeps working, and all
carry a one-line message that names the offending column, file or parameter — never a data value.
"""

from __future__ import annotations

__all__ = ["InputError", "ParameterError", "VerificationError", "redact", "describe", "describe_text", "vetted",
           "masked_path"]

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


# Descriptions of other libraries' errors that are known to be data-free, read off their message:
# each pattern captures only counts, positions and type names, never the text that follows them.
_VETTED = (
    # pyarrow's CSV reader: "CSV parse error: Row #3: Expected 3 columns, got 4: <the row>",
    # "In CSV column #1: Row #3: CSV conversion error to int64: invalid value '<cell>'"
    (re.compile(r"In CSV column #(\d+)"), lambda m: f"column #{int(m[1]) + 1}"),
    (re.compile(r"Row #(\d+)"), lambda m: f"row {m[1]}"),
    (re.compile(r"Expected (\d+) columns, got (\d+)"), lambda m: f"expected {m[1]} columns, got {m[2]}"),
    (re.compile(r"CSV conversion error to ([\w\[\], ]+?):"), lambda m: f"a value is not {m[1]}"),
    (re.compile(r"invalid UTF8"), lambda m: "invalid UTF-8 data"),
    # pandas' C parser: "Error tokenizing data. C error: Expected 3 fields in line 3, saw 4"
    (re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)"),
     lambda m: f"line {m[2]}: expected {m[1]} fields, saw {m[3]}"),
    (re.compile(r"EOF inside string starting at row (\d+)"), lambda m: f"unclosed quote starting at row {m[1]}"),
    (re.compile(r"EOF inside string(?! starting)"), lambda m: "unclosed quote"),
)
#: Longest description kept from another library's message.
_MAX_TEXT = 160


def _first_clause(text: str) -> str:
    """The start of a foreign message before anything it may quote: its first line, up to the
    first colon (libraries put the offending row, cell or path after one), numbers and quoted
    literals redacted; empty unless it reads as a sentence (three words or more), since a
    message of a word or two may be the value itself (``ValueError(value)``)."""
    text = str(text).strip().splitlines()[0] if str(text).strip() else ""
    text = redact(text.split(":", 1)[0]).strip(" .;,")
    if len(re.findall(r"(?<![\w-])[A-Za-z]+(?![\w-])", text)) < 3 or re.search(r"\S,\S", text):
        return ""  # a bare value, or a row of comma-separated values
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT - 1] + "…"


def vetted(exc: BaseException) -> str:
    """A data-free description of another library's exception (no type name; may be empty).

    Never its message verbatim: a parser's message may quote the row it failed on, a converter's
    the cell, so only what is known to be data-free is kept — row, line and column positions,
    column counts and type names recognised in the message (pyarrow's and pandas' CSV errors),
    the system's description of an ``OSError`` and its file (hive values masked,
    :func:`masked_path`), the encoding and byte offset of a decoding error
    — and otherwise only the message's first clause (before its first ``:``, where values are
    quoted), numbers and quoted literals redacted.
    """
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid {exc.encoding} data at byte offset {exc.start}"
    if isinstance(exc, UnicodeError):
        return "invalid text encoding"
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, TimeoutError):
        where = f": {masked_path(exc.filename)}" if isinstance(exc.filename, (str, bytes)) and exc.filename else ""
        return f"{redact(exc.strerror)}{where}"
    text = " ".join(str(exc).split())
    found = [make(m) for pattern, make in _VETTED for m in [pattern.search(text)] if m]
    if found:
        return ": ".join(found)
    if isinstance(exc, (KeyError, IndexError)):  # their message is the key (a value) itself
        return ""
    return _first_clause(str(exc))


def describe(exc: BaseException) -> str:
    """One line for an exception raised by another library: its type and a data-free description
    (:func:`vetted`), never the library's message verbatim."""
    text = vetted(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_text(text: str) -> str:
    """For an exception known only as text (its ``repr``, as Dask's logs give it): its type name
    alone, since the message cannot be vetted without the exception."""
    m = re.match(r"\s*([A-Za-z_][\w.]*)\(", str(text))
    return f"{m[1]} (message withheld: it may quote the data)" if m else "(message withheld: it may quote the data)"


def masked_path(path) -> str:
    """``path`` with the value of every hive ``key=value`` directory replaced by ``…``: a partition
    value is data; the key, the file name and the rest of the path are not."""
    import os

    parts = os.fsdecode(path).split(os.sep)
    return os.sep.join(p.split("=", 1)[0] + "=…" if "=" in p else p for p in parts)
