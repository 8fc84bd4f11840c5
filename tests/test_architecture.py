"""Architecture rules, checked statically over every module under daskmicro/.

a. no import cycles among daskmicro modules (imports inside functions count too);
b. no module imports another daskmicro module's private (underscore) names;
c. no function longer than MAX_FUNCTION_LINES lines;
d. no import cycles among folders: each sub-package (daskmicro/io/, daskmicro/graph/, ...) is one node,
   and each top-level module is a node of its own (see FOLDER RULES below);
e. no module longer than MAX_MODULE_LINES lines;
f. ``dask`` / ``distributed`` imported only by the modules and folders of DASK_ALLOWED;
g. no two modules share a file name (``__init__.py`` and ``__main__.py`` apart);
h. the top level holds the public API and the run model only: exactly TOP_LEVEL;
i. no function takes more than MAX_PARAMETERS parameters (positional and keyword-only, ``self`` / ``cls``
   and ``*args`` / ``**kwargs`` not counted), but those of MANY_PARAMETERS_ALLOWED.

The scan reads the source with :mod:`ast`; nothing is imported, so the test is fast and independent of
optional dependencies.

Import edges: ``import a.b.c`` and ``from a.b import c`` give an edge to the most specific daskmicro module
they name: ``from X import n`` goes to the submodule ``X.n`` when that is a module, else to ``X`` itself
(``X/__init__.py`` for a package). ``import daskmicro`` or ``from .. import name`` therefore count as an edge
to the package's ``__init__.py``. The implicit import of parent packages (``import daskmicro.io.tables`` runs
``daskmicro/__init__.py`` first) is *not* an edge: every module would then sit in a cycle with its package.

Private names: ``from X import _name`` where X is a daskmicro module other than the importer, ``_name``
starts with an underscore, is not a dunder, and is not itself a module (``from .kernels import _blocktree``
imports a private *module* as a module, which is allowed; importing its underscore names is not).
Reading ``alias._name`` where ``alias`` is an imported daskmicro module counts the same.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "daskmicro"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 500
MAX_PARAMETERS = 8

# ---------------------------------------------------------------------------------------------------------
# FOLDER RULES.
#
# Folder graph (rule d): an edge X -> Y when a module of X imports a module of Y. A sub-package is one node
# whatever its depth; a top-level module is a node of its own (daskmicro/__init__.py is the node
# "daskmicro"). The top level is not one node because it holds the run model, whose modules sit at both
# ends of the layering: config.py (the run description) is read by the executor in graph/, and plan.py
# drives graph/; one node for them all would be a cycle by construction. Excluding the top level would
# hide a cycle through one of its modules (graph -> runplan -> graph); cycles among top-level modules
# themselves are rule a's.
#
# Dask (rule f): where the Dask wiring lives. A folder name allows every module under it.
DASK_ALLOWED = {
    "daskmicro.graph",              # the task graphs: every run's executor, pipeline stages, release
    "daskmicro.runtime",            # clusters and clients, worker plugins, the Dask performance report
    "daskmicro.plan",               # the planner: the given client, an address or an in-process run
    "daskmicro.io.frames",          # a Dask DataFrame input, pieces of a group as a Dask frame
    "daskmicro.io.source",          # lake sources read as delayed pieces
    "daskmicro.io.lake",            # Parquet lakes in and out as Dask DataFrames on the workers
    "daskmicro.workflow.submit",    # workflow runs handed to a cluster (worker clients, locks)
}
DASK_PACKAGES = ("dask", "distributed")
# The top level (rule h): the public API (the package's exports, the API entries, the exceptions, the
# estimators, the data sets) and the run model (its description, resolution, planner, commit, the
# incremental survey entry and its schedule). Everything else lives in a sub-package named for what it is.
TOP_LEVEL = {
    "daskmicro", "daskmicro.__main__", "daskmicro._version",
    "daskmicro.anonymize", "daskmicro.errors", "daskmicro.estimators", "daskmicro.datasets",
    "daskmicro.config", "daskmicro.validators", "daskmicro.runplan", "daskmicro.strata", "daskmicro.plan",
    "daskmicro.finish", "daskmicro.outputs", "daskmicro.incremental_api", "daskmicro.schedule",
    "daskmicro.schedule_model",
}
UNIQUE_NAME_EXEMPT = {"__init__.py", "__main__.py"}
# Many parameters (rule i): (module, qualified function name) of the functions allowed more than
# MAX_PARAMETERS. Anything else groups the parameters that travel together into a small frozen
# dataclass of its module.
MANY_PARAMETERS_ALLOWED = {
    # public entry points: their options are documented keywords of the API
    ("daskmicro.anonymize", "anonymize"),                    # the API's main entry, every run option
    ("daskmicro.incremental_api", "anonymize_incremental"),  # the API's survey entry, every survey option
    ("daskmicro.estimators", "PCL.__init__"),                # scikit-learn style: one keyword per parameter
    ("daskmicro.io.arrivals", "ArrivalSimulator.__init__"),  # public simulator of a survey's arrivals
    ("daskmicro.kernels.pcl", "pcl"),                        # public kernel, the PCL paper's parameters
    ("daskmicro.privacy.spec", "build_spec"),                # public builder of a privacy spec
    ("daskmicro.tuning.tradeoff", "sweep"),                  # public trade-off sweep
    ("daskmicro.workflow.submit", "submit_spec"),            # public entry of daskmicro submit
    # numba kernels: a jitted function takes its arrays one by one (no Python object to group them)
    ("daskmicro.kernels._auction", "_unseat"),               # @njit: the auction's slot heaps
    ("daskmicro.kernels._blocktree", "_split"),              # @njit: the block tree's arrays
    ("daskmicro.kernels._search", "_scan_near"),             # @njit, inlined: the search's arrays
    ("daskmicro.kernels.improve", "_sweep"),                 # @njit: the cells' arrays of a sweep
    ("daskmicro.kernels.improve", "_apply"),                 # @njit, inlined: the arrays a step updates
    ("daskmicro.kernels.increment", "_adjoin"),              # @njit: the incremental cells' arrays
    ("daskmicro.kernels.mdav", "_take_cell"),                # @njit: MDAV's working arrays
}

# ---------------------------------------------------------------------------------------------------------
# KNOWN violations: none. The lists stay, asserted exactly, so that a violation can never be waved
# through: fix it instead.
# ---------------------------------------------------------------------------------------------------------

# Import cycles, each as the sorted tuple of the modules of one strongly connected component.
KNOWN_CYCLES: set[tuple[str, ...]] = set()
# (importer, imported module, private name)
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()
# (module, qualified function name): functions longer than MAX_FUNCTION_LINES lines.
KNOWN_LONG_FUNCTIONS: set[tuple[str, str]] = set()
# Folder cycles, each as the sorted tuple of the nodes of one strongly connected component.
KNOWN_FOLDER_CYCLES: set[tuple[str, ...]] = set()
# Modules longer than MAX_MODULE_LINES lines.
KNOWN_LONG_MODULES: set[str] = set()
# (module, imported name) of dask / distributed imports outside DASK_ALLOWED.
KNOWN_DASK_IMPORTS: set[tuple[str, str]] = set()

# ---------------------------------------------------------------------------------------------------------
# The scan.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. "daskmicro.io.tables"; a package's __init__.py is named after the package
    path: Path
    is_package: bool
    tree: ast.Module


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _parse_all(paths: list) -> list:
    """The syntax trees of ``paths``, parsed in a fresh thread: CPython 3.11's AST constructor can
    raise a spurious ``SystemError`` (recursion depth mismatch, python/cpython#106905) in a thread
    whose recursion counters a long-lived process with many threads has disturbed."""
    import threading

    out: list = []
    failed: list = []

    def parse():
        try:
            out.extend(ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in paths)
        except Exception as exc:  # raised again in the test's own thread
            failed.append(exc)

    worker = threading.Thread(target=parse)
    worker.start()
    worker.join()
    if failed:
        raise failed[0]
    return out


def scan_modules(root: Path = ROOT) -> dict[str, Module]:
    modules = {}
    paths = sorted(root.rglob("*.py"))
    for path, tree in zip(paths, _parse_all(paths)):
        name, is_package = _module_name(path, root)
        modules[name] = Module(name, path, is_package, tree)
    return modules


def _package_dirs(root: Path = ROOT) -> set[str]:
    """Dotted names of every directory under daskmicro (namespace packages without __init__.py too)."""
    names = {PACKAGE}
    for path in root.rglob("*"):
        if path.is_dir() and path.name != "__pycache__":
            names.add(".".join(path.relative_to(root.parent).parts))
    return names


def _is_module(name: str, modules: dict[str, Module], packages: set[str]) -> bool:
    return name in modules or name in packages


def _resolve_base(module: Module, node: ast.ImportFrom) -> str | None:
    """The absolute dotted module an ``ImportFrom`` reads from, or None when outside daskmicro."""
    if node.level == 0:
        base = node.module or ""
    else:
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        parts = package.split(".")
        drop = node.level - 1
        if drop >= len(parts):
            raise AssertionError(f"{module.path}:{node.lineno}: relative import beyond the top package")
        parts = parts[: len(parts) - drop]
        base = ".".join(parts + ([node.module] if node.module else []))
    if base == PACKAGE or base.startswith(PACKAGE + "."):
        return base
    return None


@dataclass(frozen=True)
class ImportRef:
    importer: str
    target: str  # the daskmicro module the edge goes to
    name: str | None  # the name imported from target by ``from target import name`` (None otherwise)
    lineno: int


def import_refs(modules: dict[str, Module], packages: set[str]) -> list[ImportRef]:
    refs = []
    for module in modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                        refs.append(ImportRef(module.name, alias.name, None, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                base = _resolve_base(module, node)
                if base is None:
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if alias.name != "*" and _is_module(sub, modules, packages):
                        refs.append(ImportRef(module.name, sub, None, node.lineno))
                        if base in packages and not module.name.startswith(base + ".__init__") \
                                and module.path.name != "__init__.py":
                            # ``from pkg import sub`` reads the name from the package: its __init__
                            # must have run, so the package is a dependency too
                            refs.append(ImportRef(module.name, base, None, node.lineno))
                    else:
                        refs.append(ImportRef(module.name, base, alias.name, node.lineno))
    return refs


def import_graph(modules: dict[str, Module], refs: list[ImportRef]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for ref in refs:
        # A namespace package (a directory without __init__.py) has no code: no node, no edge.
        if ref.target in modules and ref.target != ref.importer:
            graph[ref.importer].add(ref.target)
    return graph


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def find_cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    return {tuple(c) for c in strongly_connected_components(graph) if len(c) > 1}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_attribute_refs(modules: dict[str, Module], packages: set[str]) -> list[ImportRef]:
    """``alias._name`` where ``alias`` is a daskmicro module imported in the same file
    (``from .. import schedule as _schedule`` then ``_schedule._ratio(...)``): the same as importing
    ``_name``, so it counts as one."""
    refs = []
    for module in modules.values():
        aliases = {}
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve_base(module, node)
                for alias in node.names if base is not None else ():
                    if _is_module(f"{base}.{alias.name}", modules, packages):
                        aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and (alias.name == PACKAGE or alias.name.startswith(PACKAGE + ".")):
                        aliases[alias.asname] = alias.name
        for node in ast.walk(module.tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _is_private(node.attr)):
                refs.append(ImportRef(module.name, aliases[node.value.id], node.attr, node.lineno))
    return refs


def find_private_imports(refs: list[ImportRef]) -> dict[tuple[str, str, str], int]:
    found = {}
    for ref in refs:
        if ref.name is not None and ref.target != ref.importer and _is_private(ref.name):
            found.setdefault((ref.importer, ref.target, ref.name), ref.lineno)
    return found


def functions(modules: dict[str, Module]):
    """(module, qualified name, node) of every function of ``modules``, methods and nested functions too."""
    def visit(node: ast.AST, prefix: str, module: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = f"{prefix}{child.name}"
                yield module, qualname, child
                yield from visit(child, qualname + ".", module)
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.", module)
            else:
                yield from visit(child, prefix, module)

    for module in modules.values():
        yield from visit(module.tree, "", module.name)


def function_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's last line, its docstring left out."""
    length = node.end_lineno - node.lineno + 1
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        length -= body[0].end_lineno - body[0].lineno + 1
    return length


def find_long_functions(modules: dict[str, Module], limit: int = MAX_FUNCTION_LINES) -> dict[tuple[str, str], int]:
    """{(module, qualified name): length in lines from ``def`` to the function's last line, its
    docstring left out (a long numpydoc docstring is documentation, not code)}."""
    return {(module, name): n for module, name, node in functions(modules) if (n := function_length(node)) > limit}


def count_parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional (positional-only included) and keyword-only parameters, ``self`` and ``cls`` left out;
    ``*args`` and ``**kwargs`` are not counted."""
    args = node.args
    return sum(1 for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls"))


def find_many_parameters(modules: dict[str, Module], limit: int = MAX_PARAMETERS) -> dict[tuple[str, str], int]:
    """{(module, qualified name): parameters} of the functions (methods and nested functions too) that
    take more than ``limit`` parameters (:func:`count_parameters`)."""
    return {(module, name): n for module, name, node in functions(modules) if (n := count_parameters(node)) > limit}


def folder_node(module: Module) -> str:
    """The node of ``module`` in the folder graph: its sub-package, or itself at the top level."""
    parts = module.name.split(".")
    if len(parts) > 2 or (len(parts) == 2 and module.is_package):
        return ".".join(parts[:2])
    return module.name


def folder_graph(modules: dict[str, Module], refs: list[ImportRef]) -> tuple[dict[str, set[str]], dict]:
    """({node: nodes it imports}, {(node, node): [(importer, target, line), ...]})."""
    graph: dict[str, set[str]] = {folder_node(m): set() for m in modules.values()}
    edges: dict[tuple[str, str], list] = {}
    for ref in refs:
        if ref.target not in modules:
            continue
        a, b = folder_node(modules[ref.importer]), folder_node(modules[ref.target])
        if a != b:
            graph[a].add(b)
            edges.setdefault((a, b), []).append((ref.importer, ref.target, ref.lineno))
    return graph, edges


def module_lines(modules: dict[str, Module]) -> dict[str, int]:
    return {name: len(m.path.read_text(encoding="utf-8").splitlines()) for name, m in modules.items()}


def find_long_modules(modules: dict[str, Module], limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    return {name: n for name, n in module_lines(modules).items() if n > limit}


def _external_imports(tree: ast.Module):
    """(absolute name, line) of every import of a module outside the package: statements, and calls of
    ``importlib.import_module`` / ``__import__`` with a literal name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__"):
                yield node.args[0].value, node.lineno


def _allowed(module: str, allowed: set[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def find_dask_imports(modules: dict[str, Module], allowed: set[str] = DASK_ALLOWED) -> dict[tuple[str, str], int]:
    """{(module, imported name): line} for dask / distributed imports outside ``allowed``."""
    found = {}
    for name, module in modules.items():
        if _allowed(name, allowed):
            continue
        for imported, lineno in _external_imports(module.tree):
            if imported.split(".")[0] in DASK_PACKAGES:
                found.setdefault((name, imported), lineno)
    return found


def find_duplicate_names(root: Path = ROOT) -> dict[str, list[str]]:
    """{file name: its paths} for module file names used more than once under ``root``."""
    paths: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.name not in UNIQUE_NAME_EXEMPT:
            paths.setdefault(path.name, []).append(path.relative_to(root.parent).as_posix())
    return {name: p for name, p in paths.items() if len(p) > 1}


def top_level_modules(modules: dict[str, Module]) -> set[str]:
    return {name for name, m in modules.items() if folder_node(m) == name and (name == PACKAGE or not m.is_package)}


# ---------------------------------------------------------------------------------------------------------
# The rules.
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scan():
    modules = scan_modules()
    packages = _package_dirs()
    refs = import_refs(modules, packages)
    return modules, refs, import_graph(modules, refs), private_attribute_refs(modules, packages)


def _exact(found: set, known: set, what: str, describe) -> None:
    new = sorted(found - known)
    stale = sorted(known - found)
    message = []
    if new:
        message.append(f"{len(new)} {what} (fix them; never add them to the KNOWN list):")
        message.extend(f"  {describe(item)}" for item in new)
    if stale:
        message.append(f"{len(stale)} KNOWN {what} no longer occur: remove them from the KNOWN list:")
        message.extend(f"  {item!r}" for item in stale)
    assert not message, "\n".join(message)


def test_scan_sees_the_package(scan):
    modules, refs, graph, _ = scan
    assert f"{PACKAGE}" in modules and f"{PACKAGE}.kernels.mdav" in modules
    assert len(modules) > 50
    # Imports inside functions are edges too (the package is full of lazy imports that would hide cycles).
    assert sum(len(targets) for targets in graph.values()) > 100


def test_no_import_cycles(scan):
    _, refs, graph, _ = scan
    cycles = find_cycles(graph)

    def describe(component):
        members = set(component)
        edges = sorted(
            {(r.importer, r.target, r.lineno) for r in refs if r.importer in members and r.target in members}
        )
        lines = [" <-> ".join(component)]
        lines += [f"      {a} -> {b} (line {n})" for a, b, n in edges if a != b]
        return "\n".join(lines)

    _exact(cycles, KNOWN_CYCLES, "import cycles", describe)


def test_no_private_imports_across_modules(scan):
    _, refs, _, attribute_refs = scan
    found = find_private_imports(refs + attribute_refs)
    _exact(
        set(found), KNOWN_PRIVATE_IMPORTS, "imports of another module's private names",
        lambda item: f"{item[0]} (line {found[item]}): {item[2]} of {item[1]}",
    )


def test_no_long_functions(scan):
    modules, _, _, _ = scan
    found = find_long_functions(modules)
    _exact(
        set(found), KNOWN_LONG_FUNCTIONS, f"functions longer than {MAX_FUNCTION_LINES} lines",
        lambda item: f"{item[0]}.{item[1]}: {found[item]} lines",
    )


def test_no_function_takes_many_parameters(scan):
    modules, _, _, _ = scan
    found = find_many_parameters(modules)
    new = sorted(set(found) - MANY_PARAMETERS_ALLOWED)
    stale = sorted(MANY_PARAMETERS_ALLOWED - set(found))
    message = []
    if new:
        message.append(f"{len(new)} functions take more than {MAX_PARAMETERS} parameters (group those that travel "
                       "together into a frozen dataclass of the module; only a public entry point or a numba "
                       "kernel goes into MANY_PARAMETERS_ALLOWED, with its reason):")
        message.extend(f"  {m}.{f}: {found[(m, f)]} parameters" for m, f in new)
    if stale:
        message.append(f"{len(stale)} MANY_PARAMETERS_ALLOWED entries no longer take more than {MAX_PARAMETERS} "
                       "parameters, or no longer exist: remove them:")
        message.extend(f"  {item!r}" for item in stale)
    assert not message, "\n".join(message)


def test_no_folder_cycles(scan):
    modules, refs, _, _ = scan
    graph, edges = folder_graph(modules, refs)
    assert {"daskmicro.graph", "daskmicro.io", "daskmicro.plan", "daskmicro"} <= set(graph)

    def describe(component):
        lines = [" <-> ".join(component)]
        for a in component:
            for b in component:
                for importer, target, n in sorted(edges.get((a, b), []))[:5]:
                    lines.append(f"      {a} -> {b}: {importer} -> {target} (line {n})")
        return "\n".join(lines)

    _exact(find_cycles(graph), KNOWN_FOLDER_CYCLES, "folder-level import cycles", describe)


def test_no_long_modules(scan):
    modules, _, _, _ = scan
    found = find_long_modules(modules)
    _exact(set(found), KNOWN_LONG_MODULES, f"modules longer than {MAX_MODULE_LINES} lines",
           lambda item: f"{item}: {found[item]} lines")


def test_dask_imported_only_where_allowed(scan):
    modules, _, _, _ = scan
    found = find_dask_imports(modules)
    _exact(set(found), KNOWN_DASK_IMPORTS, f"imports of {' / '.join(DASK_PACKAGES)} outside DASK_ALLOWED",
           lambda item: f"{item[0]} (line {found[item]}): import {item[1]}")
    # every entry of the allow-list names a module or a folder that exists, and does import Dask
    names = set(modules) | _package_dirs()
    assert DASK_ALLOWED <= names, sorted(DASK_ALLOWED - names)
    importers = {name for name in modules if find_dask_imports({name: modules[name]}, allowed=set())}
    unused = {a for a in DASK_ALLOWED if not any(_allowed(m, {a}) for m in importers)}
    assert not unused, f"DASK_ALLOWED entries that import no Dask (remove them): {sorted(unused)}"


def test_module_file_names_are_unique():
    duplicates = find_duplicate_names()
    assert not duplicates, "module file names used more than once (rename one):\n" + "\n".join(
        f"  {name}: {', '.join(paths)}" for name, paths in sorted(duplicates.items()))


def test_top_level_is_public_api_and_run_model(scan):
    modules, _, _, _ = scan
    top = top_level_modules(modules)
    _exact(top, TOP_LEVEL, "top-level modules that are not in TOP_LEVEL (move them into a sub-package), or",
           lambda item: item)


# ---------------------------------------------------------------------------------------------------------
# The scan itself can fail: synthetic packages with a cycle, a private import and a long function.
# ---------------------------------------------------------------------------------------------------------


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / PACKAGE
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_scan_detects_violations(tmp_path):
    root = _fake_package(tmp_path, {
        "__init__.py": "from .a import f\n",
        "a.py": "def f():\n    from .sub import b\n",
        "sub/__init__.py": "",
        "sub/b.py": "import daskmicro\nfrom ._priv import _helper, __all__\nfrom . import _priv\n",
        "sub/_priv.py": "_helper = 1\n",
        "c.py": "from .sub._priv import helper\nfrom .sub import _priv as p\nimport daskmicro.sub.b as b\n"
                "def g():\n    return p._helper, p.helper, b._x, p.__doc__\n",
        "d.py": "from .e import x\n",
        "e.py": "from . import d\n",
        "long.py": "class K:\n    def m(self):\n" + "        x = 1\n" * 100 + "\ndef short():\n    pass\n",
    })
    modules = scan_modules(root)
    refs = import_refs(modules, _package_dirs(root))
    graph = import_graph(modules, refs)
    assert find_cycles(graph) == {
        ("daskmicro", "daskmicro.a", "daskmicro.sub.b"),
        ("daskmicro.d", "daskmicro.e"),
    }
    assert set(find_private_imports(refs)) == {("daskmicro.sub.b", "daskmicro.sub._priv", "_helper")}
    assert set(find_private_imports(private_attribute_refs(modules, _package_dirs(root)))) == {
        ("daskmicro.c", "daskmicro.sub._priv", "_helper"),
        ("daskmicro.c", "daskmicro.sub.b", "_x"),
    }
    assert set(find_long_functions(modules)) == {("daskmicro.long", "K.m")}


def test_scan_detects_many_parameters(tmp_path):
    nine = "a, b, c, d, e, f, g, h, i"
    root = _fake_package(tmp_path, {
        "__init__.py": "",
        "many.py": (
            f"def nine({nine}):\n    pass\n"
            "def eight(a, b, c, d, e, f, g, h, *args, **kwargs):\n    pass\n"    # *args, **kwargs not counted
            "def mixed(a, /, b, *, c, d, e, f, g, h, i):\n    pass\n"            # positional-only, keyword-only
            "class K:\n"
            "    def method(self, a, b, c, d, e, f, g, h):\n        pass\n"      # self not counted
            f"    @classmethod\n    def build(cls, {nine}):\n        pass\n"
            f"    def outer(self):\n        def inner({nine}):\n            pass\n"
            f"async def coro({nine}):\n    pass\n"
            "square = lambda a, b, c, d, e, f, g, h, i: a\n"                      # a lambda is no function here
        ),
    })
    found = find_many_parameters(scan_modules(root))
    assert found == {("daskmicro.many", "nine"): 9, ("daskmicro.many", "mixed"): 9,
                     ("daskmicro.many", "K.build"): 9, ("daskmicro.many", "K.outer.inner"): 9,
                     ("daskmicro.many", "coro"): 9}
    assert find_many_parameters(scan_modules(root), limit=9) == {}


def test_scan_detects_folder_and_file_violations(tmp_path):
    root = _fake_package(tmp_path, {
        "__init__.py": "",
        "top.py": "from .x import a\n",
        "x/__init__.py": "",
        "x/a.py": "import dask.dataframe as dd\nfrom ..y.deep import b\n",
        "x/d.py": "def f():\n    import importlib\n    return importlib.import_module('distributed.client')\n",
        "y/__init__.py": "",
        "y/deep/__init__.py": "",
        "y/deep/b.py": "def g():\n    from ...x import a\n",
        "y/deep/a.py": "from distributed import Client\nimport daskmicro_like\n",
        "z/__init__.py": "from .. import top\n",
        "z/c.py": "from ..top import a\n" + "x = 1\n" * MAX_MODULE_LINES,
        "w/__init__.py": "",
        "w/ok.py": "import dask\n",
    })
    modules = scan_modules(root)
    refs = import_refs(modules, _package_dirs(root))
    graph, edges = folder_graph(modules, refs)
    # x -> y.deep (folded into y) -> x; top-level modules are nodes of their own: z -> top -> x, no cycle
    assert find_cycles(graph) == {("daskmicro.x", "daskmicro.y")}
    assert ("daskmicro.x", "daskmicro.y") in edges and "daskmicro.top" in graph["daskmicro.z"]
    assert set(find_long_modules(modules)) == {"daskmicro.z.c"}
    assert set(find_dask_imports(modules, allowed={"daskmicro.w", "daskmicro.top"})) == {
        ("daskmicro.x.a", "dask.dataframe"), ("daskmicro.x.d", "distributed.client"),
        ("daskmicro.y.deep.a", "distributed"),
    }
    assert find_duplicate_names(root) == {"a.py": ["daskmicro/x/a.py", "daskmicro/y/deep/a.py"]}
    assert top_level_modules(modules) == {"daskmicro", "daskmicro.top"}
