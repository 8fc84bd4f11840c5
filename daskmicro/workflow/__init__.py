"""Workflow specs (YAML), runs, and scheduled submission to a running Dask cluster.

* :mod:`daskmicro.workflow.workflow_spec`: load and validate a spec (:mod:`daskmicro.workflow.values` checks
  single values, :mod:`daskmicro.workflow.sections` each section).
* :mod:`daskmicro.workflow.slots`: schedule slots, stable run keys, the (compressed) clock.
* :mod:`daskmicro.workflow.runner`: execute one run (read, anonymize, commit atomically).
* :mod:`daskmicro.workflow.submit`: hand runs to a cluster so they go on after the client exits;
  status and cancellation; the submitter's local state file.
"""

from .slots import Clock, run_key, slots_between
from .loader import load_workflow
from .workflow_spec import SpecError, WorkflowSpec, parse_spec
from .runner import execute_run
from .submit import cancel_run, list_runs, submit_spec

__all__ = [
    "Clock", "SpecError", "WorkflowSpec", "load_workflow", "parse_spec", "run_key", "slots_between",
    "execute_run", "submit_spec", "list_runs", "cancel_run",
]
