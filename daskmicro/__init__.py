"""daskmicro: k-anonymous microaggregation of large numerical microdata on Dask."""

from .runtime import compile_cache  # first: numba's cache dir is chosen before any kernel module imports numba

compile_cache.configure()

from . import _version

__version__ = _version.__version__

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
from .estimators import MDAV, PCAMDAV, PCL
from .kernels.pcl import pcl
from .anonymize import anonymize, anonymize_file
from .privacy import verify_k_anonymity, verify_rows
from .privacy.effective import effective_anonymity
from .privacy.probabilistic import probabilistic_cells
from .privacy.risk import disclosure_risk, interval_disclosure, record_linkage
from .privacy.spec import assign, build_spec, load_spec
from .kernels.utility import eigen_measure, il1s, utility_measures
from .report import render_html, write_report
from . import schedule
from .tuning.tradeoff import sweep
from .incremental_api import anonymize_incremental

__all__ = [
    "mdav", "pca_reduce", "pca_mdav", "standardize", "centroids", "cell_sizes", "cell_sse", "sse",
    "sst", "distortion", "information_loss", "relative_distortion", "MDAV", "PCAMDAV", "anonymize", "anonymize_file",
    "verify_k_anonymity", "verify_rows", "effective_anonymity", "probabilistic_cells", "disclosure_risk",
    "interval_disclosure", "record_linkage", "assign", "build_spec", "load_spec", "eigen_measure", "il1s",
    "utility_measures", "render_html", "write_report", "schedule", "anonymize_incremental",
    "sweep", "pcl", "PCL",
]
