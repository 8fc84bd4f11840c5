"""Field validators of a run's options: each takes ``(name, value)`` and returns the value checked
and normalised, or raises :class:`~daskmicro.errors.ParameterError` naming the option.

:func:`integer`, :func:`number` and :func:`choice` build a validator from their bounds or options;
the others are validators themselves.  :data:`daskmicro.config.FIELDS` maps every option of a
:class:`~daskmicro.config.RunConfig` to one of them.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ParameterError

__all__ = ["MIN_MEMORY_LIMIT", "integer", "number", "choice", "flag", "label_list", "text_list",
           "participation_value", "seed_value", "memory_size", "scheduler_address", "path_text",
           "ledger_value", "label", "ALL_NUMERIC", "qi_value"]

#: Smallest worker memory limit accepted (``memory_limit``; a worker needs far more, see README).
MIN_MEMORY_LIMIT = 16 << 20


def integer(low=None):
    def check(name, v):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ParameterError(f"{name} must be an integer{'' if low is None else f' ≥ {low}'}, got {v!r}")
        v = int(v)
        if low is not None and v < low:
            raise ParameterError(f"{name} must be an integer ≥ {low}, got {v}")
        return v
    return check


def number(low, high, low_open=False, high_open=False, what=None):
    lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
    span = what or f"in {lo}{low:g}, {'∞' if math.isinf(high) else f'{high:g}'}{hi}"

    def check(name, v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ParameterError(f"{name} must be a number {span}, got {v!r}")
        v = float(v)
        ok = math.isfinite(v) or (math.isinf(high) and v == math.inf and not high_open)
        ok = ok and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
        if not ok:
            raise ParameterError(f"{name} must be {span}, got {v!r}")
        return v
    return check


def choice(options, optional=False):
    def check(name, v):
        key = v.strip().lower().replace("_", "-") if isinstance(v, str) else v
        if key not in options:
            shown = ", ".join(repr(o) for o in options)
            raise ParameterError(f"{name} must be {'None or ' if optional else ''}one of {shown}, got {v!r}")
        return key
    return check


def flag(name, v):
    if not isinstance(v, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False, got {v!r}")
    return bool(v)


def label_list(name, v):
    """Column labels exactly as given (a single label is a one-element list); never stripped."""
    if v is None:
        return ()
    if isinstance(v, (str, int, np.integer)) or not hasattr(v, "__iter__"):
        v = [v]
    out = tuple(v.item() if isinstance(v, np.generic) else v for v in v)
    twice = sorted({repr(c) for c in out if out.count(c) > 1})
    if twice:
        raise ParameterError(f"{name}: column(s) named more than once: {', '.join(twice)}")
    return out


def text_list(name, v):
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    out = tuple(v)
    if not all(isinstance(x, str) for x in out):
        raise ParameterError(f"{name} must be a list of strings")
    return out


def participation_value(name, v):
    if isinstance(v, (bool, np.bool_)):
        raise ParameterError(f"participation must be a probability in (0, 1] or a column name, got {v!r}")
    if isinstance(v, (int, float, np.integer, np.floating)):
        return number(0.0, 1.0, low_open=True)("participation", v)
    if isinstance(v, (list, tuple, np.ndarray, dict, set)) or hasattr(v, "shape"):
        raise ParameterError("participation must be a number in (0, 1] or the name of a column of the input")
    return v


def seed_value(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ParameterError(f"seed must be a non-negative integer, got {v!r}")
    return int(v)


def memory_size(name, v):
    """Bytes per worker: an integer, or a size such as "2GiB" / "1.5 GB" (dask's notation)."""
    from .runtime.cluster import memory_bytes

    try:
        v = memory_bytes(v.strip()) if isinstance(v, str) else v
    except (ValueError, TypeError):
        v = None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float)) or not v >= MIN_MEMORY_LIMIT:
        raise ParameterError(f"{name} must be a size of at least {MIN_MEMORY_LIMIT >> 20} MiB, such as 2GiB")
    return int(v)


def scheduler_address(name, v):
    if not isinstance(v, str) or "://" not in v:
        raise ParameterError(f"{name} must be a scheduler address such as tcp://host:8786, got {v!r}")
    return v


def path_text(name, v):
    if not isinstance(v, (str, bytes)) and not hasattr(v, "__fspath__"):
        raise ParameterError(f"{name} must be a path, got {type(v).__name__}")
    return str(v)


def ledger_value(name, v):
    """A ledger: a directory path, ``"off"``/False (a trial run: nothing recorded), True (the default)."""
    if v is True:
        return None
    if v is False or (isinstance(v, str) and v.strip().lower() == "off"):
        return "off"
    if isinstance(v, str) and not v.strip():
        raise ParameterError(f"{name} must be a directory path or 'off', got an empty text")
    return path_text(name, v)


def label(name, v):
    """One column name."""
    if not isinstance(v, str) or not v:
        raise ParameterError(f"{name} must be one column name, got {v!r}")
    return v


#: ``qi`` that names every numeric column of the input (but those of ``qi_except`` and the columns
#: with another role: strata, partitioning, participation, id, dropped and kept columns).
ALL_NUMERIC = "all-numeric"


def qi_value(name, v):
    """``qi``: :data:`ALL_NUMERIC` (as a string or a one-item list), else a list of labels."""
    if isinstance(v, str) and v.strip().lower() == ALL_NUMERIC or (
            isinstance(v, (list, tuple)) and len(v) == 1 and str(v[0]).strip().lower() == ALL_NUMERIC):
        return ALL_NUMERIC
    return label_list(name, v)
