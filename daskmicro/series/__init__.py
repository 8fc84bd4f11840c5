"""Series of releases of the same people: keyed record fingerprints and frozen cells.

A release recorded in the ledger (:mod:`daskmicro.io.ledger`) freezes every published record's
cell values.  A later release of the same records republishes only values published before
(:mod:`daskmicro.series.frozen`) next to the same values of the columns published as they are
(:mod:`daskmicro.series.content`), so that differencing two releases' totals, or intersecting
releases made at other settings, gives back only published centroids.  Nothing here imports Dask.
"""
