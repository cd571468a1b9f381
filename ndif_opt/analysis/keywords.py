"""The keyword arguments a call passes, those that come through `**name` of a dict the
script builds included (`gen_kwargs = dict(max_new_tokens=20, remote=True)`, then
`model.generate(**gen_kwargs)`): migration asks whether a generate passes
`max_new_tokens=`, the cost model how many tokens it makes."""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.walk import find_nodes


def passed_keywords(call: cst.Call, facts: Facts) -> dict[str, cst.BaseExpression] | None:
    """The keyword arguments ``call`` passes, by name, with their values: those written out,
    and those of `**name` where every binding of ``name`` is a dict with constant keys that
    nothing changes in place; None when a `**` may pass keywords no one can tell before
    running (a parameter, a dict that is updated, one built another way)."""
    passed: dict[str, cst.BaseExpression] = {}
    for arg in call.args:
        if arg.keyword is not None:
            passed[arg.keyword.value] = arg.value
        elif arg.star == "**":
            items = _dict_items(arg.value, facts)
            if items is None:
                return None
            passed.update(items)
    return passed


def known_keywords(call: cst.Call, facts: Facts) -> dict[str, cst.BaseExpression]:
    """What :func:`passed_keywords` tells, or, when a `**` cannot be told, the keyword
    arguments written out."""
    passed = passed_keywords(call, facts)
    if passed is None:
        passed = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    return passed


def _dict_items(expr: cst.BaseExpression, facts: Facts) -> dict[str, cst.BaseExpression] | None:
    """The items of the dict ``expr`` is: a `dict(k=...)` call or a `{"k": ...}` display, or a
    name every simple binding of which is one (its values: the last binding's, when several
    bind the same key)."""
    if type(expr) is cst.Name:
        name = expr.value
        bindings = facts.bindings.get(name, [])
        if not bindings or name in _bound_otherwise(facts):
            return None
        items: dict[str, cst.BaseExpression] = {}
        for _, value in bindings:
            found = None if type(value) is cst.Name else _dict_items(value, facts)
            if found is None:
                return None
            items.update(found)
        return items
    if type(expr) is cst.Call and dotted_name(expr.func) == "dict" and "dict" not in facts.bindings:
        if any(arg.keyword is None for arg in expr.args):
            return None
        return {arg.keyword.value: arg.value for arg in expr.args}
    if type(expr) is cst.Dict:
        items = {}
        for element in expr.elements:
            if type(element) is not cst.DictElement or type(element.key) is not cst.SimpleString:
                return None
            items[element.key.evaluated_value] = element.value
        return items
    return None


def _bound_otherwise(facts: Facts) -> frozenset[str]:
    """Names the module binds other than by a simple assignment (a parameter, a loop target,
    an augmented assignment) or whose object it changes in place (`kw["k"] = v`,
    `kw.update(...)`: Facts.mutated_names)."""
    return facts.once(_bound_otherwise_here)


def _bound_otherwise_here(facts: Facts) -> frozenset[str]:
    return _names_bound_otherwise(facts.module) | facts.mutated_names()


def _names_bound_otherwise(module: cst.Module) -> frozenset[str]:
    found: set[str] = set()

    class Finder(cst.CSTVisitor):
        def visit_Param(self, node: cst.Param) -> None:
            found.add(node.name.value)

        def visit_For(self, node: cst.For) -> None:
            found.update(n.value for n in find_nodes(node.target, lambda n: type(n) is cst.Name))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if type(node.target) is cst.Name:
                found.add(node.target.value)

    module.visit(Finder())
    return frozenset(found)
