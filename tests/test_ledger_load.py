"""Reading a series' frozen cells from its releases (daskmicro.io.ledger.Ledger.load): each
fingerprint's cell in the latest release holding it, and the published values of those cells —
whatever the number of releases, the repeats inside a release and between releases, and two
fingerprints sharing their first 64 bits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.io.ledger import Ledger

M = 2


def _write(folder, releases):
    """``releases``: per release, a list of pieces ``(records frame, cells frame)``."""
    for n, pieces in enumerate(releases, start=1):
        r = folder / f"r{n:06d}"
        r.mkdir(parents=True)
        for i, (rec, cel) in enumerate(pieces):
            rec.to_parquet(r / f"records-{i}.parquet", index=False)
            cel.to_parquet(r / f"cells-{i}.parquet", index=False)


def _oracle(folder):
    """Every release in order, the last row of each fingerprint winning; every cell's values."""
    recs, cells = [], []
    for r in Ledger.releases(folder):
        recs += [pd.read_parquet(f) for f in sorted(r.glob("records-*.parquet"))]
        cells += [pd.read_parquet(f) for f in sorted(r.glob("cells-*.parquet"))]
    rec = pd.concat(recs, ignore_index=True).drop_duplicates(["hi", "lo"], keep="last")
    cel = pd.concat(cells, ignore_index=True).drop_duplicates("cell").set_index("cell")
    return {(int(h), int(l)): int(c) for h, l, c in rec[["hi", "lo", "cell"]].itertuples(index=False)}, cel


@st.composite
def _series(draw):
    """Releases of records drawn from a small population (so that they repeat), some records
    sharing the first 64 bits of their fingerprint, cells numbered per release."""
    n_people = draw(st.integers(1, 40))
    his = draw(st.lists(st.integers(0, 6), min_size=n_people, max_size=n_people))   # few values: collisions
    people = sorted({(h, draw(st.integers(0, 2 ** 64 - 1))) for h in his})
    releases, next_cell = [], 1
    for _ in range(draw(st.integers(1, 5))):
        pieces = []
        for _ in range(draw(st.integers(1, 3))):
            who = draw(st.lists(st.sampled_from(people), min_size=0, max_size=30))   # repeats inside a piece too
            n_cells = draw(st.integers(1, 4))
            ids = np.arange(next_cell, next_cell + n_cells, dtype=np.uint64)
            next_cell += n_cells
            cells = draw(st.lists(st.integers(0, n_cells - 1), min_size=len(who), max_size=len(who)))
            rec = pd.DataFrame({"hi": np.array([p[0] for p in who], np.uint64),
                                "lo": np.array([p[1] for p in who], np.uint64),
                                "cell": ids[np.array(cells, dtype=np.int64)] if who else np.empty(0, np.uint64)})
            cel = pd.DataFrame({"cell": ids, **{f"q{j}": ids.astype(float) * 10 + j for j in range(M)}})
            pieces.append((rec, cel))
        releases.append(pieces)
    return releases


@settings(max_examples=80, deadline=None)
@given(series=_series())
def test_load_keeps_each_fingerprint_s_latest_cell(tmp_path_factory, series):
    folder = tmp_path_factory.mktemp("series")
    _write(folder, series)
    want, cells = _oracle(folder)
    frozen = Ledger.load(folder, ("a", "b"))
    assert len(frozen) == len(want)
    fps = frozen.fps
    assert np.all((fps["hi"][1:] > fps["hi"][:-1]) | ((fps["hi"][1:] == fps["hi"][:-1]) & (fps["lo"][1:] > fps["lo"][:-1])))
    got = {(int(h), int(l)): int(c) for h, l, c in zip(fps["hi"], fps["lo"], frozen.cell_of)}
    assert got == want
    named = np.array(sorted(set(want.values())), dtype=np.uint64)
    assert np.array_equal(frozen.cell_values(named), cells.loc[named, [f"q{j}" for j in range(M)]].to_numpy())
    if len(fps):
        assert np.array_equal(frozen.lookup(fps), frozen.cell_of)


def test_a_series_of_repeated_releases_reads_the_cells_of_the_last_only(tmp_path):
    """The same records released three times: every cell comes from the last release (the older
    releases' cells files are not needed, and here not even readable)."""
    rng = np.random.default_rng(0)
    hi, lo = rng.integers(0, 2 ** 63, 500, dtype=np.uint64), rng.integers(0, 2 ** 63, 500, dtype=np.uint64)
    releases = []
    for n in range(3):
        ids = np.arange(100 * n + 1, 100 * n + 51, dtype=np.uint64)
        rec = pd.DataFrame({"hi": hi, "lo": lo, "cell": ids[rng.integers(0, 50, 500)]})
        releases.append([(rec, pd.DataFrame({"cell": ids, "q0": ids * 1.0, "q1": ids * 2.0}))])
    _write(tmp_path, releases)
    for r in Ledger.releases(tmp_path)[:-1]:
        (r / "cells-0.parquet").write_bytes(b"not parquet")
    frozen = Ledger.load(tmp_path, ("a", "b"))
    assert len(frozen) == 500 and set(frozen.cell_of.tolist()) <= set(range(201, 251))


def test_an_empty_series_loads_empty(tmp_path):
    assert len(Ledger.load(tmp_path, ("a", "b"))) == 0
    (tmp_path / "r000001").mkdir()
    assert len(Ledger.load(tmp_path, ("a", "b"))) == 0


@pytest.mark.parametrize("keep", ["first", "last"])
def test_the_last_row_of_a_fingerprint_in_a_release_wins(tmp_path, keep):
    rows = pd.DataFrame({"hi": np.array([5, 5, 5], np.uint64), "lo": np.array([1, 2, 1], np.uint64),
                         "cell": np.array([1, 2, 3], np.uint64)})
    if keep == "first":   # the same fingerprints, the repeated one's rows in the other order
        rows = rows.iloc[[2, 1, 0]]
    cells = pd.DataFrame({"cell": np.array([1, 2, 3], np.uint64), "q0": [1.0, 2.0, 3.0], "q1": [0.0, 0.0, 0.0]})
    _write(tmp_path, [[(rows, cells)]])
    frozen = Ledger.load(tmp_path, ("a", "b"))
    got = dict(zip(zip(frozen.fps["hi"].tolist(), frozen.fps["lo"].tolist()), frozen.cell_of.tolist()))
    assert got == {(5, 1): 3 if keep == "last" else 1, (5, 2): 2}
