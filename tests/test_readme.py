"""The README says what the tool does, to the letter: one Methods table listing every method and
every command, the files a run writes, and the defaults as they are."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def _tables(text: str) -> list[list[str]]:
    """The tables of ``text``: runs of consecutive lines starting with '|'."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def test_one_methods_table_with_every_method_and_command():
    from daskmicro.cli import build_parser
    from daskmicro.config import METHODS

    tables = _tables(_section("Methods"))
    assert len(tables) == 1, "the Methods table is split (or there is more than one)"
    first_cells = [row.split("|")[1] for row in tables[0][2:]]
    text = " ".join(first_cells)
    for method in list(METHODS) + ["incremental"]:
        assert f"`{method}`" in text, method
    commands = {name for action in build_parser()._actions if hasattr(action, "choices") and action.choices
                for name in action.choices}
    assert {"anonymize", "sweep", "report", "run", "warmup"} <= commands
    for command in commands:
        assert re.search(rf"`daskmicro {command}`|`{command}`", text), command


def test_the_defaults_as_they_are():
    methods = _section("Methods")
    assert "default ν = 1" in methods and "exact MDAV inside every macrocell" in methods
    assert "MDAV everywhere" in methods


def test_every_file_a_run_writes_is_listed():
    files = _section("Files a run writes")
    assert len(_tables(files)) == 1
    for name in ("OUT.report.json", "OUT.report.dask.html", "_report.json", "_dask-report.html", "_SUCCESS",
                 "part-NNNNN.parquet", "report.html", "dask-report.html", "sweep.html", "sweep.csv", "sweep.png",
                 "sweep.json", "input.parquet", "release.parquet", "--dask-report"):
        assert name in files, name
    # the Dask performance report is opt-in everywhere the README mentions it
    assert "unless `--no-dask-report`" not in README and "not `--no-dask-report`" not in README
