"""Input column names that a run's own bookkeeping could mistake for its columns.

A run adds hidden columns to every piece of its input (the row id, the shuffle key, the ledger's
fingerprints, a record's frozen cell) and groups the pre-scan by stratum and missingness pattern.
An input column of the same name must never be replaced by a hidden column (a kept column would
publish each record's input position, undoing the shuffle) nor change the groups: such a name is
refused before any work, and any other name works as every column does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskmicro
from daskmicro.cli import main
from daskmicro.errors import InputError, ParameterError
from daskmicro.io.layout import KEY_COLUMN
from daskmicro.io.source import RID
from daskmicro.series.fingerprint import FP
from daskmicro.series.frozen import CELL

K = 3
HIDDEN = (RID, KEY_COLUMN, *FP, CELL)


def _frame(name, n=24, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), name: rng.normal(size=n) + 1000.0})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(HIDDEN), role=st.sampled_from(["keep", "qi", "passthrough"]),
       seed=st.integers(0, 99))
def test_hidden_column_names_are_refused_or_kept_intact(name, role, seed):
    df = _frame(name, seed=seed)
    qi = ["a", name] if role == "qi" else ["a", "b"]
    keep = [name] if role == "keep" else None
    try:
        release, _ = daskmicro.anonymize(df, qi=qi, k=K, keep=keep, seed=seed, ledger=False)
    except (InputError, ParameterError) as e:
        assert name in str(e)
        return
    assert len(release) == len(df)
    if role != "qi":
        assert sorted(release[name]) == sorted(df[name]), f"column {name!r} not published as it is"


@pytest.mark.parametrize("output", ["out.parquet", "out"])
def test_kept_row_id_named_column_is_refused_by_the_cli(tmp_path, capsys, output):
    name = RID
    inp = tmp_path / "in.parquet"
    _frame(name).to_parquet(inp)
    rc = main(["anonymize", str(inp), str(tmp_path / output), "--qi", "a,b", "--k", str(K), "--keep", name,
               "--ledger", "off"])
    err = capsys.readouterr().err
    assert rc == 2 and name in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


@settings(max_examples=10, deadline=None)
@given(name=st.sampled_from(["__pattern__", "s", "__index_level_0__", "0"]), seed=st.integers(0, 99))
def test_stratum_name_never_changes_the_groups(name, seed):
    rng = np.random.default_rng(seed)
    n = 25
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), name: ["x"] * 12 + ["y"] * 12 + ["z"]})
    with pytest.raises(ParameterError, match="fewer than k"):
        daskmicro.anonymize(df, qi=["a", "b"], k=K, strata=[name], seed=seed, ledger=False)
    release, _ = daskmicro.anonymize(df, qi=["a", "b"], k=K, strata=[name], merge_small_strata=True, seed=seed,
                                     ledger=False)
    assert len(release) == n
    assert int(release.groupby([name, "a", "b"]).size().min()) >= K
