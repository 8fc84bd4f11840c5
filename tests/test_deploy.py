"""deploy/: the files parse and say what they should (no Docker engine or Kubernetes here)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ROOT = DEPLOY.parent


def _dask_version() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d.split("==")[1] for d in deps if d.startswith("distributed=="))


def test_dockerfile_pins_the_official_dask_image_of_the_same_release():
    text = (DEPLOY / "Dockerfile").read_text()
    base = re.search(r"^FROM\s+(\S+)", text, re.M).group(1)
    assert base == f"ghcr.io/dask/dask:{_dask_version()}-py3.12"           # tag format RELEASE-pyX.Y
    assert re.search(r"^COPY daskmicro /opt/daskmicro/daskmicro$", text, re.M)
    assert 'pip install --no-cache-dir "/opt/daskmicro[s3,azure,gcs,delta]"' in text   # every store, Delta tables
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"s3", "azure", "gcs", "delta"} <= set(extras)
    for src in re.findall(r"^COPY (.+) /opt/daskmicro/", text, re.M):
        for name in src.split():
            assert (ROOT / name).exists(), name


def test_compose_has_a_scheduler_two_workers_and_a_submitter():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"scheduler", "worker-1", "worker-2", "submitter"}
    sched = services["scheduler"]["command"]
    assert sched[:2] == ["dask", "scheduler"] and sched[sched.index("--port") + 1] == "8786"
    assert "8786:8786" in services["scheduler"]["ports"] and "8787:8787" in services["scheduler"]["ports"]
    for w in ("worker-1", "worker-2"):
        cmd = services[w]["command"]
        assert cmd[:3] == ["dask", "worker", "tcp://scheduler:8786"]
        assert "scheduler" in services[w]["depends_on"]
    sub = services["submitter"]["command"]
    assert sub[:2] == ["daskmicro", "submit"] and sub[sub.index("--scheduler") + 1] == "tcp://scheduler:8786"
    spec = sub[2].replace("/work/workflows", str(ROOT / "workflows"))
    assert Path(spec).is_file()
    # hyphenated commands (dask-scheduler, dask-worker) no longer exist
    assert "dask-scheduler" not in (DEPLOY / "docker-compose.yml").read_text()
    assert services["scheduler"]["build"]["dockerfile"] == "deploy/Dockerfile"


def _manifests(name):
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))


def _containers(pod_spec):
    return {c["name"]: c for c in pod_spec["containers"]}


def _check_cluster_spec(spec, cluster_name):
    sched = _containers(spec["scheduler"]["spec"])["scheduler"]
    assert sched["args"][:2] == ["dask", "scheduler"]
    assert {p["name"]: p["containerPort"] for p in sched["ports"]} == {"tcp-comm": 8786, "http-dashboard": 8787}
    svc = spec["scheduler"]["service"]
    assert {p["name"]: p["port"] for p in svc["ports"]} == {"tcp-comm": 8786, "http-dashboard": 8787}
    assert svc["selector"]["dask.org/cluster-name"] == cluster_name
    worker = _containers(spec["worker"]["spec"])["worker"]
    assert worker["args"][:2] == ["dask", "worker"] and spec["worker"]["replicas"] == 2


def test_operator_manifests_api_version_kind_and_commands():
    (cluster,) = _manifests("daskcluster.yaml")
    assert (cluster["apiVersion"], cluster["kind"]) == ("kubernetes.dask.org/v1", "DaskCluster")
    _check_cluster_spec(cluster["spec"], cluster["metadata"]["name"])
    (job,) = _manifests("daskjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("kubernetes.dask.org/v1", "DaskJob")
    assert set(job["spec"]) == {"job", "cluster"}
    _check_cluster_spec(job["spec"]["cluster"]["spec"], job["metadata"]["name"])
    runner = _containers(job["spec"]["job"]["spec"])["job"]
    assert "daskmicro run /data/workflows/nightly-lake.yaml --scheduler \"$DASK_SCHEDULER_ADDRESS\"" in runner["args"][-1]
    (store_job,) = _manifests("daskjob-object-store.yaml")
    assert (store_job["apiVersion"], store_job["kind"]) == ("kubernetes.dask.org/v1", "DaskJob")
    _check_cluster_spec(store_job["spec"]["cluster"]["spec"], store_job["metadata"]["name"])
    runner = _containers(store_job["spec"]["job"]["spec"])["job"]
    assert "daskmicro run /spec/object-store-lake.yaml --scheduler" in runner["args"][-1]
    worker = _containers(store_job["spec"]["cluster"]["spec"]["worker"]["spec"])["worker"]
    for pod in (runner, worker):   # credentials from a Secret, no volume shared by the job pod and the workers
        assert pod["envFrom"] == [{"secretRef": {"name": "daskmicro-store"}}]
    assert not worker.get("volumeMounts")
    # the release ledger and the run records on a persistent volume of the job pod: they outlive it
    volumes = {v["name"]: v for v in store_job["spec"]["job"]["spec"]["volumes"]}
    state = {e["name"]: e["value"] for e in runner["env"]}["XDG_STATE_HOME"]
    (mount,) = [m for m in runner["volumeMounts"] if m["mountPath"] == state]
    assert "persistentVolumeClaim" in volumes[mount["name"]]
    nightly = {e["name"]: e["value"] for e in _containers(job["spec"]["job"]["spec"])["job"]["env"]}
    assert nightly["XDG_STATE_HOME"].startswith("/data/")   # /data: the job's persistent volume
    (cron,) = _manifests("cronjob.yaml")
    assert (cron["apiVersion"], cron["kind"]) == ("batch/v1", "CronJob")
    from croniter import croniter

    assert croniter.is_valid(cron["spec"]["schedule"])


def test_jobqueue_config_and_slurm_examples():
    conf = yaml.safe_load((DEPLOY / "jobqueue" / "jobqueue.yaml").read_text())
    slurm = conf["jobqueue"]["slurm"]
    assert {"cores", "processes", "memory", "walltime", "queue"} <= set(slurm)
    ast.parse((DEPLOY / "jobqueue" / "run_slurm.py").read_text())
    sbatch = (DEPLOY / "jobqueue" / "daskmicro.sbatch").read_text()
    assert sbatch.startswith("#!/bin/bash") and "#SBATCH --nodes=" in sbatch
    assert "dask scheduler --scheduler-file" in sbatch and "srun dask worker --scheduler-file" in sbatch
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(DEPLOY / "jobqueue" / "daskmicro.sbatch")], check=True)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make test TLS certificates (install openssl)")
def test_tls_script_makes_a_ca_and_a_node_certificate(tmp_path):
    out = tmp_path / "certs"
    subprocess.run(["sh", str(DEPLOY / "make-tls-certs.sh"), str(out), "scheduler"], check=True, capture_output=True)
    assert {"ca.pem", "node.pem", "node-key.pem"} <= {p.name for p in out.iterdir()}
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca.pem"), str(out / "node.pem")],
                            capture_output=True, text=True)
    assert verify.returncode == 0 and "OK" in verify.stdout
    text = subprocess.run(["openssl", "x509", "-in", str(out / "node.pem"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "DNS:scheduler" in text and "IP Address:127.0.0.1" in text
    assert not list(DEPLOY.rglob("*.pem"))                                  # no certificate committed
