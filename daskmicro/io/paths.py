"""Where a run may write: every output path checked against every input and each other, up front.

A run writes several things — the release (a file or a directory), its JSON report, the Dask
performance report — and each is named by the user or derived from another name.  Before any
work starts, :func:`check_outputs` refuses, in one line naming the path:

* an output that is an input, lies inside an input directory, or contains an input (so
  ``OUTPUT = INPUT`` is refused even with ``--overwrite``: the user's data is never replaced);
* two outputs that are the same path, or one inside another (a report inside the release
  directory would be overwritten by the commit, or would overwrite a committed part);
* an output whose directory does not exist (found now, not after the release is committed);
* an existing output without ``overwrite``, or an existing output of the other kind (a
  directory where a file is to be written, or the reverse);
* an output inside a committed directory release or a Delta table (:func:`release_around`): a
  release is replaced whole or left as it is, never added to (its readers would read the new file
  as part of it).

Inputs are compared by identity, not by name: every file and directory a directory input holds
(the files a lake reader opens, through symbolic links) and the input itself are known by their
device and inode, and an output is refused when it, anything inside an existing output, or any
directory above it is one of them — so a link, a hard link or a bind mount of an input is caught
however it is reached.  Paths are also compared after resolving symbolic links.

A spill directory (``spill``) must exist already and lie outside every input and output: the
workers write their scratch files there.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError, ParameterError

__all__ = ["Output", "check_outputs", "check_against_inputs", "check_spill", "check_ledger", "check_private", "inside",
           "refuse_repeated_files", "release_around"]


class Output:
    """One path a run writes: ``what`` names it in messages; ``directory`` when it is a directory."""

    __slots__ = ("path", "what", "directory")

    def __init__(self, path, what: str, directory: bool = False):
        self.path, self.what, self.directory = Path(path), what, bool(directory)


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _same(a: Path, b: Path) -> bool:
    if _resolved(a) == _resolved(b):
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _inside(child: Path, parent: Path) -> bool:
    c, p = _resolved(child), _resolved(parent)
    return c != p and c.is_relative_to(p)


def inside(path, root) -> bool:
    """Whether ``path`` lies inside the directory ``root`` once both are resolved (links followed,
    ``..`` applied): the test a writer makes before it creates or writes a path built from data."""
    c, p = _resolved(Path(path)), _resolved(Path(root))
    return c != p and c.is_relative_to(p)


def _identity(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class _Identities:
    """Device and inode of every input file and of every directory an input is or holds."""

    def __init__(self, inputs):
        self.files: set = set()
        self.dirs: set = set()
        for inp in inputs:
            if inp.is_dir():
                for dirpath, _, filenames in os.walk(inp):
                    self.dirs.add(_identity(dirpath))
                    self.files.update(_identity(os.path.join(dirpath, f)) for f in filenames)
            else:
                self.files.add(_identity(inp))
        self.files.discard(None)
        self.dirs.discard(None)

    def clash(self, path: Path) -> str | None:
        """How ``path`` (an output, existing or not) meets an input, or None."""
        me = _identity(path)
        if me is not None and me in self.files:
            return "is an input file"
        if me is not None and me in self.dirs:
            return "is an input directory"
        for above in _resolved(path).parents:
            if _identity(above) in self.dirs:
                return "lies inside an input directory"
        if me is not None and path.is_dir():
            either = self.files | self.dirs
            for dirpath, dirnames, filenames in os.walk(path):
                for name in dirnames + filenames:
                    if _identity(os.path.join(dirpath, name)) in either:
                        return "would contain an input file"
        return None


def _by_identity(out: Output, ids: _Identities, inputs) -> None:
    why = ids.clash(out.path)
    if why is not None:
        named = ", ".join(str(p) for p in inputs)
        raise ParameterError(f"the {out.what} {why} (of {named}), reached through a link or mount: {out.path} "
                             "(choose another path; the input is never replaced)")


def check_spill(spill, inputs=(), outputs=()) -> None:
    """Refuse a spill directory that does not exist, is not a directory, or lies inside, around
    or at an input or an output (compared by identity as well as by resolved path)."""
    if spill is None:
        return
    p = Path(spill)
    if not p.is_dir():
        raise ParameterError(f"spill directory (--spill-dir) does not exist or is not a directory: {p} "
                             "(create it first)")
    inputs = [Path(i) for i in inputs if i is not None]
    out = Output(p, "spill directory (--spill-dir)", directory=True)
    for inp in inputs:
        if inp.exists():
            _against_input(out, inp)
    _by_identity(out, _Identities([i for i in inputs if i.exists()]), inputs)
    for other in outputs:
        if other is not None:
            _against_output(out, other)


def check_ledger(ledger, inputs=(), outputs=()) -> None:
    """Refuse a release ledger that lies inside, around or at an input or an output: its key and
    fingerprints must never be read as data nor published with a release."""
    if ledger is None or ledger == "off":
        return
    check_private(ledger, "release ledger (--ledger)", inputs, outputs)


def check_private(folder, what: str, inputs=(), outputs=()) -> None:
    """Refuse a private folder (the release ledger, the private run records) that lies inside,
    around or at an input or an output, or inside a committed release: what it holds must never be
    read as data nor published with a release."""
    inputs = [Path(i) for i in inputs if i is not None]
    led = Output(Path(folder).expanduser(), what, directory=True)
    release = release_around(led.path / "_")   # the folder itself, or a directory above it
    if release is not None:
        raise ParameterError(f"the {what} would lie inside the committed release {release}: {led.path} (it would be "
                             "published with it)")
    for inp in inputs:
        if inp.exists():
            _against_input(led, inp)
    if led.path.exists():
        _by_identity(led, _Identities([i for i in inputs if i.exists()]), inputs)
    for other in outputs:
        if other is not None:
            _against_output(led, other)


def _against_input(out: Output, inp: Path) -> None:
    if _same(out.path, inp):
        raise ParameterError(f"the {out.what} is the input itself: {out.path} (choose another path; "
                             "the input is never replaced)")
    if _inside(out.path, inp):
        raise ParameterError(f"the {out.what} lies inside the input directory {inp}: {out.path}")
    if _inside(inp, out.path):
        raise ParameterError(f"the {out.what} would contain the input {inp}: {out.path}")


def _against_output(a: Output, b: Output) -> None:
    if _same(a.path, b.path):
        raise ParameterError(f"the {a.what} and the {b.what} are the same path: {a.path}")
    for inner, outer in ((a, b), (b, a)):
        if _inside(inner.path, outer.path):
            raise ParameterError(f"the {inner.what} lies inside the {outer.what} {outer.path}: {inner.path} "
                                 "(write it elsewhere)")


def release_around(path) -> Path | None:
    """The committed directory release (``_SUCCESS``) or Delta table (``_delta_log/``) that ``path``
    would lie inside, or None."""
    for d in _resolved(Path(path)).parents:
        if (d / "_SUCCESS").is_file() or (d / "_delta_log").is_dir():
            return d
    return None


def _outside_releases(out: Output) -> None:
    release = release_around(out.path)
    if release is not None:
        raise ParameterError(f"the {out.what} would lie inside the committed release {release}: {out.path} (a release "
                             "is never added to; write it elsewhere)")


def _target(out: Output, overwrite: bool, hint: str) -> None:
    p = out.path
    _outside_releases(out)
    if p.exists() or p.is_symlink():
        if not overwrite:
            raise ParameterError(f"{out.what} already exists: {p} ({hint})")
        if out.directory and not p.is_dir():
            raise ParameterError(f"{out.what} exists and is not a directory: {p}")
        if not out.directory and p.is_dir():
            raise ParameterError(f"{out.what} is a directory: {p}")
    parent = _resolved(p).parent
    if not parent.is_dir():
        raise ParameterError(f"directory of the {out.what} does not exist: {p.parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ParameterError(f"directory of the {out.what} is not writable: {p.parent}")


def check_outputs(inputs, outputs, overwrite: bool = False, hint: str = "use --overwrite to replace it",
                  existing_ok=()) -> None:
    """Refuse a run whose outputs clash with its inputs, each other or the file system (module doc).

    Parameters
    ----------
    inputs : iterable of path-like
        Files or directories the run reads (missing ones are skipped: the reader reports them).
    outputs : iterable of :class:`Output`
        Every path the run writes (``None`` entries are skipped).
    overwrite : bool
        Existing outputs may be replaced.
    hint : str
        How to allow replacing, for the message (CLI flag or spec key).
    existing_ok : iterable of path-like
        Outputs whose existence was already judged by the caller (e.g. a committed release the
        run may leave as it is); they are still checked against inputs and other outputs.
    """
    outputs = [o for o in outputs if o is not None]
    inputs = [Path(p) for p in inputs if p is not None]
    ok = {_resolved(Path(p)) for p in existing_ok}
    for out in outputs:
        for inp in inputs:
            if inp.exists():
                _against_input(out, inp)
    ids = _Identities([i for i in inputs if i.exists()])
    for out in outputs:
        _by_identity(out, ids, inputs)
    for i, a in enumerate(outputs):
        for b in outputs[i + 1:]:
            _against_output(a, b)
    for out in outputs:
        _target(out, overwrite or _resolved(out.path) in ok, hint)


def check_against_inputs(inputs, outputs) -> None:
    """Only the input rules of :func:`check_outputs`: no output is an input, inside one or around
    one, or inside a committed release (for outputs whose existence and directory the caller checks
    itself)."""
    inputs = [Path(p) for p in inputs if p is not None]
    for out in outputs:
        _outside_releases(out)
        for inp in inputs:
            if inp.exists():
                _against_input(out, inp)
    ids = _Identities([i for i in inputs if i.exists()])
    for out in outputs:
        _by_identity(out, ids, inputs)


def refuse_repeated_files(files, root) -> None:
    """Refuse a directory input that reaches one file more than once (a symbolic or hard link to
    another of its files): its records would be read twice or more, so a cell of k rows could hold
    fewer than k records — k copies of one record publish it as it is."""
    seen, twice = set(), 0
    for f in files:
        me = _identity(f)
        if me is not None and me in seen:
            twice += 1
        seen.add(me)
    if twice:
        raise InputError(f"the input directory {root} reaches {twice} of its data file(s) a second time, through a "
                         "link to another of its files: each record would be read twice; remove the links first")
