"""numba's compile cache in a writable per-user dir: chosen at ``import daskmicro``, reused by a
second process, working when the installed package is read-only; ``daskmicro warmup`` and the Dockerfile.

Every run is a subprocess with HOME / XDG_CACHE_HOME in a temp dir and NUMBA_CACHE_DIR unset, so the
test's own process and the user's real cache are never touched. The module shares one cache dir between
tests; the warm-up command's run on an empty cache (tens of seconds on a slow machine) is the one the
session made before its tests (``_warmup.py``), or made here when the session did not need one.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _warmup import command_env, copy_kernels, pristine, user_cache

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "daskmicro"

# one small kernel (compiled in a second or two): the cache mechanics are the same for every kernel, and
# the warm-up test below compiles all of them into the same HOME
TINY_KERNEL = """
import importlib, numpy as np, daskmicro, numba
m = importlib.import_module("daskmicro.kernels.macro")
m.dd_colsum(np.random.default_rng(0).normal(size=(60, 3)))
st = m._dd_colsum.stats
print("CACHE_DIR", numba.config.CACHE_DIR)
print("MISSES", sum(st.cache_misses.values()), "HITS", sum(st.cache_hits.values()))
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("home")


_env = command_env
_user_cache = user_cache


def _run(code: str, env: dict, *args: str, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, *args, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=env["HOME"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _cache_files(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_mtime_ns
            for p in directory.rglob("*") if p.suffix in (".nbi", ".nbc")}


def test_first_run_writes_the_user_cache_dir_and_a_second_run_reuses_it(home):
    out = _run(TINY_KERNEL, _env(home))
    cache = _user_cache(home)
    assert f"CACHE_DIR {cache}\n" in out
    files = _cache_files(cache)
    assert any(f.endswith(".nbi") for f in files) and any(f.endswith(".nbc") for f in files)
    assert any("macro._dd_colsum" in f for f in files)

    again = _run(TINY_KERNEL, _env(home))
    assert re.search(r"MISSES 0 HITS [1-9]", again), again  # loaded from the cache, not compiled
    assert _cache_files(cache) == files  # nothing new, nothing rewritten


def test_daskmicro_cache_dir_overrides_and_numba_cache_dir_wins(home, tmp_path):
    code = "import daskmicro, numba; print(numba.config.CACHE_DIR)"
    mine = tmp_path / "mine"
    assert _run(code, _env(home, DASKMICRO_CACHE_DIR=str(mine))).strip() == str(mine)
    assert mine.is_dir()
    numba_dir = tmp_path / "numba-own"
    env = _env(home, DASKMICRO_CACHE_DIR=str(mine), NUMBA_CACHE_DIR=str(numba_dir))
    assert _run(code, env).strip() == str(numba_dir)


def test_numba_imported_first_still_gets_the_user_cache_dir(home):
    code = "import numba, daskmicro; print(numba.config.CACHE_DIR)"
    assert _run(code, _env(home)).strip() == str(_user_cache(home))


def test_unwritable_user_cache_dir_falls_back_to_a_temp_dir_silently(home, tmp_path):
    # Not by chmod: tests may run as root, who writes anywhere. XDG_CACHE_HOME is a *file*: no dir fits under it.
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(home, XDG_CACHE_HOME=str(blocker), TMPDIR=str(tmp))
    code = ("import numpy as np, numba, daskmicro\nfrom daskmicro.kernels.macro import sq_dist\n"
            "sq_dist(np.ones((5, 2)), np.zeros(2))\nprint('CACHE_DIR', numba.config.CACHE_DIR)\n")
    proc = subprocess.run([sys.executable, "-c", code],
                          env=env, capture_output=True, text=True, timeout=600, cwd=str(home))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("CACHE_DIR"))
    assert line.split(" ", 1)[1].startswith(str(tmp / "daskmicro-"))
    assert _cache_files(tmp)


def _read_only_copy(dest: Path) -> Path:
    target = dest / "daskmicro"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for p in [dest, *dest.rglob("*")]:
        mode = p.stat().st_mode
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return target


def test_read_only_install_compiles_into_the_user_cache_dir(home, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    target = _read_only_copy(site)
    try:
        # -I: no PYTHONPATH, no cwd on sys.path; the repo's editable finder is removed so the copy is imported
        code = f"""
import sys
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '').lower()
                    and 'editable' not in getattr(f, '__name__', '').lower()]
sys.path.insert(0, {str(site)!r})
import numpy as np, numba, daskmicro
assert daskmicro.__file__.startswith({str(target)!r}), daskmicro.__file__
from daskmicro.kernels.macro import sq_dist
sq_dist(np.ones((5, 2)), np.zeros(2))
print(numba.config.CACHE_DIR)
"""
        out = _run(code, _env(home), "-I")
        cache = _user_cache(home)
        assert out.strip() == str(cache)
        assert any("macro._sq_dist" in f for f in _cache_files(cache))
        assert not [p for p in target.rglob("*") if p.suffix in (".nbi", ".nbc")]  # nothing in the install
        running_as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        if not running_as_root:  # as root, chmod does not stop writes: the check above is the one that counts
            with pytest.raises(OSError):
                (target / "probe").write_text("")
    finally:
        for p in [site, *site.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def _one_specialization_each(cache: Path) -> None:
    """Every kernel compiled once, for the types runs use: an integer literal in a compiled call (or a
    caller passing another dtype) would add a second specialization and its compile time.  numba writes
    a function's specializations as NAME-LINE.pyXY.1.nbc, .2.nbc, … in the cache dir of its source dir
    (another copy of the package, as in the read-only test above, has a dir of its own).  The two
    kernels of the top level also read its float32 working copy (kernels.chunked.working_copy): at most
    two specializations each, float64 and float32 records."""
    both = {"macro._sq_dist", "macro._dd_colsum"}
    per_function: dict[str, int] = {}
    for f in cache.rglob("*.nbc"):
        name = f.parent.name + "/" + re.sub(r"[.][0-9]+[.]nbc$", "", f.name)
        per_function[name] = per_function.get(name, 0) + 1
    wrong = {f: c for f, c in per_function.items() if c > (2 if re.sub(r"-[0-9]+[.]py[0-9]+$", "", f.split("/")[1])
                                                             in both else 1)}
    assert per_function and not wrong, wrong


def test_warmup_command_exits_0_and_prints_the_cache_dir():
    """``daskmicro warmup`` on an empty cache (run once per session, :mod:`_warmup`): every unit
    compiled, each kernel once."""
    run = pristine()
    assert run["returncode"] == 0, run["stderr"][-3000:]
    cache = _user_cache(Path(run["home"]))
    _one_specialization_each(cache)
    assert f"numba cache dir: {cache}" in run["stdout"]
    assert re.search(r"^warm-up: \d+\.\d\d s$", run["stdout"], re.M)
    files = _cache_files(cache)
    for kernel in ("mdav._mdav", "macro._dd_colsum", "_auction.auction", "increment._adjoin", "improve."):
        assert any(kernel in f for f in files), kernel


def test_a_first_run_shows_its_compile_units_done_and_a_later_run_does_not(home, tmp_path):
    """On a terminal, a run whose kernels are not all in the cache (the warm-up's kernels without
    those of the improvement stage) counts the units done — compiled or loaded, by its
    LocalCluster's worker — up to all of them; the next run, in-process, loads them silently.  The
    run's own calls add no second specialization of any kernel."""
    import numpy as np
    import pandas as pd
    from test_cli_progress import run_in_pty

    from daskmicro.runtime.warmup import units

    run = pristine()
    assert run["returncode"] == 0, run["stderr"][-3000:]
    cache = _user_cache(home)
    for p in cache.rglob("*"):      # the tiny kernel of the tests above: the warm-up's copy replaces it
        if p.suffix in (".nbi", ".nbc"):
            p.unlink()
    assert copy_kernels(_user_cache(Path(run["home"])), cache)
    cold = [p for p in cache.rglob("improve.*") if p.suffix in (".nbi", ".nbc")]
    assert cold, sorted(_cache_files(cache))
    for p in cold:
        p.unlink()
    table = tmp_path / "in.parquet"
    pd.DataFrame(np.random.default_rng(0).normal(size=(300, 3)), columns=["a", "b", "c"]).to_parquet(table)
    args = ["--qi", "a,b,c", "--k", "5", "--method", "mdav", "--no-dask-report", "--seed", "1"]
    env = _env(home, DASKMICRO_LEDGER="off")
    rc, out = run_in_pty(["anonymize", str(table), str(tmp_path / "one"), *args, "--workers", "1"], env=env,
                         cwd=str(home), timeout=600)
    assert rc == 0, out[-2000:]
    shown = [(int(a), int(b)) for a, b in re.findall(r"compiling the kernels once: (\d+) of (\d+) units \(\d+ s\)", out)]
    total = shown[-1][1] if shown else 0      # exact MDAV's units and those of the run's quality defaults
    assert {b for _, b in shown} == {total} and total > len(units(["mdav"])), out[-2000:]
    assert shown[-1] == (total, total) and [a for a, _ in shown] == sorted(a for a, _ in shown)
    assert {p.name for p in cold} <= {p.name for p in cache.rglob("improve.*")}      # compiled again
    _one_specialization_each(cache)
    rc, out = run_in_pty(["anonymize", str(table), str(tmp_path / "two"), *args], env=env, cwd=str(home))
    assert rc == 0 and "protected 300 records" in out, out[-2000:]
    assert "compiling the kernels" not in out


def test_warmup_help_has_an_example():
    from daskmicro.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert "daskmicro warmup" in sub.choices["warmup"].format_help()


def test_dockerfile_warms_the_cache_after_the_install():
    lines, cont = [], ""
    for raw in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if raw.lstrip().startswith("#"):
            continue
        cont += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            lines.append(cont.strip())
            cont = ""
    install = next(i for i, l in enumerate(lines) if l.startswith("RUN") and "pip install" in l)
    warm = next(i for i, l in enumerate(lines) if l.startswith("RUN") and "daskmicro warmup" in l)
    assert warm > install
    # the cache dir warmed at build is the one the containers use
    env = [l for l in lines[:warm] if l.startswith("ENV") and ("DASKMICRO_CACHE_DIR" in l or "NUMBA_CACHE_DIR" in l)]
    assert env, "the cache dir must be set before the warm-up"
    assert not [l for l in lines[warm + 1:] if l.startswith("ENV") and "CACHE_DIR" in l]


def test_local_cluster_worker_processes_use_the_same_cache_dir(home):
    code = """
import daskmicro, numba
from distributed import Client
from daskmicro.runtime.cluster import local_cluster
def worker_dir():
    import numba
    return numba.config.CACHE_DIR
if __name__ == "__main__":
    with local_cluster(n_workers=1) as cluster, Client(cluster) as client:
        print(numba.config.CACHE_DIR)
        print(*client.run(worker_dir).values())
"""
    script = home / "worker_dir.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], env=_env(home), capture_output=True, text=True,
                          timeout=300, cwd=str(home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.split()
    assert lines == [str(_user_cache(home))] * 2
