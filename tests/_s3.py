"""The S3-compatible store of the tests: moto's S3 server in server mode on loopback.

The session-wide instance is the ``store`` fixture of ``conftest.py`` (one server for every test
module that uses it: moto's servers in one process share their buckets, so a second one would see
the first one's); the constants here are its credentials and bucket."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

#: The credentials of the test store: neither may appear in anything a run writes or says.
KEY_ID = "AKIADASKMICROTEST01"
SECRET = "dm-secret-0f9e8d7c6b5a49382716"
#: Credentials given through storage_options instead of the environment.
OPT_SECRET = "dm-option-secret-5a4b3c2d1e0f"
BUCKET = "survey-bucket"


def set_env(env: dict) -> dict:
    """Set (or, for None, remove) environment variables; returns their previous values."""
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return old


@contextmanager
def moto_store(client):
    """moto's S3 server on loopback, with :data:`BUCKET`; this process and ``client``'s workers
    point their standard credential chain (the environment) at it.  Yields ``(endpoint, s3fs file
    system)``."""
    import moto.server
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto.server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
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
