"""The S3 server of the suite and the helpers of its tests: moto's server mode on loopback, one per test session (moto keeps its
buckets per process, so two servers would share them).  The ``store`` fixture of ``conftest.py``
starts it; the constants name its bucket and the credentials that no run may write or print."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daskmicro import cli as lake_cli
from daskmicro.cli import build_parser
from daskmicro.errors import InputError, ParameterError

#: The credentials of the test store: neither may appear in anything a run writes or says.
KEY_ID = "AKIADASKMICROTEST01"
SECRET = "dm-secret-0f9e8d7c6b5a49382716"
#: Credentials given through storage_options instead of the environment.
OPT_SECRET = "dm-option-secret-5a4b3c2d1e0f"
BUCKET = "survey-bucket"


def set_env(env: dict) -> dict:
    """Set (a value) or remove (None) environment variables; the previous values, to set back."""
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return old


def s3_store(client):
    """moto's S3 server on loopback; this process and the cluster of ``client`` point their standard
    credential chain (the environment) at it.  Yields ``(endpoint, s3fs file system)``."""
    s3fs = pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ENDPOINT_URL": endpoint,
           "AWS_DEFAULT_REGION": "us-east-1"}
    old = set_env(env)
    olds = client.run(set_env, env)
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield endpoint, fs
    finally:
        for worker, previous in olds.items():
            client.run(set_env, previous, workers=[worker])
        set_env(old)
        server.stop()


# --------------------------------------------------------------------------- helpers of the S3 tests


def frame(n=240, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.normal(size=n), "y": rng.integers(0, 1000, n).astype(np.int64),
                         "s": np.array(["a", "b", "c"])[np.arange(n) % 3], "year": 2018 + np.arange(n) % 4,
                         "id": np.arange(n, dtype=np.int64)})


def put(fs, key: str, df: pd.DataFrame, fmt: str = "parquet") -> str:
    with fs.open(f"{BUCKET}/{key}", "wb") as fh:
        if fmt == "parquet":
            df.to_parquet(fh, index=False)
        else:
            fh.write(df.to_csv(index=False).encode())
    fs.invalidate_cache()
    return f"s3://{BUCKET}/{key}"


def put_lake(fs, prefix: str, df: pd.DataFrame) -> str:
    for (year, s), g in df.groupby(["year", "s"]):
        put(fs, f"{prefix}/year={year}/s={s}/part-0.parquet", g.drop(columns=["year", "s"]))
    return f"s3://{BUCKET}/{prefix}"


def run_cli(argv, client):
    """``daskmicro anonymize`` on the shared cluster: (exit status, error line)."""
    args = build_parser().parse_args(["anonymize", *map(str, argv)])
    try:
        return lake_cli.run_anonymize(args, client=client), ""
    except (InputError, ParameterError) as exc:
        return 2, str(exc)


def run_record(err: str) -> str:
    found = re.findall(r"private run record .*: (\S+)\s*$", err, re.M)
    assert found, err
    return Path(found[-1]).read_text()


def no_credentials(*texts):
    for text in texts:
        for secret in (SECRET, OPT_SECRET):
            assert secret not in text


def tree_text(root: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in sorted(root.rglob("*")) if p.is_file())


def release_on_store(fs, prefix: str):
    """(manifest, the release read back from the objects the manifest lists, hive columns joined,
    every key under the target)."""
    import pyarrow.parquet as pq

    fs.invalidate_cache()
    manifest = json.loads(fs.cat_file(f"{BUCKET}/{prefix}/_SUCCESS"))
    frames = []
    for entry in manifest["files"]:
        df = pq.read_table(f"{BUCKET}/{prefix}/{manifest['run']}/{entry['path']}", filesystem=fs).to_pandas()
        for seg in entry["path"].split("/")[:-1]:
            col, value = seg.split("=", 1)
            df[col] = value
        frames.append(df)
    return manifest, pd.concat(frames, ignore_index=True), sorted(fs.find(f"{BUCKET}/{prefix}"))


def runs(keys, prefix):
    return sorted({k[len(f"{BUCKET}/{prefix}/"):].split("/")[0] for k in keys} - {"_SUCCESS"})


def store_text(fs, prefix):
    fs.invalidate_cache()
    return "".join(fs.cat_file(k).decode("latin-1") for k in fs.find(f"{BUCKET}/{prefix}"))


def read_object(fs, key: str) -> pd.DataFrame:
    import pyarrow.parquet as pq

    fs.invalidate_cache()
    return pq.read_table(f"{BUCKET}/{key}", filesystem=fs).to_pandas()


class Relay:
    """A TCP relay on loopback in front of the S3 server at ``endpoint`` (``.url``): every request is
    passed on as it came, one request per connection (``Connection: close`` is set on what it passes
    on), unless :meth:`answer` answers it itself.  Subclasses choose which requests to answer or hold."""

    def __init__(self, endpoint: str):
        import socket
        import threading
        from urllib.parse import urlsplit

        target = urlsplit(endpoint)
        self.target = (target.hostname, target.port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def answer(self, first: str, names: set):
        """The response to send instead of passing the request on (``first``: its request line,
        ``names``: its header names, lower case), or None to pass it on."""
        return None

    def passed(self, first: str) -> None:
        """Called once a request passed on has been answered by the server."""

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:   # closed
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn) -> None:
        import socket
        import threading

        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            names = {line.split(b":", 1)[0].strip().lower().decode("latin-1") for line in lines[1:]}
            first = lines[0].decode("latin-1").split(" HTTP/")[0]
            response = self.answer(first, names)
            if response is not None:
                _drain(conn, lines, rest)
                conn.sendall(response)
                return
            kept = [line for line in lines if line.split(b":", 1)[0].strip().lower() != b"connection"]
            upstream = socket.create_connection(self.target)
            with upstream:
                upstream.sendall(b"\r\n".join(kept) + b"\r\nConnection: close\r\n\r\n" + rest)

                def pump(src, dst):
                    try:
                        while True:
                            data = src.recv(65536)
                            if not data:
                                break
                            dst.sendall(data)
                    except OSError:
                        pass
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                up = threading.Thread(target=pump, args=(conn, upstream), daemon=True)
                up.start()
                pump(upstream, conn)
                up.join(5)
            self.passed(first)

    def close(self) -> None:
        self.server.close()


def _drain(conn, lines: list, rest: bytes) -> None:
    """Read the body of a request answered without it (unless the client waits for ``100 Continue``
    before sending it), so that closing the connection does not reset it under the client."""
    headers = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
               for line in lines[1:] if b":" in line}
    if headers.get(b"expect", b"").lower() == b"100-continue":
        return
    size = int(headers.get(b"content-length", b"0") or 0)
    while len(rest) < size:
        chunk = conn.recv(65536)
        if not chunk:
            return
        rest += chunk


def error_response(status: str, code: str, message: str) -> bytes:
    """An S3 error answer: ``status`` (``501 Not Implemented``), its XML body of ``code`` and ``message``."""
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            "</Error>").encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


class NoConditionalWrites(Relay):
    """A store without conditional writes, as some S3-compatible stores are: a :class:`Relay` that
    answers ``501 NotImplemented`` to every request carrying ``If-None-Match`` or ``If-Match``.
    ``.refused``: the conditional requests it answered, as ``"METHOD PATH if-none-match"`` (or ``if-match``)."""

    def __init__(self, endpoint: str):
        self.refused: list[str] = []
        super().__init__(endpoint)

    def answer(self, first: str, names: set):
        conditions = sorted(names & {"if-none-match", "if-match"})
        if not conditions:
            return None
        self.refused.append(" ".join([first, *conditions]))
        return error_response("501 Not Implemented", "NotImplemented",
                              "A header you provided implies functionality that is not implemented")


class RefusingStore(Relay):
    """A store that refuses some writes and is slow to take others: a :class:`Relay` that answers
    ``403 AccessDenied`` to every PUT whose key ends with ``refuse``, and holds every PUT whose key
    ends with ``slow`` (a suffix or a tuple of them) for ``hold`` seconds before passing it on.
    ``.held``: the PUTs it held; ``.landed``: those the server has answered since."""

    def __init__(self, endpoint: str, refuse: str, slow, hold: float):
        self.refuse, self.slow, self.hold = refuse, slow, hold
        self.held: list[str] = []
        self.landed: list[str] = []
        super().__init__(endpoint)

    def answer(self, first: str, names: set):
        import time

        method, _, path = first.partition(" ")
        key = path.split("?", 1)[0]
        if method == "PUT" and key.endswith(self.refuse):
            return error_response("403 Forbidden", "AccessDenied", "Access Denied")
        if method == "PUT" and key.endswith(self.slow):
            self.held.append(path)
            time.sleep(self.hold)
        return None

    def passed(self, first: str) -> None:
        method, _, path = first.partition(" ")
        if method == "PUT" and path.split("?", 1)[0].endswith(self.slow):
            self.landed.append(path)
