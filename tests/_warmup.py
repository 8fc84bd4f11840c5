"""``daskmicro warmup`` on an empty kernel cache, run once per test session and shared.

On a machine whose kernel cache is cold (a fresh clone in CI) the suite would compile every kernel
twice: once for its own tests and once more in ``test_compile_cache.py``, whose check of the
command needs a cache that only the command has written.  Instead the command runs once, before the
test processes start (:func:`prepare`, called by the controlling pytest process), in a HOME of its
own; ``test_compile_cache.py`` judges that run (:func:`pristine`), and its cache is copied into the
suite's cache dir, where the test processes load the kernels instead of compiling them.

Where the suite's cache already holds kernels (a developer's machine), nothing runs before the
tests: the copy would save nothing, and :func:`pristine` runs the command when a test asks for it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: names the JSON file of the session's run, for the test processes (inherited through the environment)
ENV = "DASKMICRO_TEST_WARMUP"


def command_env(home: Path, **extra) -> dict:
    """The environment of a subprocess whose user cache lives in ``home`` (no cache dir setting)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "DASKMICRO_CACHE_DIR", ENV)}
    env.update({"HOME": str(home), "XDG_CACHE_HOME": str(home / "xdg"), **extra})
    return env


def user_cache(home: Path) -> Path:
    """The kernel cache dir daskmicro chooses for a process whose HOME is ``home``."""
    return home / "xdg" / "daskmicro" / "numba"


def run_command(home: Path) -> dict:
    """``python -m daskmicro warmup --jobs 2`` in ``home`` (its cache empty; two processes share the
    compile, as on the suite's two cores): what it returned and printed."""
    proc = subprocess.run([sys.executable, "-m", "daskmicro", "warmup", "--jobs", "2"], env=command_env(home),
                          capture_output=True, text=True, timeout=900, cwd=str(home))
    return {"home": str(home), "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _kernel_indexes(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*.nbi") if ".locks" not in p.parts] if cache.is_dir() else []


def _checkout_dir(cache: Path) -> Path:
    """Where numba keeps this checkout's kernels under a cache dir: the source dir's name and the
    SHA-1 of its path (numba's locator for a user-provided cache dir), so that another checkout's
    kernels in the same user cache do not count.  Were numba to name it otherwise, the dir would
    not exist and the session would run the warm-up each time: slower, never wrong."""
    import hashlib

    import daskmicro.kernels

    source = Path(daskmicro.kernels.__file__).parent
    return cache / f"{source.name}_{hashlib.sha1(str(source).encode()).hexdigest()}"


def copy_kernels(source: Path, dest: Path) -> int:
    """Copy the compiled kernels under ``source`` into ``dest``, each function's index with its
    code files; a function ``dest`` already has an index for is left as it is.  Returns the
    number of functions copied."""
    copied = 0
    for index in _kernel_indexes(source):
        rel = index.relative_to(source)
        if (dest / rel).exists():
            continue
        stem = index.name[: -len(".nbi")]
        (dest / rel.parent).mkdir(parents=True, exist_ok=True)
        for f in index.parent.glob(stem + ".*nbc"):
            shutil.copy2(f, dest / rel.parent / f.name)
        shutil.copy2(index, dest / rel)      # the index last: it names the code files
        copied += 1
    return copied


def prepare(base: Path) -> Path | None:
    """In the controlling process, before the test processes start: where the suite's kernel cache
    is empty, run the command in ``base``/home, copy its kernels into the suite's cache and record
    the run in ``base``/warmup.json (exported as ``$DASKMICRO_TEST_WARMUP``).  Returns that file,
    or None when the suite's cache already held kernels."""
    from daskmicro.runtime.compile_cache import cache_dir, configure

    suite = Path(cache_dir() or configure() or "")
    if not str(suite) or _kernel_indexes(_checkout_dir(suite)):
        return None
    home = base / "home"
    home.mkdir(parents=True)
    run = run_command(home)
    if run["returncode"] == 0:
        copy_kernels(user_cache(home), suite)
    record = base / "warmup.json"
    record.write_text(json.dumps(run))
    os.environ[ENV] = str(record)
    return record


_own: dict = {}


def pristine() -> dict:
    """The session's run of the command (see the module's doc), or one run now in a fresh HOME
    (once per process) when the session did not make one.  Keys: home, returncode, stdout, stderr."""
    record = os.environ.get(ENV)
    if record and Path(record).is_file():
        return json.loads(Path(record).read_text())
    if "run" not in _own:
        home = Path(tempfile.mkdtemp(prefix="daskmicro-warmup-"))
        atexit.register(shutil.rmtree, home, True)
        _own["run"] = run_command(home)
    return _own["run"]
