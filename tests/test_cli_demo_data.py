"""``daskmicro demo-data DIR/ --files N``: a directory of Parquet files."""

from __future__ import annotations

import pandas as pd
import pytest

from daskmicro.cli import main
from daskmicro.datasets import CENSUS_COLUMNS
from daskmicro.privacy.verify import verify_k_anonymity


def test_directory_of_parts_equals_one_file(tmp_path, capsys):
    one = tmp_path / "x.parquet"
    lake = tmp_path / "lake"
    assert main(["demo-data", str(one), "--n", "1000", "--seed", "7"]) == 0
    assert main(["demo-data", str(lake) + "/", "--n", "1000", "--seed", "7", "--files", "3"]) == 0
    names = sorted(p.name for p in lake.iterdir())
    assert names == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    parts = [pd.read_parquet(lake / name) for name in names]
    assert all(len(p) > 0 for p in parts)
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), pd.read_parquet(one))
    # no staging left beside it; an existing directory is refused in one line, then replaced with --overwrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake", "x.parquet"]
    capsys.readouterr()
    assert main(["demo-data", str(lake), "--n", "500", "--files", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daskmicro: error:") and err.count("\n") == 1
    assert len(list(lake.iterdir())) == 3
    assert main(["demo-data", str(lake), "--n", "500", "--files", "2", "--overwrite"]) == 0
    assert sorted(p.name for p in lake.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake", "x.parquet"]


@pytest.mark.parametrize("extra", ["notes.txt", "sub/data.csv", "_SUCCESS"])
def test_overwrite_replaces_only_a_directory_of_generated_parts(tmp_path, capsys, extra):
    """--overwrite replaces the whole directory: only one holding nothing but part-NNNNN.parquet
    files (what demo-data writes) is replaced; a folder of the user's files (or a release) is
    refused in one line and left as it was."""
    lake = tmp_path / "lake"
    assert main(["demo-data", str(lake) + "/", "--n", "500", "--files", "2"]) == 0
    (lake / extra).parent.mkdir(exist_ok=True)
    (lake / extra).write_text("the user's own file")
    before = {str(p.relative_to(lake)): p.read_bytes() for p in lake.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["demo-data", str(lake), "--n", "500", "--files", "3", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did not write" in err
    assert {str(p.relative_to(lake)): p.read_bytes() for p in lake.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("argv", [["x.parquet", "--files", "2"], ["d/", "--n", "2", "--files", "3"]])
def test_refusals(tmp_path, argv, capsys):
    argv = [str(tmp_path / argv[0]), *argv[1:]]
    assert main(["demo-data", *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_anonymize_reads_the_directory(tmp_path):
    lake = tmp_path / "in"
    out = tmp_path / "out"
    assert main(["demo-data", str(lake) + "/", "--n", "1200", "--seed", "2", "--files", "3"]) == 0
    qi = list(CENSUS_COLUMNS[:4])
    assert main(["anonymize", str(lake) + "/", str(out) + "/", "--qi", ",".join(qi), "--k", "5", "--seed", "1",
                 "--method", "partitioned", "--K", "100", "--partition-size", "400", "--workers", "1",
                 "--keep", ",".join(["record_id", *CENSUS_COLUMNS[4:]])]) == 0   # published as they are
    assert (out / "_SUCCESS").is_file() and (out / "_report.json").is_file()
    release = pd.concat([pd.read_parquet(p) for p in sorted(out.rglob("*.parquet"))], ignore_index=True)
    assert len(release) == 1200 and verify_k_anonymity(release, qi, 5)
