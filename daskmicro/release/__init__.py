"""The published table: QI columns replaced by centroids, one seeded release order
(:mod:`.publish`), and the release figures gathered from what the run already holds
(:mod:`.run_figures`).  No Dask here: the executor (:mod:`daskmicro.graph`) and the writers
(:mod:`daskmicro.io`) call these functions on pieces of the release.
"""
