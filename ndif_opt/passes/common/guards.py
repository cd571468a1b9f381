"""Is an expression evaluated whenever the code holding it runs?

A pass that computes on the server what the client code computes (reduction-pushdown's
chains, the records of session-hoisting's client split) evaluates it every time; the
client code may evaluate it only under a condition (`if`, a `try` whose handler catches
what it raises, a loop that may not run, `x if c else y`, `and`/`or`, a comprehension,
a function), or after a statement that may end the code first (`return`, `raise`,
`break`, `continue`). Moved, it would run where the user's code does not, and may fail
there (an index past a short prompt's end): such an expression stays where it is.
"""

from __future__ import annotations

import itertools

import libcst as cst

from ndif_opt.analysis.names import COMPREHENSIONS
from ndif_opt.syntax.positions import code_of
from ndif_opt.syntax.walk import children

__all__ = ["CONDITIONAL_EXPRESSIONS", "guard_in", "guard_of", "guard_words", "jump_out_of", "may_fail"]

CONDITIONAL_EXPRESSIONS = (cst.IfExp, cst.BooleanOperation, cst.Lambda, *COMPREHENSIONS)


def guard_of(holder: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode | None:
    """What inside ``holder`` (a statement) decides whether ``node`` is evaluated when
    ``holder`` runs: the outermost conditional construct on the way down to it (the
    holder itself when it is one); None when it runs whenever the holder does, or is not
    in it. The parts a construct always evaluates first are not guarded by it: the test
    of an `if` or `while`, a `for` loop's iterable, the test of `x if c else y`, the left
    operand of `and`/`or`, a `with` statement's items and body."""
    path = _path_to(holder, node) if may_fail(node) else None
    return None if path is None else _guard_on(path)


def guard_in(statements, node: cst.CSTNode) -> cst.CSTNode | None:
    """:func:`guard_of` over a run of statements that runs in order: the guard in the
    statement holding ``node``, or a statement before it that may end the run first
    (:func:`jump_out_of`); None when ``node`` runs whenever the run does."""
    if not may_fail(node):
        return None
    for stmt in statements:
        path = _path_to(stmt, node)
        if path is not None:
            return _guard_on(path)
        jump = jump_out_of(stmt)
        if jump is not None:
            return jump
    return None


def may_fail(node: cst.CSTNode) -> bool:
    """Could evaluating ``node`` raise? Only a name, and slices of it with plain bounds
    (`prompt[:55]`, `ids[-8:]`: a slice past the end is shorter, not an error), are known
    not to."""
    while type(node) is cst.Subscript:
        if not all(type(element.slice) is cst.Slice and _plain_bounds(element.slice) for element in node.slice):
            return True
        node = node.value
    return type(node) is not cst.Name


def _plain_bounds(part: cst.Slice) -> bool:
    bounds = (part.lower, part.upper, part.step)
    return all(b is None or type(b) in (cst.Integer, cst.Name) or (
        type(b) is cst.UnaryOperation and type(b.expression) in (cst.Integer, cst.Name)) for b in bounds)


def _guard_on(path: list[cst.CSTNode]) -> cst.CSTNode | None:
    for index, (parent, child) in enumerate(itertools.pairwise(path)):
        if _always_evaluates(parent, child, path[index + 2] if index + 2 < len(path) else None):
            continue
        if isinstance(parent, CONDITIONAL_EXPRESSIONS) or (
                isinstance(parent, cst.BaseCompoundStatement) and not isinstance(parent, cst.With)):
            return parent
    return None


def jump_out_of(node: cst.CSTNode, in_loop: bool = False, *, raises: bool = True) -> cst.CSTNode | None:
    """A `return`, `raise` (unless not ``raises``), `break` or `continue` in ``node`` that
    may leave the suite holding it (not one of a function or class defined in it, nor a
    `break` or `continue` of a loop inside it)."""
    kind = type(node)
    if kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
        return None
    if kind is cst.Return or (raises and kind is cst.Raise) or (kind in (cst.Break, cst.Continue) and not in_loop):
        return node
    inner_loop = in_loop or kind in (cst.For, cst.While)
    for child in children(node):
        found = jump_out_of(child, inner_loop, raises=raises)
        if found is not None:
            return found
    return None


def guard_words(guard: cst.CSTNode) -> str:
    """Where a guarded expression runs, in the words of its guard (``guard_of``,
    ``jump_out_of``): "when `n > POS`", "inside `try:`, ..."."""
    line = code_of(guard).strip().splitlines()[0].rstrip(":")
    if isinstance(guard, cst.If):
        return f"when `{code_of(guard.test).strip()}`"
    if isinstance(guard, (cst.Try, cst.TryStar)):
        return "inside `try:`, whose handler may catch what it raises"
    if isinstance(guard, (cst.For, cst.While)):
        return f"in the loop `{line}`, which may not run"
    if isinstance(guard, (cst.Return, cst.Break, cst.Continue, cst.Raise)):
        return f"after `{line}`, which may end the code first"
    return f"as part of `{line}`, when it decides to"


def _always_evaluates(parent: cst.CSTNode, child: cst.CSTNode, grandchild: cst.CSTNode | None) -> bool:
    """Does ``parent`` evaluate ``child`` (on the way to ``grandchild``) every time it
    is evaluated itself?"""
    kind = type(parent)
    if isinstance(parent, COMPREHENSIONS):
        # the first `for`'s iterable is evaluated where the comprehension stands
        return child is parent.for_in and grandchild is parent.for_in.iter
    if kind in (cst.If, cst.While, cst.IfExp):
        return child is parent.test
    if kind is cst.For:
        return child is parent.iter or child is parent.target
    if kind is cst.BooleanOperation:
        return child is parent.left
    return False


def _path_to(holder: cst.CSTNode, node: cst.CSTNode) -> list[cst.CSTNode] | None:
    """[holder, ..., node], or None when ``node`` is not in ``holder``."""
    if holder is node:
        return [holder]
    for child in holder.children:
        found = _path_to(child, node)
        if found is not None:
            return [holder, *found]
    return None
