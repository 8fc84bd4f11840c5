"""Where and how a run's work executes: the Dask cluster and client (:mod:`.cluster`), numba's
compile cache (:mod:`.compile_cache`), the kernels' warm-up before the stages (:mod:`.warmup`), the
worker processes' memory allocator (:mod:`.allocator`) and the Dask performance report
(:mod:`.dask_report`).

Nothing is imported here: ``daskmicro/__init__.py`` imports :mod:`.compile_cache` before any module
that imports numba, and that must not pull in Dask or the kernels.
"""
