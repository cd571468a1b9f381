"""What the cost walk reads of the code itself: invokes, ``tracer.stop()``, the
compound statements of a block, the main guard, calls of same-file functions (with the
comprehensions around them), and short quotes of code for notes.
"""

from __future__ import annotations

import functools

import libcst as cst

from ndif_opt.analysis.names import COMPREHENSIONS
from ndif_opt.syntax.loops import map_as_comprehension
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import content_children


def invoke_call(stmt: cst.With) -> cst.Call | None:
    """The ``tracer.invoke(...)`` call a ``with`` statement opens, if it is one."""
    item = stmt.items[0].item if stmt.items else None
    if type(item) is cst.Call and type(item.func) is cst.Attribute and item.func.attr.value == "invoke":
        return item
    return None


@functools.lru_cache(maxsize=4096)
def stop_index(block: cst.With, tracer: str | None) -> int | None:
    """Where a trace body calls ``tracer.stop()``: the index of the top-level statement
    that does, -1 when it is deeper; None when it does not. (A pure function of an
    immutable node, cached: every version of a tree walks the blocks it did not change.)"""
    if tracer is None:
        return None
    for index, stmt in enumerate(block.body.body):
        for node in walk_nodes(stmt):
            if is_stop_call(node) and node.func.value.value == tracer:
                top = type(stmt) is cst.SimpleStatementLine and any(
                    type(small) is cst.Expr and small.value is node for small in stmt.body
                )
                return index if top else -1
    return None


def is_stop_call(node: cst.CSTNode) -> bool:
    """Is ``node`` a call `<name>.stop()` (a tracer's)?"""
    return (type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "stop"
            and type(node.func.value) is cst.Name and not node.args)


@functools.lru_cache(maxsize=4096)
def calls_stop(node: cst.CSTNode) -> bool:
    """Does ``node`` hold a call `<name>.stop()`? (Cached by node: a pure function of an
    immutable node, asked again of every version's loops.)"""
    return any(is_stop_call(n) for n in walk_nodes(node))


def compound(block: cst.BaseSuite, into_loops: bool = True):
    """The compound statements nested in a block (cheaper than a walk of every node);
    without ``into_loops``, a loop inside is yielded but not entered (what its body holds
    belongs to it: its `break`, its `continue`)."""
    stack = list(block.body) if type(block) is cst.IndentedBlock else []
    while stack:
        stmt = stack.pop()
        kind = type(stmt)  # a simple statement line, or a compound statement
        if kind is cst.SimpleStatementLine or kind is cst.FunctionDef or kind is cst.ClassDef:
            continue
        yield stmt
        if not into_loops and (kind is cst.For or kind is cst.While):
            continue
        for part in (stmt.body, getattr(stmt, "orelse", None), getattr(stmt, "finalbody", None)):
            if type(part) in (cst.Else, cst.Finally):
                part = part.body
            if type(part) is cst.If:
                stack.append(part)
            elif type(part) is cst.IndentedBlock:
                stack.extend(part.body)
        for handler in getattr(stmt, "handlers", ()) or ():
            if type(handler.body) is cst.IndentedBlock:
                stack.extend(handler.body.body)


def is_main_guard(stmt: cst.If) -> bool:
    """``if __name__ == "__main__":`` — the branch a script run as a script takes."""
    test = stmt.test
    return (
        type(test) is cst.Comparison
        and len(test.comparisons) == 1
        and type(test.comparisons[0].operator) is cst.Equal
        and {code_of(test.left), code_of(test.comparisons[0].comparator)} in (
            {"__name__", '"__main__"'}, {"__name__", "'__main__'"}
        )
    )


def has_skip(node: cst.CSTNode) -> bool:
    return any(
        type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "skip"
        for n in walk_nodes(node)
    )


def names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in walk_nodes(node) if type(n) is cst.Name}


def walk_nodes(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        # whitespace, punctuation, operators: nothing the walks look for is there
        stack.extend(content_children(current))


@functools.lru_cache(maxsize=4096)
def same_file_calls(node: cst.CSTNode, functions: frozenset[str],
           instances: frozenset[str] = frozenset()) -> tuple[tuple[cst.Call, tuple], ...]:
    """Calls of the named same-file functions in ``node`` (methods called on ``self`` or on
    one of the ``instances``), each with the ``for`` clauses of the comprehensions around
    it (a pure function of an immutable node, cached: later versions of the tree share
    most statements)."""
    found: list[tuple[cst.Call, tuple]] = []
    _find_calls(node, functions, found, (), instances)
    return tuple(found)


LEAVING = (cst.Return, cst.Raise, cst.Break, cst.Continue)


def called_name(call: cst.Call, instances: frozenset[str] = frozenset()) -> str | None:
    """`run` for `run(...)`, `self.run` for `self.run(...)` and for `exp.run(...)` with
    `exp` one of the ``instances`` (`self.__call__` for `exp(...)`), else None."""
    func = call.func
    if type(func) is cst.Name:
        return "self.__call__" if func.value in instances else func.value
    if type(func) is cst.Attribute and type(func.value) is cst.Name and (
            func.value.value == "self" or func.value.value in instances):
        return f"self.{func.attr.value}"
    return None


def _find_calls(node: cst.CSTNode, functions: frozenset[str], found: list, loops: tuple,
                instances: frozenset[str]) -> None:
    # in the order of a walk (a node, then its children in libcst's order), reading only
    # the fields that may hold more than layout; a lambda's body runs later, if ever
    kind = type(node)
    if kind is cst.Lambda:
        return
    if kind is cst.Call and called_name(node, instances) in functions:
        found.append((node, loops))
    if kind is cst.Call:
        mapped = map_as_comprehension(node)
        if mapped is not None:
            clause, element = mapped
            _find_calls(clause.iter, functions, found, loops, instances)
            _find_calls(element, functions, found, (*loops, clause), instances)
            return
    if kind in COMPREHENSIONS:
        clause, inner = node.for_in, loops
        while clause is not None:
            _find_calls(clause.iter, functions, found, inner, instances)
            inner = (*inner, clause)
            for test in clause.ifs:
                _find_calls(test, functions, found, inner, instances)
            clause = clause.inner_for_in
        for element in ((node.key, node.value) if kind is cst.DictComp else (node.elt,)):
            _find_calls(element, functions, found, inner, instances)
        return
    for child in content_children(node):
        _find_calls(child, functions, found, loops, instances)
