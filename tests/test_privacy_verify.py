"""k-anonymity and row-count verification: both must be able to fail."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskmicro.errors import ParameterError
from daskmicro.privacy import KAnonymityCheck, VerificationError, verify_k_anonymity, verify_rows


def _release():
    # tuples (1, 10) ×3, (2, 20) ×2, (3, 30) ×1; a non-QI column that must not matter
    return pd.DataFrame(
        {
            "a": [1.0, 1.0, 1.0, 2.0, 2.0, 3.0],
            "b": [10.0, 10.0, 10.0, 20.0, 20.0, 30.0],
            "name": ["u", "v", "w", "x", "y", "z"],
        }
    )


def test_passing_release():
    check = verify_k_anonymity(_release(), ["a", "b"], k=1)
    assert check.ok and bool(check)
    assert (check.min_count, check.n_tuples, check.n_violating_tuples, check.n_violating_records) == (1, 3, 0, 0)
    assert check.raise_if_failed() is check


def test_violating_release_is_caught():
    check = verify_k_anonymity(_release(), ["a", "b"], k=3)
    assert not check and not check.ok
    assert check.k == 3
    assert check.min_count == 1
    assert check.n_tuples == 3
    assert check.n_violating_tuples == 2
    assert check.n_violating_records == 3
    with pytest.raises(VerificationError) as info:
        check.raise_if_failed()
    message = str(info.value)
    assert "\n" not in message
    assert "k = 3" in message and "2 of 3" in message
    for value in ("10.0", "20.0", "30.0"):  # counts only, never values
        assert value not in message


def test_tuple_is_the_combination_of_columns():
    # each column alone has every value twice, the pairs are all distinct
    df = pd.DataFrame({"a": [1, 1, 2, 2], "b": [5, 6, 5, 6]})
    assert verify_k_anonymity(df, ["a"], 2)
    assert verify_k_anonymity(df, ["b"], 2)
    check = verify_k_anonymity(df, ["a", "b"], 2)
    assert not check and check.n_violating_records == 4


def test_missing_values_form_their_own_tuple():
    df = pd.DataFrame({"a": [1.0, 1.0, np.nan]})
    check = verify_k_anonymity(df, ["a"], 2)
    assert not check and check.n_tuples == 2 and check.min_count == 1


def test_empty_release_and_to_dict():
    check = verify_k_anonymity(pd.DataFrame({"a": []}), ["a"], 2)
    assert check.ok and check.min_count == 0 and check.n_tuples == 0
    assert check.to_dict() == {
        "ok": True, "k": 2, "min_count": 0, "n_tuples": 0, "n_violating_tuples": 0, "n_violating_records": 0,
    }  # fmt: skip


def test_bad_arguments():
    with pytest.raises(ParameterError, match="'zz'|zz"):
        verify_k_anonymity(_release(), ["a", "zz"], 2)
    with pytest.raises(ParameterError, match="k"):
        verify_k_anonymity(_release(), ["a"], 0)
    with pytest.raises(ParameterError):
        verify_k_anonymity(_release(), [], 2)


def test_verify_rows():
    assert verify_rows(6, _release())
    assert verify_rows(6, 6).ok
    check = verify_rows(7, _release())
    assert not check and (check.rows_in, check.rows_out) == (7, 6)
    with pytest.raises(VerificationError, match="7 records in, 6 records out"):
        check.raise_if_failed()


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(1, 6), min_size=1, max_size=8), k=st.integers(1, 6))
def test_counts_match_a_direct_count(counts, k):
    values = np.repeat(np.arange(len(counts), dtype=float), counts)
    df = pd.DataFrame({"a": values, "b": -values})
    check = verify_k_anonymity(df.sample(frac=1, random_state=0), ["a", "b"], k)
    counts = np.array(counts)
    assert isinstance(check, KAnonymityCheck)
    assert check.ok == bool((counts >= k).all())
    assert check.min_count == counts.min()
    assert check.n_tuples == len(counts)
    assert check.n_violating_tuples == int((counts < k).sum())
    assert check.n_violating_records == int(counts[counts < k].sum())


def test_distributed_tuple_counts_agree_with_the_direct_check():
    from daskmicro.privacy.verify import check_tuple_counts, merge_tuple_counts, tuple_counts

    rng = np.random.default_rng(0)
    C = rng.normal(size=(300, 3))
    release = pd.DataFrame(C[rng.integers(0, 300, 2000)], columns=["a", "b", "c"])
    parts = [tuple_counts(release.iloc[i::3], ["a", "b", "c"]) for i in range(3)]
    merged = merge_tuple_counts(merge_tuple_counts(parts[0], parts[1]), parts[2])
    for k in (1, 3, 8):
        assert check_tuple_counts(merged, k) == verify_k_anonymity(release, ["a", "b", "c"], k)


def test_distributed_tuple_counts_never_merge_different_tuples_with_equal_hashes():
    from daskmicro.privacy.verify import TupleCounts, check_tuple_counts, merge_tuple_counts

    a = TupleCounts(np.array([7], np.uint64), np.array([5]), np.array([[1.0, 2.0]]))
    b = TupleCounts(np.array([7], np.uint64), np.array([5]), np.array([[1.0, 2.5]]))  # forced collision
    with pytest.raises(VerificationError, match="share a 64-bit hash"):
        check_tuple_counts(merge_tuple_counts(a, b), 10)
    same = TupleCounts(np.array([7], np.uint64), np.array([5]), np.array([[1.0, 2.0]]))
    assert check_tuple_counts(merge_tuple_counts(a, same), 10).ok


@pytest.mark.parametrize("k", [2, 3, 5])
def test_checking_in_hash_buckets_gives_the_verdict_of_one_merge(k):
    """The distributed check merges tuple counts per range of the tuple hash: its
    verdict and size histogram must be those of one merge of all counts, failures included."""
    from daskmicro.privacy.verify import (bucket_verdict, check_tuple_counts, combine_verdicts,
                                          merge_tuple_counts, split_tuple_counts, tuple_counts)

    rng = np.random.default_rng(k)
    sizes = rng.integers(1, 2 * k + 2, size=400)            # some tuples under k
    df = pd.DataFrame({"a": np.repeat(np.arange(400.0), sizes), "b": np.repeat(rng.normal(size=400), sizes)})
    df = df.sample(frac=1.0, random_state=k).reset_index(drop=True)
    chunks = [tuple_counts(df.iloc[i:i + 300], ["a", "b"]) for i in range(0, len(df), 300)]
    whole = merge_tuple_counts(*chunks)
    expected = check_tuple_counts(whole, k)
    buckets = [split_tuple_counts(c, 5) for c in chunks]
    assert sum(b[i].hashes.size for b in buckets for i in range(5)) == sum(c.hashes.size for c in chunks)
    verdicts = [bucket_verdict(merge_tuple_counts(*[b[i] for b in buckets]), k) for i in range(5)]
    check, (uniq, number) = combine_verdicts(k, *verdicts)
    assert check == expected and not check.ok and check.n_violating_records == int(sizes[sizes < k].sum())
    want_sizes, want_number = np.unique(sizes, return_counts=True)
    assert uniq.tolist() == want_sizes.tolist() and number.tolist() == want_number.tolist()
    # and a passing release passes
    ok_df = pd.DataFrame({"a": np.repeat(np.arange(50.0), k), "b": 1.0})
    parts = [split_tuple_counts(tuple_counts(ok_df, ["a", "b"]), 4)]
    ok, _ = combine_verdicts(k, *[bucket_verdict(p, k) for p in parts[0]])
    assert ok.ok and ok.min_count == k and ok.n_tuples == 50


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n_files=st.integers(1, 4), n_buckets=st.integers(1, 6), k=st.integers(2, 6),
       dtype=st.sampled_from(["float64", "float32", "int64", "uint8"]), hive=st.booleans(),
       threads=st.integers(1, 9), min_rows=st.integers(1, 40))
def test_written_files_checked_through_disk_buckets_give_the_direct_verdict(tmp_path_factory, seed, n_files,
                                                                             n_buckets, k, dtype, hive, threads,
                                                                             min_rows):
    """The directory release is verified file by file — or, with fewer files than worker threads,
    in row ranges of a file (graph/release ``check_ranges``) —, its counts cut into hash buckets on
    disk (io/shuffle ``scatter_counts``) and each bucket merged from its fragments
    (``bucket_verdict_of``): the verdict and tuple sizes are those of the whole release read back
    and counted at once, failures included, for any number of files, ranges and buckets, in the
    written dtype."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from daskmicro.graph import release
    from daskmicro.io import shuffle as sh
    from daskmicro.privacy.verify import combine_verdicts, tuple_counts

    rng = np.random.default_rng(seed)
    tmp = tmp_path_factory.mktemp("counts")
    sizes = rng.integers(1, 2 * k + 1, size=int(rng.integers(5, 60)))          # some groups under k
    tuples = rng.integers(0, 250, size=(sizes.size, 2)).astype(dtype)
    df = pd.DataFrame(np.repeat(tuples, sizes, axis=0), columns=["a", "b"])
    df["s"] = rng.choice(["x", "y"], size=len(df)) if hive else "x"
    df = df.sample(frac=1.0, random_state=seed % 1000).reset_index(drop=True)
    schema = pa.schema([pa.field("a", pa.from_numpy_dtype(np.dtype(dtype))),
                        pa.field("b", pa.from_numpy_dtype(np.dtype(dtype)))])
    (tmp / "_counts").mkdir()
    files = []
    for j, piece in enumerate(np.array_split(np.arange(len(df)), n_files)):
        part = df.iloc[piece]
        for value, sub in part.groupby("s"):
            path = tmp / f"f{j}-{value}.parquet"
            pq.write_table(pa.Table.from_pandas(sub[["a", "b"]], schema=schema, preserve_index=False), path)
            files.append((path, {"s": value}))
    rows = [pq.ParquetFile(p).metadata.num_rows for p, _ in files]
    smallest, release.MIN_CHECK_ROWS = release.MIN_CHECK_ROWS, min_rows
    try:
        ranges = release.check_ranges(rows, threads)
    finally:
        release.MIN_CHECK_ROWS = smallest
    covered = [np.zeros(r, dtype=int) for r in rows]   # every row of every file in exactly one range
    for f, (a, b) in ranges:
        covered[f][a:b] += 1
        assert b - a >= min(min_rows, rows[f]) or (a, b) == (0, rows[f])
    assert all((c == 1).all() for c in covered)
    assert len(ranges) <= max(len(rows), threads)
    assert len(ranges) > len(rows) or threads // len(rows) < 2 or all(r < 2 * min_rows for r in rows)
    target = sh.CountsTarget(tmp / "_counts", n_buckets)
    got = [sh.scatter_counts(str(files[f][0]), schema, ["s", "a", "b"], files[f][1], target, j, rng_)
           for j, (f, rng_) in enumerate(ranges)]
    assert sum(g[0] for g in got) == len(df) and all(g[1] for g in got)
    by_bucket: dict = {}
    for j, (_, _, written, *_) in enumerate(got):
        for b in written:
            by_bucket.setdefault(b, []).append(j)
    assert set(by_bucket) <= set(range(n_buckets))
    check, (uniq, number) = combine_verdicts(k, *[sh.bucket_verdict_of(tmp / "_counts", b, js, k)
                                                  for b, js in by_bucket.items()])
    read = pd.concat([pd.read_parquet(p).assign(s=c["s"]) for p, c in files], ignore_index=True)
    assert check == verify_k_anonymity(read, ["s", "a", "b"], k)
    whole = tuple_counts(read.astype({"s": object}), ["s", "a", "b"])
    want, want_n = np.unique(whole.counts, return_counts=True)
    assert uniq.tolist() == want.tolist() and number.tolist() == want_n.tolist()
    sh.remove_counts(tmp)
    assert not (tmp / "_counts").exists()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 3000), block=st.integers(1, 700))
def test_expected_checksum_block_by_block_is_the_checksum_of_every_row_id(n, block):
    """The row check's expected value is computed in blocks (io/commit ``range_checksum``) so that
    the client never holds n row ids; it must be the checksum of 0 … n − 1 for any n and block."""
    from daskmicro.io import commit as cm

    assert cm.range_checksum(n, block) == cm.row_checksum(np.arange(n, dtype=np.int64))
    if n:   # and it tells a release missing a row, or holding one twice, from the right one
        assert cm.range_checksum(n, block) != cm.row_checksum(np.arange(n - 1, dtype=np.int64))
        assert cm.range_checksum(n, block) != cm.row_checksum(np.r_[np.arange(n, dtype=np.int64), 0])


_SPECIAL = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 5e-324, -5e-324, 1.0, 1.0 + 2 ** -52, 2.0 ** 53, 1e308]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["float16", "float32", "float64"]),
       values=st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from(_SPECIAL)),
                       min_size=0, max_size=40),
       payload=st.integers(1, 2 ** 20))
def test_float_hashes_are_pandas_hashes_bit_for_bit(dtype, values, payload):
    """The verifier hashes float columns itself (no pandas temporaries): same uint64 as pandas'
    hash_array for every float dtype, NaNs of any sign or payload and ±0.0 included."""
    from daskmicro.privacy.verify import column_hashes, hash_floats

    with np.errstate(over="ignore", invalid="ignore"):
        a = np.array(values, dtype=np.float64).astype(dtype)
    if dtype == "float64" and a.size:  # a NaN with another payload: still the one missing value
        bits = a.view(np.uint64).copy()
        bits[0] = np.uint64(0x7FF0000000000000) | np.uint64(payload)
        a = bits.view(np.float64)
    expected = pd.util.hash_pandas_object(pd.Series(a), index=False, categorize=False).to_numpy()
    assert np.array_equal(hash_floats(a), expected)
    frame = pd.DataFrame({"x": a, "s": ["u"] * a.size})
    assert np.array_equal(column_hashes(frame, ["x", "s"]), column_hashes({"x": a, "s": frame["s"]}, ["x", "s"], a.size))


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(1, 5), min_size=1, max_size=12), width=st.integers(1, 4), seed=st.integers(0, 99))
def test_grouping_counts_tuples_and_flags_every_forced_collision(counts, width, seed):
    """Rows grouped by their 64-bit hash: counts and representatives as np.unique gives them, and a
    collision flagged whenever two different tuples share a hash, wherever they sit in the rows."""
    from daskmicro.privacy.verify import _group

    rng = np.random.default_rng(seed)
    tuples = np.repeat(rng.integers(0, 2 ** 63, size=(len(counts), width), dtype=np.uint64), counts, axis=0)
    perm = rng.permutation(tuples.shape[0])
    tuples = tuples[perm]
    hashes = tuples[:, 0] * np.uint64(3)
    g = _group(hashes, np.ones(len(tuples), np.int64), tuples, False)
    uniq, first, inv = np.unique(hashes, return_index=True, return_inverse=True)
    assert not g.collision
    assert np.array_equal(g.hashes, uniq) and np.array_equal(g.tuples, tuples[first])
    assert np.array_equal(g.counts, np.bincount(inv))
    if len(counts) > 1:  # two different tuples under one hash: flagged, never merged silently
        forced = hashes.copy()
        forced[hashes == hashes[perm.size - 1]] = hashes[0]
        assert _group(forced, np.ones(len(tuples), np.int64), tuples, False).collision == bool(
            (tuples[hashes == hashes[perm.size - 1]] != tuples[0]).any())


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(1, 5), min_size=1, max_size=12), seed=st.integers(0, 99),
       dtype=st.sampled_from(["float64", "float32", "int64", "string"]))
def test_tuple_counts_are_a_groupby_of_the_published_values(counts, seed, dtype):
    """Counts, tuples and representatives of one partition: a groupby of the values as published,
    in their dtype; with every row's 64-bit hash forced equal, any two different tuples are flagged."""
    from daskmicro.privacy import verify as V

    rng = np.random.default_rng(seed)
    base = rng.integers(-50, 50, size=(len(counts), 2))
    rows = np.repeat(base, counts, axis=0)[rng.permutation(sum(counts))]
    frame = pd.DataFrame({"a": rows[:, 0], "b": rows[:, 1]}).astype(dtype)
    got = V.tuple_counts(frame, ["a", "b"])
    expected = frame.groupby(["a", "b"]).size()
    assert sorted(got.counts.tolist()) == sorted(expected.tolist()) and not got.collision
    assert np.array_equal(np.sort(got.hashes), got.hashes) and got.tuples.shape == (len(expected), 2)
    flat = V._combine
    try:
        V._combine = lambda H: np.zeros(H.shape[1], dtype=np.uint64)  # every row under one hash
        forced = V.tuple_counts(frame, ["a", "b"])
    finally:
        V._combine = flat
    assert forced.collision == (len(expected) > 1)


_DTYPES = ["float16", "float32", "float64", "int8", "int64", "uint32", "Int64", "Float64", "bool", "object"]


def _frame_of(rng, n, dtype, width):
    """``n`` rows of ``width`` columns of few distinct values (tuples repeat) in ``dtype``."""
    out = {}
    for j in range(width):
        v = rng.integers(-3, 4, n)
        if dtype == "bool":
            col = pd.Series(v > 0)
        elif dtype == "object":
            col = pd.Series([f"v{x}" for x in v], dtype=object)
        elif dtype in ("Int64", "Float64"):
            col = pd.Series(v, dtype=dtype).mask(v == 0)   # with missing values
        else:
            col = pd.Series((v * 1.5 if dtype.startswith("float") else np.abs(v) if dtype.startswith("u") else v)
                            ).astype(dtype)
        out[f"c{j}"] = col
    return pd.DataFrame(out)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(1, 400), width=st.integers(1, 4), dtype=st.sampled_from(_DTYPES),
       cuts=st.lists(st.integers(0, 400), max_size=4))
def test_tuple_fingerprint_is_that_of_the_counts_for_any_order_and_cut(seed, n, width, dtype, cuts):
    """The fingerprint of a release's tuples (what a release counted before it is written is checked
    against as read back) is the same whatever the order of the rows and however they are cut into
    parts, equals the fingerprint of their merged tuple counts, and changes when one value changes."""
    from daskmicro.privacy.verify import (add_fingerprints, counts_fingerprint, merge_tuple_counts, tuple_counts,
                                          tuple_fingerprint)

    rng = np.random.default_rng(seed)
    df = _frame_of(rng, n, dtype, width)
    cols = list(df.columns)
    whole = tuple_fingerprint(df, cols)
    edges = sorted({0, n, *[c % (n + 1) for c in cuts]})
    parts = [df.iloc[a:b] for a, b in zip(edges[:-1], edges[1:])]
    assert add_fingerprints(*[tuple_fingerprint(p, cols) for p in parts]) == whole
    assert counts_fingerprint(merge_tuple_counts(*[tuple_counts(p, cols) for p in parts])) == whole
    shuffled = df.iloc[rng.permutation(n)].reset_index(drop=True)
    assert tuple_fingerprint(shuffled, cols) == whole
    changed = df.copy()
    r, c = int(rng.integers(n)), cols[int(rng.integers(width))]
    old = changed[c].iloc[r]
    if dtype == "bool":
        new = not old
    elif dtype == "object":
        new = old + "x"
    elif pd.isna(old):
        new = 7
    elif dtype.startswith("float"):
        new = np.nextafter(np.dtype(dtype).type(old), np.dtype(dtype).type(np.inf))
    else:
        new = old + 1
    changed[c] = changed[c].astype(object).where(np.arange(n) != r, new).astype(df[c].dtype)
    assert pd.isna(old) or changed[c].iloc[r] != old
    assert tuple_fingerprint(changed, cols) != whole
    assert tuple_fingerprint(df.iloc[1:], cols) != whole or n == 0


@pytest.mark.parametrize("dtype, text", [(object, "None"), (object, "nan"), (object, "<NA>"), ("string", "<NA>"),
                                         ("str", "nan"), ("str", "None"), ("category", "nan")])
def test_a_missing_text_value_is_not_the_text_of_its_name(dtype, text):
    """A missing stratum value (null in the file) is another published value than the text "None",
    "nan" or "<NA>" — which pandas hashes alike for some dtypes (an object column's None as "None",
    NaN as "nan"; a string column's NA as "<NA>"; the default str column's NaN as "nan") — so one
    record with a missing stratum beside k − 1 records of that text is a group of one."""
    df = pd.DataFrame({"s": pd.Series([text, text, None], dtype=dtype), "q": [1.0, 1.0, 1.0]})
    check = verify_k_anonymity(df, ["q"], 3, strata=["s"])
    assert not check and check.n_tuples == 2 and check.min_count == 1


def test_a_written_null_is_not_the_text_nan(tmp_path):
    """The same as the files are checked (read back: a string column as pandas' str, null as NaN)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from daskmicro.io.commit import verify_file
    from daskmicro.privacy.verify import check_tuple_counts

    table = pa.table({"s": pa.array(["nan", "nan", None]), "q": pa.array([1.0, 1.0, 1.0])})
    pq.write_table(table, tmp_path / "f.parquet")
    _, same, counts = verify_file(str(tmp_path / "f.parquet"), table.schema, ["s", "q"])
    check = check_tuple_counts(counts, 3)
    assert same and not check and check.n_tuples == 2 and check.min_count == 1


_NUMPY_DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "bool"]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(0, 300), width=st.integers(1, 4),
       dtypes=st.lists(st.sampled_from(_NUMPY_DTYPES), min_size=4, max_size=4), distinct=st.integers(1, 40))
def test_compiled_counts_are_pandas_hashes_grouped_as_np_unique_groups_them(seed, n, width, dtypes, distinct):
    """The compiled column hashes are pandas' hash_array of every NumPy number dtype (extremes, NaNs
    and ±0.0 included), and the compiled grouping gives the tuple counts np.unique gives: the same
    hashes, counts and representatives (each hash's first row)."""
    from daskmicro.privacy.verify import _combine, column_hashes, tuple_counts

    rng = np.random.default_rng(seed)
    cols = {}
    for j, dtype in enumerate(dtypes[:width]):
        dt = np.dtype(dtype)
        if dt.kind == "f":
            pool = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.5, np.finfo(dt).max, np.finfo(dt).tiny],
                            dtype=dt)
            pool = np.concatenate([pool, rng.normal(size=distinct).astype(dt)])
        elif dt.kind == "b":
            pool = np.array([False, True])
        else:
            info = np.iinfo(dt)
            pool = np.concatenate([np.array([info.min, info.max, 0], dtype=dt),
                                   rng.integers(info.min, info.max, size=distinct, dtype=dt, endpoint=True)])
        cols[f"c{j}"] = pool[rng.integers(0, pool.size, n)]
    frame = pd.DataFrame(cols)
    names = list(frame.columns)
    H = column_hashes(frame, names)
    for j, c in enumerate(names):
        expected = pd.util.hash_pandas_object(frame[c], index=False, categorize=False).to_numpy()
        assert np.array_equal(H[j], expected), c
    got = tuple_counts(frame, names)
    hashes = _combine(H)
    folded = np.full(n, 0x9E3779B97F4A7C15, dtype=np.uint64)   # the row hash, folded column by column in NumPy
    with np.errstate(over="ignore"):
        for column in H:
            folded = (folded ^ column) * np.uint64(0xBF58476D1CE4E5B9)
            folded ^= folded >> np.uint64(31)
    assert np.array_equal(hashes, folded)
    uniq, first, inverse, counts = np.unique(hashes, return_index=True, return_inverse=True, return_counts=True)
    assert np.array_equal(got.hashes, uniq) and np.array_equal(got.counts, counts)
    assert np.array_equal(got.tuples.reshape(-1, width), H[:, first].T.reshape(-1, width))
    assert not got.collision and np.array_equal(H[:, first[inverse]], H)   # no two tuples under one hash here
    assert int(got.counts.sum()) == n
    assert got.hashes.size == len(frame.drop_duplicates())


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">i8", ">u4"])
def test_a_column_in_the_other_byte_order_hashes_as_its_values(dtype):
    """A column stored big-endian hashes as the same values stored natively: its NaNs of any payload
    are one missing value, −0.0 is 0.0, and so the counts are the same."""
    from daskmicro.privacy.verify import column_hashes, tuple_counts

    values = [0.0, -0.0, np.nan, 1.5, 1.5, np.nan] if dtype[1] == "f" else [0, 0, 7, 7, 7, 1]
    native = np.array(values, dtype=dtype[1:])
    swapped = native.astype(dtype)
    if dtype[1] == "f":   # another NaN payload in the swapped copy
        bits = swapped.view(">u8" if dtype == ">f8" else ">u4").copy()
        bits[5] |= 1
        swapped = bits.view(dtype)
        assert np.isnan(swapped[5])
    assert np.array_equal(column_hashes({"x": swapped}, ["x"], 6), column_hashes({"x": native}, ["x"], 6))
    expected = [2, 2, 2] if dtype[1] == "f" else [1, 2, 3]
    assert sorted(tuple_counts({"x": swapped}, ["x"], 6).counts.tolist()) == expected
