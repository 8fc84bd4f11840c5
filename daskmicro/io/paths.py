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
  directory where a file is to be written, or the reverse).

Paths are compared after resolving symbolic links, and existing files also by identity
(:func:`os.path.samefile`), so a link or a hard link to the input is caught as well.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ParameterError

__all__ = ["Output", "check_outputs", "check_against_inputs"]


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


def _target(out: Output, overwrite: bool, hint: str) -> None:
    p = out.path
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
    for i, a in enumerate(outputs):
        for b in outputs[i + 1:]:
            _against_output(a, b)
    for out in outputs:
        _target(out, overwrite or _resolved(out.path) in ok, hint)


def check_against_inputs(inputs, outputs) -> None:
    """Only the input rule of :func:`check_outputs`: no output is an input, inside one or around
    one (for outputs whose existence and directory the caller checks itself)."""
    inputs = [Path(p) for p in inputs if p is not None]
    for out in outputs:
        for inp in inputs:
            if inp.exists():
                _against_input(out, inp)
