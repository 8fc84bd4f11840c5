"""The microaggregation function as a published, verifiable specification (§V-C).

In the *locally trusted* mode of Rebollo-Monedero et al., *p-Probabilistic k-Anonymous
Microaggregation …* (``003_0edb38f823409d2d.txt`` §IV-B, §V-C), the cells are designed from a
statistical model of the respondents before the survey runs; each respondent receives the
microaggregation function, checks it, applies it on their own computer and sends back only the
cell (or its centroid).  This module writes that function as a JSON document and applies it.

A spec holds the QI column names, the standardization (z_i = (x_i − mean_i)/scale_i), the
anonymity requirement (k, n_min, π, p̄), one entry per cell, the assignment rule in words, and a
SHA-256 checksum over a canonical serialization.  Two rules are implemented:

``sequential-balls`` (MDAV, the paper's intensional spec)
    MDAV builds each cell from a reference record and the records nearest to it among those
    still unassigned.  The spec lists the reference points in the order they were selected and,
    for each, a squared radius; the last cell (MDAV's remainder) has none.
``nearest-centroid`` (optionally with additive costs, as PCL's additively weighted Voronoi cells)
    Each record goes to the cell minimising ‖z − ẑ_c‖² + cost_c.

The exact statements are :data:`RULES`; :func:`assign` implements them to the letter.  Before a
spec is written, the rule is applied to the model records and every *induced* cell is checked
against the requirement (q̄_c ≤ p̄, or at least k records without a participation model): the
guarantee is about what the rule does, not about the partition it was derived from.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError
from ..kernels.metrics import standardize
from .effective import cell_failure, check_anonymity, check_max_cell_failure, check_participation
from .probabilistic import _dist2, weighted_centroids

__all__ = ["FORMAT", "VERSION", "RULES", "build_spec", "spec_checksum", "load_spec", "save_spec", "assign",
           "cell_values"]

FORMAT = "daskmicro.microaggregation-spec"
VERSION = 1

_STANDARDIZE = (
    "Standardize the record: z_i = (x_i - mean_i) / scale_i for every QI column i, in the order of 'qi', "
    "with z_i = 0 where constant_i is true. Squared distances are sums over i, in that order, of "
    "(z_i - point_i)^2 in IEEE double precision."
)
#: The assignment rules, stated exactly as :func:`assign` applies them.
RULES = {
    "sequential-balls": _STANDARDIZE + " Visit the cells in increasing id. The record belongs to the first "
    "cell whose 'reference' is not null and whose squared distance to it is at most 'radius2'. If no such "
    "cell exists, it belongs to the last cell, whose 'reference' and 'radius2' are null.",
    "nearest-centroid": _STANDARDIZE + " The record belongs to the cell c minimising (squared distance to "
    "'centroid' of c) + 'cost' of c; among equal values, the lowest id.",
}
_CANON = "JSON of the spec without 'checksum': keys sorted, separators ',' and ':', ASCII, floats as shortest round-trip repr"
_TOP = {"format", "version", "qi", "standardization", "anonymity", "rule", "cells", "model", "checksum"}


# --------------------------------------------------------------------------- checksum


def _canonical(spec: dict) -> bytes:
    body = {key: value for key, value in spec.items() if key != "checksum"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def spec_checksum(spec: dict) -> str:
    """SHA-256 (hex) of the canonical serialization of ``spec`` without its ``checksum`` member."""
    return hashlib.sha256(_canonical(spec)).hexdigest()


# --------------------------------------------------------------------------- building


def _floats(a) -> list:
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def _qi_matrix(X, qi) -> np.ndarray:
    if isinstance(X, pd.DataFrame):
        missing = [c for c in qi if c not in X.columns]
        if missing:
            raise InputError(f"QI column(s) missing from the table: {', '.join(map(repr, missing))}")
        cols = []
        for c in qi:
            if pd.api.types.is_bool_dtype(X[c]) or not pd.api.types.is_numeric_dtype(X[c]):
                raise InputError(f"QI column {c!r} is not numeric")
            cols.append(X[c].to_numpy(dtype=np.float64, na_value=np.nan))
        M = np.column_stack(cols) if cols else np.zeros((len(X), 0))
    else:
        M = np.asarray(X, dtype=np.float64)
        if M.ndim != 2 or M.shape[1] != len(qi):
            raise InputError(f"the records must form a matrix with one column per QI ({len(qi)}), got shape {M.shape}")
    bad = [qi[i] for i in range(M.shape[1]) if not np.isfinite(M[:, i]).all()]
    if bad:
        raise InputError(f"QI column(s) with missing or infinite values: {', '.join(map(repr, bad))}")
    if M.shape[0] == 0:
        raise InputError("the table has no records")
    return M


def _balls(Z: np.ndarray, labels: np.ndarray) -> list:
    """Reference point and squared radius of every cell but the last, in cell order.

    The reference is the record MDAV would have picked (furthest from the centroid of what is
    left, then furthest from that record, alternately), or else the first member whose ball
    separates the cell from the records left; the radius is halfway between the furthest member
    and the nearest record left, so rounding cannot move a model record across it.  When records
    tie at that boundary (duplicates), the radius is the furthest member's and the tied records
    join the cell: the induced partition is then checked by the caller.
    """
    ncell = int(labels.max()) + 1
    rem = np.arange(Z.shape[0])
    out = []
    prev = None
    for c in range(ncell - 1):
        inside = labels[rem] == c
        if prev is None:
            guess = rem[int(np.argmax(_dist2(Z[rem], Z[rem].mean(axis=0))))]
        else:
            d = _dist2(Z[rem], Z[prev])
            guess = rem[int(np.argmax(d))]
        best = None
        for ref in [guess, *rem[inside]]:
            if labels[ref] != c:
                continue
            d = _dist2(Z[rem], Z[ref])
            d_in, d_out = d[inside].max(), d[~inside].min()
            if d_in < d_out:
                best = (ref, float(d_in + (d_out - d_in) / 2.0))
                break
            if best is None:
                best = (ref, float(d_in))
        out.append((Z[best[0]].copy(), best[1]))
        prev = best[0] if prev is None else None
        rem = rem[~inside]
    return out


def build_spec(X, labels, qi, k, *, rule="sequential-balls", costs=None, participation=None,
               max_cell_failure=None, n_min=None) -> dict:
    """Write a micropartition of model records as a verifiable specification (§V-C).

    Parameters
    ----------
    X : pandas.DataFrame or array_like, shape (n, m)
        Model records in original units (a DataFrame holding the ``qi`` columns, or a matrix whose
        columns are the ``qi`` in order).
    labels : array_like of int, shape (n,)
        Cell ids 0 … C−1, each used; for ``"sequential-balls"`` numbered in the order MDAV (or
        :func:`~daskmicro.privacy.probabilistic.grow_cells`) formed them, the last being the rest.
    qi : list of str
        Quasi-identifier column names.
    k : int
        Target anonymity, ≥ 2.
    rule : {"sequential-balls", "nearest-centroid"}
        Assignment rule (see :data:`RULES`).
    costs : array_like, shape (C,), optional
        ``"nearest-centroid"`` only: additive cost of every cell (PCL); zeros by default.
    participation : float or array_like, optional
        π (or π_j per model record) of the design; requires ``max_cell_failure``.
    max_cell_failure : float, optional
        p̄ of the design.
    n_min : int, optional
        Effective anonymity of the design (constant π), recorded for the respondent.

    Returns
    -------
    dict
        The spec, checksum included; ``model`` holds the cells the rule induces on ``X``.

    Raises
    ------
    ParameterError
        Bad parameters, or the rule applied to the model records yields a cell that misses the
        requirement (q̄_c > p̄, or fewer than k records without a participation model).
    """
    qi = [str(c) for c in qi] if not isinstance(qi, str) else [qi]
    if not qi or len(set(qi)) != len(qi):
        raise ParameterError("qi must name distinct quasi-identifier columns")
    k = check_anonymity(k)
    if rule not in RULES:
        raise ParameterError(f"rule must be one of {', '.join(RULES)}; got {rule!r}")
    M = _qi_matrix(X, qi)
    n = M.shape[0]
    labels = np.asarray(labels)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ParameterError(f"labels must hold one non-negative integer cell id per record ({n})")
    labels = labels.astype(np.int64)
    ncell = int(labels.max()) + 1
    if np.bincount(labels, minlength=ncell).min() == 0:
        raise ParameterError("labels must use every cell id 0 … C−1")
    if (participation is None) != (max_cell_failure is None):
        raise ParameterError("give participation and max_cell_failure together")
    pis = None
    if participation is not None:
        part = check_participation(participation)
        pbar = check_max_cell_failure(max_cell_failure)
        pis = np.full(n, part) if np.isscalar(part) else part
        if pis.size != n:
            raise ParameterError(f"participation has {pis.size} values but there are {n} records")
    Z, params = standardize(M)
    value = weighted_centroids(M, labels, pis)

    if rule == "sequential-balls":
        if costs is not None:
            raise ParameterError("costs apply only to rule 'nearest-centroid'")
        cells = [{"id": c, "reference": _floats(ref), "radius2": r2, "value": _floats(value[c])}
                 for c, (ref, r2) in enumerate(_balls(Z, labels))]
        cells.append({"id": ncell - 1, "reference": None, "radius2": None, "value": _floats(value[-1])})
    else:
        w = np.zeros(ncell) if costs is None else np.asarray(costs, dtype=np.float64)
        if w.shape != (ncell,) or not np.isfinite(w).all():
            raise ParameterError(f"costs must hold one finite number per cell ({ncell})")
        cent = weighted_centroids(Z, labels, pis)
        cells = [{"id": c, "centroid": _floats(cent[c]), "cost": float(w[c]), "value": _floats(value[c])}
                 for c in range(ncell)]
    spec = {
        "format": FORMAT,
        "version": VERSION,
        "qi": qi,
        "standardization": {"mean": _floats(params.mean), "scale": _floats(params.scale),
                            "constant": [bool(v) for v in params.constant]},
        "anonymity": {
            "k": k,
            "n_min": None if n_min is None else int(n_min),
            "participation": None if pis is None else (float(participation) if np.isscalar(participation) else "per-record"),
            "max_cell_failure": None if pis is None else pbar,
        },
        "rule": {"name": rule, "statement": RULES[rule]},
        "cells": cells,
    }
    induced = _assign(spec, M)
    sizes = np.bincount(induced, minlength=ncell)
    model = {"n_records": n, "cell_sizes": sizes.tolist(), "moved_records": int((induced != labels).sum())}
    if pis is not None:
        fails = [cell_failure(k, pis[induced == c]).cell_failure if sizes[c] else 0.0 for c in range(ncell)]
        bad = [c for c in range(ncell) if fails[c] > pbar]
        model["cell_failure"] = fails
        if bad:
            raise ParameterError(
                f"rule {rule!r} applied to the model records gives {len(bad)} cell(s) with failure probability "
                f"above max_cell_failure = {pbar:g} (first: cell {bad[0]}); use another rule or partition"
            )
    else:
        bad = [c for c in range(ncell) if 0 < sizes[c] < k]
        if bad:
            raise ParameterError(
                f"rule {rule!r} applied to the model records gives {len(bad)} cell(s) with fewer than k = {k} "
                f"records (first: cell {bad[0]}); use another rule or partition"
            )
    spec["model"] = model
    spec["checksum"] = {"algorithm": "sha256", "canonicalization": _CANON, "value": spec_checksum(spec)}
    return spec


# --------------------------------------------------------------------------- loading and checking


def _fail(where: str, what: str):
    raise InputError(f"invalid spec{where}: {what}")


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _vector(v, m: int, where: str, name: str) -> None:
    if not isinstance(v, list) or len(v) != m or not all(_is_num(x) for x in v):
        _fail(where, f"{name} must be a list of {m} finite numbers")


def _check_spec(spec, where: str) -> dict:
    if not isinstance(spec, dict):
        _fail(where, "the document must be a JSON object")
    missing = sorted({"format", "version", "qi", "standardization", "anonymity", "rule", "cells", "checksum"} - spec.keys())
    if missing:
        _fail(where, f"missing key(s) {', '.join(missing)}")
    extra = sorted(set(spec) - _TOP)
    if extra:
        _fail(where, f"unknown key(s) {', '.join(extra)}")
    if spec["format"] != FORMAT:
        _fail(where, f"format must be {FORMAT!r}")
    if spec["version"] != VERSION or not _is_int(spec["version"]):
        _fail(where, f"version must be {VERSION}")
    ck = spec["checksum"]
    if not isinstance(ck, dict) or ck.get("algorithm") != "sha256" or not isinstance(ck.get("value"), str):
        _fail(where, "checksum must be an object with algorithm 'sha256' and a hex value")
    if ck["value"] != spec_checksum(spec):
        raise InputError(f"spec{where} fails its SHA-256 checksum: it was modified after export (or damaged)")
    qi = spec["qi"]
    if not isinstance(qi, list) or not qi or not all(isinstance(c, str) for c in qi) or len(set(qi)) != len(qi):
        _fail(where, "qi must be a non-empty list of distinct column names")
    m = len(qi)
    st = spec["standardization"]
    if not isinstance(st, dict) or set(st) != {"mean", "scale", "constant"}:
        _fail(where, "standardization must have exactly mean, scale and constant")
    _vector(st["mean"], m, where, "standardization.mean")
    _vector(st["scale"], m, where, "standardization.scale")
    if min(st["scale"]) <= 0:
        _fail(where, "standardization.scale must be positive")
    if not isinstance(st["constant"], list) or len(st["constant"]) != m or not all(isinstance(b, bool) for b in st["constant"]):
        _fail(where, f"standardization.constant must be a list of {m} booleans")
    an = spec["anonymity"]
    if not isinstance(an, dict) or not _is_int(an.get("k")) or an["k"] < 2:
        _fail(where, "anonymity.k must be an integer ≥ 2")
    if an.get("n_min") is not None and (not _is_int(an["n_min"]) or an["n_min"] < an["k"]):
        _fail(where, "anonymity.n_min must be null or an integer ≥ k")
    pi, pbar = an.get("participation"), an.get("max_cell_failure")
    if not (pi is None or pi == "per-record" or (_is_num(pi) and 0 < pi <= 1)):
        _fail(where, "anonymity.participation must be null, 'per-record' or a number in (0, 1]")
    if not (pbar is None or (_is_num(pbar) and 0 < pbar < 1)) or (pi is None) != (pbar is None):
        _fail(where, "anonymity.max_cell_failure must be a number in (0, 1) given with participation, else null")
    if "model" in spec and not isinstance(spec["model"], dict):
        _fail(where, "model must be an object")
    rule = spec["rule"]
    if not isinstance(rule, dict) or rule.get("name") not in RULES:
        _fail(where, f"rule.name must be one of {', '.join(RULES)}")
    if rule.get("statement") != RULES[rule["name"]]:
        _fail(where, "rule.statement differs from the rule this version of daskmicro applies")
    cells = spec["cells"]
    if not isinstance(cells, list) or not cells:
        _fail(where, "cells must be a non-empty list")
    balls = rule["name"] == "sequential-balls"
    keys = {"id", "reference", "radius2", "value"} if balls else {"id", "centroid", "cost", "value"}
    for c, cell in enumerate(cells):
        if not isinstance(cell, dict) or set(cell) != keys:
            _fail(where, f"cell {c} must have exactly the keys {', '.join(sorted(keys))}")
        if cell["id"] != c or not _is_int(cell["id"]):
            _fail(where, f"cell {c} has id {cell['id']!r}; ids must be 0, 1, … in order")
        _vector(cell["value"], m, where, f"cell {c} value")
        if balls:
            last = c == len(cells) - 1
            if last and (cell["reference"] is not None or cell["radius2"] is not None):
                _fail(where, "the last cell must have null reference and radius2")
            if not last:
                _vector(cell["reference"], m, where, f"cell {c} reference")
                if not _is_num(cell["radius2"]) or cell["radius2"] < 0:
                    _fail(where, f"cell {c} radius2 must be a non-negative number")
        else:
            _vector(cell["centroid"], m, where, f"cell {c} centroid")
            if not _is_num(cell["cost"]):
                _fail(where, f"cell {c} cost must be a finite number")
    return spec


def load_spec(source, expected_checksum: str | None = None) -> dict:
    """Read and check a spec: structure, types, rule statement and SHA-256 checksum.

    Parameters
    ----------
    source : str, path-like or dict
        A JSON file, or an already parsed spec.
    expected_checksum : str, optional
        The checksum obtained through a trusted channel (e.g. printed on the survey); the spec
        must carry exactly this value.

    Raises
    ------
    InputError
        Unreadable file, invalid JSON, missing or mistyped members, unknown rule, or a checksum
        that does not match the content (tampered or damaged) or ``expected_checksum``.
    """
    where = ""
    if isinstance(source, dict):
        spec = source
    else:
        path = Path(source)
        where = f" {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read spec {path}: {' '.join(str(exc).split())}") from None
        try:
            spec = json.loads(text, parse_constant=lambda name: _fail(where, f"non-finite number {name}"))
        except json.JSONDecodeError as exc:
            raise InputError(f"spec {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    _check_spec(spec, where)
    if expected_checksum is not None and spec["checksum"]["value"] != str(expected_checksum).strip().lower():
        raise InputError(f"spec{where} carries checksum {spec['checksum']['value'][:12]}…, not the expected one")
    return spec


def save_spec(spec: dict, path) -> Path:
    """Check ``spec`` and write it as indented JSON, atomically."""
    from ..io.tables import write_json_atomic

    _check_spec(spec, "")
    return write_json_atomic(spec, path)


# --------------------------------------------------------------------------- applying


def _standardized(spec: dict, data) -> np.ndarray:
    M = _qi_matrix(data, spec["qi"])
    st = spec["standardization"]
    Z = (M - np.asarray(st["mean"])) / np.asarray(st["scale"])
    Z[:, np.asarray(st["constant"], dtype=bool)] = 0.0
    return Z


def assign(spec: dict, data) -> np.ndarray:
    """Cell id of every record, exactly as the spec's rule states (:data:`RULES`).

    Parameters
    ----------
    spec : dict
        A spec from :func:`build_spec` or :func:`load_spec` (checked again here).
    data : pandas.DataFrame or array_like
        Records holding the spec's QI columns (a matrix: those columns in spec order).

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    return _assign(_check_spec(spec, ""), data)


def _assign(spec: dict, data) -> np.ndarray:
    Z = _standardized(spec, data)
    cells = spec["cells"]
    out = np.full(Z.shape[0], len(cells) - 1, dtype=np.int64)
    if spec["rule"]["name"] == "sequential-balls":
        left = np.arange(Z.shape[0])
        for c, cell in enumerate(cells[:-1]):
            if left.size == 0:
                break
            hit = _dist2(Z[left], np.asarray(cell["reference"])) <= cell["radius2"]
            out[left[hit]] = c
            left = left[~hit]
        return out
    cent = np.asarray([cell["centroid"] for cell in cells])
    cost = np.asarray([cell["cost"] for cell in cells])
    for start in range(0, Z.shape[0], 2048):
        block = Z[start:start + 2048]
        D = np.zeros((block.shape[0], cent.shape[0]))
        for i in range(Z.shape[1]):
            D += (block[:, i, None] - cent[None, :, i]) ** 2
        out[start:start + 2048] = np.argmin(D + cost, axis=1)
    return out


def cell_values(spec: dict) -> np.ndarray:
    """The value published for each cell (cells × QI, original units), as listed in the spec."""
    return np.asarray([cell["value"] for cell in spec["cells"]], dtype=np.float64)
