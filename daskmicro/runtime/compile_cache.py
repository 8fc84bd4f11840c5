"""Where numba keeps daskmicro's compiled kernels: a writable per-user cache by default.

numba's ``cache=True`` writes next to the module (``__pycache__``) and, when that is not writable (a
read-only site-packages, a Docker image, a shared HPC install), falls back to a directory of its own
choosing per user or to nothing at all, so every new process compiles again. :func:`configure` runs when
``daskmicro`` is imported, before any daskmicro module imports numba, in the client and in every Dask worker
process (workers import daskmicro to run its tasks). It picks, in order:

1. ``NUMBA_CACHE_DIR`` if set: numba's own setting, left untouched;
2. ``DASKMICRO_CACHE_DIR`` if set;
3. the platform's user cache dir + ``daskmicro/numba``: ``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux,
   ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows;

creates it if missing and, when it cannot be created or written, falls back silently to a directory under
the system temp dir (a cache never fails a run). The choice is exported as ``NUMBA_CACHE_DIR``, so that
processes started later (LocalCluster workers) inherit it, and given to numba's config when numba was
imported first.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["configure", "cache_dir", "default_cache_dir"]

ENV_DASKMICRO = "DASKMICRO_CACHE_DIR"
ENV_NUMBA = "NUMBA_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$DASKMICRO_CACHE_DIR``, else the platform's user cache dir + ``daskmicro/numba``."""
    given = os.environ.get(ENV_DASKMICRO, "").strip()
    if given:
        return Path(given).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "daskmicro" / "numba"


def _writable(path: Path) -> bool:
    """Create ``path`` if missing and check that a file can be written in it (os.access lies for root)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
        return True
    except (OSError, RuntimeError, ValueError):  # RuntimeError: Path.home() without a home
        return False


def _temp_cache_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"daskmicro-{uid}" / "numba"


def configure() -> str | None:
    """Choose numba's cache dir (see the module's doc) and return it; ``None`` when nothing writable was found
    (numba then does what it does by itself). Never raises."""
    current = os.environ.get(ENV_NUMBA, "").strip()
    if current:
        return current
    try:
        chosen = default_cache_dir()
    except (OSError, RuntimeError):
        chosen = None
    if chosen is None or not _writable(chosen):
        chosen = _temp_cache_dir()
        if not _writable(chosen):
            return None
    path = str(chosen)
    os.environ[ENV_NUMBA] = path  # numba reads it when numba.core.config is first imported; children inherit it
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba was imported before daskmicro: its config has already read the environment
        config.CACHE_DIR = path  # read again by every dispatcher's cache locator, created when a kernel is defined
    return path


def cache_dir() -> str | None:
    """The cache dir numba uses now (``None``: numba's own default, next to the modules)."""
    config = sys.modules.get("numba.core.config")
    value = getattr(config, "CACHE_DIR", None) if config is not None else os.environ.get(ENV_NUMBA)
    return value or None
