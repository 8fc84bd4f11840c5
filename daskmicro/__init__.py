"""daskmicro: k-anonymous microaggregation of large numerical microdata on Dask."""

__version__ = "0.1.0"

from .kernels import (
    mdav,
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
from .anonymize import anonymize
from .privacy import verify_k_anonymity, verify_rows
