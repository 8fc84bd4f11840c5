"""The secondary commands (``run``, ``spec``, ``assign``, ``audit``) on inputs that are legal to
write but wrong: one line naming the parameter, column or file, exit status 2, nothing written,
nothing the user owns replaced."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


def _tree(root: Path) -> dict:
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _records(n=120, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.normal(50, 10, n), "b": rng.normal(1000, 200, n), "c": rng.integers(0, 100, n)})


_SPEC = """\
version: 1
name: t
input:
  path: in.parquet
qi: [a, b, c]
k: 5
method: mdav
output:
  path: rel.parquet
  overwrite: true
report:
  path: {report}
cluster:
  workers: 1
series:
  ledger: off
"""


@pytest.mark.parametrize("report", ["w.yaml", "./w.yaml"])
def test_a_workflow_never_writes_its_report_over_its_own_spec(tmp_path, cli, report):
    _records().to_parquet(tmp_path / "in.parquet")
    (tmp_path / "w.yaml").write_text(_SPEC.format(report=report))
    before = _tree(tmp_path)
    r = cli("run", tmp_path / "w.yaml", "--workers", "1", "--quiet")
    assert r.returncode == 2, r.stdout
    line = r.stderr.strip()
    assert "\n" not in line and "w.yaml" in line and "report" in line
    assert _tree(tmp_path) == before
