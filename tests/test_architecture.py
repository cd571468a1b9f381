"""The shape of the package, checked on its source with ``ast``: no import circles, imports
that run down the layers only, no private names imported across modules, and a Layout
(docs/architecture.md) that names every module and states the layers (libcst's boundary:
tests/syntax/test_libcst_boundary.py)."""

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


def _dynamic_target(call: ast.Call, module: str) -> str | None:
    """What ``importlib.import_module(...)`` imports: the module a string names, or the package
    an f-string's fixed part names (``f"{__name__}.{name}"`` in a package: that package)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name != "import_module" or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if not isinstance(arg, ast.JoinedStr):
        return None
    prefix = ""
    for part in arg.values:
        if isinstance(part, ast.Constant):
            prefix += part.value
        elif isinstance(part.value, ast.Name) and part.value.id == "__name__":
            prefix += module
        else:
            return prefix.rpartition(".")[0] or None
    return prefix


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) of every import in the file, at any depth
    (an import inside a function or an ``if TYPE_CHECKING:`` block is an edge of the graph too,
    and so is ``importlib.import_module``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and (target := _dynamic_target(node, module)) is not None:
            out.append((target, None, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += [(target, alias.name, node.lineno) for alias in node.names]
    return out


def _imported_modules(module: str, path: Path) -> list[tuple[str, int]]:
    """(module of the package, line) for every import of one in the file."""
    out = []
    for target, name, line in _imports(module, path):
        if name is not None and f"{target}.{name}" in MODULES:
            out.append((f"{target}.{name}", line))
        elif target in MODULES:
            out.append((target, line))
    return out


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for module, path in MODULES.items():
        edges[module].update(target for target, _ in _imported_modules(module, path))
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


# The layers, bottom to top: a module imports modules of its own layer and of the layers below
# it, never of one above — at any depth: inside functions, and in `if TYPE_CHECKING:` blocks too
# (a type a module names is part of what it depends on; no import is exempt). A package's
# name stands for its modules and subpackages; "ndif_opt" is the package's own __init__ only.
LAYERS = (
    ("ndif_opt.types", "ndif_opt.options", "ndif_opt.version"),
    ("ndif_opt.wording",),
    ("ndif_opt.syntax",),
    ("ndif_opt.analysis",),
    ("ndif_opt.cost",),
    ("ndif_opt.cost_model",),
    ("ndif_opt.passes",),
    ("ndif_opt.engine",),
    ("ndif_opt.api",),
    ("ndif_opt.output",),
    ("ndif_opt.verify",),
    ("ndif_opt.frontends",),
    ("ndif_opt", "ndif_opt.__main__"),
)


def _layer(module: str) -> int | None:
    for index, names in enumerate(LAYERS):
        for name in names:
            if module == name or (name != "ndif_opt" and module.startswith(name + ".")):
                return index
    return None


def test_every_module_is_in_a_layer():
    assert [module for module in MODULES if _layer(module) is None] == []


def test_imports_run_down_the_layers():
    upward = set()
    for module, path in MODULES.items():
        for target, line in _imported_modules(module, path):
            if _layer(target) > _layer(module):
                upward.add(f"{path.relative_to(ROOT)}:{line}: {module} (layer {_layer(module)}) imports "
                           f"{target} (layer {_layer(target)}), a layer above it")
    assert not upward, "\n".join(sorted(upward))


def test_the_layout_states_the_layers():
    """docs/architecture.md's Layout gives the order of LAYERS, bottom to top."""
    text = " ".join((ROOT / "docs" / "architecture.md").read_text().split("## Layout", 1)[1].split("```", 1)[0].split())
    short = [", ".join(name.removeprefix("ndif_opt.") for name in names) for names in LAYERS[:-1]]
    assert " ← ".join(short) + " ← the package (`__init__`, `__main__`)" in text


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


# directories of tests/ that test no one subpackage: golden files, and the suites run on other
# nnsight releases in venvs of their own (.ci/run)
NOT_A_SUBPACKAGE = {"golden", "nnterp_env", "nnsight04_env"}


def test_the_tests_follow_the_code():
    """tests/<subpackage>/ holds the tests of ndif_opt/<subpackage>/ (tests/passes/<id>/ those of
    one pass: tests/passes/test_registry.py); tests of the whole stay at the top. pytest imports
    each test file by its name (no __init__.py): no two may share one."""
    tests = ROOT / "tests"
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    directories = {path.name for path in tests.iterdir() if path.is_dir() and not path.name.startswith(("_", "."))}
    assert directories - NOT_A_SUBPACKAGE <= subpackages, directories - NOT_A_SUBPACKAGE - subpackages
    names = [path.name for path in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(name for name in set(names) if names.count(name) > 1)


def test_facts_of_a_version_are_cached_one_way():
    """docs/architecture.md, "Caching": a fact of a version is ``facts.once(compute, ...)``,
    keyed by a named function (no string key, no lambda), and nothing but Facts touches
    its memo."""
    offenders = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("once", "known", "once_for") and node.args:
                if node.func.attr == "once_for" or isinstance(node.args[0], (ast.Constant, ast.JoinedStr, ast.Lambda)):
                    offenders.append(f"{where}: .{node.func.attr}({ast.unparse(node.args[0])}, ...)")
            elif isinstance(node, ast.Attribute) and node.attr == "memo" and module != "ndif_opt.analysis.facts":
                offenders.append(f"{where}: .memo")
    assert offenders == []
