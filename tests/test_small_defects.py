"""Classes of small defects: each test checks the mechanism, not one example.

a. plan / schedule: every numeric parameter gives finite figures or a one-line refusal;
b. workflow specs: YAML aliases and oversized files refused before objects are built;
c. cron schedules: frequent expressions run, never-firing or malformed ones are refused;
d. scheduler addresses: a server that is not a Dask scheduler is given up on within the timeout;
e. kernels: non-finite values and magnitudes beyond MAX_ABS refused by every public entry point;
f. writes of several files (sweep): all or nothing.
"""

from __future__ import annotations

import datetime as dt
import http.server
import importlib
import json
import math
import re
import shutil
import socket
import threading
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskmicro
from daskmicro import schedule
from daskmicro.cli import main
from daskmicro.errors import ParameterError

# --------------------------------------------------------------------------- a. plan


def _wide_numbers():
    """Floats over every magnitude (tiny, huge, inf, nan, negative) and integers up to 400 digits."""
    special = st.sampled_from([0.0, -0.0, 5e-324, 1e-320, 1e-300, 1e-12, 0.1, 1.0, 2.0, 5.0, 1e8, 1e12,
                               1e150, 1e300, 1e308, 1.7976931348623157e308, -1.0, -1e300, math.inf, -math.inf,
                               math.nan])
    return st.one_of(special, st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400))


def _texts(x) -> list[str]:
    """Ways a user may write ``x``: repr (scientific) and, when finite, plain decimals."""
    out = [repr(x) if isinstance(x, float) else str(x)]
    if isinstance(x, float) and math.isfinite(x):
        out.append(f"{x:.400f}".rstrip("0").rstrip(".") or "0")
    return out


_PLAN_OPTIONS = {
    "--zeta": ["--t-ref", "2h", "--deadline", "1h"],
    "--survey": ["--t-ref", "2h"],
    "--t-ref": ["--zeta", "5", "--deadline", "1h"],
    "--deadline": ["--zeta", "5", "--t-ref", "2h"],
    "--beta": ["--zeta", "5", "--t-ref", "2h"],
    "--n": ["--survey", "10h", "--calibrate", "10000:1,20000:4,40000:16"],
}
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|\binf\b|\bnan\b", re.I)


def _check_plan_outcome(code, out, err, option):
    if code == 0:
        assert err == ""
        assert not re.search(r"\b(inf|nan)\b", out, re.I), out
        for token in _NUMBER.findall(out):
            assert math.isfinite(float(token)), token
    else:
        assert code == 2 and out == "", (code, out, err)
        assert err.count("\n") == 1 and err.startswith("daskmicro: error: "), err
        assert option in err or re.search(r"--[a-z]|zeta|beta|t_ref|deadline", err), err


@settings(max_examples=160, deadline=None, suppress_health_check=list(HealthCheck))
@given(option=st.sampled_from(sorted(_PLAN_OPTIONS)), x=_wide_numbers(), as_json=st.booleans(), which=st.integers(0, 1))
def test_plan_cli_any_magnitude_gives_finite_figures_or_one_line(option, x, as_json, which, capsys):
    texts = _texts(x)
    argv = ["plan", option, texts[min(which, len(texts) - 1)], *_PLAN_OPTIONS[option]]
    code = main(argv + (["--json"] if as_json else []))
    out, err = capsys.readouterr()
    _check_plan_outcome(code, out, err, option)
    if code == 0 and as_json:
        doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-finite JSON constant {c}"))
        assert all(math.isfinite(e["time"]) for e in doc["timeline"])


@pytest.mark.parametrize("zeta", ["1e300", "1e308", "1e200", "1e15", "1e12", "1e-300", "5e-324"])
def test_plan_cli_extreme_zeta(zeta, capsys):
    code = main(["plan", "--zeta", zeta])
    out, err = capsys.readouterr()
    _check_plan_outcome(code, out, err, "--zeta")


_API = {
    "critical_ratio": lambda z, b, t: schedule.critical_ratio(z),
    "optimal_ratio": lambda z, b, t: schedule.optimal_ratio(z),
    "optimal_gain": lambda z, b, t: schedule.optimal_gain(z),
    "deadline_min": lambda z, b, t: schedule.deadline_min(z),
    "time_gain": lambda z, b, t: schedule.time_gain(t, z),
    "deadline_ratio": lambda z, b, t: schedule.deadline_ratio(z, t),
    "critical_ratio_numeric": lambda z, b, t: schedule.critical_ratio_numeric(z, b),
    "optimize_ratio": lambda z, b, t: schedule.optimize_ratio(z, b),
    "deadline_ratio_numeric": lambda z, b, t: schedule.deadline_ratio_numeric(z, t, b),
    "plan": lambda z, b, t: schedule.plan(z, beta=b, t_ref=t, deadline=t).to_dict(),
    "time_model": lambda z, b, t: schedule.TimeModel(a=t, beta=b)(z),
}


def _floats_in(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _floats_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _floats_in(v)
    elif isinstance(value, float):
        yield value


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(_API)), z=_wide_numbers(), b=st.one_of(st.just(2.0), st.just(1.5), _wide_numbers()),
       t=_wide_numbers())
def test_schedule_functions_finite_or_refused(name, z, b, t):
    try:
        result = _API[name](z, b, t)
    except ParameterError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 300
        return
    values = list(_floats_in(result))
    assert values and all(math.isfinite(v) for v in values), (name, z, b, t, result)


@pytest.mark.parametrize("zeta", [1e6, 1e8, 1e12, 1e20, 1e154, 1e200, 1e308])
def test_closed_forms_keep_their_digits_for_slow_arrivals(zeta):
    v = schedule.critical_ratio(zeta)
    assert 0 < v <= 1 / zeta
    # ν₋ solves (1 − ν)² = ζν: checked relatively (the difference form lost every digit here)
    assert (1 - v) ** 2 / zeta / v == pytest.approx(1, rel=1e-12)
    assert schedule.optimal_ratio(zeta) == v and schedule.optimal_gain(zeta) <= 1
    assert schedule.deadline_min(zeta) == pytest.approx(v * v, rel=1e-12)
    nu_end = schedule.deadline_ratio(zeta, 0.5)
    assert nu_end > 0 and (1 - nu_end) ** 2 + nu_end ** 2 == pytest.approx(0.5 + zeta * nu_end, rel=1e-9)
    assert schedule.critical_ratio_numeric(zeta, 2.0) == pytest.approx(v, rel=1e-9)


def test_release_time_after_close_is_meaningful_for_slow_arrivals():
    p = schedule.plan(1e15, t_ref=1e12)
    assert p.finish_after_close == pytest.approx(1e12 * 1e-30, rel=1e-6)   # ν₋²·t_ref, not rounding noise
    assert p.tau_end_min == pytest.approx(1e-30, rel=1e-6)


# --------------------------------------------------------------------------- b. YAML specs


_SPEC_TAIL = "qi: [a, b]\nk: 2\noutput: {path: out.parquet}\n"


def _bomb(levels: int) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("levels", [3, 9])
def test_yaml_aliases_refused_before_expansion(tmp_path, capsys, levels):
    # the bomb sits where the validator walks it (a filter's value list)
    bomb = _bomb(levels).replace("\n", "\n  ")
    text = (f"x-anchors:\n  {bomb}\nname: bomb\ninput:\n  path: data.csv\n  filters: [[a, in, *l{levels - 1}]]\n"
            + _SPEC_TAIL)
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "aliases" in err


def test_yaml_alias_in_a_valid_spec_is_refused(tmp_path):
    from daskmicro.workflow import SpecError, load_workflow

    path = tmp_path / "alias.yaml"
    path.write_text("name: a\ninput: {path: &p data.csv}\nqi: [a, b]\nk: 2\noutput: {path: out.parquet}\n"
                    "description: *p\n")
    with pytest.raises(SpecError, match=r"alias\.yaml: .*aliases \(\*name\) are not allowed"):
        load_workflow(path)


@pytest.mark.parametrize("text", [
    "name: d\ninput: {path: data.csv}\nqi: [a, b]\nk: 5\noutput: {path: out.parquet}\nk: 2\n",
    "name: d\ninput: {path: data.csv, path: other.csv}\nqi: [a, b]\nk: 5\noutput: {path: out.parquet}\n",
])
def test_yaml_duplicate_keys_refused(tmp_path, text):
    """A setting given twice would silently take its last value (a reviewer reads k: 5, the run
    uses k: 2): refused, naming the key and line."""
    from daskmicro.workflow import SpecError, load_workflow

    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"dup\.yaml: .*line \d+.*given twice"):
        load_workflow(path)


def test_spec_file_size_and_nesting_bounded(tmp_path, capsys):
    from daskmicro.workflow.loader import MAX_SPEC_BYTES

    big = tmp_path / "big.yaml"
    big.write_text("name: big\n" + "# padding\n" * (MAX_SPEC_BYTES // 10 + 1) + _SPEC_TAIL)
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\ndescription: " + "[" * 20000 + "]" * 20000 + "\n")
    for path, what in ((big, "larger than"), (deep, "nested too deeply")):
        assert main(["run", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and what in err


# --------------------------------------------------------------------------- c. cron


@pytest.mark.parametrize("expr", ["* * * * *", "*/7 * * * *", "30 2 * * 1-5", "0 0 29 2 *", "15 3 * * 0"])
@pytest.mark.parametrize("tz", ["UTC", "Europe/Madrid", "America/New_York"])
def test_latest_and_next_slot_agree_with_the_enumeration(expr, tz):
    from daskmicro.workflow.slots import UTC, latest_slot, next_slot, slots_between

    sched = {"cron": expr, "timezone": tz}
    window = dt.timedelta(days=1500 if "29 2" in expr else 1 if expr.startswith("*") else 3)
    rng = np.random.default_rng(abs(hash((expr, tz))) % 2**32)
    for now in [dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC), dt.datetime(2026, 10, 25, 0, 30, 0, 1, tzinfo=UTC),
                *(dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=int(s)) for s in rng.integers(0, 3e7, 4))]:
        past = slots_between(sched, now - window, now)
        future = slots_between(sched, now, now + window)
        assert latest_slot(sched, now, window) == (past[-1] if past else None)
        assert next_slot(sched, now, window) == (future[0] if future else None)


def test_run_with_a_per_minute_cron_picks_the_latest_slot(tmp_path, capsys, monkeypatch):
    spec = tmp_path / "minutely.yaml"
    (tmp_path / "data.csv").write_text("a,b\n1,2\n3,4\n")   # the input exists: the run checks it first
    spec.write_text("name: minutely\ninput: {path: data.csv}\nqi: [a, b]\nk: 2\n"
                    "output: {path: 'out-{slot}.parquet'}\nschedule: {cron: '* * * * *'}\n")
    monkeypatch.setenv("DASKMICRO_CLOCK", f"2026-01-01T00:00:30Z,{time.time()},1")
    monkeypatch.setenv("DASKMICRO_CONNECT_TIMEOUT", "1")
    # a closed port: the run gets as far as connecting, so the slot was found
    assert main(["run", str(spec), "--scheduler", f"tcp://127.0.0.1:{_closed_port()}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    line = err[0].removeprefix("daskmicro: ")  # a notice of the run, like the dashboard line
    assert line.startswith("run minutely-") and line.split(" ")[1].endswith("-20260101T000000Z")
    assert err[-1].startswith("daskmicro: error: cannot connect to the Dask scheduler")


@pytest.mark.parametrize("expr, why", [("0 0 31 2 *", "never fires"), ("0 0 30 2 *", "never fires"),
                                       ("61 * * * *", "expected 5 fields"), ("* * * *", "expected 5 fields"),
                                       ("*/0 * * * *", "expected 5 fields"), ("@hourly", "expected 5 fields")])
def test_invalid_cron_refused_in_one_line(expr, why):
    from daskmicro.workflow.workflow_spec import SpecError, parse_spec

    spec = {"name": "c", "input": {"path": "d.csv"}, "qi": ["a"], "k": 2, "output": {"path": "o/{slot}"},
            "schedule": {"cron": expr}}
    with pytest.raises(SpecError, match=re.escape("schedule.cron: ") + ".*" + why) as info:
        parse_spec(spec)
    assert "\n" not in str(info.value)


def test_unquoted_star_cron_gets_a_hint(tmp_path, capsys):
    spec = tmp_path / "star.yaml"
    spec.write_text("name: s\ninput: {path: d.csv}\n" + _SPEC_TAIL + "schedule: {cron: * * * * *}\n")
    assert main(["run", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(spec) in err and "quote it" in err


# --------------------------------------------------------------------------- d. scheduler addresses


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def silent_server():
    """A socket on 127.0.0.1 that accepts connections and never says anything."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held, stop = [], threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for c in held:
        c.close()
    srv.close()


@pytest.fixture
def http_server():
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("server", ["silent_server", "http_server", "closed"])
def test_cluster_client_gives_up_within_the_timeout(server, request):
    from daskmicro.runtime.cluster import cluster_client

    address = f"tcp://127.0.0.1:{_closed_port()}" if server == "closed" else request.getfixturevalue(server)
    with pytest.raises(ParameterError) as info:
        with cluster_client(scheduler=address, timeout=1.5):
            pass
    assert str(info.value).startswith(f"cannot connect to the Dask scheduler at {address} within 1.5 s")
    assert "\n" not in str(info.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [["status"], ["cancel", "some-run-key"]])
def test_workflow_commands_give_up_on_a_silent_server(argv, silent_server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DASKMICRO_CONNECT_TIMEOUT", "1")
    assert main([*argv, "--scheduler", silent_server, "--state", str(tmp_path / "state.json")]) == 2
    err = capsys.readouterr().err
    assert err == f"daskmicro: error: cannot connect to the Dask scheduler at {silent_server} within 1 s" + \
        err[err.index(" within 1 s") + len(" within 1 s"):]
    assert err.count("\n") == 1


@pytest.mark.parametrize("value", ["abc", "0", "-3", "inf", "nan", "1e9"])
def test_connect_timeout_setting_is_validated(value, monkeypatch):
    from daskmicro.runtime.cluster import connect_timeout

    monkeypatch.setenv("DASKMICRO_CONNECT_TIMEOUT", value)
    with pytest.raises(ParameterError, match=r"DASKMICRO_CONNECT_TIMEOUT: expected seconds in \(0, 3600\]"):
        connect_timeout()
    with pytest.raises(ParameterError, match=r"^timeout: expected seconds"):
        connect_timeout(value)


# --------------------------------------------------------------------------- e. kernels


def _X():
    return np.random.default_rng(0).normal(size=(40, 3))


_LABELS = np.repeat(np.arange(8), 5)
_ENTRY_POINTS = {
    "mdav": (lambda X: daskmicro.mdav(X, 5), "X"),
    "pca_mdav": (lambda X: daskmicro.pca_mdav(X, 5, n_components=2), "X"),
    "pca_reduce": (lambda X: daskmicro.pca_reduce(X, n_components=2), "X"),
    "pcl": (lambda X: daskmicro.pcl(X, 5), "X"),
    "MDAV.fit": (lambda X: daskmicro.MDAV(k=5).fit(X), "X"),
    "standardize": (lambda X: daskmicro.standardize(X), "X"),
    "centroids": (lambda X: daskmicro.centroids(X, _LABELS), "X"),
    "cell_sse": (lambda X: daskmicro.cell_sse(X, _LABELS), "X"),
    "sse": (lambda X: daskmicro.sse(X, _LABELS), "X"),
    "sst": (lambda X: daskmicro.sst(X), "X"),
    "distortion": (lambda X: daskmicro.distortion(X, _LABELS), "X"),
    "information_loss": (lambda X: daskmicro.information_loss(X, _LABELS), "X"),
    "il1s/original": (lambda X: daskmicro.il1s(X, _X()), "original"),
    "il1s/released": (lambda X: daskmicro.il1s(_X(), X), "released"),
    "eigen_measure": (lambda X: daskmicro.eigen_measure(X, _X()), "original"),
    "utility_measures": (lambda X: daskmicro.utility_measures(_X(), X), "released"),
}


@pytest.mark.parametrize("bad", ["huge", "-huge", "nan", "inf"])
@pytest.mark.parametrize("entry", sorted(_ENTRY_POINTS))
def test_kernel_entry_points_refuse_unusable_values(entry, bad):
    fn, name = _ENTRY_POINTS[entry]
    X = _X()
    X[7, 1] = {"huge": 3.14159e200, "-huge": -2.71828e151, "nan": np.nan, "inf": np.inf}[bad]
    with pytest.raises(ValueError) as info:
        fn(X)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{name} ")
    assert ("1e+150" in msg) if "huge" in bad else ("NaN or infinite" in msg)
    assert "3.14" not in msg and "2.71" not in msg   # no data value


@pytest.mark.parametrize("entry", sorted(_ENTRY_POINTS))
def test_kernel_entry_points_accept_the_bound_itself(entry):
    from daskmicro.kernels.bounds import MAX_ABS

    X = _X()
    X[0, 0], X[1, 1] = MAX_ABS, -MAX_ABS
    _ENTRY_POINTS[entry][0](X)


def test_max_abs_is_defined_once():
    from daskmicro.kernels import bounds

    for module in ("daskmicro.anonymize", "daskmicro.graph.executor", "daskmicro.kernels.columns", "daskmicro.privacy.spec"):
        assert importlib.import_module(module).MAX_ABS is bounds.MAX_ABS
    assert "MAX_ABS = " not in (importlib.import_module("daskmicro.anonymize").__loader__.get_source("daskmicro.anonymize"))


# --------------------------------------------------------------------------- f. all-or-nothing writes


def test_atomic_batch_rolls_back_when_a_later_file_fails(tmp_path):
    from daskmicro.io.tables import AtomicBatch

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "x.json").write_text("old x")
    batch = AtomicBatch()
    batch.json({"new": 1}, a / "x.json")
    batch.text("new y", b / "y.txt")
    shutil.rmtree(b)           # a real failure between staging and commit: y's staged file is gone
    with pytest.raises(FileNotFoundError):
        batch.commit()
    assert (a / "x.json").read_text() == "old x"
    assert sorted(p.name for p in a.iterdir()) == ["x.json"]      # no staged or kept-aside leftovers


def test_atomic_batch_refuses_a_directory_target_before_moving_anything(tmp_path):
    from daskmicro.errors import InputError
    from daskmicro.io.tables import AtomicBatch

    (tmp_path / "x.json").write_text("old x")
    (tmp_path / "page.html").mkdir()
    (tmp_path / "page.html" / "keep").write_text("mine")
    with pytest.raises(InputError, match="cannot replace a directory with a file"):
        with AtomicBatch() as batch:
            batch.json({"new": 1}, tmp_path / "x.json")
            batch.text("new", tmp_path / "page.html")
    assert (tmp_path / "x.json").read_text() == "old x"
    assert (tmp_path / "page.html" / "keep").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "x.json"]


@pytest.fixture
def sweep_input(tmp_path):
    path = tmp_path / "data.csv"
    pd.DataFrame(np.random.default_rng(1).normal(size=(120, 3)), columns=["a", "b", "c"]).to_csv(path, index=False)
    return path


def test_sweep_leaves_old_outputs_whole_when_one_cannot_be_replaced(sweep_input, tmp_path, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    for name in ("sweep.json", "sweep.csv", "sweep.png"):
        (out / name).write_text("old")
    (out / "sweep.html").mkdir()
    (out / "sweep.html" / "keep").write_text("mine")
    code = main(["sweep", str(sweep_input), "--qi", "a,b,c", "--k", "3", "--nu", "0.5,1", "--K", "20",
                 "--n-components", "1", "--out", str(out), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines()[-1].startswith("daskmicro: error: ")
    assert all((out / n).read_text() == "old" for n in ("sweep.json", "sweep.csv", "sweep.png"))
    assert sorted(p.name for p in out.iterdir()) == ["sweep.csv", "sweep.html", "sweep.json", "sweep.png"]


@pytest.mark.parametrize("bad", [["--K", "5000"], ["--k", "500"], ["--n-components", "9"]])
def test_sweep_with_a_failing_setting_writes_nothing(bad, sweep_input, tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", str(sweep_input), "--qi", "a,b,c", "--k", "3", "--nu", "0.5,1", "--K", "20", "--out", str(out)]
    for i in range(0, len(bad), 2):
        j = argv.index(bad[i]) if bad[i] in argv else None
        if j is None:
            argv += bad[i:i + 2]
        else:
            argv[j + 1] = bad[i + 1]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("daskmicro: error: ")
    assert not out.exists()
