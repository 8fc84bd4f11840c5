"""Sub-commands for surveys with uncertain participation: ``spec``, ``assign`` and ``audit``.

The workflow of the *locally trusted* mode (*p-Probabilistic k-Anonymous Microaggregation …*, §IV-B, §V-C):

1. ``daskmicro spec``: from a model of the respondents, design cells of the effective anonymity
   n_min (p-probabilistic k-anonymity) and export the microaggregation function as a JSON spec
   that holds aggregates only (centroids of ≥ k model records, costs, counts, standardization);
2. ``daskmicro assign``: each respondent (or anyone holding records) maps records to cells exactly
   as the spec says — after checking its checksum — and keeps only the cell and its value;
3. ``daskmicro audit``: once real participation is known, report which cells ended with fewer
   than k participants (k-anonymity failed) and how many records that affects.

Errors follow :mod:`daskmicro.cli`: one line on stderr, exit status 2, nothing written.
``audit`` exits with 1 when it finds a failing cell.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, ParameterError

__all__ = ["add_parsers", "run_spec", "run_assign", "run_audit", "audit_cells"]

_FMT = argparse.RawDescriptionHelpFormatter

_SPEC_DESCRIPTION = """\
Design the cells of a survey from a model of its respondents and export the microaggregation
function as a JSON spec that respondents can check (SHA-256 checksum) and apply themselves.

Without --participation the cells are designed by exact MDAV with K.  With a participation
probability π (--participation) or one per record (--participation-column), every cell is made
large enough that it keeps at least K participants with probability ≥ 1 − p̄
(--max-cell-failure): MDAV with the effective anonymity n_min for a constant π, cells grown
one record at a time until their own failure probability is ≤ p̄ for per-record π.

The spec publishes no model record: per cell the mean of its ≥ K design records (z-scored and in
original units), an additive cost and a count; records go to the nearest centroid (plus cost).
"""

_SPEC_EPILOG = """\
examples:
  daskmicro spec model.parquet survey.spec.json --qi age,income --k 10 --participation 0.75 --max-cell-failure 1e-6
  daskmicro spec model.csv spec.json --qi x1,x2,x3 --k 5 --participation-column p_respond --max-cell-failure 1e-4

The printed checksum should reach respondents through a channel they trust (e.g. the invitation):
'daskmicro assign --checksum' refuses any spec that does not carry it.  Before writing, the rule is
applied to the model records; MDAV cells are not nearest-centroid cells in general, so cells whose
induced part is empty, below K or above p̄ are removed (smallest first) until none is, and the
command prints how many model records the rule moves away from their design cell.
"""

_ASSIGN_DESCRIPTION = """\
Map records to cells exactly as a spec says.  The spec is refused if it is malformed or its
checksum does not match its content.  OUTPUT holds every column of INPUT, with the QI columns
replaced by the value of the record's cell (original units) and a column with the cell id.
"""

_AUDIT_DESCRIPTION = """\
After the survey: count the participants of every cell and report the cells that ended with
fewer than k of them (0 < participants < k: k-anonymity failed) and how many records they hold.

INPUT is the output of 'daskmicro assign' (a cell column), either only the responses received
(every row took part) or all designed records with a participation column (1/true = took part).
Exit status: 0 when no cell failed, 1 when some did, 2 on bad input.
"""


def _probability(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_parsers(subparsers) -> None:
    """Register ``spec``, ``assign`` and ``audit`` on the sub-parsers of the ``daskmicro`` command."""
    p = subparsers.add_parser("spec", help="design p-probabilistic cells and export the microaggregation spec",
                              description=_SPEC_DESCRIPTION, epilog=_SPEC_EPILOG, formatter_class=_FMT)
    p.add_argument("input", metavar="INPUT", help="model records: .csv, .parquet or a directory of Parquet files")
    p.add_argument("spec", metavar="SPEC", help="spec to write (.json)")
    p.add_argument("--qi", required=True, metavar="COLS", help="comma-separated quasi-identifier columns (numeric)")
    p.add_argument("--k", required=True, type=int, metavar="K", help="anonymity parameter (≥ 2)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--participation", type=_probability, metavar="PI", help="participation probability of every record, in (0, 1]")
    g.add_argument("--participation-column", metavar="COL", help="column holding each record's participation probability")
    p.add_argument("--max-cell-failure", type=_probability, metavar="PBAR", help="acceptable probability that a cell keeps 1 … K−1 participants, in (0, 1)")
    p.add_argument("--rule", default="nearest-centroid", help="assignment rule written in the spec; only %(default)s "
                   "(sequential-balls, which published model records, is refused)")
    p.add_argument("--overwrite", action="store_true", help="replace SPEC if it exists")
    from .anonymize_cmd import add_series_options

    add_series_options(p)
    p.set_defaults(handler=run_spec)

    p = subparsers.add_parser("assign", help="map records to cells as a spec says (checksum checked)",
                              description=_ASSIGN_DESCRIPTION, formatter_class=_FMT,
                              epilog="example:\n  daskmicro assign --spec survey.spec.json me.csv my_answer.csv\n")
    p.add_argument("--spec", required=True, metavar="SPEC", help="spec written by 'daskmicro spec'")
    p.add_argument("input", metavar="INPUT", help="records holding the spec's QI columns (.csv or .parquet)")
    p.add_argument("output", metavar="OUTPUT", help="file to write (.csv or .parquet)")
    p.add_argument("--checksum", metavar="HEX", help="refuse the spec unless it carries this SHA-256 checksum")
    p.add_argument("--cell-column", default="cell", metavar="NAME", help="name of the cell id column (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.set_defaults(handler=run_assign)

    p = subparsers.add_parser("audit", help="after the survey: report cells left with fewer than k participants",
                              description=_AUDIT_DESCRIPTION, formatter_class=_FMT,
                              epilog="examples:\n  daskmicro audit responses.parquet --spec survey.spec.json\n"
                                     "  daskmicro audit assigned.csv --k 10 --participation-column responded --report audit.json\n")
    p.add_argument("input", metavar="INPUT", help="assigned records (.csv or .parquet) with a cell column")
    p.add_argument("--spec", metavar="SPEC", help="the spec the cells come from (gives k and the list of cells)")
    p.add_argument("--k", type=int, metavar="K", help="anonymity parameter (when no spec is given)")
    p.add_argument("--cell-column", default="cell", metavar="NAME", help="column holding the cell id (default: %(default)s)")
    p.add_argument("--participation-column", metavar="COL", help="column telling who took part (1/0 or true/false); default: every row took part")
    p.add_argument("--report", metavar="PATH", help="also write the audit as JSON to PATH")
    p.add_argument("--overwrite", action="store_true", help="replace the report if it exists")
    p.set_defaults(handler=run_audit)


# --------------------------------------------------------------------------- helpers


def _check_target(path: Path, overwrite: bool, what: str, inputs=()) -> None:
    from ..io.paths import Output, check_outputs  # one rule for every command's outputs

    check_outputs(inputs, [Output(path, what)], overwrite)


def _qi_list(text: str) -> list:
    from ..io.qi import column_list  # names exactly as written, the rule of every command

    qi = column_list(text, "--qi")
    if not qi:
        raise ParameterError("--qi must name at least one column")
    return qi


def _participation_column(df: pd.DataFrame, col: str) -> np.ndarray:
    if col not in df.columns:
        raise ParameterError(f"participation column {col!r} is not in the input")
    values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    n_nan = int(np.isnan(values).sum())
    if n_nan:
        raise ParameterError(f"participation column {col!r} has {n_nan} missing or non-numeric value(s)")
    bad = int(((values <= 0) | (values > 1)).sum())
    if bad:
        raise ParameterError(f"participation column {col!r} has {bad} value(s) outside (0, 1]")
    return values


# --------------------------------------------------------------------------- spec


def run_spec(args) -> int:
    """``daskmicro spec``: design cells on model records and write the spec."""
    from ..io.tables import read_table, write_json_atomic
    from ..kernels import mdav, standardize
    from ..privacy.probabilistic import probabilistic_cells
    from ..kernels.mdav import check_k
    from ..privacy.spec import RETIRED_RULES, RULES, build_spec, check_spec, qi_matrix

    out = Path(args.spec)
    _check_target(out, args.overwrite, "spec", inputs=[args.input])
    qi = _qi_list(args.qi)
    if args.rule not in RULES:
        raise ParameterError(f"--rule must be {' or '.join(RULES)}; {args.rule!r} is not available"
                             + (" (its spec published model records)" if args.rule in RETIRED_RULES else ""))
    if (args.participation is None and args.participation_column is None) != (args.max_cell_failure is None):
        raise ParameterError("--max-cell-failure goes with --participation or --participation-column")
    df = read_table(args.input)
    X = qi_matrix(df, qi)
    Z = standardize(X)[0]
    if args.participation_column is not None:
        participation = _participation_column(df, args.participation_column)
    else:
        participation = args.participation
    n_min = None
    series = _series_design(args, df, qi)
    if series is not None:  # the cells of a series of releases: values published before are repeated
        labels, values, n_min = series
        spec = build_spec(X, labels, qi, args.k, rule=args.rule, participation=participation,
                          max_cell_failure=args.max_cell_failure, n_min=n_min, values=values)
    elif participation is None:
        try:
            k = check_k(len(df), args.k)
        except ValueError as exc:
            raise ParameterError(str(exc)) from None
        labels = mdav(Z, k)
    else:
        cells = probabilistic_cells(Z, args.k, participation, args.max_cell_failure)
        labels, n_min = cells.labels, cells.n_min
    if series is None:
        spec = build_spec(X, labels, qi, args.k, rule=args.rule, participation=participation,
                          max_cell_failure=args.max_cell_failure, n_min=n_min)
    write_json_atomic(check_spec(spec), out)
    model = spec["model"]
    sizes = model["cell_sizes"]
    print(f"{len(spec['cells'])} cells over {len(df):,} model records (sizes {min(sizes)}–{max(sizes)}), "
          f"k = {args.k}" + (f", n_min = {n_min}" if n_min else ""))
    print(f"{model['removed_cells']} of {model['design_cells']} design cells removed; the rule moves "
          f"{model['moved_records']:,} model record(s) away from their design cell")
    if "cell_failure" in spec["model"]:
        q = np.asarray(spec["model"]["cell_failure"])
        from ..privacy.effective import table_failure
        from ..privacy.failure_bounds import upper_bound

        if spec["anonymity"]["participation"] == "per-record":   # the cells' q̄_c are bounds: so is t̄
            print(f"largest cell failure q̄ ≤ {q.max():g} (p̄ = {args.max_cell_failure:g}); "
                  f"table failure t̄ ≤ {upper_bound(table_failure(q)):g} (bounds rounded up)")
        else:
            print(f"largest cell failure q̄ = {q.max():.3g} (≤ p̄ = {args.max_cell_failure:g}); "
                  f"table failure t̄ = {table_failure(q):.3g}")
    print(f"spec:     {out}\nchecksum: sha256 {spec['checksum']['value']}")
    if series is None and _ledger_off(args):
        print("daskmicro: release ledger off: this is a trial run, not recorded; the spec must not be published",
              file=sys.stderr)
    return 0


def _ledger_off(args) -> bool:
    from ..io.ledger import default_ledger

    return (args.ledger or default_ledger()).strip().lower() == "off"


def _series_design(args, df, qi):
    """With the release ledger on: the design cells of the model records as a release of them would
    publish them (records published before keep their frozen values; :mod:`daskmicro.series`),
    recorded in the ledger like any release — (labels, each cell's values, n_min); None for a trial
    run (the ledger off), whose design is aggregated afresh."""
    from ..config import RunConfig
    from ..plan import echo_stderr, run
    from ..release.publish import ROW_ID

    participation = args.participation_column if args.participation_column is not None else args.participation
    cfg = RunConfig.build(qi=tuple(qi), k=args.k, method="mdav", seed=0, keep_row_id=True,
                          participation=participation, max_cell_failure=args.max_cell_failure,
                          ledger=args.ledger, new_series=args.new_series, id_column=args.id_column)
    if cfg.ledger_path == "off":
        return None
    # a spec publishes the cells' QI values only: the run reads the columns the design uses, so no
    # other column is recorded as published nor refused as an identifier (spec has no --drop/--keep)
    used = list(dict.fromkeys([*qi, *(c for c in (args.participation_column, args.id_column) if c is not None)]))
    missing = [c for c in used if c not in df.columns]
    if missing:
        from ..io.qi import unknown_columns

        raise unknown_columns(missing, df.columns, what="participation or id")
    outcome = run(cfg, df[used].reset_index(drop=True), say=echo_stderr)
    published = outcome.release.sort_values(ROW_ID)[list(qi)].to_numpy(np.float64)
    values, labels = np.unique(published, axis=0, return_inverse=True)
    prob = outcome.report.probabilistic or {}
    return labels.ravel(), values, prob.get("n_min")


# --------------------------------------------------------------------------- assign


def run_assign(args) -> int:
    """``daskmicro assign``: apply a spec to records."""
    from ..io.tables import AtomicBatch, read_table, table_format
    from ..privacy.spec import assign, cell_values, load_spec

    out = Path(args.output)
    fmt = table_format(out)
    if fmt is None:
        raise ParameterError(f"OUTPUT must end in .csv or .parquet: {out}")
    _check_target(out, args.overwrite, "output", inputs=[args.input, args.spec])
    spec = load_spec(args.spec, expected_checksum=args.checksum)
    df = read_table(args.input)
    if args.cell_column in df.columns:
        raise ParameterError(f"the input already has a column named {args.cell_column!r} (use --cell-column)")
    cells = assign(spec, df)
    values = cell_values(spec)[cells]
    result = df.copy()
    for j, col in enumerate(spec["qi"]):
        result[col] = values[:, j]
    result[args.cell_column] = cells
    with AtomicBatch() as batch:
        batch.parquet(result, out) if fmt == "parquet" else batch.csv(result, out)
    print(f"{len(df):,} record(s) assigned to {len(np.unique(cells))} of {len(spec['cells'])} cells "
          f"(spec sha256 {spec['checksum']['value'][:12]}…)\noutput: {out}")
    return 0


# --------------------------------------------------------------------------- audit


def audit_cells(cells, k: int, active=None, n_cells: int | None = None, cell_failure=None) -> dict:
    """Count participants per cell and list the cells with 0 < participants < k.

    Parameters
    ----------
    cells : array_like of int
        Cell id of every record.
    k : int
        Anonymity parameter.
    active : array_like of bool, optional
        Who took part (default: everyone).
    n_cells : int, optional
        Number of designed cells (ids 0 … n_cells−1); default: the largest id + 1.
    cell_failure : array_like, optional
        Designed failure probability q̄_c of every cell, to compare with what happened.

    Returns
    -------
    dict
        ``n_cells``, ``n_records``, ``n_active``, ``empty_cells``, ``failed_cells`` (list of
        ``{"cell", "active"}``), ``n_failed_cells``, ``unprotected_records`` (active records in
        failed cells), ``ok``, and with ``cell_failure`` the ``expected_failed_cells`` Σ q̄_c.
    """
    cells = np.asarray(cells, dtype=np.int64)
    act = np.ones(cells.size, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    n_cells = int(cells.max()) + 1 if n_cells is None else int(n_cells)
    ids, counts = np.unique(cells[act], return_counts=True)   # memory by records, not by the largest id
    low = (counts > 0) & (counts < k)
    failed, failed_counts = ids[low], counts[low]
    out = {
        "k": int(k),
        "n_cells": n_cells,
        "n_records": int(cells.size),
        "n_active": int(act.sum()),
        "empty_cells": n_cells - int(ids.size),
        "n_failed_cells": int(failed.size),
        "unprotected_records": int(failed_counts.sum()),
        "failed_cells": [{"cell": int(c), "active": int(a)} for c, a in zip(failed, failed_counts)],
        "ok": bool(failed.size == 0),
    }
    if cell_failure is not None:
        out["expected_failed_cells"] = float(np.sum(cell_failure))
    return out


def _bool_column(df: pd.DataFrame, col: str) -> np.ndarray:
    if col not in df.columns:
        raise ParameterError(f"participation column {col!r} is not in the input")
    s = df[col]
    if s.isna().any():
        raise InputError(f"participation column {col!r} has {int(s.isna().sum())} missing value(s)")
    if pd.api.types.is_bool_dtype(s):
        return s.to_numpy(dtype=bool)
    text = s.astype(str).str.strip().str.lower()
    known = {"1": True, "0": False, "1.0": True, "0.0": False, "true": True, "false": False, "yes": True, "no": False}
    bad = int((~text.isin(list(known))).sum())
    if bad:
        raise InputError(f"participation column {col!r} has {bad} value(s) that are not 1/0, true/false or yes/no")
    return text.map(known).to_numpy(dtype=bool)


def run_audit(args) -> int:
    """``daskmicro audit``: report cells that ended below k participants."""
    from ..io.qi import EXACT_INT
    from ..io.tables import read_table, write_json_atomic
    from ..privacy.spec import load_spec

    if (args.spec is None) == (args.k is None):
        raise ParameterError("give exactly one of --spec and --k")
    report_path = Path(args.report) if args.report else None
    if report_path is not None:
        _check_target(report_path, args.overwrite, "report", inputs=[args.input] + ([args.spec] if args.spec else []))
    spec = load_spec(args.spec) if args.spec else None
    if spec is None and (isinstance(args.k, bool) or args.k < 2):
        raise ParameterError(f"--k must be ≥ 2, got {args.k}")
    k = spec["anonymity"]["k"] if spec else args.k
    df = read_table(args.input)
    col = args.cell_column
    if col not in df.columns:
        raise InputError(f"cell column {col!r} is not in the input (see --cell-column)")
    ids = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    n_cells = len(spec["cells"]) if spec else None
    top = n_cells if n_cells else EXACT_INT   # ids held exactly: distinct ids stay distinct
    if np.isnan(ids).any() or (ids != np.round(ids)).any() or ids.min() < 0 or ids.max() >= top:
        limit = f" in 0 … {n_cells - 1}" if n_cells else " below 2^53"
        raise InputError(f"cell column {col!r} must hold integer cell ids{limit}")
    active = _bool_column(df, args.participation_column) if args.participation_column else None
    q = spec.get("model", {}).get("cell_failure") if spec else None
    result = audit_cells(ids.astype(np.int64), k, active, n_cells, q)
    if spec:
        result["spec_checksum"] = spec["checksum"]["value"]
    if report_path is not None:
        write_json_atomic(result, report_path)
    print(f"{result['n_active']:,} participant(s) of {result['n_records']:,} record(s) in {result['n_cells']} cell(s); "
          f"{result['empty_cells']} empty")
    if result["ok"]:
        print(f"k = {k} holds: no cell has 1 … {k - 1} participants")
    else:
        shown = ", ".join(f"{c['cell']} ({c['active']})" for c in result["failed_cells"][:10])
        more = " …" if result["n_failed_cells"] > 10 else ""
        print(f"k = {k} FAILED in {result['n_failed_cells']} cell(s), {result['unprotected_records']} unprotected "
              f"record(s): cell (participants) {shown}{more}")
    if "expected_failed_cells" in result:
        print(f"designed expectation: {result['expected_failed_cells']:.3g} failing cell(s) (Σ q̄_c of the spec; "
              "at most that where its q̄_c are bounds: per-record participation)")
    if report_path is not None:
        print(f"report: {report_path}")
    return 0 if result["ok"] else 1
