"""Table input and atomic output (CSV, Parquet, JSON)."""

from .tables import (
    AtomicBatch,
    read_table,
    table_format,
    write_json_atomic,
    write_parquet_atomic,
    write_table_atomic,
)

__all__ = [
    "AtomicBatch",
    "read_table",
    "table_format",
    "write_json_atomic",
    "write_parquet_atomic",
    "write_table_atomic",
]
