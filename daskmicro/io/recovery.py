"""What interrupted runs leave, resolved before anything else is done, and what readers refuse.

A commit (:func:`daskmicro.io.commit.commit`, :class:`daskmicro.io.tables.AtomicBatch`) writes a
journal (:mod:`daskmicro.io.journal`) before its first rename; :func:`recover` rolls a journalled
commit forward (its new version is complete) or puts the old version back, puts back a release
moved aside by an older interrupted commit, and sweeps staging folders and temporary files whose
owner process is gone.  :func:`refuse_uncommitted` keeps readers off a release without
``_SUCCESS``; :func:`refuse_foreign` keeps a run off a directory it would replace that holds files
daskmicro did not write there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from ..errors import InputError, ParameterError
from .journal import fsync_dir, journal_path, read_journal, remove_journal

__all__ = ["SUCCESS", "OWNER", "owner_record", "owner_alive", "sweep_owned", "sweep_stale", "sweep_files", "recover", "recover_journal", "refuse_uncommitted",
           "glob_escape", "foreign_entries", "refuse_foreign", "MANIFEST_FORMAT"]

SUCCESS = "_SUCCESS"
#: Marks a staging directory with the process that owns it (removed before the commit).
OWNER = "_daskmicro_owner.json"
_STALE_KINDS = ("tmp", "old", "trash")
#: A staging directory owned by another machine counts as stale after this many seconds.
_FOREIGN_STALE_SECONDS = 24 * 3600
#: A staging directory without an owner file is left alone for this long (it may be starting).
_UNOWNED_GRACE_SECONDS = 60
#: The ``format`` of a release's ``_SUCCESS`` manifest (local, or on an object store).
MANIFEST_FORMAT = "daskmicro-release/1"
#: The files of a committed local directory release besides those its manifest lists.
_RELEASE_OWN = (SUCCESS, "_report.json", "_dask-report.html")



def _owner_alive(folder: Path) -> bool:
    try:
        owner = json.loads((folder / OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no owner: an interrupted run of an older version, or one just starting
        return time.time() - folder.stat().st_mtime < _UNOWNED_GRACE_SECONDS
    return owner_alive(owner)


def owner_record() -> dict:
    """What an owner file holds: this process, its machine, when it started writing."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}


def owner_alive(owner) -> bool:
    """Whether the process an owner record (:func:`owner_record`) names may still be running: on
    this machine, while its process exists; on another, for a day after it started."""
    if not isinstance(owner, dict):
        return False
    if owner.get("host") != socket.gethostname():
        return time.time() - float(owner.get("started", 0)) < _FOREIGN_STALE_SECONDS
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    return True


#: A folder without an owner file is left alone this long (its run may be naming itself).
UNOWNED_STALE_SECONDS = 3600


def sweep_owned(folders) -> list:
    """Remove each of ``folders`` (each made by a run, with an :data:`OWNER` file naming it) whose run
    is gone: its owner process has ended (:func:`owner_alive`), or it has no owner file and is
    :data:`UNOWNED_STALE_SECONDS` old (its run died naming itself).  An owner file that cannot be
    read (being written) leaves its folder alone.  Returns the names removed."""
    removed = []
    for folder in folders:
        if not folder.is_dir():
            continue
        try:
            owner = json.loads((folder / OWNER).read_text(encoding="utf-8"))
        except FileNotFoundError:
            owner = None
            if time.time() - folder.stat().st_mtime < UNOWNED_STALE_SECONDS:
                continue
        except (OSError, ValueError):
            continue
        if owner is not None and owner_alive(owner):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder.name)
    return removed


def sweep_stale(target: Path) -> list:
    """Delete the staging, moved-aside and trash folders of ``target`` left by interrupted runs.

    Only siblings named exactly ``.NAME.tmp-<8 hex digits>``, ``.NAME.old-<8 hex digits>`` or
    ``.NAME.trash-<8 hex digits>`` for this target are considered, and a staging folder whose owner
    process is still alive is left alone.  While a commit journal of ``target`` is unresolved
    nothing but trash is touched, and a moved-aside release only once ``target`` is a committed
    release (it may otherwise be the only copy: :func:`recover` puts it back).  Returns the
    names removed.
    """
    target = Path(target)
    removed = []
    if not target.parent.is_dir():
        return removed
    pending = journal_path(target).exists()
    for kind in _STALE_KINDS:
        for folder in target.parent.glob(f".{target.name}.{kind}-*"):
            suffix = folder.name[len(f".{target.name}.{kind}-"):]
            if len(suffix) != 8 or not all(ch in "0123456789abcdef" for ch in suffix) or not folder.is_dir():
                continue
            if kind == "tmp" and _owner_alive(folder):
                continue
            # a moved-aside release may be the only copy: kept while a commit is unresolved or
            # the target is not a committed release (recover() puts it back)
            if kind in ("tmp", "old") and pending:
                continue
            if kind == "old" and not _replaced_by(target, folder):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed



# --------------------------------------------------------------------------- recovery


def _name(target) -> Path:
    target = Path(target)
    return target.resolve() if target.name in ("", ".", "..") else target


def _old_dirs(target: Path) -> list:
    out = []
    for folder in target.parent.glob(f".{target.name}.old-*"):
        suffix = folder.name[len(f".{target.name}.old-"):]
        if len(suffix) == 8 and all(ch in "0123456789abcdef" for ch in suffix) and folder.is_dir():
            out.append(folder)
    return sorted(out)


def _replaced_by(target: Path, old: Path) -> bool:
    """Whether the moved-aside ``old`` is no longer needed: ``target`` is in place and is not an
    interrupted commit of an older version (no ``_SUCCESS`` where the old release had one)."""
    if not target.is_dir():
        return False
    return (target / SUCCESS).is_file() or not (old / SUCCESS).is_file()


def _trash(path: Path) -> None:
    """Rename ``path`` to a trash sibling (atomic) and delete it."""
    name = path.name.split(".old-")[0].split(".tmp-")[0]
    trash = path.parent / f"{name}.trash-{uuid.uuid4().hex[:8]}"
    os.replace(path, trash)
    fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


def _recover_dir(target: Path, record: dict) -> str | None:
    staging = Path(record["staging"])
    old = Path(record["old"]) if record.get("old") else None
    done = None
    if staging.is_dir() and os.path.lexists(target) and (old is None or os.path.lexists(old)):
        # a target the journal did not expect (another run committed one since): it stays
        _trash(staging)
        done = f"dropped the interrupted commit of {target} (another release is in place)"
    elif staging.is_dir():  # complete and verified (the journal is written after it is): roll forward
        (staging / OWNER).unlink(missing_ok=True)
        if os.path.lexists(target):
            os.replace(target, old)
            fsync_dir(target.parent)
        os.replace(staging, target)
        done = f"completed the interrupted commit of {target}"
    elif not os.path.lexists(target) and old is not None and old.is_dir():
        os.replace(old, target)
        done = f"put the previous release of {target} back (its interrupted commit left no new one)"
    fsync_dir(target.parent)
    remove_journal(target)
    if old is not None and old.is_dir() and target.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    return done


def _recover_files(record: dict) -> str | None:
    pairs = [(Path(p["tmp"]), Path(p["target"]), Path(p["old"]) if p.get("old") else None)
             for p in record.get("pairs", [])]
    if record.get("state") == "back":  # the renames failed in the committing process: all old
        for tmp, target, old in pairs:
            if old is not None and os.path.lexists(old):
                os.replace(old, target)
                old.unlink(missing_ok=True)  # still there when the target was never replaced (same file)
            elif old is None and not os.path.lexists(tmp):
                target.unlink(missing_ok=True)  # placed by the failed commit, no old version
        done = "put back the files of an interrupted commit: " + ", ".join(str(t) for _, t, _ in pairs)
    else:  # every staged file was complete before the journal: finish the renames
        for tmp, target, _ in pairs:
            if os.path.lexists(tmp):
                os.replace(tmp, target)
        done = "completed the interrupted commit of " + ", ".join(str(t) for _, t, _ in pairs)
    for folder in {t.parent for _, t, _ in pairs}:
        fsync_dir(folder)
    return done


def recover_journal(target: Path) -> str | None:
    """Resolve the commit journal of ``target``, if any; returns what was done."""
    record = read_journal(target)
    if record is None:
        return None
    if not record or record.get("kind") not in ("dir", "files"):
        raise InputError(f"unreadable commit journal {journal_path(target)}: "
                         f"check {target} and remove the journal")
    if record["kind"] == "dir":
        return _recover_dir(target, record)
    done = _recover_files(record)
    remove_journal(target)
    for pair in record.get("pairs", []):
        for key in ("tmp", "old"):
            if pair.get(key):
                Path(pair[key]).unlink(missing_ok=True)
    return done


def _recover_legacy(target: Path) -> str | None:
    """No journal: a release moved aside by an interrupted commit and not replaced is put back."""
    olds = _old_dirs(target)
    if not olds:
        return None
    if not os.path.lexists(target):
        if len(olds) > 1:
            raise InputError(f"{target} is missing and {len(olds)} moved-aside copies of it are left by "
                             f"interrupted runs ({', '.join(o.name for o in olds)}): rename the one to keep to {target}")
        os.replace(olds[0], target)
        fsync_dir(target.parent)
        return f"put the previous release of {target} back (an interrupted commit had moved it aside)"
    if target.is_dir() and not (target / SUCCESS).is_file():
        committed = [o for o in olds if (o / SUCCESS).is_file()]
        if len(committed) == 1:  # renamed into place, killed before its _SUCCESS: not a release
            _trash(target)
            os.replace(committed[0], target)
            fsync_dir(target.parent)
            return f"put the previous release of {target} back (the new one was never committed)"
    return None


def _owner_dead(pid_text: str) -> bool:
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False
    return False


def sweep_files(target) -> list:
    """Delete the temporary and moved-aside files of ``target`` left by dead processes.

    :class:`~daskmicro.io.tables.AtomicBatch` names them ``.NAME.<32 hex>.<pid>.tmp`` /
    ``.old`` (and a journal being written ``.NAME.commit.<pid>.new``); one whose process is gone
    is deleted — never while a commit journal of ``target`` is unresolved.  Names of older
    versions without a pid (``.NAME.<32 hex>.tmp`` / ``.old``) are deleted when ``target``
    exists (an old one is a second link of it) or, for a temporary file, after a minute.
    Returns the names removed.
    """
    target = _name(target)
    removed = []
    if not target.parent.is_dir() or journal_path(target).exists():
        return removed
    prefix = f".{target.name}."
    for path in target.parent.glob(f".{glob_escape(target.name)}.*"):
        rest = path.name[len(prefix):].split(".")
        if not path.is_file() and not path.is_symlink():
            continue
        if len(rest) == 3 and rest[2] in ("tmp", "old") and _is_hex(rest[0], 32) and rest[1].isdigit():
            stale = _owner_dead(rest[1])
        elif len(rest) == 3 and rest[0] == "commit" and rest[2] == "new" and rest[1].isdigit():
            stale = _owner_dead(rest[1])
        elif len(rest) == 2 and rest[1] in ("tmp", "old") and _is_hex(rest[0], 32):
            stale = (rest[1] == "old" and target.exists()) or \
                (rest[1] == "tmp" and time.time() - path.lstat().st_mtime > _UNOWNED_GRACE_SECONDS)
        else:
            continue
        if stale:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def _is_hex(text: str, n: int) -> bool:
    return len(text) == n and all(ch in "0123456789abcdef" for ch in text)


def recover(*targets, sweep: bool = True) -> list:
    """Resolve every interrupted commit of ``targets`` (outputs of the run about to start), then
    sweep what interrupted runs left of them; returns one line per thing done.

    Called first by every entry that commits, whatever it is then asked to do: an interrupted
    commit is rolled forward when its new version is complete (a journal exists), else its old
    version is put back.  Raises :class:`~daskmicro.errors.InputError` (one line naming the
    path) when the state cannot be decided.
    """
    lines = []
    names = [_name(t) for t in targets if t is not None]
    for target in names:
        if not target.parent.is_dir():
            continue
        for step in (recover_journal, _recover_legacy):
            done = step(target)
            if done:
                lines.append(done)
    if sweep:
        for target in names:
            if not target.parent.is_dir():
                continue
            removed = sweep_stale(target)
            if removed:
                lines.append(f"removed {len(removed)} staging folder(s) of {target} left by an interrupted run: "
                             f"{', '.join(removed)}")
            removed = sweep_files(target)
            if removed:
                lines.append(f"removed {len(removed)} temporary file(s) of {target} left by an interrupted run: "
                             f"{', '.join(removed)}")
    return lines


def refuse_uncommitted(path) -> None:
    """Refuse (:class:`~daskmicro.errors.InputError`, one line) to read a directory that is a
    daskmicro release but not a committed one: no ``_SUCCESS``, while it holds a ``_report.json``
    or a commit of it is unresolved (a journal, or a moved-aside release with ``_SUCCESS``, beside it).  A plain
    directory of Parquet files (no ``_SUCCESS``, nothing of daskmicro's) is read as it is."""
    path = Path(path)
    if not path.is_dir() or (path / SUCCESS).is_file():
        return
    target = _name(path)
    aside = any((o / SUCCESS).is_file() for o in _old_dirs(target))  # a release moved aside for it
    if (path / "_report.json").is_file() or journal_path(target).exists() or aside:
        raise InputError(f"not a committed release (no {SUCCESS}; an interrupted run? run daskmicro "
                         f"on it again as the output to recover it): {path}")


def foreign_entries(target) -> list:
    """The entries below an existing directory ``target`` that daskmicro did not write there (paths
    relative to it, sorted): all of them unless its ``_SUCCESS`` is a daskmicro release manifest,
    else every file that manifest does not list (other than ``_SUCCESS``, ``_report.json`` and
    ``_dask-report.html``) and every folder holding none of its files.  Links are not followed."""
    root = Path(target)
    try:
        manifest = json.loads((root / SUCCESS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    listed: set = set()
    if isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT:
        listed = {str(f.get("path")) for f in manifest.get("files") or () if isinstance(f, dict)} | set(_RELEASE_OWN)
    folders = {"/".join(p.split("/")[:i]) for p in listed for i in range(1, p.count("/") + 1)}
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        out += [prefix + d for d in dirnames if prefix + d not in folders]
        out += [prefix + f for f in filenames if prefix + f not in listed]
        dirnames[:] = [d for d in dirnames if prefix + d in folders]
    return sorted(out)


def refuse_foreign(target) -> None:
    """Refuse (:class:`~daskmicro.errors.ParameterError`, one line) to replace an existing local
    directory holding anything daskmicro did not write there (:func:`foreign_entries`), or a link
    (the commit would move the link aside and leave it there): the commit
    moves the whole directory aside and deletes it, so ``overwrite`` replaces a release, never a
    folder of the user's (as a prefix holding other objects is refused on an object store)."""
    root = Path(target)
    if root.is_symlink():   # the commit would replace the link, never write where it points
        raise ParameterError(f"output {root} is a symbolic link: a release would replace the link and leave it "
                             "beside the release; give the directory it points to")
    if not root.is_dir():
        return
    foreign = foreign_entries(root)
    if foreign:
        raise ParameterError(f"output {root} holds {len(foreign)} file(s) or folder(s) that daskmicro did not write "
                             f"(e.g. {foreign[0]}); a release replaces the whole directory: write it to a new or "
                             "empty directory, or move them out first")
