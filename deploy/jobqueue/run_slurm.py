"""Run a workflow spec on SLURM: dask-jobqueue starts the workers as batch jobs.

    pip install dask-jobqueue
    python deploy/jobqueue/run_slurm.py workflows/census-demo.yaml --jobs 4

The scheduler runs in this process (on the login or a service node); keep it alive for the run.
"""

import argparse
import sys

from dask_jobqueue import SLURMCluster  # reads ~/.config/dask/jobqueue.yaml
from distributed import Client

from daskmicro.workflow import execute_run, load_workflow


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--jobs", type=int, default=2, help="SLURM jobs of workers")
    args = p.parse_args()
    spec = load_workflow(args.spec)
    with SLURMCluster() as cluster, Client(cluster) as client:
        cluster.scale(jobs=args.jobs)
        client.wait_for_workers(1, timeout=600)
        summary = execute_run(spec, None, client, progress=lambda s, t: print(f"{s:<17} {t:7.2f} s", file=sys.stderr))
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
