"""daskmicro: k-anonymous microaggregation of large numerical microdata on Dask."""

__version__ = "0.1.0"

from .kernels import (
    mdav,
    pca_reduce,
    pca_mdav,
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
from .estimators import MDAV, PCAMDAV
from .anonymize import anonymize
from .privacy import verify_k_anonymity, verify_rows

__all__ = [
    "mdav", "pca_reduce", "pca_mdav", "standardize", "centroids", "cell_sizes", "cell_sse", "sse",
    "sst", "distortion", "information_loss", "relative_distortion", "MDAV", "PCAMDAV", "anonymize",
    "verify_k_anonymity", "verify_rows",
]
