"""Incremental surveys as a mode of the one run model: their options and rules
(:mod:`.options`) and the report section of a run (:mod:`.report`).

The executor of both stages is Dask wiring: :mod:`daskmicro.graph.incremental_run` (ν from
:mod:`daskmicro.graph.incremental_schedule`; the stages in :mod:`daskmicro.graph.incremental` and its
partitioned twins); the kernels of the increment are in :mod:`daskmicro.kernels.increment`."""
