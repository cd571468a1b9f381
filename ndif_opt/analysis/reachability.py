"""Which functions of a file the code here may run.

The code a file runs is its module-level code (class bodies and ``if __name__ ==
"__main__":`` included), then every function that code names — calls, and also hands on
as a value (a callback passed to another module's function, a function stored in a
table): code elsewhere may call it — then every function *those* name, and so on. A
function that no code here names is run by nothing here: a script's dead code, or a
library module's API, which its callers run — unless the module's own code runs none
of its functions at all: then it is a library, and each public function (and public
method of a public class) is an entry point, run once. A name counts wherever it is spelled (a
call ``f(...)``, an attribute ``obj.f``, a string ``getattr(obj, "f")``), so two
functions of one name are both run when either is named; special methods
(``__init__``, ``__call__``, ...) run with their class, and a decorator that registers
a function (``@app.route``, ``@click.command``) makes it run — a decorator that only
wraps it (``@torch.no_grad()``, ``@staticmethod``) does not.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.facts import Facts, child_suites
from ndif_opt.analysis.vocabulary import MODEL_BLOCK_METHODS
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.walk import content_children

__all__ = ["Reach", "reach"]

# decorators that wrap a function and hand it back: they do not call it
WRAPPING_DECORATORS = frozenset({
    "staticmethod", "classmethod", "property", "abstractmethod", "overload", "override",
    "wraps", "lru_cache", "cache", "cached_property", "contextmanager", "asynccontextmanager",
    "no_grad", "inference_mode", "enable_grad", "set_grad_enabled", "jit", "compile",
})


@dataclass(frozen=True)
class Reach:
    """The functions (and methods) of a module that its code may run, and those it never does."""

    run: frozenset[int]  # ids of the FunctionDef nodes run
    unrun: tuple[cst.FunctionDef, ...]  # the others, in source order

    def runs(self, func: cst.FunctionDef) -> bool:
        return id(func) in self.run


def reach(facts: Facts) -> Reach:
    """The module's :class:`Reach` (worked out once per version of the tree)."""
    return facts.once(_reach_here)


def _reach_here(facts: Facts) -> Reach:
    return _reach(facts.module)


@dataclass
class _Def:
    func: cst.FunctionDef
    owner: cst.ClassDef | None  # the class it is a method of
    names: set[str]  # the names its body spells (not those of the functions it defines)
    inner: list["_Def"]  # functions defined in its body


def _reach(module: cst.Module) -> Reach:
    defs: list[_Def] = []
    classes: dict[str, list[cst.ClassDef]] = {}
    spelled: set[str] = set()
    for statement in reversed(module.body):  # (the order in which _spelled walks a module)
        names, statement_defs, statement_classes = _statement_spelling(statement)
        spelled |= names
        defs.extend(statement_defs)
        for name, found in statement_classes:
            classes.setdefault(name, []).extend(found)
    if not any(_named(entry, spelled, classes) for entry in defs) and not _opens_blocks(module.body):
        # a library module: its own code runs none of its functions and no nnsight block,
        # its users do: each public function, and each public method of a public class, is
        # an entry point
        spelled |= {entry.func.name.value for entry in defs if _public(entry)}
        spelled |= {name for name in classes if not name.startswith("_")}
    run: set[int] = set()
    pending = list(defs)
    changed = True
    while changed:
        changed = False
        for entry in list(pending):
            if not _named(entry, spelled, classes):
                continue
            run.add(id(entry.func))
            spelled |= entry.names
            pending.remove(entry)
            pending.extend(entry.inner)
            changed = True
    unrun = [d.func for d in _all(defs) if id(d.func) not in run]
    return Reach(frozenset(run), tuple(unrun))


@functools.lru_cache(maxsize=4096)
def _statement_spelling(statement: cst.BaseStatement) -> tuple[
        frozenset[str], tuple[_Def, ...], tuple[tuple[str, tuple[cst.ClassDef, ...]], ...]]:
    """What :func:`_spelled` finds in a top-level statement: the names it spells, its
    functions and its classes. A pure function of an immutable node, hashed by identity and
    kept alive while cached: the versions of a tree share most statements, and a file's
    windows their prelude's (the cost model asks once per version). Nothing changes the
    :class:`_Def` objects it returns."""
    defs: list[_Def] = []
    classes: dict[str, list[cst.ClassDef]] = {}
    names = _spelled(statement, None, defs, classes)
    return frozenset(names), tuple(defs), tuple((name, tuple(found)) for name, found in classes.items())


def _opens_blocks(statements) -> bool:
    """Does module-level code (functions and classes aside) open an nnsight block?"""
    for stmt in statements:
        if type(stmt) in (cst.FunctionDef, cst.ClassDef):
            continue
        if type(stmt) is cst.With and any(
                type(item.item) is cst.Call and type(item.item.func) is cst.Attribute
                and item.item.func.attr.value in MODEL_BLOCK_METHODS for item in stmt.items):
            return True
        if any(_opens_blocks(suite.body) for suite in child_suites(stmt)):
            return True
    return False


def _public(entry: _Def) -> bool:
    return not entry.func.name.value.startswith("_") and (
        entry.owner is None or not entry.owner.name.value.startswith("_"))


def _all(defs: list[_Def]):
    for entry in defs:
        yield entry
        yield from _all(entry.inner)


def _named(entry: _Def, spelled: set[str], classes: dict[str, list[cst.ClassDef]]) -> bool:
    func = entry.func
    name = func.name.value
    if name in spelled:
        return True
    if any(not _wraps_only(d) for d in func.decorators):
        return True  # registered: what it was handed to runs it
    if entry.owner is not None and name.startswith("__") and name.endswith("__"):
        return entry.owner.name.value in spelled  # it runs with its class
    return False


def _wraps_only(decorator: cst.Decorator) -> bool:
    expr = decorator.decorator
    if type(expr) is cst.Call:
        expr = expr.func
    name = dotted_name(expr) or ""
    return name.rsplit(".", 1)[-1] in WRAPPING_DECORATORS


def _spelled(node: cst.CSTNode, owner: cst.ClassDef | None, defs: list[_Def],
             classes: dict[str, list[cst.ClassDef]]) -> set[str]:
    """The names the code of ``node`` spells, outside the bodies of the functions it
    defines (each becomes a :class:`_Def` in ``defs``, with the names of its own body)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is cst.FunctionDef:
            inner: list[_Def] = []
            body = _spelled(current.body, None, inner, classes)
            defs.append(_Def(current, owner, body, inner))
            # decorators, defaults and annotations run where the function is defined
            stack.extend(current.decorators)
            stack.append(current.params)
            continue
        if kind is cst.ClassDef:
            classes.setdefault(current.name.value, []).append(current)
            stack.extend(current.decorators)
            stack.extend(a.value for a in current.bases)
            names |= _spelled(current.body, current, defs, classes)
            continue
        if kind is cst.Param:  # its name is bound, not spelled
            stack.extend(part for part in (current.default, current.annotation) if part is not None)
            continue
        if kind is cst.Name:
            names.add(current.value)
        elif kind is cst.Attribute:
            names.add(current.attr.value)
        elif kind is cst.SimpleString:
            text = current.value.strip("\"'rbuRBU")
            if text.isidentifier():
                names.add(text)  # getattr(obj, "run"), a table of names
        stack.extend(content_children(current))
    return names
