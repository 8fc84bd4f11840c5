"""Reading tables with clear errors, and atomic writes."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from daskmicro.errors import InputError
from daskmicro.io import (
    AtomicBatch,
    read_table,
    table_format,
    write_json_atomic,
    write_parquet_atomic,
    write_table_atomic,
)


@pytest.fixture
def frame():
    return pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "s": ["x", "y", "z"]})


def _one_line_naming(exc_info, path):
    message = str(exc_info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_table_format():
    assert table_format("x.csv") == "csv" and table_format("X.CSV.GZ") == "csv"
    assert table_format("x.parquet") == "parquet" and table_format("dir/x.pq") == "parquet"
    assert table_format("x.xlsx") is None


def test_round_trips(tmp_path, frame):
    write_table_atomic(frame, tmp_path / "t.csv")
    write_parquet_atomic(frame, tmp_path / "t.parquet")
    write_table_atomic(frame, tmp_path / "t.csv.gz")
    pd.testing.assert_frame_equal(read_table(tmp_path / "t.csv"), frame, check_dtype=False)
    pd.testing.assert_frame_equal(read_table(tmp_path / "t.csv.gz"), frame, check_dtype=False)
    back = read_table(tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(back, frame)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.csv.gz", "t.parquet"]  # no temporaries


def test_directory_of_parquet_files(tmp_path, frame):
    (tmp_path / "lake").mkdir()
    frame.iloc[:2].to_parquet(tmp_path / "lake" / "part-0.parquet", index=False)
    frame.iloc[2:].to_parquet(tmp_path / "lake" / "part-1.parquet", index=False)
    back = read_table(tmp_path / "lake").sort_values("a").reset_index(drop=True)
    pd.testing.assert_frame_equal(back, frame, check_dtype=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError) as info:
        read_table(tmp_path / "empty")
    assert "no Parquet files" in _one_line_naming(info, tmp_path / "empty")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.csv"
    with pytest.raises(InputError) as info:
        read_table(path)
    assert "not found" in _one_line_naming(info, path)


def test_unknown_extension(tmp_path):
    path = tmp_path / "data.xlsx"
    path.write_bytes(b"abc")
    with pytest.raises(InputError) as info:
        read_table(path)
    assert "unknown input format" in _one_line_naming(info, path)


def test_garbage_parquet(tmp_path):
    path = tmp_path / "data.parquet"
    path.write_bytes(os.urandom(64) + b"not a parquet file")
    with pytest.raises(InputError) as info:
        read_table(path)
    assert "cannot read" in _one_line_naming(info, path)


@pytest.mark.parametrize("content", [b"", b"a,b\n"])
def test_empty_csv(tmp_path, content):
    path = tmp_path / "empty.csv"
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_table(path)
    message = _one_line_naming(info, path)
    assert "empty" in message or "no rows" in message


def test_empty_parquet(tmp_path, frame):
    path = tmp_path / "empty.parquet"
    frame.iloc[:0].to_parquet(path)
    with pytest.raises(InputError) as info:
        read_table(path)
    assert "no rows" in _one_line_naming(info, path)


def test_json_atomic(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic({"n": np.int64(3), "x": np.float32(0.5), "v": np.arange(2), "ok": np.bool_(True)}, path)
    assert json.loads(path.read_text()) == {"n": 3, "x": 0.5, "v": [0, 1], "ok": True}


def test_failed_write_leaves_nothing(tmp_path, frame):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_json_atomic({"bad": object()}, path)
    with pytest.raises(ValueError):
        write_json_atomic({"nan": float("nan")}, path)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_batch_is_all_or_nothing(tmp_path, frame):
    with pytest.raises(RuntimeError):
        with AtomicBatch() as batch:
            batch.parquet(frame, tmp_path / "release.parquet")
            batch.json({"n": 3}, tmp_path / "report.json")
            raise RuntimeError("failure after staging")
    assert list(tmp_path.iterdir()) == []
    with AtomicBatch() as batch:
        batch.parquet(frame, tmp_path / "release.parquet")
        batch.json({"n": 3}, tmp_path / "report.json")
        assert not (tmp_path / "release.parquet").exists()  # not before the block ends
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release.parquet", "report.json"]


def test_write_table_rejects_unknown_extension(tmp_path, frame):
    with pytest.raises(InputError, match="out.txt"):
        write_table_atomic(frame, tmp_path / "out.txt")
    assert list(tmp_path.iterdir()) == []
