"""Reading a workflow spec file safely, then validating it (:func:`daskmicro.workflow.workflow_spec.parse_spec`).

The file is bounded in size and read with a YAML loader that refuses aliases (they let a few
lines expand to billions of values) before anything is built, and keys given twice in one
mapping (a later value would silently win).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .workflow_spec import SpecError, WorkflowSpec, parse_spec

__all__ = ["MAX_SPEC_BYTES", "load_workflow"]

#: Largest spec file accepted, in bytes: a spec is a page of YAML.
MAX_SPEC_BYTES = 1 << 20


def _spec_loader():
    """A ``yaml.SafeLoader`` that refuses aliases (``*name``) before any Python object is built.

    An alias repeats a node without copying its text, so a few lines of nested aliases expand
    to billions of nodes ("billion laughs").  A spec has no use for them.
    """
    import yaml

    class SpecLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a workflow spec; "
                                                  "write the value out (quote a cron expression: '* * * * *')",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            # a key written twice would silently take its last value (k: 5 … k: 2 runs with 2)
            seen = set()
            for key_node, _ in getattr(node, "value", ()):
                key = getattr(key_node, "value", None)
                if isinstance(key, str):
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} is given twice in one mapping; give each setting once",
                            key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep)

    return SpecLoader


def load_workflow(path) -> WorkflowSpec:
    """Read and validate a YAML spec file; relative paths in it are relative to the file's directory.

    Files over :data:`MAX_SPEC_BYTES` and YAML aliases are refused before the YAML is composed.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise InputError(f"workflow spec not found: {p}")
    with open(p, "rb") as fh:
        raw = fh.read(MAX_SPEC_BYTES + 1)
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"workflow spec: {p}: larger than {MAX_SPEC_BYTES:,} bytes; a spec is a short YAML file")
    try:
        obj = yaml.load(raw.decode("utf-8"), Loader=_spec_loader())  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError:
        raise SpecError(f"workflow spec: {p}: not UTF-8 text") from None
    except RecursionError:
        raise SpecError(f"workflow spec: {p}: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "alias" in str(getattr(exc, "context", "") or "") and "alias" not in problem:
            problem += " (a value starting with '*' is read as an alias: quote it, e.g. cron: '* * * * *')"
        raise SpecError(f"workflow spec: {p}: not valid YAML{where}: {problem}") from None
    if obj is None:
        raise SpecError(f"workflow spec: {p}: the file is empty")
    return parse_spec(obj, base_dir=p.parent, source=str(p.resolve()))
