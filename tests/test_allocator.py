"""The allocator of the processes a run computes in (daskmicro.allocator): after a run's warm-up, a
Dask worker serves large arrays from its heap instead of mapping each one afresh — checked on real
worker processes of a LocalCluster by what glibc itself reports (``mallinfo2``), not by timing."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskmicro import allocator
from daskmicro.warmup import warm_workers


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2():
    try:
        f = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = _MallInfo2
    return f


pytestmark = pytest.mark.skipif(_mallinfo2() is None, reason="not glibc ≥ 2.33 (no mallinfo2): nothing to tune")


def mapped_while_held(nbytes: int) -> dict:
    """In this process: bytes of directly mapped blocks gained while an array of ``nbytes`` is held."""
    info = _mallinfo2()
    before = info().hblkhd
    a = np.ones(nbytes // 8)
    gained = info().hblkhd - before
    del a
    return {"gained": int(gained), "trim_env": os.environ.get("MALLOC_TRIM_THRESHOLD_")}


def test_a_runs_warm_up_makes_dask_workers_reuse_large_arrays():
    size = 4 << 20  # 4 MiB: above the 128 KiB threshold Dask's environment pins, below the tuned 32 MiB
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        before = client.run(mapped_while_held, size)
        for got in before.values():
            if got["trim_env"] is not None:  # Dask's nanny set a malloc variable: the dynamic threshold is off
                assert got["gained"] >= size
        entry = warm_workers(client, ["mdav"])
        assert entry["allocator_tuned"] == 2
        # in a task (the worker's task thread, its own arena) and in the worker's main thread
        assert client.submit(mapped_while_held, size, pure=False).result()["gained"] == 0
        assert all(v["gained"] == 0 for v in client.run(mapped_while_held, size).values())


def test_an_owners_own_setting_is_left_alone():
    code = "from daskmicro import allocator; print(allocator.tune())"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    env.pop("MALLOC_MMAP_THRESHOLD_")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    assert allocator.MMAP_THRESHOLD == 32 << 20
