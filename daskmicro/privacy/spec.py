"""The microaggregation function as a published, verifiable specification (§V-C).

In the *locally trusted* mode of Rebollo-Monedero et al., *p-Probabilistic k-Anonymous
Microaggregation …* (Information Sciences 2017, §IV-B, §V-C), the cells are designed from a
statistical model of the respondents before the survey runs; each respondent receives the
microaggregation function, checks it, applies it on their own computer and sends back only the
cell (or its centroid).  This module writes that function as a JSON document and applies it.

What a spec publishes (format version 2) is aggregates only: the QI names, the standardization
(z_i = (x_i − mean_i)/scale_i with the mean of every QI over all model records and, as scale, the
spread of the cell centroids — never the records' standard deviation, which with the centroids
and counts would give every cell's sum of squares), the anonymity
requirement (k, n_min, π, p̄), per cell a centroid (the mean, z-scored and in original units, of
the ≥ k model records of one design cell) and an additive cost, and per cell the number of model
records the rule puts there.  The rule is the cost-sensitive nearest-neighbour condition of PCL
(*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*, §3.2): a record goes to the cell minimising ‖z − ẑ_c‖² + cost_c,
an additively weighted Voronoi partition.  No field is a model record, a distance to one, or a
bound set by one.

Version 1 also offered MDAV's intensional spec of §V-C ("sequential-balls": the reference records
in selection order with the squared distance of the last record adjoined).  It reproduced MDAV
cells exactly, but every reference was a z-scored model record (outliers first) and every radius
a distance to one, so version 1 specs are refused.  The price: MDAV cells are not Voronoi cells
of their centroids, so :func:`build_spec` no longer reproduces an arbitrary design partition on
the model records.  It keeps the design centroids as sites, applies the rule to the model records
and, while an induced cell misses the requirement (fewer than k records, q̄_c > p̄, or empty),
removes the sites of the smallest such cells; ``model.moved_records`` counts the model records
whose cell under the rule is not their design cell.  The guarantee checked before writing is
about what the rule does on the model records, not about the design partition.
With per-record participation each cell's failure q̄_c is published rounded up to one significant
digit (p̄ where that would pass p̄): exact, with the other records' π known, it gives the last one.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError, describe
from ..kernels.bounds import MAX_ABS
from ..kernels.columns import qi_matrix as qi_frame_values
from ..kernels.metrics import Standardization
from .effective import cell_failure, check_anonymity, check_max_cell_failure, check_participation
from .failure_bounds import cell_failure_bound
from .probabilistic import weighted_centroids

__all__ = ["FORMAT", "VERSION", "RULES", "RETIRED_RULES", "build_spec", "qi_matrix", "spec_checksum", "load_spec", "check_spec", "assign",
           "cell_values"]

FORMAT = "daskmicro.microaggregation-spec"
VERSION = 2

_STANDARDIZE = (
    "Standardize the record: z_i = (x_i - mean_i) / scale_i for every QI column i, in the order of 'qi', "
    "with z_i = 0 where constant_i is true. Squared distances are sums over i, in that order, of "
    "(z_i - point_i)^2 in IEEE double precision."
)
#: The assignment rules, stated exactly as :func:`assign` applies them.
RULES = {
    "nearest-centroid": _STANDARDIZE + " The record belongs to the cell c minimising (squared distance to "
    "'centroid' of c) + 'cost' of c; among equal values, the lowest id.",
}
#: Rules of earlier versions, refused because their specs publish model records.
RETIRED_RULES = {"sequential-balls": 1}
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


def qi_matrix(X, qi) -> np.ndarray:
    """The ``qi`` columns of ``X`` (a frame, or a matrix of them in order) as a float64 matrix, by the
    one rule of every QI reader (:func:`daskmicro.kernels.columns.qi_matrix`), refusals naming columns."""
    if not isinstance(X, pd.DataFrame):
        M = np.asarray(X, dtype=np.float64)
        if M.ndim != 2 or M.shape[1] != len(qi):
            raise InputError(f"the records must form a matrix with one column per QI ({len(qi)}), got shape {M.shape}")
        X, qi, names = pd.DataFrame(M), list(range(M.shape[1])), qi
    else:
        names = None
        for what, bad in (("missing from the table", [c for c in qi if c not in X.columns]),
                          ("named more than once in the input", [c for c in qi if int((X.columns == c).sum()) > 1])):
            if bad:
                raise InputError(f"QI column(s) {what}: {', '.join(map(repr, bad))}")
    M = qi_frame_values(X, list(qi), names=names)
    if M.shape[0] == 0:
        raise InputError("the table has no records")
    return M


def _requirement_misses(spec: dict, induced: np.ndarray, pis, k: int, pbar) -> tuple:
    """Induced cell sizes, failure probabilities (or None) and the cells that miss the requirement.

    A cell misses it when it holds no model record (respondents landing there would be alone), fewer
    than k without a participation model, or has q̄_c > p̄ with one.
    """
    ncell = len(spec["cells"])
    sizes = np.bincount(induced, minlength=ncell)
    if pis is None:
        return sizes, None, np.flatnonzero(sizes < k)
    fails = np.array([cell_failure(k, pis[induced == c]).cell_failure if sizes[c] else 1.0 for c in range(ncell)])
    return sizes, fails, np.flatnonzero((sizes == 0) | (fails > pbar))


def _fit_sites(spec: dict, M: np.ndarray, pis, k: int, pbar) -> tuple:
    """Remove cells from ``spec`` until every cell the rule induces on ``M`` meets the requirement.

    Each round applies the rule, and if some induced cells miss the requirement removes the
    smallest of them (an eighth of the misses, at least one) from ``spec["cells"]``: their model
    records then go to their next-best cells.  Sites are never moved, so every published centroid
    stays the mean of its design cell.  Returns the design ids kept, the induced ids on ``M`` and
    the induced sizes and failure probabilities.
    """
    kept = np.arange(len(spec["cells"]))
    while True:
        induced = _assign(spec, M)
        sizes, fails, bad = _requirement_misses(spec, induced, pis, k, pbar)
        if bad.size == 0:
            return kept, induced, sizes, fails
        if kept.size == 1:
            what = "fewer than k = %d records" % k if pis is None else "failure probability above max_cell_failure"
            raise ParameterError(f"no spec meets the requirement: even a single cell of all model records has {what}")
        order = bad[np.lexsort((bad, sizes[bad]))]
        drop = order[:max(1, bad.size // 8)]
        keep = np.setdiff1d(np.arange(kept.size), drop)
        kept = kept[keep]
        spec["cells"] = [dict(spec["cells"][i], id=j) for j, i in enumerate(keep)]


def _design_labels(labels, n: int, k: int) -> tuple[np.ndarray, int]:
    """(int64 labels, number of cells) of a design, checked: one id per record, every id 0 … C−1
    used, every cell of at least k records."""
    labels = np.asarray(labels)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ParameterError(f"labels must hold one non-negative integer cell id per record ({n})")
    labels = labels.astype(np.int64)
    ncell = int(labels.max()) + 1
    counts = np.bincount(labels, minlength=ncell)
    if counts.min() == 0:
        raise ParameterError("labels must use every cell id 0 … C−1")
    if counts.min() < k:
        raise ParameterError(f"labels give {int((counts < k).sum())} cell(s) fewer than k = {k} records "
                             f"(first: cell {int(np.argmax(counts < k))}); their centroids cannot be published")
    return labels, ncell


def _design_participation(participation, max_cell_failure, n: int):
    """(π per model record, p̄) of a design, checked; (None, None) without participation."""
    if (participation is None) != (max_cell_failure is None):
        raise ParameterError("give participation and max_cell_failure together")
    if participation is None:
        return None, None
    part = check_participation(participation)
    pbar = check_max_cell_failure(max_cell_failure)
    pis = np.full(n, part) if np.isscalar(part) else part
    if pis.size != n:
        raise ParameterError(f"participation has {pis.size} values but there are {n} records")
    return pis, pbar


def _cell_standardization(value: np.ndarray, counts: np.ndarray) -> Standardization:
    """The published standardization, from the design cells' centroids and sizes only.

    ``mean`` is the size-weighted mean of the centroids (the model records' mean) and ``scale``
    the size-weighted spread of the centroids around it (the between-cell standard deviation).
    The records' own standard deviation is not published: with the centroids and counts it gives
    n·Σx² and hence the total within-cell sum of squares, from which the records of a cell can be
    solved (two records from their sum and sum of squares when the other cells' records are
    equal).  A column whose centroids are all equal is constant for the rule.
    """
    w = counts / counts.sum()
    mean = value[0] + w @ (value - value[0])
    std = np.sqrt(w @ (value - mean) ** 2)
    constant = (value.min(axis=0) == value.max(axis=0)) | ~(std > 0) | ~np.isfinite(std)
    mean = np.where(constant, value[0], mean)
    return Standardization(mean=mean, scale=np.where(constant, 1.0, std), constant=constant)


def build_spec(X, labels, qi, k, *, rule="nearest-centroid", costs=None, participation=None,
               max_cell_failure=None, n_min=None, values=None) -> dict:
    """Write a micropartition of model records as a verifiable specification (§V-C), aggregates only.

    Each design cell (``labels``) of at least k records contributes its centroid (plain mean,
    z-scored and in original units) and a cost; records are assigned by the cost-sensitive
    nearest-neighbour rule of PCL (*An algorithm for k-anonymous microaggregation … distortion-optimized quantizers*, §3.2; :data:`RULES`).  The rule is applied to the model
    records and cells whose induced part misses the requirement (empty, fewer than k records, or
    q̄_c > p̄) are removed, smallest first, until none does.  The induced cells therefore meet the
    requirement but need not equal the design cells: ``model.moved_records`` counts the model
    records whose cell differs from their design cell (removed cells' records included).

    Parameters
    ----------
    X : pandas.DataFrame or array_like, shape (n, m)
        Model records in original units (a DataFrame holding the ``qi`` columns, or a matrix whose
        columns are the ``qi`` in order).
    labels : array_like of int, shape (n,)
        Design cell ids 0 … C−1, each used by at least k records (a centroid of fewer would
        disclose too much).
    qi : list of str
        Quasi-identifier column names.
    k : int
        Target anonymity, ≥ 2.
    rule : {"nearest-centroid"}
        Assignment rule (see :data:`RULES`); ``"sequential-balls"`` (format 1) is refused.
    costs : array_like, shape (C,), optional
        Additive cost of every design cell (PCL); zeros by default.  Published as given, so they
        should come from aggregates (PCL's cost step on cell probabilities), not from records.
    participation : float or array_like, optional
        π (or π_j per model record) of the design; requires ``max_cell_failure``.
    max_cell_failure : float, optional
        p̄ of the design.
    n_min : int, optional
        Effective anonymity of the design (constant π), recorded for the respondent.
    values : array_like, shape (C, m), optional
        The values each design cell publishes, in original units, when they are given rather than
        the mean of its records: a series' frozen cell values (:mod:`daskmicro.series`), so that a
        later spec of the same records repeats what an earlier one published.

    Returns
    -------
    dict
        The spec, checksum included; ``model`` holds counts of the cells the rule induces on ``X``
        and, with participation, each one's q̄_c (per-record π: a bound rounded up,
        :func:`~daskmicro.privacy.failure_bounds.cell_failure_bound`).

    Raises
    ------
    ParameterError
        Bad parameters, a design cell of fewer than k records, or no set of cells whose induced
        parts all meet the requirement (not even one cell of all records).
    """
    qi = [str(c) for c in qi] if not isinstance(qi, str) else [qi]
    if not qi or len(set(qi)) != len(qi):
        raise ParameterError("qi must name distinct quasi-identifier columns")
    k = check_anonymity(k)
    if rule in RETIRED_RULES:
        raise ParameterError(f"rule {rule!r} is no longer available: its spec publishes model records; "
                             "use 'nearest-centroid'")
    if rule not in RULES:
        raise ParameterError(f"rule must be one of {', '.join(RULES)}; got {rule!r}")
    M = qi_matrix(X, qi)
    n = M.shape[0]
    labels, ncell = _design_labels(labels, n, k)
    counts = np.bincount(labels, minlength=ncell)
    pis, pbar = _design_participation(participation, max_cell_failure, n)
    w = np.zeros(ncell) if costs is None else np.asarray(costs, dtype=np.float64)
    if w.shape != (ncell,) or not np.isfinite(w).all():
        raise ParameterError(f"costs must hold one finite number per cell ({ncell})")
    if values is None:
        value = weighted_centroids(M, labels)
    else:
        value = np.asarray(values, dtype=np.float64)
        if value.shape != (ncell, M.shape[1]) or not np.isfinite(value).all():
            raise ParameterError(f"values must hold {M.shape[1]} finite numbers per cell ({ncell} cells)")
    params = _cell_standardization(value, counts)
    # the rule's centroids from the published values alone: z-scoring the records first would round
    # each record apart, and two cells of one mean would then get centroids an ulp apart, with the
    # records split between them by where each lies (a count the spec publishes)
    cent = params.transform(value)
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
            "max_cell_failure": pbar,
        },
        "rule": {"name": rule, "statement": RULES[rule]},
        "cells": cells,
    }
    kept, induced, sizes, fails = _fit_sites(spec, M, pis, k, pbar)
    model = {"n_records": n, "design_cells": ncell, "removed_cells": ncell - int(kept.size),
             "cell_sizes": sizes.tolist(), "moved_records": int((kept[induced] != labels).sum())}
    if fails is not None:   # per-record π: each q̄_c as a bound rounded up, never the exact figure
        public = float if np.isscalar(participation) else (lambda q: cell_failure_bound(q, pbar))
        model["cell_failure"] = [public(float(q)) for q in fails]
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
    if spec["version"] in RETIRED_RULES.values() and _is_int(spec["version"]):
        raise InputError(f"spec{where} has format version {spec['version']}, whose cells publish model records; "
                         "it is refused: export the spec again with this version of daskmicro")
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
    keys = {"id", "centroid", "cost", "value"}
    for c, cell in enumerate(cells):
        if not isinstance(cell, dict) or set(cell) != keys:
            _fail(where, f"cell {c} must have exactly the keys {', '.join(sorted(keys))}")
        if cell["id"] != c or not _is_int(cell["id"]):
            _fail(where, f"cell {c} has id {cell['id']!r}; ids must be 0, 1, … in order")
        _vector(cell["value"], m, where, f"cell {c} value")
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
            raise InputError(f"cannot read spec {path}: {describe(exc)}") from None
        try:
            spec = json.loads(text, parse_constant=lambda name: _fail(where, f"non-finite number {name}"))
        except json.JSONDecodeError as exc:
            raise InputError(f"spec {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    _check_spec(spec, where)
    if expected_checksum is not None and spec["checksum"]["value"] != str(expected_checksum).strip().lower():
        raise InputError(f"spec{where} carries checksum {spec['checksum']['value'][:12]}…, not the expected one")
    return spec


def check_spec(spec: dict) -> dict:
    """``spec`` checked as :func:`load_spec` checks a file's (raises InputError), returned as is: what
    a writer calls before writing it (``daskmicro spec`` writes it with
    :func:`daskmicro.io.tables.write_json_atomic`)."""
    _check_spec(spec, "")
    return spec


# --------------------------------------------------------------------------- applying


def _standardized(spec: dict, data) -> np.ndarray:
    """The records z-scored as the spec says; z-scores beyond ±MAX_ABS (squared distances overflow, every cell ties) refused."""
    M = qi_matrix(data, spec["qi"])
    st = spec["standardization"]
    with np.errstate(over="ignore", invalid="ignore"):
        Z = (M - np.asarray(st["mean"])) / np.asarray(st["scale"])
    Z[:, np.asarray(st["constant"], dtype=bool)] = 0.0
    far = [repr(c) for j, c in enumerate(spec["qi"]) if not (np.abs(Z[:, j]) <= MAX_ABS).all()]
    if far:
        raise InputError(f"QI column(s) with values too far from the spec's cells to assign: {', '.join(far)} (beyond ±"
                         f"{MAX_ABS:.0e} standard deviations: squared distances would overflow); use the model's units")
    return Z


def assign(spec: dict, data) -> np.ndarray:
    """Cell id of every record, exactly as the spec's rule states (:data:`RULES`).

    The rule depends on the record alone (nearest centroid plus cost, ties to the lowest id), so a
    respondent can apply it without seeing anyone else.  On the model records it gives the cells
    counted in ``model.cell_sizes``, each meeting the requirement; that is not always the design
    partition (see the module docstring), and for other records no cell size is promised:
    ``daskmicro audit`` counts what happened.

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
    out = np.empty(Z.shape[0], dtype=np.int64)
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
