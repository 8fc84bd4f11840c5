"""Pure numpy / numba kernels: no Dask import anywhere in this package."""

from .mdav import mdav, check_k, as_records
from .metrics import (
    Standardization,
    standardize,
    centroids,
    cell_sizes,
    cell_sse,
    sse,
    sst,
    distortion,
    information_loss,
    relative_distortion,
)
from .pca import PCAReduction, pca_reduce, pca_mdav

__all__ = ["mdav", "check_k", "as_records", "Standardization", "standardize", "centroids", "cell_sizes",
           "cell_sse", "sse", "sst", "distortion", "information_loss", "relative_distortion", "PCAReduction",
           "pca_reduce", "pca_mdav"]
