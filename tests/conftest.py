"""Session set-up: the compiled kernels are built once, before the first test, by two processes that
share the compile as a machine's Dask workers do (:func:`daskmicro.warmup.warm_up`), instead of by
whichever test first needs each one, alone; on a warm cache this only loads them (about a second)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels():
    from daskmicro.warmup import warm_up

    warm_up(jobs=2)
