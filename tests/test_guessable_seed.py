"""A shuffle seed small enough to be found by trying every value undoes the row shuffle.

The release's row order is a public function of the seed and the row ids
(:func:`daskmicro.release.publish.shuffle_keys`), so the seed is kept out of everything published.
A seed the user gives (``--seed 4242``, ``seed=0``) is a secret only if it cannot be guessed:
with the release alone, trying every seed below 10,000 and keeping the one that puts a sorted
column of the input back in order takes well under a second here, and gives every release row its
input position (here: its income rank within its region).  A recorded release's order is keyed by
its ledger's secret (:func:`daskmicro.series.fingerprint.order_seed`): the same search finds
nothing, and the same ledger and seed give the same release again.  A trial run (no ledger) given
such a seed says so; a drawn seed (63 random bits) or a large given one is not flagged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.release.publish import shuffle_keys


def _register(tmp_path, n=300):
    rng = np.random.default_rng(5)
    df = pd.DataFrame({"region": np.repeat(["east", "north", "south"], n // 3),
                       "income": np.round(rng.lognormal(10, 0.5, n), 2),
                       "age": rng.integers(18, 90, n).astype(float)})
    df = df.sort_values(["region", "income"]).reset_index(drop=True)   # a register in a meaningful order
    path = tmp_path / "register.parquet"
    df.to_parquet(path)
    return df, path


def _run(tmp_path, path, seed, capsys, ledger="off", name=None):
    out = tmp_path / f"rel-{name or seed}.parquet"
    argv = ["anonymize", str(path), str(out), "--qi", "income,age", "--k", "5", "--keep", "region",
            "--ledger", str(ledger)]
    assert main(argv + ([] if seed is None else ["--seed", str(seed)])) == 0
    return pd.read_parquet(out), capsys.readouterr().err


def _guess(rel):
    """The attack, on the release alone: the seed below 10,000 that sorts the kept column back."""
    n, ids = len(rel), np.arange(len(rel), dtype=np.int64)
    region = rel["region"].to_numpy()
    for s in range(10_000):
        back = np.empty(n, dtype=object)
        back[np.argsort(shuffle_keys(s, ids), kind="stable")] = region
        if (back[:-1] <= back[1:]).all():
            return s
    return None


def test_a_small_seed_of_a_trial_run_is_found_from_the_release_and_the_run_says_so(tmp_path, capsys):
    df, path = _register(tmp_path)
    rel, err = _run(tmp_path, path, 4242, capsys)
    found = _guess(rel)
    assert found == 4242
    order = np.argsort(shuffle_keys(found, np.arange(len(rel), dtype=np.int64)), kind="stable")
    assert (df["region"].to_numpy()[order] == rel["region"].to_numpy()).all()   # release row t is input row order[t]
    # so the run warns that its seed can be guessed
    assert "seed" in err and "guess" in err and "undo" in err


def test_a_recorded_release_keys_its_order_with_the_ledger_secret(tmp_path, capsys):
    _, path = _register(tmp_path)
    ledger = tmp_path / "ledger"
    rel, err = _run(tmp_path, path, 4242, capsys, ledger=ledger, name="a")
    assert _guess(rel) is None and "guess" not in err
    again, _ = _run(tmp_path, path, 4242, capsys, ledger=ledger, name="b")   # the same ledger and seed: the same release
    pd.testing.assert_frame_equal(again, rel)
    other, _ = _run(tmp_path, path, 4242, capsys, ledger=tmp_path / "other-ledger", name="c")
    assert not other["region"].equals(rel["region"])                         # another ledger's key: another order


@pytest.mark.parametrize("seed", [None, 2 ** 62 + 12345])
def test_a_drawn_or_large_seed_is_not_flagged(tmp_path, capsys, seed):
    _, path = _register(tmp_path)
    _, err = _run(tmp_path, path, seed, capsys)
    assert "guess" not in err and "trial run" in err
