"""No value of the input in any message: errors, notices, logs and reports name columns, files,
parameters, positions and counts only.  Secrets are planted in the places adversaries use — a
malformed CSV row, a stratum label, a QI cell, a participation value, a partition value — and the
CLI (its ``main``, every byte this process writes captured; as a process of its own where the
input is read by workers or the run starts its own cluster) and the API are run on them; neither the secret
nor any run of four of its digits may appear.  ``--quiet`` prints the one error line and nothing
else, not even Dask's log of a failed task on a real LocalCluster."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import daskmicro
from daskmicro.errors import ParameterError, describe, masked_path

TOKEN = "SECRET-TOKEN-xyz"
NAME = "carol o-neil"
NUMBER = 987654.321


def _digit_runs(secret) -> list:
    digits = "".join(ch for ch in str(secret) if ch.isdigit())
    return [digits[i:i + 4] for i in range(len(digits) - 3)]


def assert_clean(text: str, secrets) -> None:
    for secret in secrets:
        assert str(secret) not in text, (secret, text[-2000:])
        for run in _digit_runs(secret) if not isinstance(secret, str) or secret[:1].isdigit() or secret[:1] == "-" else []:
            assert run not in text, (secret, run, text[-2000:])


def cli_process(*args, timeout=300):
    """The command as a user runs it: a process of its own, everything it prints captured."""
    return subprocess.run([sys.executable, "-m", "daskmicro", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)



def assert_one_line_refusal(done, secrets, names=()) -> str:
    assert done.returncode != 0, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("daskmicro: error: "), done.stderr[-3000:]
    assert done.stdout == ""
    assert_clean(done.stderr + done.stdout, secrets)
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


# --------------------------------------------------------------------------- the sanitizer itself


@pytest.mark.parametrize("exc", [
    ValueError(f"CSV parse error: Row #3: Expected 3 columns, got 4: {NAME},{NUMBER},{TOKEN}"),
    ValueError(f"In CSV column #1: Row #3: CSV conversion error to int64: invalid value '{TOKEN}'"),
    ValueError(f"could not convert string to float: '{TOKEN}'"),
    ValueError(f"could not convert string to float: {TOKEN}"),
    ValueError(f"Unknown datetime string format, unable to parse: {NAME}, at position 0"),
    ValueError(TOKEN),
    ValueError(f"{NAME} {TOKEN}"),
    ValueError(f"{NAME},{NUMBER},{TOKEN}"),
    ValueError(f"Integer value {NUMBER} not in range"),
    KeyError(TOKEN),
    OSError(f"Couldn't deserialize thrift: {TOKEN}"),
    OSError(36, "File name too long", f"/data/.out.tmp-1/p={TOKEN}{NUMBER}/part-0.parquet"),
    UnicodeDecodeError("utf-8", TOKEN.encode(), 0, 1, "invalid start byte"),
    TypeError(f"unhashable type: '{TOKEN}'"),
])
def test_describe_never_quotes_the_message(exc):
    text = describe(exc)
    assert "\n" not in text and text.startswith(type(exc).__name__)
    assert_clean(text, [TOKEN, NAME, NUMBER])


def test_describe_keeps_positions_and_counts():
    assert describe(ValueError(f"CSV parse error: Row #3: Expected 3 columns, got 4: {TOKEN}")) == \
        "ValueError: row 3: expected 3 columns, got 4"
    assert "line 7" in describe(ValueError("Error tokenizing data. C error: Expected 2 fields in line 7, saw 3"))
    assert masked_path(f"/lake/region={TOKEN}/year=2020/f.parquet") == "/lake/region=…/year=…/f.parquet"


# --------------------------------------------------------------------------- malformed CSV rows


HEADER = b"name,age,income\n"
GOOD = b"alice,30,1000\nbob,40,2000\ndave,60,4000\neve,70,5000\n"
CSV_CASES = {
    "extra-field": GOOD + f"{NAME},50,3000,{TOKEN}\n".encode(),
    "missing-field": GOOD + f"{NAME},{TOKEN}\n".encode(),
    "bad-quoting": GOOD + f'{NAME},50,"{TOKEN}\n7,8,9\n'.encode(),
    "non-utf8": GOOD + NAME.encode() + b",\xff\xfe" + TOKEN.encode() + b",3000\n",
    "bad-number": GOOD + f"{NAME},{TOKEN},3000\n".encode(),
    "number-in-text": GOOD + f"{NAME},50,{NUMBER}x\n".encode(),
}


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_malformed_csv_row_is_never_echoed(cli, tmp_path, case):
    src = tmp_path / "in.csv"
    src.write_bytes(HEADER + CSV_CASES[case])
    done = cli("anonymize", src, tmp_path / "out.parquet", "--qi", "age,income", "--k", "2", "--quiet")
    line = assert_one_line_refusal(done, [TOKEN, NAME, NUMBER, "o-neil", "xyz"])
    assert "in.csv" in line or "'age'" in line or "'income'" in line, line
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("case", ["extra-field", "missing-field"])
def test_malformed_csv_row_far_into_the_file(tmp_path, case):
    """A malformed row beyond the first block Arrow infers types from is met when the rows are read."""
    rows = "".join(f"r{i},{20 + i % 50},{1000 + i}\n" for i in range(60_000)).encode()
    src = tmp_path / "in.csv"
    src.write_bytes(HEADER + rows + CSV_CASES[case][len(GOOD):])
    done = cli_process("anonymize", src, tmp_path / "out.parquet", "--qi", "age,income", "--k", "3", "--quiet",
               "--method", "mdav", "--reference", "none")
    line = assert_one_line_refusal(done, [TOKEN, NAME, "o-neil"])
    assert "in.csv" in line


def test_api_malformed_csv_row(tmp_path):
    src = tmp_path / "in.csv"
    src.write_bytes(HEADER + CSV_CASES["extra-field"])
    with pytest.raises(ValueError) as info:
        daskmicro.anonymize(str(src), qi=["age", "income"], k=2)
    assert_clean(str(info.value) + repr(info.value), [TOKEN, NAME, NUMBER, "o-neil"])


# --------------------------------------------------------------------------- stratum labels


STRATA = {
    "text": ["alice", "bob"],
    "token": [TOKEN, "bob"],
    "float": [-4.820175842608121, 1.5],
    "integer": [48213579, 7],
    "date": ["2031-07-19", "2019-01-01"],
}


def _strata_frame(kind):
    small, big = STRATA[kind]
    df = pd.DataFrame({"x": np.arange(9.0), "y": np.arange(9.0) % 4, "s": [small] + [big] * 8})
    if kind == "date":
        df["s"] = pd.to_datetime(df["s"])
    return df


@pytest.mark.parametrize("kind", sorted(STRATA))
def test_small_stratum_is_named_without_its_value(cli, tmp_path, kind):
    df = _strata_frame(kind)
    df.to_parquet(tmp_path / "in.parquet")
    secret = STRATA[kind][0]
    done = cli("anonymize", tmp_path / "in.parquet", tmp_path / "out.parquet", "--qi", "x,y", "--k", "3",
               "--strata", "s", "--quiet")
    line = assert_one_line_refusal(done, [secret], names=["column s", "fewer than k = 3"])
    assert "1 record(s)" in line
    with pytest.raises(ParameterError) as info:
        daskmicro.anonymize(df, qi=["x", "y"], k=3, strata=["s"])
    assert_clean(str(info.value), [secret])


def test_merged_strata_report_names_no_value(cli, tmp_path):
    df = _strata_frame("token")
    df.to_parquet(tmp_path / "in.parquet")
    done = cli("anonymize", tmp_path / "in.parquet", tmp_path / "out.parquet", "--qi", "x,y", "--k", "3",
               "--strata", "s", "--merge-small-strata", "--report", tmp_path / "run.json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert_clean(done.stdout + done.stderr, [TOKEN])
    report = (tmp_path / "run.json").read_text()
    assert_clean(report, [TOKEN, "bob"])
    groups = json.loads(report)["strata"]["groups"]
    assert [g["group"] for g in groups] == ["strata 1+2 of 2 (column s)"]
    html = tmp_path / "run.html"
    done = cli("report", tmp_path / "run.json", "--output", html)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_clean(html.read_text() + done.stdout + done.stderr, [TOKEN])


# --------------------------------------------------------------------------- QI cells


QI_CASES = {
    "inf": lambda df: df.assign(x=df.x.where(df.index != 3, np.inf)),
    "nan": lambda df: df.assign(x=df.x.where(df.index != 3, np.nan)),
    "huge": lambda df: df.assign(x=df.x.where(df.index != 3, 9.87654321e300)),
    "big-int": lambda df: df.assign(x=np.where(df.index == 3, 9876543210987654321, 1).astype("uint64")),
    "mixed": lambda df: df.assign(x=df.x.astype(object).where(df.index != 3, TOKEN)),
}


@pytest.mark.parametrize("case", sorted(QI_CASES))
def test_bad_qi_cell_is_counted_not_quoted(cli, tmp_path, case):
    df = pd.DataFrame({"x": np.arange(12.0) + NUMBER, "y": np.arange(12.0) % 5, "who": [TOKEN] * 12})
    df = QI_CASES[case](df)
    src = tmp_path / "in.csv"
    df.to_csv(src, index=False)
    done = cli("anonymize", src, tmp_path / "out.parquet", "--qi", "x,y", "--k", "3", "--quiet")
    secrets = [TOKEN, NUMBER, "9.87654321e300", "9876543210987654321"]
    assert_one_line_refusal(done, secrets, names=["'x'"])
    with pytest.raises(ValueError) as info:
        daskmicro.anonymize(df, qi=["x", "y"], k=3)
    assert_clean(str(info.value), secrets)


# --------------------------------------------------------------------------- identifiers published as they are


@pytest.mark.parametrize("column", ["code", "user_name"])
def test_identifier_refusal_names_the_column_only(cli, tmp_path, column):
    """A column of secrets distinct for every record ("code": refused by its values; "user_name" by
    its name) is refused in one line that names it, never one of its values."""
    values = [f"{TOKEN}{i:03d}" if i % 2 else str(int(NUMBER * 1000) + i) for i in range(12)]
    df = pd.DataFrame({"x": np.arange(12.0), "y": np.arange(12.0) % 5, column: values})
    src = tmp_path / "in.csv"
    df.to_csv(src, index=False)
    done = cli("anonymize", src, tmp_path / "out.parquet", "--qi", "x,y", "--k", "3", "--quiet")
    secrets = [TOKEN, NUMBER, *values]
    assert_one_line_refusal(done, secrets, names=[f"'{column}'", f"--drop {column}", f"--keep {column}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    with pytest.raises(ValueError) as info:
        daskmicro.anonymize(df, qi=["x", "y"], k=3)
    assert_clean(str(info.value), secrets)


# --------------------------------------------------------------------------- participation and partitions


def test_participation_out_of_range_is_counted(cli, tmp_path):
    df = pd.DataFrame({"x": np.arange(12.0), "y": np.arange(12.0) % 5, "p": [0.5] * 11 + [NUMBER]})
    df.to_csv(tmp_path / "in.csv", index=False)
    done = cli("anonymize", tmp_path / "in.csv", tmp_path / "out.parquet", "--qi", "x,y", "--k", "3",
               "--participation", "p", "--max-cell-failure", "0.1", "--quiet")
    assert_one_line_refusal(done, [NUMBER], names=["'p'"])


def test_partition_value_is_not_echoed(cli, tmp_path):
    value = (TOKEN + str(NUMBER)) * 12  # a directory name too long for the file system
    df = pd.DataFrame({"x": np.arange(12.0), "y": np.arange(12.0) % 5, "p": [value] * 6 + ["ok"] * 6})
    df.to_parquet(tmp_path / "in.parquet")
    done = cli("anonymize", tmp_path / "in.parquet", tmp_path / "out", "--qi", "x,y", "--k", "3",
               "--partition-by", "p", "--quiet")
    assert_one_line_refusal(done, [TOKEN, NUMBER], names=["'p'", "255 bytes"])


def test_hive_partition_value_of_a_bad_lake_file_is_masked(cli, tmp_path):
    lake = tmp_path / "lake"
    for i, region in enumerate([TOKEN, "north"]):
        d = lake / f"region={region}"
        d.mkdir(parents=True)
        pd.DataFrame({"x": np.arange(10.0) + i, "y": np.arange(10.0) % 3}).to_parquet(d / "part.parquet")
    (lake / f"region={TOKEN}" / "part.parquet").write_bytes(b"PAR1 not a parquet file PAR1")
    done = cli("anonymize", lake, tmp_path / "out", "--qi", "x,y", "--k", "3", "--quiet")
    assert_one_line_refusal(done, [TOKEN], names=["part.parquet", "region=…"])


# --------------------------------------------------------------------------- --quiet on a real LocalCluster


def test_quiet_failed_task_on_a_local_cluster_prints_one_line(tmp_path):
    """A task failing on a worker from data (strata of lists cannot be grouped) on the LocalCluster
    the run starts: with --quiet, stderr is the one error line — no 'Compute Failed' block."""
    lake = tmp_path / "lake"
    lake.mkdir()
    for i in range(2):
        pd.DataFrame({"x": np.arange(20.0) + i, "y": np.arange(20.0) % 3,
                      "tags": [[TOKEN, "alice"]] * 20}).to_parquet(lake / f"part{i}.parquet")
    args = ["anonymize", lake, tmp_path / "out", "--qi", "x,y", "--k", "3", "--strata", "tags", "--workers", "1"]
    done = cli_process(*args, "--quiet")
    assert_one_line_refusal(done, [TOKEN, "alice"])
    loud = cli_process(*args)
    assert loud.returncode != 0
    assert_clean(loud.stdout + loud.stderr, [TOKEN, "alice"])


def test_quiet_run_silences_dask_logs_of_a_failed_task(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(
        "import sys, warnings\n"
        "import pandas as pd\n"
        "from daskmicro.runtime.cluster import cluster_client, quiet_run\n"
        "def boom(df):\n"
        "    warnings.warn('a warning on the worker')\n"
        f"    raise OSError('disk full while writing {TOKEN}')\n"
        "if __name__ == '__main__':\n"
        "    with quiet_run():\n"
        "        warnings.warn('a warning here')\n"
        "        with cluster_client(n_workers=1) as c:\n"
        f"            f = c.submit(boom, pd.DataFrame({{'who': ['{TOKEN}']}}))\n"
        "            try:\n"
        "                f.result()\n"
        "            except OSError:\n"
        "                pass\n"
        "    print('daskmicro: error: the one line', file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert done.stderr.splitlines() == ["daskmicro: error: the one line"], done.stderr[-3000:]
    assert done.stdout == ""
