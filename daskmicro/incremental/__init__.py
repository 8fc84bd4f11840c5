"""Incremental surveys as a mode of the one run model: options (:mod:`.options`), the data ratio ν
(:mod:`.nu`), the executor of both stages (:mod:`.execute`) and its report section (:mod:`.report`).

The Dask wiring of the stages lives in :mod:`daskmicro.graph.incremental` and its partitioned
twins; the kernels of the increment in :mod:`daskmicro.kernels.incremental`."""
