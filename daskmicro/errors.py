"""Exceptions raised on bad input, bad parameters and failed release checks.

All three subclass a built-in so that existing ``except ValueError`` code keeps working, and all
carry a one-line message that names the offending column, file or parameter — never a data value.
"""

from __future__ import annotations

__all__ = ["InputError", "ParameterError", "VerificationError"]


class InputError(ValueError):
    """The input table cannot be used: missing, unreadable, empty, or with unusable QI values."""


class ParameterError(ValueError):
    """A parameter (``k``, ``qi``, ``method``, …) is out of range or inconsistent with the data."""


class VerificationError(Exception):
    """A release failed a privacy or integrity check (k-anonymity, row count); it must not be published."""
