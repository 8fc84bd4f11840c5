"""A lake from and to an S3-compatible store against the same lake on the local disk, side by side.

Writes a lake of ``--files`` Parquet files (``--n`` rows × ``--m`` correlated Gaussian QI columns and
an ``id`` column dropped as a direct identifier) on the local disk and uploads the same files to a
local S3 server (moto's server mode, started here as its own process on loopback).  Then runs
``daskmicro anonymize`` as a subprocess with the same settings and seed, alternating

    local:  DIR/in        →  DIR/out         (atomic rename commit)
    s3:     s3://bench/in →  s3://bench/out  (run prefix, read back and checked, _SUCCESS manifest)

``--repeat`` times each, and prints the wall times, their ratio and whether the two releases are the
same files byte for byte (SHA-256 of each local file against the manifest's).  The S3 server runs on
the same cores as the run (a real store would not), so the ratio is an upper bound.  Usage::

    python bench_object_store.py --n 16000000 --files 64
"""

from __future__ import annotations

import _common  # noqa: F401  (pins thread pools before numpy is imported)

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

BUCKET = "bench"


def make_lake(root: Path, n: int, files: int, m: int, seed: int = 0) -> None:
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, m)) / np.sqrt(m) + np.eye(m)
    bounds = np.linspace(0, n, files + 1).astype(np.int64)
    for i in range(files):
        size = int(bounds[i + 1] - bounds[i])
        df = pd.DataFrame(rng.normal(size=(size, m)) @ A, columns=[f"x{j + 1}" for j in range(m)])
        df["id"] = np.arange(bounds[i], bounds[i + 1], dtype=np.int64)
        df.to_parquet(root / f"part-{i:05d}.parquet", index=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_store(env: dict):
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen([str(server) if server.exists() else "moto_server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    env.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret", AWS_ENDPOINT_URL=endpoint,
               AWS_DEFAULT_REGION="us-east-1")
    return proc


def run(cmd: list, env: dict) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[3:6])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall


def server_cpu(proc) -> float:
    import psutil

    try:
        t = psutil.Process(proc.pid).cpu_times()
        return t.user + t.system
    except psutil.NoSuchProcess:
        return float("nan")


def local_hashes(out: Path) -> dict:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*.parquet"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=16_000_000)
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--m", type=int, default=13)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dir", default="/tmp/daskmicro-bench-s3")
    a = ap.parse_args()
    _common.print_machine_info()
    import s3fs

    base = Path(a.dir)
    shutil.rmtree(base, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), DASKMICRO_LEDGER="off")
    store = start_store(env)
    try:
        t0 = time.perf_counter()
        make_lake(base / "in", a.n, a.files, a.m)
        t_make = time.perf_counter() - t0
        fs = s3fs.S3FileSystem(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"],
                               endpoint_url=env["AWS_ENDPOINT_URL"])
        fs.mkdir(BUCKET)
        t0 = time.perf_counter()
        fs.put(str(base / "in") + "/", f"{BUCKET}/in/", recursive=True)
        t_up = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in (base / "in").iterdir())
        print(f"lake: {a.n:,} rows × {a.m} QIs in {a.files} files ({size / 2**20:,.0f} MiB), written in "
              f"{t_make:.1f} s, uploaded in {t_up:.1f} s")
        qi = ",".join(f"x{j + 1}" for j in range(a.m))
        common = ["--qi", qi, "--k", str(a.k), "--drop", "id", "--workers", "2", "--seed", "1", "--overwrite",
                  "--force", "--quiet"]
        cli = [sys.executable, "-m", "daskmicro", "anonymize"]
        cmds = {"local": cli + [str(base / "in"), str(base / "out"), *common],
                "s3": cli + [f"s3://{BUCKET}/in", f"s3://{BUCKET}/out", *common]}
        print("command:", " ".join(cmds["s3"][1:]))
        times = {"local": [], "s3": []}
        for _ in range(a.repeat):
            for name in ("local", "s3"):
                times[name].append(run(cmds[name], env))
                print(f"  {name:6s} {times[name][-1]:8.1f} s", flush=True)
        fs.invalidate_cache()
        manifest = json.loads(fs.cat_file(f"{BUCKET}/out/_SUCCESS"))
        same = local_hashes(base / "out") == {e["path"]: e["sha256"] for e in manifest["files"]}
        stages = {"local": json.loads((base / "out" / "_report.json").read_text())["timings"],
                  "s3": json.loads(fs.cat_file(f"{BUCKET}/out/{manifest['run']}/_report.json"))["timings"]}
        best = {k: min(v) for k, v in times.items()}
        print()
        print("| stage (last run of each) | local s | S3 s |")
        print("|---|---:|---:|")
        for name in stages["local"]:
            if isinstance(stages["local"][name], (int, float)) and name in stages["s3"]:
                print(f"| {name} | {stages['local'][name]:.1f} | {stages['s3'][name]:.1f} |")
        print(f"| **wall time, CLI end to end (best of {a.repeat})** | **{best['local']:.1f}** | **{best['s3']:.1f}** |")
        print(f"\nratio S3 / local: {best['s3'] / best['local']:.2f}; CPU seconds of the S3 server process "
              f"(on the same cores as the runs, all runs and the upload): {server_cpu(store):.1f}")
        print(f"\nsame release files byte for byte: {same} ({len(manifest['files'])} files, "
              f"{sum(e['bytes'] for e in manifest['files']) / 2**20:,.0f} MiB)")
    finally:
        store.terminate()
        store.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
