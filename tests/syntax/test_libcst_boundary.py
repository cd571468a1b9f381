"""ndif_opt uses libcst's public API, but for one module (ndif_opt/syntax/codegen.py), which pins
the libcst release it was checked against and refuses another; nothing patches libcst."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import libcst as cst
import libcst.metadata

from ndif_opt.syntax import codegen

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ndif_opt"
ALLOWED = PACKAGE / "syntax" / "codegen.py"  # the one module on libcst's private API


def _modules() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def _private_libcst_members() -> set[str]:
    """The private methods and properties of libcst's classes (``_codegen``,
    ``_visit_and_replace_children``, ``_validate``...), but names too common to tell."""
    found = set()
    for module in (cst, libcst.metadata):
        for kind in vars(module).values():
            if not isinstance(kind, type) or not kind.__module__.startswith("libcst"):
                continue
            for klass in kind.__mro__:
                if klass.__module__.startswith("libcst"):
                    found |= {name for name, value in vars(klass).items()
                              if name.startswith("_") and not name.startswith("__")
                              and (inspect.isfunction(value) or isinstance(value, (property, classmethod, staticmethod)))}
    return found - {"_name", "_index", "_gen", "_generate_next_value_"}


def test_only_codegen_imports_libcst_internals():
    importers = set()
    for path, tree in _modules().items():
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.startswith("libcst._") for name in names):
                importers.add(path.relative_to(ROOT).as_posix())
    assert importers == {"ndif_opt/syntax/codegen.py"}


def test_only_codegen_uses_private_members_of_libcst():
    private = _private_libcst_members()
    assert {"_codegen", "_visit_and_replace_children", "_validate"} <= private
    used = [f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
            for path, tree in _modules().items() if path != ALLOWED
            for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in private]
    assert used == []


def _libcst_names(tree: ast.Module) -> set[str]:
    """Names a module binds to libcst or to something imported from it."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names
                      if alias.name.split(".")[0] == "libcst"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "libcst":
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _root(node: ast.AST) -> tuple[str | None, int]:
    """The name an attribute chain starts from, and how many attributes follow it."""
    depth = 0
    while isinstance(node, ast.Attribute):
        node, depth = node.value, depth + 1
    return (node.id if isinstance(node, ast.Name) else None), depth


def test_nothing_assigns_to_an_attribute_of_libcst():
    """No ``CSTNode.x = ...``, ``cst.Name.x = ...``, ``setattr(cst.Module, ...)``: a library
    must not change libcst for the whole process (its caller's, an editor server's)."""
    patched = []
    for path, tree in _modules().items():
        libcst_names = _libcst_names(tree)

        def of_libcst(target: ast.AST, least_depth: int) -> bool:
            root, depth = _root(target)
            # `cst.X.y = ...` (module, class, attribute) or `X.y = ...` (X imported from libcst)
            return root in libcst_names and depth >= least_depth

        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                if isinstance(target, ast.Attribute) and of_libcst(target, 1):
                    patched.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("setattr", "delattr") and node.args and of_libcst(node.args[0], 0)):
                patched.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert patched == []


def test_pyproject_pins_the_release_codegen_was_checked_against():
    pyproject = (ROOT / "pyproject.toml").read_text()
    pins = re.findall(r'"libcst([^"]*)"', pyproject)
    assert pins == [f"=={codegen.LIBCST_RELEASE}.*"]


def test_codegen_refuses_another_libcst_release():
    script = ("import libcst._version\nlibcst._version.__version__ = '1.99.0'\n"
              "import ndif_opt.syntax.codegen\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert "ImportError" in done.stderr
    assert f"libcst=={codegen.LIBCST_RELEASE}.*" in done.stderr and "1.99.0" in done.stderr
