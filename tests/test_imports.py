"""The import graph: no cycle among the project's modules (every import: module level, inside
functions and under ``if TYPE_CHECKING``), the framework
(dataprep/) never imports a concrete stage, pretrain/ never imports stages/, and the prepare path
leaves MindSpore and Ray unimported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dataprep", "stages", "pretrain")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(path: Path, name: str, modules: dict[str, Path], top_level_only: bool) -> set[str]:
    """Project modules ``name`` imports (at module level only, outside ``if TYPE_CHECKING``,
    when ``top_level_only``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    if top_level_only:
        nodes = [n for n in nodes if _is_module_level(tree, n)]
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]).strip(".")
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in modules else base)
    return {m for m in out if m in modules and m != name}


def _is_module_level(tree: ast.Module, target: ast.AST) -> bool:
    """``target`` runs when the module is imported: not inside a function or class body."""

    def visit(node: ast.AST) -> bool:
        for child in ast.iter_child_nodes(node):
            if child is target:
                return True
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if visit(child):
                return True
        return False

    return visit(tree)


def import_graph(top_level_only: bool = False) -> dict[str, set[str]]:
    """{module: the project modules it imports} (every import unless ``top_level_only``)."""
    modules = _modules()
    return {name: _imports(path, name, modules, top_level_only) for name, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each
    sorted; modules in one of them import each other, directly or through the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_import_cycles() -> None:
    """No circle, counting the imports inside functions (they run later, but a circle through
    them still ties the modules together) and those under TYPE_CHECKING."""
    graph = import_graph()
    described = [
        ", ".join(f"{m} -> {sorted(graph[m] & set(cycle))}" for m in cycle) for cycle in import_cycles(graph)
    ]
    assert not described, "import cycles:\n" + "\n".join(described)


def test_import_cycles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_the_framework_never_imports_a_stage_and_training_never_imports_stages() -> None:
    modules = _modules()
    for name, path in modules.items():
        deps = _imports(path, name, modules, top_level_only=False)
        if name.startswith(("dataprep", "pretrain")):
            assert not {d for d in deps if d.split(".")[0] == "stages"}, f"{name} imports {deps}"


def test_the_prepare_path_needs_neither_mindspore_nor_ray() -> None:
    probe = (
        "import sys, dataprep.cli, dataprep.executor, dataprep.stage, dataprep.decide_jobs\n"
        "dataprep.stage.all_stages()\n"
        "print(sorted(m for m in ('mindspore', 'ray', 'torch') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert r.stdout.strip() == "[]"


ISOLATED_IMPORTS = """
import importlib, os, sys
names = sys.argv[1:]
for name in names:  # the third-party libraries get loaded once, here (failures: below)
    try:
        importlib.import_module(name)
    except BaseException:
        pass
failed = []
for name in names:
    pid = os.fork()
    if pid == 0:  # a fresh copy of every project module: only ``name`` asked for
        for loaded in [m for m in sys.modules if m.split(".")[0] in {"dataprep", "stages"}]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except BaseException as e:
            print(f"{name}: {type(e).__name__}: {e}", flush=True)
            os._exit(1)
        os._exit(0)
    if os.waitpid(pid, 0)[1]:
        failed.append(name)
print("failed:", " ".join(failed))
"""


def test_every_module_imports_on_its_own() -> None:
    """Each module of dataprep/ and stages/ (the prepare path) imported first, with no other project
    module loaded: an import cycle or a missing import shows up only in some orders. (pretrain/'s
    graph is checked by ``test_no_import_cycles``; forking a process holding MindSpore is slow.)"""
    names = sorted(
        n for n in _modules() if n.split(".")[0] in ("dataprep", "stages") and n != "dataprep.__main__"
    )
    r = subprocess.run(
        [sys.executable, "-c", ISOLATED_IMPORTS, *names], capture_output=True, text=True, cwd=ROOT
    )
    assert r.stdout.strip().splitlines()[-1] == "failed:", r.stdout + r.stderr


if __name__ == "__main__":  # print the circles: python tests/test_imports.py
    for cycle in import_cycles(import_graph()):
        print(len(cycle), " ".join(cycle))
