"""An adversary holding every release of a series: what it may learn, and what it must not.

Each test makes releases a statistical office would make and attacks them with what they
publish.  Besides the differencing of two releases (the rows one has and the other has not, over
the columns both publish), the attacker links a record's rows across releases by a column
published as it is (``pid``, published knowingly) and intersects: the tuple of a record's
published QI and stratum values in both releases must be shared by at least k records, or the
re-release is refused with nothing written or recorded.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from daskmicro import anonymize, anonymize_file
from daskmicro.errors import ParameterError

QI = ["age", "income"]


def _people(n, seed, start=0, **columns):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"pid": np.arange(start, start + n), "age": rng.integers(18, 90, n).astype(np.int64),
                       "income": np.round(rng.normal(50, 10, n), 1)})
    for name, value in columns.items():
        df[name] = value
    return df


def _release(df, ledger, k, **kw):
    out = anonymize(df, qi=QI, k=k, seed=1, ledger=ledger, keep=["pid"], **kw)
    return out[0] if isinstance(out, tuple) else out


def _releases(ledger) -> list:
    return sorted(p.name for p in ledger.rglob("r[0-9]*") if p.is_dir())


def _linked(rel1, rel2, k, tuple_columns) -> None:
    """Every record in both releases, linked by ``pid``, shares its published values of
    ``tuple_columns`` in both with at least k - 1 others."""
    both = rel1.merge(rel2, on="pid", suffixes=("_1", "_2"))
    keys = [f"{c}_{i}" for i in (1, 2) for c in tuple_columns]
    sizes = Counter(tuple(None if pd.isna(v) else v for v in row)
                    for row in both[keys].astype(object).itertuples(index=False))
    assert min(sizes.values()) >= k, sorted(sizes.values())


def test_two_runs_of_one_series_at_once_record_one(tmp_path):
    """A release of a series made while another run of it was recording one is refused at its
    commit: both were made from the same frozen cells, so the same new records were aggregated
    twice, afresh, at other settings (intersected: single records)."""
    ledger = tmp_path / "ledger"
    df = _people(30, 1)
    inner = {}

    def meanwhile(*args, **kwargs):
        if "rel" not in inner:
            inner["rel"] = _release(df, ledger, 5)

    with pytest.raises(ParameterError, match="another release of this series was recorded while this one ran"):
        _release(df, ledger, 3, progress=meanwhile)
    assert _releases(ledger) == ["r000001"]
    assert not list(ledger.rglob(".stage-*"))
    again = _release(df, ledger, 3)   # run again: it republishes the frozen cells
    _linked(inner["rel"], again, 5, QI)
    assert _releases(ledger) == ["r000001", "r000002"]


def test_two_runs_starting_series_sharing_a_qi_at_once_record_one(tmp_path):
    """Two runs that each start a series of the same people with QIs sharing a column (each saw no
    other series when it read the ledger) would both be recorded, two fresh aggregations to
    intersect: the one that commits second is refused, nothing written or recorded, and run again
    it is refused as any new series sharing a QI is."""
    ledger = tmp_path / "ledger"
    df = _people(30, 1, region=np.arange(30) % 3)
    inner = {}

    def meanwhile(*args, **kwargs):
        if "rel" not in inner:
            inner["rel"] = _release(df, ledger, 5, strata=["region"])   # another series: other strata

    with pytest.raises(ParameterError, match="another run recorded a release with other QIs"):
        _release(df, ledger, 3, progress=meanwhile)
    assert _releases(ledger) == ["r000001"]
    assert not list(ledger.rglob(".stage-*"))
    with pytest.raises(ParameterError, match="sharing QI columns"):
        _release(df, ledger, 3)
    assert _releases(ledger) == ["r000001"]
    _release(df, ledger, 3, new_series=True)   # asked for: recorded
    assert _releases(ledger) == ["r000001", "r000001"]


def _keyed_alike(df, ledger, first, qi, **kw):
    """The release ``first`` of ``df`` was keyed by the ledger's key on disk: a re-release of the same
    records republishes every one of them, the same release in the same row order."""
    again, rep = anonymize(df, qi=qi, k=5, seed=1, ledger=ledger, keep=["pid"], **kw)
    assert rep.series["republished"] == len(df) and rep.series["new"] == 0
    pd.testing.assert_frame_equal(first, again)


def _two_series(n=40):
    """Records, and two series of them that share no QI (each may start while the other runs)."""
    rng = np.random.default_rng(4)
    return _people(n, 3, height=np.round(rng.normal(170, 9, n), 1), weight=np.round(rng.normal(70, 12, n), 1))


def test_a_first_run_keys_with_the_key_another_run_made_meanwhile(tmp_path):
    """A run that found a new ledger without a key, while another run made the key and recorded its
    release, keys its own release with that key: both releases recorded, keyed by the one key."""
    ledger = tmp_path / "ledger"
    df = _two_series()
    inner = {}

    def meanwhile(*args, **kwargs):
        if "rel" not in inner:
            inner["rel"], _ = anonymize(df, qi=["height", "weight"], k=5, seed=1, ledger=ledger, keep=["pid"])
            inner["key"] = (ledger / "key").read_bytes()

    outer, rep = anonymize(df, qi=QI, k=5, seed=1, ledger=ledger, keep=["pid"], progress=meanwhile)
    assert rep.series["recorded"] and (ledger / "key").read_bytes() == inner["key"]
    assert _releases(ledger) == ["r000001", "r000001"] and not list(ledger.rglob(".stage-*"))
    _keyed_alike(df, ledger, outer, QI)
    _keyed_alike(df, ledger, inner["rel"], ["height", "weight"])


def test_first_runs_of_a_new_ledger_at_once_key_with_one_key(tmp_path):
    """Runs of a new ledger that reach their first use of its key at once (threads held at a barrier
    after their pre-scan): one key is made, and every release is keyed by it."""
    import threading

    ledger = tmp_path / "ledger"
    df = _two_series()
    runs = [dict(qi=QI), dict(qi=["height", "weight"])]
    barrier = threading.Barrier(len(runs))
    out, errors = {}, []

    def wait(name, *args):
        if name == "pre-scan":
            barrier.wait(timeout=60)

    def release(i):
        try:
            out[i] = anonymize(df, k=5, seed=1, ledger=ledger, keep=["pid"], progress=wait, **runs[i])[0]
        except BaseException as exc:   # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=release, args=(i,)) for i in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(out) == len(runs), errors
    assert [p.name for p in ledger.iterdir() if p.name.startswith((".key", "key"))] == ["key"]
    assert _releases(ledger) == ["r000001"] * len(runs)
    for i, kw in enumerate(runs):
        _keyed_alike(df, ledger, out[i], **kw)


def test_a_release_keyed_with_a_key_no_longer_on_disk_is_not_recorded(tmp_path):
    """A ledger's key replaced while a run keyed its release with the one before: the release is
    refused at its commit, nothing written or recorded; run again, it is keyed by the key on disk."""
    ledger = tmp_path / "ledger"
    df = _people(40, 5)
    out = tmp_path / "rel.parquet"

    def replace_key(name, *args):
        if name == "cells" and not (ledger / "replaced").exists():
            (ledger / "key").write_text("ab" * 32)
            (ledger / "replaced").write_text("")

    with pytest.raises(ParameterError, match="its key is not the one this release was keyed with"):
        anonymize_file(_parquet(df, tmp_path), out, qi=QI, k=5, seed=1, ledger=ledger, keep=["pid"],
                       progress=replace_key)
    assert not out.exists() and not (ledger / "series").exists() and not list(ledger.rglob(".stage-*"))
    first = _release(df, ledger, 5)
    assert _releases(ledger) == ["r000001"] and (ledger / "key").read_text() == "ab" * 32
    _keyed_alike(df, ledger, first, QI)


def _parquet(df, tmp):
    df.to_parquet(tmp / "in.parquet", index=False)
    return tmp / "in.parquet"


def _release_file(df, tmp, name, ledger, k, **kw):
    df.to_parquet(tmp / "in.parquet", index=False)
    anonymize_file(tmp / "in.parquet", tmp / name, qi=QI, k=k, seed=1, ledger=ledger, keep=["pid"], **kw)
    return pd.read_parquet(tmp / name)


def test_a_release_partitioned_otherwise_is_another_series(tmp_path):
    """Partition columns are strata of a record's fingerprint: the same records released into a
    file and then into a directory partitioned by a column (or the other way round) would all be
    new records of the series, aggregated afresh, and the two releases intersected.  They are
    another series, refused while the first has releases; the same partitioning re-releases."""
    ledger = tmp_path / "ledger"
    df = _people(40, 2, region=np.arange(40) % 2)
    first = _release_file(df, tmp_path, "one.parquet", ledger, 4)
    with pytest.raises(ParameterError, match="other QIs, strata or id column"):
        _release_file(df, tmp_path, "parts", ledger, 4, partition_by=["region"])
    assert not (tmp_path / "parts").exists() and len(_releases(ledger)) == 1
    again = _release_file(df, tmp_path, "two.parquet", ledger, 4)
    _linked(first, again, 4, QI)
    other = tmp_path / "other-ledger"
    parts = _release_file(df, tmp_path, "p1", other, 4, partition_by=["region"])
    with pytest.raises(ParameterError, match="other QIs, strata or id column"):
        _release_file(df, tmp_path, "flat.parquet", other, 4)
    again = _release_file(df, tmp_path, "p2", other, 4, partition_by=["region"])
    _linked(parts, again, 4, [*QI, "region"])


def _strata(sizes, seed, start=0):
    return pd.concat([_people(n, seed + s, start + 100 * s, s=s) for s, n in sizes.items()], ignore_index=True)


def test_small_strata_merged_otherwise_are_refused(tmp_path):
    """A stratum of fewer than k records is published merged with a neighbour, under one label.
    Merged with the other neighbour in a re-release (``1|2``, then ``2|3``), its records would be
    singled out by the intersection of their labels, and the frozen cells they shared with the
    first neighbour's records would be split: the re-release is refused, nothing recorded.  A
    re-release merged as before, or whose new small strata merge among themselves, goes on."""
    ledger = tmp_path / "ledger"
    kw = dict(strata=["s"], merge_small_strata=True)
    first = _strata({1: 10, 2: 4, 3: 12}, 3)
    r1 = _release(first, ledger, 5, **kw)
    assert set(r1["s"]) == {"1|2", "3"}
    grown = pd.concat([first, _people(5, 9, 300, s=1)], ignore_index=True)   # stratum 2 now merges with 3
    with pytest.raises(ParameterError, match="other values of their strata"):
        _release(grown, ledger, 5, **kw)
    assert len(_releases(ledger)) == 1
    _linked(r1, _release(first, ledger, 5, **kw), 5, [*QI, "s"])
    other = tmp_path / "other"
    first = _strata({1: 10, 2: 6, 3: 12}, 4)
    r1 = _release(first, other, 5, **kw)
    r2 = _release(pd.concat([first, _strata({4: 3, 5: 3}, 5)], ignore_index=True), other, 5, **kw)
    assert set(r2["s"]) == {"1", "2", "3", "4|5"}
    _linked(r1, r2, 5, [*QI, "s"])
