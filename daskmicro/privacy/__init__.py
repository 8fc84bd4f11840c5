"""Privacy checks on releases: k-anonymity verification and row preservation."""

from .verify import (
    KAnonymityCheck,
    RowCheck,
    VerificationError,
    verify_k_anonymity,
    verify_rows,
)

__all__ = ["KAnonymityCheck", "RowCheck", "VerificationError", "verify_k_anonymity", "verify_rows"]
