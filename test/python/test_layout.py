"""The package's import structure: no import cycle, no private name imported
from another part, no tool importing another tool, the decision never compiling.

Read from the sources (``ast``), so nothing is imported; a part is a
subpackage of ``falcon_mlir`` (catalog, decision, passes, pipeline, tools ...)
or one of its top-level modules (api, cli, options ...).
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pyproject's package-dir: these folders map into the falcon_mlir namespace.
TREES = {"falcon_mlir": "falcon_mlir", "falcon_mlir.passes": "passes",
         "falcon_mlir.dialects": "dialects", "falcon_mlir.tools": "tools"}


def _modules() -> dict:
    mods = {}
    for pkg, folder in TREES.items():
        base = os.path.join(ROOT, folder)
        for dirpath, _, files in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            parts = [] if rel == "." else rel.split(os.sep)
            for f in files:
                if f.endswith(".py"):
                    name = ".".join([pkg] + parts + ([] if f == "__init__.py" else [f[:-3]]))
                    mods[name] = os.path.join(dirpath, f)
    return mods


MODULES = _modules()


def _imports(name: str, path: str):
    """``(target module, imported name or None, at module level)`` per import."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    top = set(map(id, tree.body))
    for stmt in ast.walk(tree):
        at_top = id(stmt) in top
        if isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                base = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
                base = base[:len(base) - stmt.level + 1]
                target = ".".join(base + ([stmt.module] if stmt.module else []))
            else:
                target = stmt.module or ""
            for alias in stmt.names:
                sub = f"{target}.{alias.name}"
                yield (sub, None, at_top) if sub in MODULES else (target, alias.name, at_top)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                yield alias.name, None, at_top


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _with_parents(target: str) -> list:
    p = target.split(".")
    return [".".join(p[:i]) for i in range(1, len(p) + 1) if ".".join(p[:i]) in MODULES]


def test_no_import_cycle_at_module_level():
    graph = {m: set() for m in MODULES}
    for m, path in MODULES.items():
        for target, _, at_top in _imports(m, path):
            if at_top and target.startswith("falcon_mlir"):
                graph[m].update(t for t in _with_parents(target)
                                if t != m and not m.startswith(t + "."))
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_no_private_name_across_parts():
    bad = [f"{m} imports {target}.{name}" for m, path in MODULES.items()
           for target, name, _ in _imports(m, path)
           if target.startswith("falcon_mlir") and name and name.startswith("_")
           and not name.startswith("__") and _part(target) != _part(m)]
    assert bad == []


def test_no_tool_imports_another_tool():
    bad = [f"{m} imports {target}" for m, path in MODULES.items() if m.startswith("falcon_mlir.tools.")
           for target, _, _ in _imports(m, path) if target.startswith("falcon_mlir.tools.")]
    assert bad == []


def test_decision_never_compiles():
    allowed = ("falcon_mlir.decision", "falcon_mlir.catalog", "falcon_mlir.dialects.plan",
               "falcon_mlir.files")  # Profile.save writes atomically
    bad = [f"{m} imports {target}" for m, path in MODULES.items() if m.startswith("falcon_mlir.decision")
           for target, _, _ in _imports(m, path)
           if (target.startswith("falcon_mlir") and not target.startswith(allowed)
               and target != "falcon_mlir") or target.startswith("iree")]
    assert bad == []


def test_every_package_folder_is_listed_in_pyproject():
    """Was: passes/empty_reduction/ was not in pyproject's ``packages``; the editable install (the
    tests') found it through the folder, but a wheel (``pip install .``) left it out and every tool
    died at import, ``--version`` included ("internal error: ModuleNotFoundError: No module named
    'falcon_mlir.passes.empty_reduction'"). Every folder with an ``__init__.py`` under the
    package-dir trees must be listed, and every listed package must have one."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = {m for m, path in MODULES.items() if path.endswith("__init__.py")}
    assert sorted(found - listed) == [] and sorted(listed - found) == []


def test_ci_runs_readmes_test_command():
    """CI runs exactly what a new user runs: the last line of ``.ci/run`` is README's second
    command (the one that runs the tests), character for character."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```sh\n")[1:3]]
    assert len(blocks) == 2 and "pytest" in blocks[1] and "run_model.py" in blocks[0], blocks
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci_lines = [ln for ln in f.read().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci_lines[-1] == blocks[1]
