"""What an expression spells, read as syntax: ``a.b.c`` (:func:`dotted_name`), the name at
the root of ``a[0].b`` (:func:`root_name`), and nnsight's two call shapes every layer asks
about — a save (:func:`is_save_call`) and a call's ``remote=`` argument (:func:`remote_arg`).

No facts of the tree, no scopes: the node alone answers. (Type checks, not isinstance:
libcst's node classes are final, and isinstance against them is an ABC check, several times
slower; these are asked everywhere.)
"""

from __future__ import annotations

import libcst as cst


def root_name(expr: cst.BaseExpression) -> str | None:
    """`a` for `a`, `a.b.c`, `a[0].b`, `a.b(...).c`; None when the root is not a name."""
    while True:
        kind = type(expr)
        if kind is cst.Name:
            return expr.value
        if kind is cst.Attribute or kind is cst.Subscript:
            expr = expr.value
        elif kind is cst.Call:
            expr = expr.func
        else:
            return None


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for an attribute chain of names; None for anything else."""
    if type(expr) is cst.Name:
        return expr.value
    parts: list[str] = []
    while type(expr) is cst.Attribute:
        parts.append(expr.attr.value)
        expr = expr.value
    if type(expr) is not cst.Name:
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def is_save_call(expr: cst.BaseExpression) -> bool:
    """`x.save()` or `nnsight.save(x)` / `save(x)`."""
    if type(expr) is not cst.Call:
        return False
    func = expr.func
    if type(func) is cst.Attribute and func.attr.value == "save" and not expr.args:
        return True
    name = dotted_name(func)
    return name in ("nnsight.save", "save") and len(expr.args) >= 1


def remote_arg(call: cst.Call) -> cst.Arg | None:
    """The call's `remote=` argument, if it has one."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "remote":
            return arg
    return None
