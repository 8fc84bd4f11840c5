"""Workflow specs: one-line errors naming the key, schedules, stable run keys, the local state file."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from daskmicro.cli import main
from daskmicro.workflow import Clock, SpecError, load_workflow, parse_spec
from daskmicro.errors import ParameterError
from daskmicro.workflow.submit import LocalState

UTC = dt.timezone.utc
BASE = {"name": "w", "input": {"path": "in.parquet"}, "qi": ["a", "b"], "k": 5, "output": {"path": "out.parquet"}}


def _with(path: str, value):
    spec = copy.deepcopy(BASE)
    keys = path.split(".")
    node = spec
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return spec


_DELETE = object()

# (what to change, value, text the one-line message must hold)
MISTAKES = [
    ("output.path", 3, "workflow spec: output.path: expected a string, got 3"),
    ("output.path", _DELETE, "workflow spec: output.path: missing"),
    ("output.path", "out.csv", "output.path: expected a .parquet file or a directory"),
    ("output.paht", "x", "workflow spec: output: unknown key(s) 'paht' (expected one of: path, overwrite, partition_by, rows_per_file, force, table_format)"),
    ("output.overwrite", "yes", "output.overwrite: expected true or false, got 'yes'"),
    ("colour", "red", "workflow spec: unknown key(s) 'colour'"),
    ("k", 1, "workflow spec: k: expected an integer ≥ 2, got 1"),
    ("k", "5", "workflow spec: k: expected an integer ≥ 2, got '5'"),
    ("k", _DELETE, "workflow spec: k: missing"),
    ("qi", [], "workflow spec: qi: expected a list of column names"),
    ("qi", ["a", "a"], "workflow spec: qi: column(s) named twice: a"),
    ("qi", "a,,b", "workflow spec: qi: expected a list of column names"),
    ("name", "has space", "workflow spec: name: expected letters, digits"),
    ("method", "kmeans", "workflow spec: method: expected one of auto, mdav, pca-mdav, pcl, partitioned, proximal-distal, incremental, got 'kmeans'"),
    ("parameters.nu", 1.5, "workflow spec: parameters.nu: expected a number in [0, 1], got 1.5"),
    ("parameters.energy_loss", 1.0, "parameters.energy_loss: expected a number in [0, 1), got 1.0"),
    ("parameters.K", 2, "parameters.K: expected an integer ≥ 3, got 2"),
    ("parameters.bogus", 1, "workflow spec: parameters: unknown key(s) 'bogus'"),
    ("input.path", _DELETE, "workflow spec: input.path: missing"),
    ("input.filters", [["region", "~", 1]], "input.filters[0][1]: expected one of ==, !=, <, <=, >, >=, in, not in, got '~'"),
    ("input.filters", [["region", "in", 1]], "input.filters[0][2]: expected a list of values for 'in', got 1"),
    ("input.filters", ["region"], "input.filters[0]: expected [column, op, value], got 'region'"),
    ("input.strata", 5, "input.strata: expected a list of column names"),
    ("input.path", "lake/{day}", "input.path: unknown placeholder {day}"),
    ("input.path", "lake/{name!r}", "input.path: placeholder {name!r} takes no conversion or format: write {name}"),
    ("input.path", "lake/{name:>9}", "input.path: placeholder {name:>9} takes no conversion or format: write {name}"),
    ("output.path", "out/{date}", "output.path: slot placeholders ({slot}, {date}, ...) need a schedule"),
    ("schedule", {"cron": "0 2 * *"}, "schedule.cron: expected 5 fields 'minute hour day-of-month month day-of-week', got '0 2 * *'"),
    ("schedule", {"cron": "61 2 * * *"}, "schedule.cron: expected 5 fields"),
    ("schedule", {"cron": "0 2 * * *", "at": ["2026-01-01T00:00:00Z"]}, "schedule: give exactly one of cron"),
    ("schedule", {"at": ["tomorrow"]}, "schedule.at[0]: expected an ISO 8601 time such as 2026-11-21T02:00:00Z, got 'tomorrow'"),
    ("schedule", {"cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "schedule.timezone: unknown time zone 'Mars/Olympus'"),
    ("schedule", {"cron": "0 2 * * *"}, "output.path: a scheduled workflow writes one release per slot"),
    ("cluster", {"address": "scheduler:8786"}, "cluster.address: expected an address such as tcp://host:8786"),
    ("cluster", {"address": "tls://s:8786"}, "cluster.tls: a tls:// address needs ca_file, cert and key"),
    ("cluster", {"tls": {"ca_file": "ca.pem"}}, "cluster.tls: expected ca_file, cert and key; missing cert, key"),
    ("cluster", {"workers": 0}, "cluster.workers: expected an integer ≥ 1, got 0"),
    ("participation", {"pi": 0.5}, "participation.max_cell_failure: missing"),
    ("participation", {"pi": 0.5, "column": "p", "max_cell_failure": 0.1}, "participation: give exactly one of pi"),
    ("participation", {"pi": 0, "max_cell_failure": 0.1}, "participation.pi: expected a number in (0, 1], got 0"),
    ("participation", {"pi": 0.5, "max_cell_failure": 1}, "participation.max_cell_failure: expected a number in (0, 1), got 1"),
    ("incremental", {"close_at": "2h", "zeta": 5}, "incremental: only used with method: incremental"),
    ("report", {"path": 7}, "report.path: expected a non-empty string, got 7"),
    ("report", {"dask_report": "yes"}, "report.dask_report: expected true or false, got 'yes'"),
    ("version", 2, "workflow spec: version: expected 1, got 2"),
]


@pytest.mark.parametrize("path, value, message", MISTAKES, ids=[f"{m[0]}=" + ("<deleted>" if m[1] is _DELETE else repr(m[1])[:40]) for m in MISTAKES])
def test_each_mistake_is_one_line_naming_the_key(path, value, message, tmp_path):
    with pytest.raises(SpecError) as info:
        parse_spec(_with(path, value), base_dir=tmp_path)
    text = str(info.value)
    assert message in text and "\n" not in text


@pytest.mark.parametrize("section, message", [
    ({"close_at": "2h"}, "incremental: give zeta (arrivals coefficient) or nu"),
    ({"zeta": 5}, "incremental.close_at: missing"),
    ({"close_at": "soon", "zeta": 5}, "incremental.close_at: expected an ISO 8601 time or a duration such as 2h, got 'soon'"),
    ({"close_at": "2h", "zeta": -1}, "incremental.zeta: expected a number > 0, got -1"),
    ({"close_at": "2h", "zeta": 5, "arrivals": "uniform"}, "incremental.arrivals: not an option of a run"),
    ({"close_at": "2h", "zeta": 5, "deadline": "tomorrow"}, "incremental.deadline: expected a duration"),
    ({"close_at": "2h", "zeta": 5, "base_method": "pcl"}, "incremental.base_method: expected one of mdav, pca-mdav, partitioned"),
])
def test_incremental_section_mistakes(section, message, tmp_path):
    spec = dict(BASE, method="incremental", incremental=section)
    with pytest.raises(SpecError, match=None) as info:
        parse_spec(spec, base_dir=tmp_path)
    assert message in str(info.value)


def test_missing_incremental_section_and_yaml_errors(tmp_path, capsys):
    with pytest.raises(SpecError, match="incremental: missing: method incremental needs"):
        parse_spec(dict(BASE, method="incremental"), base_dir=tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ninput: [unclosed\n")
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskmicro: error: workflow spec:") and "not valid YAML at line" in err and err.count("\n") == 1
    (tmp_path / "empty.yaml").write_text("")
    assert main(["submit", str(tmp_path / "empty.yaml"), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "the file is empty" in err[0] and "workflow spec not found" in err[1]
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert main(["run", str(tmp_path / "list.yaml")]) == 2
    assert "workflow spec: expected a mapping with keys version, name" in capsys.readouterr().err


def test_paths_are_relative_to_the_spec_and_keys_are_stable(tmp_path):
    (tmp_path / "s.yaml").write_text("name: w\ninput: {path: data/in.parquet}\nqi: a,b\nk: 3\n"
                                     "output: {path: 'rel/{date}'}\nschedule: {cron: '0 2 * * *'}\n"
                                     "cluster: {address: 'tcp://x:8786'}\n")
    s = load_workflow(tmp_path / "s.yaml")
    assert s.data["input"]["path"] == str(tmp_path.resolve() / "data/in.parquet") and s.data["qi"] == ["a", "b"]
    slot = dt.datetime(2026, 11, 22, 2, tzinfo=UTC)
    assert s.key(slot) == f"w-{s.digest[:10]}-20261122T020000Z" and s.key(slot) == load_workflow(tmp_path / "s.yaml").key(slot)
    other_cluster = parse_spec({**BASE, "cluster": {"address": "tcp://y:1"}}, base_dir=tmp_path)
    assert other_cluster.digest == parse_spec(BASE, base_dir=tmp_path).digest          # cluster not in the key
    assert parse_spec({**BASE, "k": 6}, base_dir=tmp_path).digest != parse_spec(BASE, base_dir=tmp_path).digest
    assert parse_spec(BASE, base_dir=tmp_path).key(None).endswith("-once")


def test_cron_and_one_off_slots(tmp_path):
    s = parse_spec({**BASE, "output": {"path": "o/{slot}"}, "schedule": {"cron": "30 2 * * 1-5"}}, base_dir=tmp_path)
    start = dt.datetime(2026, 11, 20, 0, tzinfo=UTC)                      # a Friday
    got = s.slots(start, start + dt.timedelta(days=4))
    assert got == [dt.datetime(2026, 11, d, 2, 30, tzinfo=UTC) for d in (20, 23)]
    madrid = parse_spec({**BASE, "output": {"path": "o/{slot}"},
                         "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Madrid"}}, base_dir=tmp_path)
    assert madrid.slots(start, start + dt.timedelta(days=1)) == [dt.datetime(2026, 11, 20, 1, tzinfo=UTC)]
    once = parse_spec({**BASE, "output": {"path": "o/{slot}"},
                       "schedule": {"at": ["2026-11-21T10:00:00+01:00", dt.datetime(2026, 11, 21, 8)]}}, base_dir=tmp_path)
    assert once.slots(start, start + dt.timedelta(days=2)) == [dt.datetime(2026, 11, 21, 8, tzinfo=UTC),
                                                                dt.datetime(2026, 11, 21, 9, tzinfo=UTC)]


def test_compressed_clock_maps_simulated_to_real_time():
    c = Clock(speed=60.0, sim_origin=1_000_000.0, real_origin=500.0)
    t = dt.datetime.fromtimestamp(1_000_000.0 + 600, UTC)                   # ten simulated minutes later
    assert c.real_time(t) == pytest.approx(510.0)
    assert abs(Clock().now().timestamp() - dt.datetime.now(UTC).timestamp()) < 1


def test_local_state_survives_a_new_submitter(tmp_path):
    path = tmp_path / "deep" / "runs.json"
    LocalState(path).add({"w-1-once": {"slot": "once"}})
    LocalState(path).add({"w-1-20260101T000000Z": {"slot": "20260101T000000Z"}})
    assert set(LocalState(path).load()) == {"w-1-once", "w-1-20260101T000000Z"}
    path.write_text("{not json")
    with pytest.raises(Exception, match="state file .* is unreadable"):
        LocalState(path).load()


@pytest.mark.parametrize("text", ['[]', '"runs"', '{"runs": 5}', '{"runs": {"k": 5}}', '{"report": 1}', '{}'])
def test_a_file_that_is_not_a_state_file_is_refused_in_one_line_and_kept(tmp_path, capsys, text):
    """Another JSON document named as the state file ended as an internal error, or was read as no
    runs and replaced by the submitter's records."""
    path = tmp_path / "mine.json"
    path.write_text(text)
    with pytest.raises(ParameterError, match="is not a daskmicro state file"):
        LocalState(path).load()
    with pytest.raises(ParameterError, match="is not a daskmicro state file"):
        LocalState(path).add({"w-1-once": {"slot": "once"}})
    assert main(["status", "--state", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a daskmicro state file" in err and len(err.strip().splitlines()) == 1
    assert path.read_text() == text


def test_cli_usage_errors_are_one_line(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: w\ninput: {path: in.parquet}\nqi: [a]\nk: 2\noutput: {path: out.parquet}\n")
    assert main(["submit", str(spec)]) == 2
    assert "--scheduler: give the address of the cluster" in capsys.readouterr().err
    assert main(["submit", str(spec), "--scheduler", "tcp://127.0.0.1:1", "--slot", "2026-01-01T00:00:00Z"]) == 2
    assert "--slot: the spec has no schedule" in capsys.readouterr().err
    assert main(["run", str(spec), "--slot", "2026-01-01T00:00:00Z"]) == 2   # as submit: one rule
    assert "--slot: the spec has no schedule" in capsys.readouterr().err
    nightly = tmp_path / "n.yaml"
    nightly.write_text("name: w\ninput: {path: in.parquet}\nqi: [a]\nk: 2\noutput: {path: 'out-{date}.parquet'}\n"
                       "schedule: {cron: '0 2 * * *', timezone: Europe/Paris}\n")
    for command in (["run", str(nightly)], ["submit", str(nightly), "--scheduler", "tcp://127.0.0.1:1"]):
        assert main(command + ["--slot", "2026-11-22T02:00:00Z"]) == 2   # 02:00 in Paris is 01:00Z
        err = capsys.readouterr().err
        assert "--slot: 2026-11-22T02:00:00+00:00 is not a slot of the schedule" in err and "2026-11-22T01:00:00+00:00" in err
        assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.yaml", "s.yaml"]
    assert main(["submit", str(spec), "--scheduler", "tcp://x:1", "--horizon", "soon"]) == 2
    assert "cannot read duration" in capsys.readouterr().err
    assert main(["cancel", "k", "--scheduler", "tls://127.0.0.1:1"]) == 2
    assert "uses TLS" in capsys.readouterr().err
    assert main(["run", str(spec)]) == 2                                   # input missing: nothing written
    assert "input not found" in capsys.readouterr().err and not (tmp_path / "out.parquet").exists()
    assert main(["status", "--state", str(tmp_path / "none.json")]) == 0
    assert capsys.readouterr().out.strip() == "no runs"


def test_column_names_are_taken_exactly(tmp_path):
    spec = parse_spec({**BASE, "qi": "a, b", "input": {"path": "in.parquet", "strata": [" s"]}}, base_dir=tmp_path)
    assert spec.data["qi"] == ["a", " b"] and spec.data["input"]["strata"] == [" s"]


def test_every_run_option_is_a_spec_key_and_names_stay_exact(tmp_path):
    """A spec builds the same RunConfig as the CLI and the API (one run model): every run option
    has a key, column names are taken exactly (filters too), refused combinations fail at load."""
    from daskmicro.config import RunConfig
    from daskmicro.workflow.runner import filter_texts

    spec = copy.deepcopy(BASE)
    spec["input"].update(filters=[[" year", ">=", 2020], ["re'gion", "in", ["n", "s"]]], strata=["s"],
                         merge_small_strata=True, missing="separate", drop=["name"])
    spec["method"] = "partitioned"
    spec["parameters"] = {"K": 50, "refine": "pcl", "refine_iter": 3, "reference": "sample"}
    spec["output"].update(path="out", partition_by=["s"], rows_per_file=1000, force=True)
    s = parse_spec(spec, tmp_path)
    assert s.data["input"]["filters"][0][0] == " year"
    texts = filter_texts(s.data["input"]["filters"], s.name, None)
    assert texts == ["' year' >= 2020", "\"re'gion\" in ('n', 's')"]
    cfg = RunConfig.from_spec(s.data, texts)
    assert (cfg.strata, cfg.merge_small_strata, cfg.missing, cfg.drop) == (("s",), True, "separate", ("name",))
    assert (cfg.refine, cfg.refine_iter, cfg.reference, cfg.partition_by, cfg.rows_per_file, cfg.force) == \
        ("pcl", 3, "sample", ("s",), 1000, True)
    # the Dask performance report: only when the spec asks for it (report.dask_report)
    assert cfg.dask_report is False
    spec["report"] = {"dask_report": True}
    assert RunConfig.from_spec(parse_spec(spec, tmp_path).data, texts).dask_report is True
    spec["method"] = "mdav"   # refine needs the pipeline: refused when the spec is loaded
    del spec["parameters"]["K"]
    with pytest.raises(SpecError, match="refine and macro are stages"):
        parse_spec(spec, tmp_path)


def test_submit_refuses_a_recorded_spec_that_names_no_ledger(tmp_path, monkeypatch):
    """A submitted run records its release in the release ledger of the worker that runs it: with
    the default ledger (each machine's own state directory) two slots run on two workers would not
    see each other's releases and publish the same people aggregated afresh.  So ``submit`` refuses
    a recorded spec that names no ledger, in one line, before anything is submitted or recorded."""
    from daskmicro.errors import ParameterError
    from daskmicro.workflow.submit import submit_spec

    monkeypatch.setenv("DASKMICRO_LEDGER", str(tmp_path / "ledger"))   # the submitter's default: recorded
    state = tmp_path / "state.json"
    with pytest.raises(ParameterError, match=r"^series\.ledger: a submitted run .*series\.ledger: off") as err:
        submit_spec(parse_spec(BASE, base_dir=tmp_path), None, state=state)
    assert "\n" not in str(err.value)
    assert not state.exists() and not (tmp_path / "ledger").exists()


@pytest.mark.parametrize("text", ["age,income\n51.257302,1240.651\n", "alice: 123-45-6789\nbob: 98.6\n", "- 51.257302\n- 1240.651\n"])
def test_a_data_file_given_as_the_spec_is_refused_without_its_values(tmp_path, capsys, text):
    """``daskmicro run data.csv`` quoted the file's first records in the error (a CSV reads as one YAML text)."""
    data = tmp_path / "data.csv"
    data.write_text(text)
    assert main(["run", str(data)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "data file" in err
    for value in ("51.25", "1240", "alice", "123-45", "98.6"):
        assert value not in err
