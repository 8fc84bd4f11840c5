"""The outputs of a run (:func:`daskmicro.plan.run`): where they are (local paths, or objects and
prefixes of an object store), what kind of release they take, every check before any work, and
the recovery of what an interrupted run left of them."""

from __future__ import annotations

from pathlib import Path

from .errors import ParameterError
from .io import recovery as rec

__all__ = ["locate", "sink_of", "on_store", "check_run_outputs", "check_run_records", "recover_outputs"]


def sink_of(output) -> str:
    """What kind of release ``output`` takes: ``memory`` (None), ``lake`` (a directory, local or
    a prefix of a store) or ``file`` (a ``.parquet`` file or object)."""
    from .io.lake import is_lake_target
    from .io.objectcommit import is_remote_target
    from .io.objectfile import is_object_target

    if output is None:
        return "memory"
    if is_remote_target(output):
        return "lake"
    if is_object_target(output):
        return "file"
    if is_lake_target(output):
        return "lake"
    if not str(output).lower().endswith((".parquet", ".pq")):
        raise ParameterError(f"OUTPUT must be a .parquet file or a directory: {output}")
    return "file"


def on_store(path) -> bool:
    """Whether ``path`` is written on an object store (a directory release or one object)."""
    from .io.objectcommit import is_remote_target
    from .io.objectfile import is_object_target

    return is_remote_target(path) or is_object_target(path)


def check_run_outputs(cfg, sink, output, report_path, input, perf_wanted, existing_ok=()):
    """Every path the run writes, checked against the input and each other before any work: local
    ones here (:mod:`daskmicro.io.paths`), objects of a store on their store."""
    from .io.objectstore import is_remote
    from .io.paths import Output, check_ledger, check_outputs, check_spill
    from .runtime import dask_report

    inputs = [input] if input is not None and not is_remote(str(input)) else []
    if sink == "file" and report_path is None:
        report_path = (output.with_suffix(".report.json", "report") if on_store(output)
                       else Path(output).with_suffix(".report.json"))
    remote = [p for p in (output, report_path) if on_store(p)]
    local = [] if sink == "memory" or on_store(output) else [Output(Path(output), "output", directory=sink == "lake")]
    if report_path is not None and not on_store(report_path):
        local.append(Output(Path(report_path), "report"))
    perf_path = None
    if sink == "file" and perf_wanted:   # beside the report: on its store, or on this machine
        if on_store(report_path):
            perf_path = report_path.with_suffix(".dask.html", "Dask performance report")
            remote.append(perf_path)
        else:
            perf_path = dask_report.performance_report_path(report_path)
            local.append(Output(perf_path, "Dask performance report"))
    if sink == "memory":
        check_spill(cfg.spill_directory, inputs)
        check_ledger(cfg.ledger_path, inputs)
        return None, None
    _check_on_store(remote, input, cfg.overwrite, bool(existing_ok))
    check_outputs(inputs, local, cfg.overwrite, existing_ok=[p for p in existing_ok if not on_store(p)])
    if cfg.table_format == "delta" and not on_store(output):   # one on a store: checked by its target
        from .io.delta import check_delta_target

        check_delta_target(output, recorded=cfg.ledger_path != "off")
    elif sink == "lake" and not on_store(output) and (cfg.force or not existing_ok):
        rec.refuse_foreign(output)   # replaced whole: only a release of daskmicro's (not on a no-op run)
    check_spill(cfg.spill_directory, inputs, local)
    check_ledger(cfg.ledger_path, inputs, local)
    check_run_records(inputs, local)
    return (report_path if on_store(report_path) else Path(report_path) if report_path else None), perf_path


def check_run_records(inputs=(), outputs=()) -> None:
    """Refuse a run whose private run record (:mod:`daskmicro.io.runrecord`) would be written
    inside, around or at an input or an output (``$XDG_STATE_HOME`` set below the output
    directory): the seed and the input's paths would be published with the release."""
    from .io.paths import check_private
    from .io.runrecord import state_dir

    check_private(state_dir() / "runs", "private run record folder ($XDG_STATE_HOME/daskmicro/runs)", inputs, outputs)


def _check_on_store(targets, input, overwrite: bool, same: bool) -> None:
    """Check the outputs of a run on an object store against its input and each other, then on
    their store (a directory release holding this very run: ``same``)."""
    if len({str(t) for t in targets}) < len(targets):
        raise ParameterError(f"the release and its report are the same object: {targets[0]}")
    for target in targets:
        if input is not None:
            target.against(input)
        for other in targets:
            if other is not target:
                target.against(str(other), f"the {other.what}")
    for target in targets:
        target.check(overwrite or same)


def locate(input, output, report_path, storage_options, cfg):
    """``file://`` URLs as the local paths they name; on an object store (``s3://``, ``abfs://``,
    ``gs://``) a directory output as its :class:`~daskmicro.io.objectcommit.RemoteTarget`, a ``.parquet`` object output
    and a report as :class:`~daskmicro.io.objectfile.ObjectTarget` (an incremental survey's as any
    run's; its arrivals may be a prefix of a store too: :mod:`daskmicro.io.objectsurvey`); a Delta
    release on a store is a :class:`~daskmicro.io.deltastore.DeltaTableTarget`; what cannot be
    written to an object store refused in one line before anything is read or written: a ledger
    there, ``storage_options`` without a URL."""
    from .io.delta import refuse_delta_output
    from .io.objectstore import is_remote, local_path, refuse_remote_output

    refuse_delta_output(cfg.table_format, output)   # a Delta table: a directory, local or a prefix of a store
    remote_out = output is not None and is_remote(str(output))
    lake_out = remote_out and not str(output).lower().endswith((".parquet", ".pq"))
    refuse_remote_output(cfg.ledger, "release ledger")
    input, report_path = (local_path(str(p)) if p is not None else None for p in (input, report_path))
    remote = input is not None and is_remote(input)
    remote_report = report_path is not None and is_remote(str(report_path))
    if storage_options is not None and not (remote or remote_out or remote_report):
        raise ParameterError("storage_options apply only to an object-store input or output (s3://BUCKET/KEY, "
                             "abfs://CONTAINER/KEY, gs://BUCKET/KEY)")
    if remote_report:
        from .io.objectfile import ObjectTarget

        report_path = ObjectTarget(str(report_path), storage_options, "report")
    if lake_out and cfg.table_format == "delta":
        from .io.deltastore import DeltaTableTarget

        return input, DeltaTableTarget(str(output), storage_options, recorded=cfg.ledger_path != "off"), report_path
    if lake_out:
        from .io.objectcommit import RemoteTarget

        return input, RemoteTarget(str(output), storage_options), report_path
    if remote_out:
        from .io.objectfile import ObjectTarget

        return input, ObjectTarget(str(output), storage_options, "output"), report_path
    return input, local_path(str(output)) if output is not None else None, report_path


def recover_outputs(output, report_path=None) -> list:
    """Resolve interrupted commits of the outputs a run to ``output`` writes (the release, its
    report, the Dask performance report) and sweep what interrupted runs left of them
    (:func:`daskmicro.io.recovery.recover`); returns the notices."""
    if output is None:
        return []
    from .io.lake import is_lake_target
    from .io.objectcommit import is_remote_target
    from .runtime import dask_report

    notices = output.sweep() if is_remote_target(output) else []   # run prefixes of interrupted runs
    local_report = report_path is not None and not on_store(report_path)
    if on_store(output):   # a report copy kept here
        return notices + (rec.recover(Path(report_path)) if local_report else [])
    targets = [Path(output)]
    if local_report:
        targets.append(Path(report_path))
    if not is_lake_target(output) and not (report_path is not None and not local_report):
        report = Path(report_path) if report_path else Path(output).with_suffix(".report.json")
        targets += [report, dask_report.performance_report_path(report)]
    return rec.recover(*dict.fromkeys(targets))
