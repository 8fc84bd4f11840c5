"""An incremental survey landing on an object store, as a collector lands it, for the survey tests
of every store (:mod:`test_incremental_object_store` on S3, :mod:`test_cloud_stores` on Azure and GCS)."""

from __future__ import annotations

import io
import json
import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from _s3 import BUCKET
from daskmicro.datasets import census_like
from daskmicro.io.arrivals import CLOSED, MANIFEST, OFFSET_KEY


QI = ["AGI", "FEDTAX", "FICA", "INTVAL", "PEARNVAL", "STATETAX", "WSALVAL"]
N, K, FILES = 1500, 5, 6
#: ν = 0.3 of 1,500 records in six files of 250: the base needs 1,050, so it is the first five
#: files (landed before the run starts) and the increment the sixth (landed while the run waits).
NU, N_BASE = 0.3, 1250


def survey_frame(seed: int) -> pd.DataFrame:
    return census_like(N, seed=seed)[QI].assign(record_id=np.arange(N, dtype=np.int64))


class StoreSurvey:
    """A survey landing under ``prefix`` of the test store as a collector lands it: its
    ``_arrivals.json`` first, then one object per file, named by its arrival time and carrying it
    in its metadata (as :class:`~daskmicro.io.arrivals.ArrivalSimulator` writes them); the last
    ``held`` files land only once :meth:`let_in` is called (the test, not the machine's load,
    decides that data are still arriving when the base stage starts), then ``_closed.json``."""

    def __init__(self, fs, prefix: str, df: pd.DataFrame, held: int = 1, late=None, bucket: str = BUCKET,
                 scheme: str = "s3"):
        self.fs, self.root, self.df, self.held = fs, f"{bucket}/{prefix}", df, held
        self.url = f"{scheme}://{self.root}"
        self.late = late or self._land_rest   # what happens once let in
        self.gate, self.thread = threading.Event(), None
        bounds = np.linspace(0, len(df), FILES + 1).astype(int)
        self.chunks = list(zip(bounds[:-1], bounds[1:]))
        self.names = [f"part-{j:05d}-t{j:013d}.parquet" for j in range(FILES)]

    def put_file(self, j: int, df: pd.DataFrame | None = None) -> None:
        a, b = self.chunks[j]
        table = pa.Table.from_pandas(self.df.iloc[a:b] if df is None else df, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), OFFSET_KEY: repr(j / 1000).encode()})
        buf = io.BytesIO()
        pq.write_table(table, buf)
        self.fs.pipe_file(f"{self.root}/{self.names[j]}", buf.getvalue())

    def _land_rest(self) -> None:
        for j in range(FILES - self.held, FILES):
            self.put_file(j)
        self.fs.pipe_file(f"{self.root}/{CLOSED}", json.dumps({"closed_at": time.time()}).encode())

    def open(self) -> "StoreSurvey":
        """The survey's manifest, its first object."""
        self.fs.pipe_file(f"{self.root}/{MANIFEST}", json.dumps({
            "opened_at": time.time(), "duration": 60.0, "speed": 1.0, "profile": "uniform", "mode": "realtime",
            "n_files": FILES, "rows": len(self.df), "columns": list(self.df.columns), "timestamp_column": None,
        }).encode())
        return self

    def start(self) -> "StoreSurvey":
        self.open()
        for j in range(FILES - self.held):
            self.put_file(j)

        def later():
            self.gate.wait(120)
            self.late()
        self.thread = threading.Thread(target=later, daemon=True)
        self.thread.start()
        return self

    def let_in(self) -> None:
        self.gate.set()

    def join(self) -> None:
        self.let_in()
        self.thread.join(60)


def _base_submitted(dask_scheduler=None) -> bool:
    return any(str(key).startswith("incremental-standardization-") for key in dask_scheduler.tasks)


def land_after_the_base(client, survey: StoreSurvey) -> None:
    """Let the held files land once the run has submitted its base stage (its base is decided)."""
    def wait():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not client.run_on_scheduler(_base_submitted):
            time.sleep(0.02)
        survey.let_in()
    threading.Thread(target=wait, daemon=True).start()
