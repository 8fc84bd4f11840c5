"""The documentation runs as written and cites only what is in the repository.

Every fenced code block of the README is executed, in document order, in one empty directory:
```python blocks in one namespace in this process, ```bash / ```sh blocks whose commands start with
``daskmicro`` through ``python -m daskmicro`` (a block may use the files an earlier block made).
Blocks that only show output or other tools are fenced ```text.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "workflows" / "README.md",
        ROOT / "workflows" / "SCHEMA.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```([A-Za-z]*)\n(.*?)^```\s*$", re.S | re.M)


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1).lower(), m.group(2)) for m in FENCE.finditer(text)]


def commands(body: str) -> list[list[str]]:
    """The commands of a shell block: one per line (``\\`` continues a line), comments dropped."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def test_every_readme_block_is_python_shell_or_text():
    kinds = [kind for kind, _ in blocks(README)]
    assert kinds and set(kinds) <= {"python", "bash", "sh", "text"}, kinds
    for kind, body in blocks(README):
        if kind in ("bash", "sh"):
            assert all(words[0] == "daskmicro" for words in commands(body)), body


def test_the_readme_code_runs_as_written(tmp_path, monkeypatch):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("DASKMICRO_DEBUG", None)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    namespace: dict = {"__name__": "__readme__"}
    ran = {"python": 0, "shell": 0}
    for kind, body in blocks(README):
        if kind == "python":
            exec(compile(body, "README.md", "exec"), namespace)
            ran["python"] += 1
        elif kind in ("bash", "sh"):
            for words in commands(body):
                proc = subprocess.run([sys.executable, "-m", "daskmicro", *words[1:]], cwd=work, env=env,
                                      capture_output=True, text=True, timeout=300)
                assert proc.returncode == 0, f"{shlex.join(words)}\n{proc.stdout}\n{proc.stderr}"
                ran["shell"] += 1
    assert ran["python"] >= 2 and ran["shell"] >= 3, ran
    # what the quick starts promise
    assert (work / "release.parquet").is_file() and (work / "release.report.json").is_file()
    assert (work / "release.report.html").is_file()
    assert (work / "release" / "_SUCCESS").is_file()
    records = list((tmp_path / "state" / "daskmicro" / "runs").glob("*.json"))
    assert len(records) >= 2
    assert all(p.stat().st_mode & 0o077 == 0 for p in records)


def test_the_readme_error_example_is_what_the_command_says(tmp_path):
    match = re.search(r"^\$ (daskmicro anonymize .*)\n(daskmicro: error: .*)$", README, re.M)
    assert match, "the README shows no error example"
    from daskmicro.datasets import census_like

    words = shlex.split(match.group(1))
    census_like(50, seed=0).to_parquet(tmp_path / words[2])
    proc = subprocess.run([sys.executable, "-m", "daskmicro", *words[1:]], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "s")},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == match.group(2)
    assert not (tmp_path / words[3]).exists()


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_development_history_and_no_missing_files(path):
    text = path.read_text(encoding="utf-8")
    for pattern in (r"\bstop \d", r"\bissue \d", r"\d{3}_[0-9a-f]{16}", r"seed papers", r"\bthis session\b"):
        assert not re.search(pattern, text, re.I), (pattern, re.search(pattern, text, re.I).group(0))
    # every relative Markdown link leads to a file of the repository, every #anchor to a heading
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{path.name}: link to a missing file {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest.read_text(encoding="utf-8")), f"{path.name}: no heading #{anchor}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes."""
    out = set()
    for heading in re.findall(r"^#+ (.*)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def _resolves(dotted: str) -> bool:
    """``daskmicro.a.b``: the longest importable module prefix, then attributes."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        # a module of this checkout (a file, or a package's __init__.py), looked up on disk: an installed
        # copy of the package elsewhere must not answer for it
        where = ROOT.joinpath(*parts[:i])
        if not (where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()):
            continue
        obj = importlib.import_module(".".join(parts[:i]))
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_paths_cited_exist(path):
    """Every ``daskmicro/....py`` file and every ``daskmicro.module.name`` the page cites exists."""
    text = path.read_text(encoding="utf-8")
    for file in re.findall(r"(?<![\w/])daskmicro/[\w/]+\.py\b", text):
        assert (ROOT / file).is_file(), f"{path.name}: cites a missing file {file}"
    for dotted in set(re.findall(r"(?<![\w./-])daskmicro(?:\.[A-Za-z_]\w*)+", text)):
        assert _resolves(dotted), f"{path.name}: cites {dotted}, which is no module or name of the package"
