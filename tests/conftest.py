"""Shared set-up for the whole suite.

* Where the kernel cache is empty, ``daskmicro warmup`` runs once before the test processes start,
  and its kernels are copied into the suite's cache (:mod:`_warmup`; ``test_compile_cache.py`` judges
  that run).  Then the compiled kernels are loaded once, before the first test
  (:func:`daskmicro.runtime.warmup.warm_up`): what is still missing is compiled there, under
  pytest-xdist each test process taking its share as a machine's Dask workers do (the unit locks of
  the cache dir); alone, a pool of two processes shares it. On a warm cache this takes about a second.
* ``client``: one LocalCluster of two single-threaded worker processes (set up as daskmicro sets
  up its own) for every test that only needs *a* cluster.  Tests that kill workers, need another
  number of workers or memory limits, or check how a cluster starts keep a cluster of their own.
* ``clients``: ``clients(n)`` is a client of a LocalCluster of ``n`` single-threaded worker
  processes (set up like ``client``'s), started on first use, for the tests that compare runs on
  1, 2 and 4 workers: the one of 1 worker is kept for the session, the one of 4 workers for the test
  file that started it (an idle cluster costs CPU; only two files use it).
* ``dask_processes``: a real ``dask scheduler`` and ``dask worker --nworkers 2`` as separate
  processes on loopback, started on first use in a test file and stopped at its end.
* ``store``: moto's S3 server on loopback (:mod:`_s3`), started on first use, with this process and
  ``client``'s workers pointing their credential chain at it: ``(endpoint, s3fs file system)``.
* The census data sets and their QI list, made once.
* The release ledger is off (``DASKMICRO_LEDGER=off``): tests of series name their own ledger.

Under pytest-xdist each worker process of the run has its own session, so these are started at
most once per xdist worker, and only if one of its tests asks for them.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

# Every run of the suite is a trial run (the release ledger off) unless a test names a ledger:
# runs of the same data sets in different tests must not become one series of releases.  Set before
# the helpers are imported: _clusters.ENV, the environment of the ``dask scheduler`` / ``dask worker``
# processes (the workflow runs submitted to them), is taken at import.
os.environ["DASKMICRO_LEDGER"] = "off"

# Dask's housekeeping, sampled less often in the suite's clusters: each worker samples its running
# task's stack for the profile every 10 ms (the profile cycled every second) and each scheduler,
# nanny and worker measures its event loop's tick every 20 ms — on an idle 2-worker LocalCluster
# about 7 % of a core, for every cluster the suite holds open.  Every worker still profiles its tasks
# (a performance report still has its profiles) and every server still watches its event loop; only
# the sampling is coarser.  Set in the environment, so that the processes the tests start (CLI runs,
# ``dask scheduler`` / ``dask worker``, the workers' fork server) sample alike; set before the helpers
# are imported, as the ledger above.
DASK_HOUSEKEEPING = {
    "DASK_DISTRIBUTED__WORKER__PROFILE__INTERVAL": "100ms",
    "DASK_DISTRIBUTED__WORKER__PROFILE__CYCLE": "10s",
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "200ms",
}
for _name, _value in DASK_HOUSEKEEPING.items():
    os.environ.setdefault(_name, _value)
import dask  # noqa: E402  (dask reads its environment when first imported: refresh, if it was earlier)

dask.config.refresh()

from _clusters import connect, process_client, start_dask_processes  # noqa: E402
from _s3 import s3_store  # noqa: E402
from _warmup import prepare  # noqa: E402


def pytest_configure(config):
    """In the controlling process only (not in pytest-xdist's test processes, which inherit what it
    sets up): ``daskmicro warmup`` on an empty cache, when the suite's cache is empty."""
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="daskmicro-suite-warmup-"))
    config.add_cleanup(lambda: shutil.rmtree(base, ignore_errors=True))
    prepare(base)


#: Seconds each of the slowest test files took in a run of the suite on 2 cores (pytest --junitxml).
#: The test processes take whole files, the slowest first (longest processing time first: the run
#: does not end with one process still on a long file while the other waits), the others after
#: them in their usual order.  Only the order changes; refresh the figures when a file grows.
SLOW_FILES = {
    "test_object_store.py": 190, "test_pipeline.py": 77, "test_cli_progress.py": 75, "test_compile_cache.py": 72,
    "test_cloud_stores.py": 69, "test_lake_faults.py": 20, "test_incremental_fixed.py": 51,
    "test_delta_store.py": 46, "test_incremental_pipeline.py": 43, "test_workflow_cluster.py": 42,
    "test_report_html.py": 40, "test_adversarial.py": 37, "test_lake_interrupt.py": 33, "test_report_truth.py": 32,
    "test_write_paths.py": 18, "test_series.py": 28, "test_pages_in_browser.py": 25, "test_identifiers.py": 15,
    "test_no_values.py": 24, "test_workflow_examples.py": 22, "test_cli_cluster.py": 21,
    "test_commit_faults.py": 21, "test_cli.py": 20,
}


def pytest_collection_modifyitems(config, items):
    """The slowest files first (:data:`SLOW_FILES`); pytest-xdist keeps this order when given
    ``--no-loadscope-reorder`` (the Makefile's test command)."""
    order = {}
    for i, item in enumerate(items):
        order.setdefault(item.path.name, i)
    items.sort(key=lambda item: (-SLOW_FILES.get(item.path.name, 0), order[item.path.name]))


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels():
    from daskmicro.runtime.warmup import KERNEL_SETS, warm, warm_up

    if os.environ.get("PYTEST_XDIST_WORKER"):
        warm(list(KERNEL_SETS))      # the units, shared with the other test processes through their locks
    else:
        warm_up(jobs=2)


# --------------------------------------------------------------------------- clusters


@pytest.fixture(scope="session")
def client():
    """A client of the shared LocalCluster of two worker processes."""
    with process_client(2) as c:
        yield c


@pytest.fixture(scope="session")
def store(client):
    """moto's S3 server of the session (:func:`_s3.s3_store`): ``(endpoint, s3fs file system)``."""
    yield from s3_store(client)


#: ``clients(n)`` keeps a cluster of at most this many workers for the session; a larger one (4
#: workers, 4 processes on a 2-core machine) only for the test file that started it: the few files
#: that compare 4 workers run early (SLOW_FILES), and an idle cluster is not free (Dask's
#: heartbeats and housekeeping in each of its processes, for the rest of the session).
CLIENTS_KEPT_FOR_THE_SESSION = 2
_started_clients: dict = {}   # n_workers -> (client, ExitStack closing its cluster)


@pytest.fixture(scope="session")
def clients():
    """``clients(n)``: a client of a shared LocalCluster of ``n`` worker processes (1 and 4 in the
    tests that compare worker counts), started on first use, closed at the end of the session (one
    of more than :data:`CLIENTS_KEPT_FOR_THE_SESSION` workers: at the end of its test file)."""
    from contextlib import ExitStack

    def get(n_workers: int):
        if n_workers not in _started_clients:
            stack = ExitStack()
            _started_clients[n_workers] = (stack.enter_context(process_client(n_workers)), stack)
        return _started_clients[n_workers][0]

    try:
        yield get
    finally:
        _close_clients(lambda n: True)


def _close_clients(which) -> None:
    for n in [n for n in _started_clients if which(n)]:
        _started_clients.pop(n)[1].close()


@pytest.fixture(scope="module", autouse=True)
def _larger_clusters_for_their_file_only():
    yield
    _close_clients(lambda n: n > CLIENTS_KEPT_FOR_THE_SESSION)


@pytest.fixture(scope="module")
def dask_processes():
    """The shared ``dask scheduler`` + two ``dask worker`` processes of a test file: ``.address``,
    ``.client`` (two files use them, one of them in one test: stopped at the end of each file, not
    left idle, at about 4 % of a core, for the rest of the session)."""
    cluster = start_dask_processes(2)
    try:
        with connect(cluster) as c:
            cluster.client = c
            yield cluster
    finally:
        cluster.stop()


# --------------------------------------------------------------------------- data


@pytest.fixture(scope="session")
def census():
    """The census test data set (1,080 records × 13 numeric attributes)."""
    from daskmicro.datasets import load_census

    return load_census()


@pytest.fixture(scope="session")
def census_z(census):
    """The census data set z-scored, as the kernels take it."""
    from daskmicro.kernels import standardize

    return standardize(census.to_numpy(dtype=np.float64))[0]


@pytest.fixture(scope="session")
def qi():
    """The quasi-identifiers of census-like data: its 13 numeric columns (not record_id, region)."""
    from daskmicro.datasets import CENSUS_COLUMNS

    return list(CENSUS_COLUMNS)


@pytest.fixture
def cli(capfd, monkeypatch):
    """The command's ``main`` in this process (for a test that needs no process of its own): what it
    writes to this process's stdout and stderr captured at the file descriptors (logging handlers and
    C-level writes too), returned as a finished process's fields (returncode, stdout, stderr);
    ``cwd``: the directory it runs in."""
    import subprocess

    from daskmicro.cli import main

    def run(*args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capfd.readouterr()
        rc = main([str(a) for a in args])
        out = capfd.readouterr()
        return subprocess.CompletedProcess(args, rc, out.out, out.err)

    return run
