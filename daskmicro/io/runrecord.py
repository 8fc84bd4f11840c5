"""The private run record: what reproduces or audits a run, kept away from what is published.

A release and its companions (``_SUCCESS``, ``_report.json``, the HTML page) hold aggregates only.
Two things a data owner may need are not aggregates: the shuffle seed (with it, anyone can undo the
row shuffle and line the release up with the input) and the input's identity (paths, sizes and
modification times of its files).  They go to one JSON file per run under the user's state
directory — ``$XDG_STATE_HOME/daskmicro/runs/`` (``~/.local/state/daskmicro/runs/`` when the
variable is unset) — created with owner-only permissions (directory 0700, file 0600), never inside
an output.  The run prints its path.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

__all__ = ["state_dir", "write_run_record"]


def state_dir() -> Path:
    """daskmicro's private state directory of this user (not created)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "daskmicro"


def write_run_record(doc: dict) -> Path:
    """Write ``doc`` as a new owner-only JSON file under :func:`state_dir` ``/runs``; its path."""
    from .tables import dump_json

    folder = state_dir() / "runs"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    name = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}.json"
    path = folder / name
    text = dump_json(doc)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def record_text(path: Path | None, error: str | None = None) -> str:
    """The one line a run prints about its record."""
    if path is not None:
        return f"private run record (seed, input files; keep it, never publish it): {path}"
    return f"warning: no private run record written ({error}); the run cannot be reproduced exactly"


def load(path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))
