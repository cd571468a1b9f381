"""A script's results: the module-level names it leaves bound, which every rewrite keeps.

Python tools never treat a module-level name as dead (pyflakes' and ruff's unused-variable
rules are for function locals), and neither does ndif-opt: whatever a script leaves in its
namespace is what `python -i`, `%run`, `runpy`, an import or a debugger shows. So every
module-level name the original script leaves bound must hold an equal value after the
optimized script, except the script's *intermediates*:

- a name bound only to a saved model value that code reads (`logits =
  model.lm_head.output.save()` followed by `logits[0, -1].argmax()`): once the reads move
  into the session the download is what the rewrite saves (a value saved and read nowhere
  is what the script saved it for: a result);
- a loop temporary: a name every iteration of a loop around it binds afresh (`for prompt
  in prompts:`, and what the body binds for sure before it reads it);
- the tracer an nnsight block binds with `as`, and an `except ... as` name (Python unbinds
  it).

The rule is read once per file, on Python's own tree of the code as written
(:func:`script_result_names`): a window of the file, and every version of the tree the passes
make, take the file's answer (``analyze(..., original_results=...)``), so windowed and
whole-file runs agree and a rewrite never turns a result into an intermediate.
"""

from __future__ import annotations

import ast

from ndif_opt.analysis.vocabulary import BLOCK_METHODS
from ndif_opt.syntax.python_ast import load_names, nodes

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def script_result_names(tree: ast.Module, source: str | None = None) -> frozenset[str]:
    """The names of the script's results (see the module docstring). ``source``: the code
    ``tree`` was parsed from, when the caller has it (then a code without `:=` is not
    searched for what `:=` binds)."""
    if source is None or ":=" in source:
        walrus = any(type(node) is ast.NamedExpr for node in nodes(tree))
    else:
        walrus = False
    known: list[frozenset[str]] = []

    def read() -> frozenset[str]:  # (asked only of a name a block binds to a saved value)
        if not known:
            known.append(_read_names(tree))
        return known[0]

    results: set[str] = set()
    temporaries: dict[int, frozenset[str]] = {}  # id(loop) -> _afresh(loop), asked of each binding in it

    def afresh(loop: ast.stmt) -> frozenset[str]:
        found = temporaries.get(id(loop))
        if found is None:
            found = temporaries[id(loop)] = _afresh(loop)
        return found

    for stmt, loops, in_block in _module_statements(tree.body, (), False):
        for name, intermediate in _bindings(stmt, in_block, read, _walrus if walrus else _no_walrus):
            if not intermediate and not any(name in afresh(loop) for loop in loops):
                results.add(name)
    return frozenset(results)


def _module_statements(body, loops: tuple, in_block: bool):
    """(statement, the loops around it, inside an nnsight block?) for every statement of
    module-level code, compound ones included, functions and classes not entered."""
    for stmt in body:
        yield stmt, loops, in_block
        if isinstance(stmt, _SCOPES):
            continue
        inner_loops = (*loops, stmt) if isinstance(stmt, _LOOPS) else loops
        inner_block = in_block or (isinstance(stmt, (ast.With, ast.AsyncWith)) and _opens_block(stmt))
        for field in ("body", "orelse", "finalbody"):
            yield from _module_statements(getattr(stmt, field, []) or [], inner_loops if field == "body" else loops,
                                          inner_block if field == "body" else in_block)
        for handler in getattr(stmt, "handlers", []) or []:
            yield from _module_statements(handler.body, loops, in_block)
        for case in getattr(stmt, "cases", []) or []:
            yield from _module_statements(case.body, loops, in_block)


def _opens_block(stmt: ast.With | ast.AsyncWith) -> bool:
    return any(isinstance(item.context_expr, ast.Call) and isinstance(item.context_expr.func, ast.Attribute)
               and item.context_expr.func.attr in BLOCK_METHODS for item in stmt.items)


def _bindings(stmt: ast.stmt, in_block: bool, read, _walrus) -> list[tuple[str, bool]]:
    """(name, an intermediate by how it is bound) for what ``stmt`` binds in its own line or
    header (not in the statements it holds); ``_walrus``: what an expression binds with `:=`."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [(stmt.name, False)]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [(n, True) for n in _targets(stmt.target)] + _walrus(stmt.iter)
    if isinstance(stmt, (ast.While, ast.If)):
        return _walrus(stmt.test)
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        block = _opens_block(stmt)
        found = []
        for item in stmt.items:
            found += _walrus(item.context_expr)
            if item.optional_vars is not None:
                found += [(n, block) for n in _targets(item.optional_vars)]
        return found
    if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
        return [(h.name, True) for h in stmt.handlers if h.name]
    if isinstance(stmt, ast.Assign):
        saved = in_block and _saves_a_model_value(stmt.value)
        return [(n, saved and n in read()) for t in stmt.targets for n in _targets(t)] + _walrus(stmt.value)
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return [(n, False) for n in _targets(stmt.target)] + (_walrus(stmt.value) if stmt.value else [])
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [((a.asname or a.name).split(".")[0], False) for a in stmt.names if a.name != "*"]
    if isinstance(stmt, ast.Delete):
        return [(n, False) for t in stmt.targets for n in _targets(t)]
    if isinstance(stmt, ast.Expr):
        return _walrus(stmt.value)
    return []


def _targets(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for element in target.elts for n in _targets(element)]
    if isinstance(target, ast.Starred):
        return _targets(target.value)
    return []  # `x[i] = v`, `x.a = v`: a change of `x`, not a binding


def _no_walrus(expr: ast.expr | None) -> list[tuple[str, bool]]:
    """:func:`_walrus` in a tree without `:=`."""
    return []


def _walrus(expr: ast.expr | None) -> list[tuple[str, bool]]:
    if expr is None:
        return []
    return [(node.target.id, False) for node in nodes(expr) if type(node) is ast.NamedExpr]


def _saves_a_model_value(value: ast.expr) -> bool:
    """`x.save()` / `nnsight.save(x)` of a computed value, not of a container the script
    fills (`list().save()`, `nnsight.save(results)`)."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr == "save" and not value.args:
        saved = func.value
    elif (isinstance(func, ast.Name) and func.id == "save") or (
            isinstance(func, ast.Attribute) and func.attr == "save" and isinstance(func.value, ast.Name)
            and func.value.id == "nnsight"):
        if not value.args:
            return False
        saved = value.args[0]
    else:
        return False
    if isinstance(saved, ast.Name):
        return False
    empty = (isinstance(saved, (ast.List, ast.Dict)) and not (saved.elts if isinstance(saved, ast.List) else saved.keys))
    made = (isinstance(saved, ast.Call) and isinstance(saved.func, ast.Name) and saved.func.id in ("list", "dict")
            and not saved.args and not saved.keywords)
    return not (empty or made)


def _read_names(tree: ast.Module) -> frozenset[str]:
    return frozenset(load_names(tree))


def _afresh(loop: ast.stmt) -> frozenset[str]:
    """Names every iteration of ``loop`` binds before it reads them (its temporaries): bound
    for sure by its body, and read nowhere in it before that."""
    exposed: set[str] = set()
    bound = _scan(loop.body, set(), exposed)
    return frozenset(bound - exposed)


def _scan(stmts, bound: set[str], exposed: set[str]) -> set[str]:
    """Adds to ``exposed`` the names ``stmts`` may read before binding them (given the names
    ``bound`` before them); returns the names bound for sure after them."""
    bound = set(bound)
    for stmt in stmts:
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                exposed |= _expr_reads(item.context_expr) - bound
                if item.optional_vars is not None:
                    bound |= set(_targets(item.optional_vars))
            bound = _scan(stmt.body, bound, exposed)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            exposed |= _expr_reads(stmt.iter) - bound
            _scan(stmt.body, bound | set(_targets(stmt.target)), exposed)
            _scan(stmt.orelse, bound, exposed)
        elif isinstance(stmt, (ast.If, ast.While)):
            exposed |= _expr_reads(stmt.test) - bound
            _scan(stmt.body, bound, exposed)
            _scan(stmt.orelse, bound, exposed)
            bound |= _definite(stmt)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            _scan(stmt.body + stmt.orelse, bound, exposed)
            for handler in stmt.handlers:
                _scan(handler.body, bound | ({handler.name} if handler.name else set()), exposed)
            _scan(stmt.finalbody, bound, exposed)
            bound |= _definite(stmt)
        else:
            exposed |= _reads(stmt) - bound
            bound |= _definite(stmt)
    return bound


def _expr_reads(expr: ast.expr) -> set[str]:
    return load_names(expr)


def _reads(stmt: ast.stmt) -> set[str]:
    found = nodes(stmt)
    reads = {node.id for node in found if type(node) is ast.Name and type(node.ctx) is ast.Load}
    # `total += x` reads `total` (its target is a store to Python's tree)
    return reads | {n for node in found if type(node) is ast.AugAssign for n in _targets(node.target)}


def _definite(stmt: ast.stmt) -> set[str]:
    """Names ``stmt`` binds whenever it completes normally."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None) is not None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n for t in targets for n in _targets(t)}
    if isinstance(stmt, ast.AugAssign):
        return set(_targets(stmt.target))
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        found = {n for item in stmt.items if item.optional_vars is not None for n in _targets(item.optional_vars)}
        for inner in stmt.body:
            found |= _definite(inner)
        return found
    if isinstance(stmt, ast.If) and stmt.orelse:
        return set().union(*(_definite(s) for s in stmt.body)) & set().union(*(_definite(s) for s in stmt.orelse))
    return set()
