"""The shape of the package, checked on its source with ``ast``: no import circles, no private
names imported across modules, and a Layout (docs/architecture.md) that names every module
(libcst's boundary: tests/test_libcst_boundary.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ndif_opt"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) of every import in the file, at any depth
    (an import inside a function is an edge of the graph too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [(target, alias.name, node.lineno) for alias in node.names]
    return out


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for module, path in MODULES.items():
        for target, name, _ in _imports(module, path):
            if name is not None and f"{target}.{name}" in MODULES:
                edges[module].add(f"{target}.{name}")
            elif target in MODULES:
                edges[module].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_circle():
    edges = _edges()
    # a package's __init__ importing its own modules is not a circle of the design
    for module in edges:
        edges[module] = {t for t in edges[module] if not module.startswith(t + ".")}
    assert _cycles(edges) == []


def test_no_private_name_is_imported_from_another_module():
    private = []
    for module, path in MODULES.items():
        for target, name, line in _imports(module, path):
            if target.startswith("ndif_opt") and name is not None and name.startswith("_") and target != module:
                private.append(f"{path.relative_to(ROOT)}:{line} imports {name} from {target}")
    assert private == []


def test_the_layout_names_every_module_once():
    text = (ROOT / "docs" / "architecture.md").read_text()
    layout = text.split("## Layout", 1)[1].split("```", 2)[1]
    listed = re.findall(r"^(ndif_opt/\S+\.py)\s", layout, re.M)
    expected = sorted(str(path.relative_to(ROOT)) for path in MODULES.values())
    assert sorted(listed) == expected
    assert len(listed) == len(set(listed))
