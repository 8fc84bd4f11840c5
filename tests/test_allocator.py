"""The allocator of the kernel tasks (daskmicro.runtime.allocator): inside them a Dask worker serves arrays of
up to 32 MiB from its heap instead of mapping each one afresh, keeps the heap it grows while they run,
and maps them again and gives the heap back after — checked on
real worker processes of a LocalCluster by what glibc itself reports (``mallinfo2``), not by timing."""

import contextlib
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskmicro.runtime import allocator


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


pytestmark = pytest.mark.skipif(_mallinfo2() is None, reason="needs glibc ≥ 2.33 (mallinfo2) to measure the allocator settings; this C library has none")


def mapped_while_held(nbytes: int) -> dict:
    """In this process: bytes of directly mapped blocks gained while an array of ``nbytes`` is held."""
    info = _mallinfo2()
    before = info().hblkhd
    a = np.ones(nbytes // 8)
    gained = info().hblkhd - before
    del a
    return {"gained": int(gained), "trim_env": os.environ.get("MALLOC_TRIM_THRESHOLD_")}


def mapped_inside_and_after(nbytes: int, after_bytes: int) -> dict:
    """In this process: bytes newly mapped for an array of ``nbytes`` inside allocator.reusing(), and
    for one of ``after_bytes`` after it.  glibc serves a request from a free chunk of its heap before it
    looks at the threshold, so the array after is larger than any chunk the one inside can have freed:
    only the threshold then decides whether it is mapped afresh or taken from a grown heap."""
    with allocator.reusing() as changed:
        inside = mapped_while_held(nbytes)["gained"]
    return {"changed": changed, "inside": inside, "after": mapped_while_held(after_bytes)["gained"]}


def heap_kept(nbytes: int, inside: bool) -> dict:
    """In this process: resident bytes while ``nbytes`` of small arrays (100 KiB each: served from the
    heap whatever the mmap threshold) are held and once they are freed, inside allocator.reusing() or
    not, and after it."""
    def resident():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    with (allocator.reusing() if inside else contextlib.nullcontext()):
        a = [np.ones(100 << 7) for _ in range(nbytes // (100 << 10))]
        held = resident()
        del a
        freed = resident()
    return {"held": held, "freed": freed, "after": resident()}


def test_kernel_tasks_reuse_large_arrays_on_dask_workers_and_give_them_back_after():
    size = 16 << 20  # 16 MiB: above the 128 KiB threshold Dask's environment pins, below the 32 MiB inside
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        before = client.submit(mapped_while_held, size, pure=False).result()
        assert before["trim_env"] is not None            # Dask's nanny pinned the threshold ...
        assert before["gained"] >= size                  # ... so a 2 MiB array is mapped afresh
        after = size * 3 // 2   # 24 MiB: below the 32 MiB threshold inside, above any chunk the 16 MiB freed
        got = client.submit(mapped_inside_and_after, size, after, pure=False).result()
        assert got == {"changed": True, "inside": 0, "after": got["after"]} and got["after"] >= after


def test_the_heap_a_kernel_task_grows_stays_while_it_runs_and_goes_back_after():
    """Under the nanny's 64 KiB trim threshold the main heap hands freed memory back at once (and the next
    arrays fault it in again); inside reusing() it stays, and it goes back when the task ends."""
    code = ("import json, sys; sys.path.insert(0, %r); import test_allocator as t; "
            "print(json.dumps([t.heap_kept(16 << 20, False), t.heap_kept(16 << 20, True)]))"
            % os.path.dirname(__file__))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "MALLOC_TRIM_THRESHOLD_": "65536"},
                         capture_output=True, text=True, check=True)
    plain, kept = json.loads(out.stdout)
    half = 8 << 20
    assert plain["freed"] <= plain["held"] - half                                  # given back at once
    assert kept["freed"] >= kept["held"] - (1 << 20) and kept["after"] <= kept["held"] - half  # kept, then back


def test_nothing_changes_where_glibc_adjusts_by_itself_or_the_owner_chose():
    code = "from daskmicro.runtime import allocator\nwith allocator.reusing() as c: print(c)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    for extra, want in (({}, "False"), ({"MALLOC_TRIM_THRESHOLD_": "65536"}, "True"),
                        ({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": "131072"}, "False")):
        out = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == want, extra
    assert allocator.MMAP_THRESHOLD == 32 << 20 and allocator.TRIM_THRESHOLD == 1 << 30
