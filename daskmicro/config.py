"""One run description: :class:`RunConfig`, every option and every default of a run, validated once.

Every entry builds one: the Python API (:func:`daskmicro.anonymize` → :meth:`RunConfig.build`), the command
line (``daskmicro anonymize`` → :meth:`RunConfig.from_args`) and a workflow spec (``daskmicro run`` /
``submit`` → :meth:`RunConfig.from_spec`).  Nothing below it sees argparse or YAML: the planner
(:mod:`daskmicro.plan`) takes a RunConfig and nothing else.

Validation is declarative: :data:`FIELDS` says what each option accepts (one checker per field), :data:`RULES`
says which combinations are refused and why (the reason is inherent to the methods; the README's
combination table is :func:`rules_table`).  A refused combination raises :class:`~daskmicro.errors.ParameterError`
with that one line.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from .errors import ParameterError
from .incremental.options import incremental_value, not_taken_by_a_survey
from .validators import (ALL_NUMERIC, choice, flag, integer, label, label_list, ledger_value, memory_size, number,
                         participation_value, path_text, qi_value, scheduler_address, seed_value, text_list)

__all__ = ["RunConfig", "ALL_NUMERIC", "DEFAULTS", "METHODS", "RUN_METHODS", "QUALITIES", "QUALITY", "ONE_TASK_METHODS", "RULES", "Rule", "rules_table",
           "AUTO_EXACT_ROWS", "DEFAULT_TASK_ROWS", "DEFAULT_MAX_TASK_ROWS", "DEFAULT_ROWS_PER_FILE",
           "check_seed", "check_k_for"]

#: Microaggregation methods.
METHODS = ("auto", "mdav", "pca-mdav", "pcl", "partitioned", "proximal-distal")
#: What a run may be: one of :data:`METHODS`, or an incremental survey (a base stage while the
#: records arrive, an increment at the close: :mod:`daskmicro.incremental`).
RUN_METHODS = METHODS + ("incremental",)
#: Methods that form all the cells of a group in one task.
ONE_TASK_METHODS = ("mdav", "pca-mdav", "pcl")
#: ``method="auto"``: a group of at most this many records runs exact MDAV in one task, larger
#: groups run the partitioned pipeline.
AUTO_EXACT_ROWS = 100_000
#: Records per top-level task of the partitioned pipeline.
DEFAULT_TASK_ROWS = 250_000
#: Largest group a one-task method accepts (exact MDAV takes minutes beyond).
DEFAULT_MAX_TASK_ROWS = 1_000_000
#: Rows per file of a directory release.
DEFAULT_ROWS_PER_FILE = 1_000_000

#: Per-method defaults of the pipeline layout: macrocell size K, distal fraction ν, partition
#: size.  ν = 0.4 and K = 1000 are the choice on Census of *Efficient k-Anonymous Microaggregation … via PCA* (§V, Fig. 14); the
#: partitioned default runs MDAV in every macrocell (ν = 1, the lowest distortion).
DEFAULTS = {
    "partitioned": {"K": 1000, "nu": 1.0, "partition_size": 50_000},
    "proximal-distal": {"K": 1000, "nu": 0.4, "partition_size": None},
    "mdav": {"K": None, "nu": 1.0, "partition_size": None},
    "pca-mdav": {"K": None, "nu": 0.0, "partition_size": None},
    "pcl": {"K": None, "nu": 1.0, "partition_size": None},
}

#: ``quality``: what each setting adds to the cells a method forms, all applied by
#: :func:`daskmicro.kernels.improve.polish`: ``improve_sweeps`` passes of moves and swaps between
#: neighbouring cells with ``improve_neighbours`` cells tried per record, then ``improve_pcl_iter``
#: noiseless PCL iterations (a joint reassignment under the size constraint) and
#: ``improve_post_sweeps`` passes more (with at most
#: :data:`~daskmicro.kernels.improve.POST_PCL_NEIGHBOURS` cells per record) — a pipeline stage
#: over each top cell's partitions jointly, so that it also works across their borders.
#: ``partition_size`` and ``task_rows``: the partitioned method's partition size and top-cell
#: size when none is given (the improvement repairs most of what smaller partitions cost, and
#: their MDAV is cheaper; larger top cells leave fewer borders the stage cannot cross); ``one_task``: whether groups small enough for one task
#: (exact MDAV, PCA-MDAV, PCL) get the same pass.  "balanced" keeps the named one-task methods exact
#: and brings the partitioned pipeline to exact MDAV's distortion; "high" spends about twice the
#: time for 10–15 % less.  Measured in benchmarks/README.md.
QUALITY = {
    "balanced": {"improve_sweeps": 3, "improve_neighbours": 8, "improve_pcl_iter": 0, "improve_post_sweeps": 0,
                 "partition_size": 25_000, "task_rows": DEFAULT_TASK_ROWS, "one_task": False},  # partitioned only
    "high": {"improve_sweeps": 2, "improve_neighbours": 16, "improve_pcl_iter": 2, "improve_post_sweeps": 2,
             "partition_size": 25_000, "task_rows": 2 * DEFAULT_TASK_ROWS, "one_task": True},
}
QUALITIES = tuple(QUALITY)


#: What each option accepts (None always means "not set": the default applies).
FIELDS: dict[str, Callable[[str, Any], Any]] = {
    "qi": qi_value,
    "qi_except": label_list,
    "k": integer(2),
    "method": choice(RUN_METHODS),
    "energy_loss": number(0.0, 1.0, high_open=True),
    "n_components": integer(1),
    "seed": seed_value,
    "keep_row_id": flag,
    "K": integer(2),
    "nu": number(0.0, 1.0),
    "partition_size": integer(2),
    "task_rows": integer(2),
    "max_task_rows": integer(1),
    "sse_threshold": number(0.0, math.inf, what="≥ 0"),
    "participation": participation_value,
    "max_cell_failure": number(0.0, 1.0, low_open=True, high_open=True),
    "plain_k_reference": flag,
    "reference": choice(("auto", "exact", "sample"), optional=True),
    "strata": label_list,
    "missing": choice(("refuse", "separate")),
    "merge_small_strata": flag,
    "quality": choice(QUALITIES),
    "refine": choice(("pcl",), optional=True),
    "refine_iter": integer(1),
    "macro": choice(("mdav", "pcl")), "macro_iter": integer(1),
    "filters": text_list,
    "columns": label_list,
    "drop": label_list,
    "keep": label_list,
    "partition_by": label_list,
    "rows_per_file": lambda name, v: integer(1)("rows_per_file (--rows-per-file)", v),
    "table_format": lambda name, v: choice(("parquet", "delta"))("table_format (--table-format)", v),
    "force": flag, "overwrite": flag,
    "scheduler": scheduler_address,
    "workers": integer(1),
    "tls_ca_file": path_text, "tls_cert": path_text, "tls_key": path_text,
    "dask_report": flag, "risk": flag,
    "memory_limit": memory_size,
    "spill_directory": path_text,
    "ledger": ledger_value,
    "new_series": flag, "id_column": label,
    "incremental": incremental_value,
}


# --------------------------------------------------------------------------- combination rules


@dataclass(frozen=True)
class Rule:
    """A refused combination: ``when(config)`` is true → ParameterError(``message``)."""

    name: str
    when: Callable[["RunConfig"], bool]
    message: str
    detail: Callable[["RunConfig"], str] | None = None   # the columns concerned, for the error

    def error(self, config) -> ParameterError:
        extra = f" ({self.detail(config)})" if self.detail is not None else ""
        return ParameterError(self.message + extra)


def _pcl_stage(c) -> bool:
    return c.refine is not None or c.macro == "pcl"


def _per_record(c) -> bool:
    return c.participation is not None and not isinstance(c.participation, float)


RULES: tuple[Rule, ...] = (
    Rule("participation needs max_cell_failure", lambda c: (c.participation is None) != (c.max_cell_failure is None),
         "participation and max_cell_failure go together: the probability π (or a column of π_j) and the "
         "acceptable cell failure p̄"),
    Rule("plain_k_reference needs participation", lambda c: c.plain_k_reference is not None and c.participation is None,
         "plain_k_reference applies only with participation and max_cell_failure"),
    Rule("incremental options need method incremental", lambda c: c.incremental is not None
         and c.method != "incremental",
         "incremental options (close_at, zeta, nu of the survey, increment, …) apply only to method 'incremental'"),
    Rule("options an incremental run does not take", lambda c: bool(not_taken_by_a_survey(c)),
         "method 'incremental' microaggregates one survey in two stages (a base stage while the records arrive, an "
         "increment at the close); strata, participation, quality, PCL stages, filters, column selection, "
         "partitioned output, the exact-MDAV reference, --force and the disclosure risk (no row id pairs a released "
         "row with its arriving record) do not apply to it, and the pipeline layout "
         "(K, nu, partition_size, task_rows, energy_loss, n_components) only to base_method 'partitioned'",
         lambda c: _names(not_taken_by_a_survey(c))),
    Rule("PCA options need a PCA method", lambda c: (c.energy_loss is not None or c.n_components is not None)
         and c.method not in ("pca-mdav", "partitioned", "proximal-distal", "incremental"),
         "energy_loss and n_components apply only to method 'pca-mdav' and to the pipeline methods that use PCA "
         "(partitioned, proximal-distal)"),
    Rule("one PCA bound", lambda c: c.energy_loss is not None and c.n_components is not None,
         "give either energy_loss or n_components, not both"),
    Rule("layout options need the pipeline", lambda c: c.method in ONE_TASK_METHODS
         and any(v is not None for v in (c.K, c.nu, c.partition_size, c.sse_threshold)),
         "K, nu, partition_size and sse_threshold apply to the partitioned and proximal-distal methods"),
    Rule("K not above k", lambda c: c.K is not None and c.K <= c.k,
         "K (macrocell size) must be larger than k (the cell size)", lambda c: f"K = {c.K}, k = {c.k}"),
    Rule("refine_iter without refine", lambda c: c.refine_iter is not None and c.refine is None,
         "refine_iter applies only with refine='pcl'"),
    Rule("macro_iter without macro='pcl'", lambda c: c.macro_iter is not None and c.macro != "pcl",
         "macro_iter applies only with macro='pcl'"),
    Rule("PCL stages need the pipeline", lambda c: _pcl_stage(c) and c.method in ONE_TASK_METHODS,
         "refine and macro are stages of the partitioned / proximal-distal pipeline; a one-task method "
         "(mdav, pca-mdav, pcl) has no partitions to refine (use method 'pcl' for PCL on all records)"),
    Rule("per-record participation and PCL cells", lambda c: _per_record(c) and (c.refine is not None or c.method == "pcl"),
         "a participation column (per-record π_j) cannot be combined with PCL cells (method 'pcl' or refine "
         "'pcl'): PCL moves records between cells and does not keep each cell's failure q̄ ≤ p̄ (macro='pcl' "
         "only shapes the partitions and is accepted)"),
    Rule("per-record participation and quality high", lambda c: _per_record(c) and c.quality == "high",
         "a participation column (per-record π_j) cannot be combined with quality 'high': its moves and swaps "
         "between cells do not keep each cell's failure q̄ ≤ p̄ (the default quality leaves such cells as grown)"),
    Rule("per-record participation and proximal-distal", lambda c: _per_record(c) and c.method == "proximal-distal",
         "a participation column (per-record π_j) is not supported by method 'proximal-distal' (Algorithm C "
         "as published forms fixed-size cells); use 'partitioned', 'mdav' or 'pca-mdav'"),
    Rule("stratum column is a QI", lambda c: bool(set(c.strata) & set(c.qi)),
         "strata (--strata): stratum columns cannot also be quasi-identifiers",
         lambda c: _names([x for x in c.strata if x in c.qi])),
    Rule("kept QI", lambda c: bool(set(c.keep) & set(c.qi)),
         "keep (--keep): quasi-identifiers are masked, never published as they are",
         lambda c: _names([x for x in c.keep if x in c.qi])),
    Rule("kept and dropped column", lambda c: bool(set(c.keep) & set(c.drop)),
         "keep and drop (--keep, --drop): a column cannot be both published and left out",
         lambda c: _names([x for x in c.keep if x in c.drop])),
    Rule("dropped QI", lambda c: bool(set(c.drop) & set(c.qi)),
         "drop (--drop): quasi-identifiers cannot be dropped", lambda c: _names([x for x in c.drop if x in c.qi])),
    Rule("partitioning column is a QI", lambda c: bool(set(c.partition_by or ()) & set(c.qi)),
         "partition_by (--partition-by): a quasi-identifier cannot be a partitioning column",
         lambda c: _names([x for x in c.partition_by if x in c.qi])),
    Rule("participation column is published", lambda c: _per_record(c) and c.participation in {*c.qi, *c.strata, *(c.partition_by or ())},
         "the participation column is also a QI column, a stratum or a partitioning column; it is never published",
         lambda c: repr(c.participation)),
    Rule("worker memory settings need a LocalCluster", lambda c: c.scheduler is not None
         and (c.memory_limit is not None or c.spill_directory is not None),
         "memory_limit and spill_directory (--memory-limit, --spill-dir) set up the workers of the LocalCluster "
         "daskmicro starts; the workers of a running cluster keep their own (dask worker --memory-limit, "
         "--local-directory)"),
    Rule("new series without a ledger", lambda c: c.new_series and c.ledger_path == "off",
         "new_series (--new-series) starts a new series in the release ledger; with the ledger off (a trial run: "
         "--ledger off, series.ledger: off or DASKMICRO_LEDGER=off) nothing is recorded"),
    Rule("id column without a ledger", lambda c: c.id_column is not None and c.ledger_path == "off", "id_column (--id-column) identifies "
         "records in the release ledger; with the ledger off (--ledger off, series.ledger: off or DASKMICRO_LEDGER=off) nothing is recorded"),
    Rule("id column is a QI, a stratum or a partitioning column", lambda c: c.id_column in {*c.qi, *c.strata, *(c.partition_by or ())} - {None},
         "id_column (--id-column): the id column is never published and cannot be a QI, a stratum or a partitioning column",
         lambda c: repr(c.id_column)),
    Rule("Delta table and incremental", lambda c: c.table_format == "delta" and c.method == "incremental",
         "table_format 'delta' (--table-format) does not apply to method 'incremental' (its stages are releases)"),
    Rule("TLS needs three files", lambda c: 0 < sum(v is not None for v in (c.tls_ca_file, c.tls_cert, c.tls_key)) < 3,
         "TLS needs a CA file, a client certificate and a client key (--tls-ca-file, --tls-cert, --tls-key)",
         lambda c: "missing " + ", ".join(f for f, v in (("--tls-ca-file", c.tls_ca_file), ("--tls-cert", c.tls_cert),
                                                          ("--tls-key", c.tls_key)) if v is None)),
)


def _names(cols) -> str:
    return ", ".join(repr(x) for x in cols)


def rules_table() -> str:
    """The refused combinations as a Markdown table (the README's table is this)."""
    lines = ["| refused combination | why |", "|---|---|"]
    lines += [f"| {r.name} | {r.message} |" for r in RULES]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the config


@dataclass(frozen=True)
class RunConfig:
    """Every option of a run (see :func:`daskmicro.anonymize` for their meaning); frozen.

    Build it with :meth:`build` (keyword options as the API takes them), :meth:`from_args` or
    :meth:`from_spec`; all three validate every field and every rule once.  ``None`` means "not
    set": the planner applies the method's default (:data:`DEFAULTS`) where the option matters.
    """

    qi: tuple
    k: int
    method: str = "auto"
    energy_loss: float | None = None
    n_components: int | None = None
    seed: int = 0
    keep_row_id: bool = False
    K: int | None = None
    nu: float | None = None
    partition_size: int | None = None
    task_rows: int | None = None
    max_task_rows: int | None = None
    sse_threshold: float | None = None
    participation: Any = None
    max_cell_failure: float | None = None
    plain_k_reference: bool | None = None
    reference: str | None = None
    strata: tuple = ()
    missing: str = "refuse"
    merge_small_strata: bool = False
    quality: str = "balanced"
    refine: str | None = None
    refine_iter: int | None = None
    macro: str = "mdav"
    macro_iter: int | None = None
    # source and release
    filters: tuple = ()
    columns: tuple | None = None
    drop: tuple = ()
    keep: tuple = ()    # published as they are although they look like identifiers
    partition_by: tuple | None = None
    rows_per_file: int = DEFAULT_ROWS_PER_FILE
    table_format: str = "parquet"   # a directory release: a Parquet lake with _SUCCESS, or a Delta table version
    force: bool = False
    overwrite: bool = False
    # cluster
    scheduler: str | None = None
    workers: int | None = None
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    dask_report: bool = False   # the Dask performance report (several MB): only when asked for
    risk: bool = False          # disclosure risk of the release against the input, on a sample (report)
    memory_limit: int | None = None     # bytes per worker of the LocalCluster (None: from the task size)
    spill_directory: str | None = None  # where those workers spill (None: Dask's temporary directory)
    # series of releases (daskmicro.io.ledger)
    ledger: str | None = None           # None: the default ledger; "off": a trial run, nothing recorded
    new_series: bool = False            # re-aggregate records published before (gives earlier values away)
    id_column: str | None = None        # records identified by this column (else by strata + QIs)
    # an incremental survey (method "incremental": daskmicro.incremental)
    incremental: Any = None             # IncrementalOptions (None: their defaults)
    qi_except: tuple | None = None      # qi "all-numeric": the numeric columns that are not QIs (None: qi as given)
    seed_drawn: bool = field(default=False, compare=False)

    # ----------------------------------------------------------------- builders

    @classmethod
    def build(cls, **options) -> "RunConfig":
        """A validated config from keyword options (None: not set).  ``seed=None`` draws one from
        OS entropy, recorded in the config and the report."""
        unknown = sorted(set(options) - set(FIELDS))
        if unknown:
            raise ParameterError(f"unknown option(s): {', '.join(unknown)}")
        if options.get("qi") is None:
            raise ParameterError("qi must name at least one quasi-identifier column")
        if options.get("k") is None:
            raise ParameterError("k must be an integer ≥ 2, got None")
        values = {}
        for name, v in options.items():
            if v is None:
                continue
            values[name] = FIELDS[name](name, v)
        if values["qi"] == ALL_NUMERIC:   # resolved against the input's columns by the planner
            values["qi"], values["qi_except"] = (), tuple(values.get("qi_except", ()))
        elif "qi_except" in values:
            raise ParameterError("qi_except (--qi-except) applies only with qi 'all-numeric' (every numeric column "
                                 "but those named)")
        elif not values["qi"]:
            raise ParameterError("qi must name at least one quasi-identifier column")
        drawn = "seed" not in values
        if drawn:
            values["seed"] = secrets.randbits(63)
        cfg = cls(**values, seed_drawn=drawn)
        cfg.check_rules()
        return cfg

    @classmethod
    def from_args(cls, args, qi, participation=None, incremental=None) -> "RunConfig":
        """The config of ``daskmicro anonymize`` from its parsed arguments (``qi`` split exactly;
        ``incremental``: the incremental options given, a mapping)."""
        from .io.qi import column_list

        def cols(text, flag):
            return tuple(column_list(text, flag)) if text else None

        return cls.build(
            qi=qi, k=args.k, method=args.method, energy_loss=args.energy_loss, n_components=args.n_components,
            seed=args.seed, keep_row_id=args.keep_row_id, K=args.K, nu=args.nu, partition_size=args.partition_size,
            task_rows=args.task_rows, max_task_rows=args.max_task_rows, quality=args.quality, refine=args.refine,
            refine_iter=args.refine_iter, macro=args.macro, macro_iter=args.macro_iter,
            participation=participation, max_cell_failure=args.max_cell_failure,
            # the exact-MDAV reference (default "auto") is not one of a survey: its own is --one-pass-reference
            reference=None if args.reference == "none" or (args.method == "incremental" and args.reference == "auto")
            else args.reference,
            strata=cols(args.strata, "--strata"), missing=args.missing,
            merge_small_strata=args.merge_small_strata, filters=tuple(args.filter or ()) or None,
            columns=cols(args.columns, "--columns"), drop=cols(args.drop, "--drop"), keep=cols(args.keep, "--keep"),
            partition_by=cols(args.partition_by, "--partition-by"), rows_per_file=args.rows_per_file,
            table_format=getattr(args, "table_format", None),
            force=args.force, overwrite=args.overwrite, scheduler=args.scheduler, workers=args.workers,
            tls_ca_file=args.tls_ca_file, tls_cert=args.tls_cert, tls_key=args.tls_key,
            dask_report=bool(getattr(args, "dask_report", False)), risk=bool(getattr(args, "risk", False)),
            memory_limit=getattr(args, "memory_limit", None), spill_directory=getattr(args, "spill_dir", None),
            ledger=getattr(args, "ledger", None), new_series=getattr(args, "new_series", None),
            id_column=getattr(args, "id_column", None), incremental=incremental,
            qi_except=cols(getattr(args, "qi_except", None), "--qi-except"),
        )

    @classmethod
    def from_spec(cls, data: dict, filters=()) -> "RunConfig":
        """The config of one workflow run from a validated spec's data (filters already filled
        in for the slot and written as filter expressions)."""
        params = dict(data.get("parameters") or {})
        part = data.get("participation") or {}
        method = data.get("method", "auto")
        cluster = data.get("cluster") or {}
        tls = cluster.get("tls") or {}
        inp, out = data.get("input") or {}, data.get("output") or {}
        incremental = None
        if method == "incremental":
            from .incremental.options import from_spec_section

            incremental = from_spec_section(data.get("incremental") or {})

        def cols(v):
            return tuple(v) if v else None

        return cls.build(
            qi=tuple(data["qi"]), qi_except=cols(data.get("qi_except")), k=data["k"], method=method, **params,
            participation=part.get("pi", part.get("column")), max_cell_failure=part.get("max_cell_failure"),
            strata=cols(inp.get("strata")), missing=inp.get("missing"), merge_small_strata=inp.get("merge_small_strata"),
            columns=cols(inp.get("columns")), drop=cols(inp.get("drop")), keep=cols(inp.get("keep")),
            filters=tuple(filters) or None,
            overwrite=bool(out.get("overwrite", False)), force=out.get("force"), partition_by=cols(out.get("partition_by")),
            rows_per_file=out.get("rows_per_file"), table_format=out.get("table_format"),
            scheduler=cluster.get("address"), workers=cluster.get("workers"),
            tls_ca_file=tls.get("ca_file"), tls_cert=tls.get("cert"), tls_key=tls.get("key"),
            dask_report=(data.get("report") or {}).get("dask_report"), risk=(data.get("report") or {}).get("risk"),
            memory_limit=cluster.get("memory_limit"), spill_directory=cluster.get("spill_directory"),
            ledger=(data.get("series") or {}).get("ledger"), new_series=(data.get("series") or {}).get("new_series"),
            id_column=(data.get("series") or {}).get("id_column"),
            incremental=incremental,
        )

    # ----------------------------------------------------------------- checks and derived values

    all_numeric = property(lambda self: self.qi_except is not None, doc="qi 'all-numeric' (daskmicro.io.qi.all_numeric)")

    def check_rules(self) -> None:
        """Refuse the first rule of :data:`RULES` this config breaks, in one line."""
        for rule in RULES:
            if rule.when(self):
                raise rule.error(self)

    @property
    def incremental_options(self):
        """The incremental options of a survey run (their defaults when none were given)."""
        from .incremental.options import IncrementalOptions

        return self.incremental if self.incremental is not None else IncrementalOptions()

    @property
    def per_record_participation(self) -> bool:
        return _per_record(self)

    @property
    def constant_participation(self) -> float | None:
        return self.participation if isinstance(self.participation, float) else None

    @property
    def improve_settings(self) -> dict:
        """The improvement pass of this run's ``quality`` (:data:`QUALITY`); none where the cells
        are grown for a participation column (moves would not keep each cell's q̄ ≤ p̄)."""
        q = dict(QUALITY[self.quality])
        if _per_record(self):
            q["improve_sweeps"] = 0
        return q

    @property
    def task_rows_or_default(self) -> int:
        """``task_rows``, else the run's ``quality`` default (:data:`QUALITY`)."""
        return self.task_rows or QUALITY[self.quality]["task_rows"]

    @property
    def ledger_path(self) -> str:
        """The run's ledger: the given one, else the default (:func:`daskmicro.io.ledger.default_ledger`);
        ``"off"`` for a trial run."""
        from .io.ledger import default_ledger

        return self.ledger if self.ledger is not None else default_ledger()

    @property
    def max_task_rows_or_default(self) -> int:
        return self.max_task_rows or DEFAULT_MAX_TASK_ROWS

    def group_method(self, n: int, exact_rows: int = AUTO_EXACT_ROWS) -> str:
        """The method a group of ``n`` records runs: ``auto`` resolved by size (exact MDAV up to
        ``exact_rows``), PCL stages and the partitioned-only options sending it to the pipeline."""
        if self.method != "auto":
            return self.method
        if _pcl_stage(self) or any(v is not None for v in (self.K, self.nu, self.partition_size, self.sse_threshold)):
            return "partitioned"
        return "mdav" if n <= exact_rows else "partitioned"

    def fingerprint_dict(self) -> dict:
        """The options that determine the release (for the commit manifest's fingerprint)."""
        skip = {"force", "overwrite", "scheduler", "workers", "tls_ca_file", "tls_cert", "tls_key", "dask_report",
                "seed_drawn", "memory_limit", "spill_directory", "ledger",
                *(("table_format",) if self.table_format == "parquet" else ())}  # Parquet: fingerprints as before
        out = {}
        for f in fields(self):
            if f.name in skip:
                continue
            v = getattr(self, f.name)
            if f.name == "incremental":
                v = None if v is None else v.fingerprint_dict()
            out[f.name] = list(v) if isinstance(v, tuple) else v
        if self.seed_drawn:
            out["seed"] = None  # a drawn seed: the same input and options are the same run
        return out


def check_seed(seed) -> int:
    """A seed ≥ 0 as given, or one drawn from OS entropy when None."""
    return secrets.randbits(63) if seed is None else seed_value("seed", seed)


def check_k_for(n: int, k) -> int:
    """``k`` checked against ``n`` records (2 ≤ k ≤ n)."""
    k = integer(2)("k", k)
    if k > n:
        raise ParameterError(f"k = {k} exceeds the number of records n = {n}")
    return k
