"""Walks over Python's own tree (:mod:`ast`), faster than ``ast.walk``.

The windows' plan and the file's results read Python's tree of the whole file on every run
(an editor's too): ``ast.walk`` lists each node's children through two generators, and a
third of the nodes it yields are the Load/Store context of a name. These walks list the
fields that may hold nodes once per node class and leave those leaves out.
"""

from __future__ import annotations

import ast

_AST = ast.AST
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # node class -> the fields that may hold nodes
# fields that never hold a node, in any class (identifiers, numbers, flags), a name's context
# and the operator of an operation (empty nodes that no walk here looks at)
_LEAF_FIELDS = frozenset({"ctx", "id", "attr", "arg", "name", "asname", "module", "level", "kind",
                          "type_comment", "is_async", "conversion", "rest", "op", "ops"})


def children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes(node)`` as a list, without the Load/Store/Del context of a
    name and the operator of an operation (leaves no walk looks at)."""
    kind = type(node)
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(
            f for f in kind._fields if f not in _LEAF_FIELDS and not (kind is ast.Constant and f == "value")
        )
    found = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, _AST):
            found.append(value)
        elif type(value) is list:
            found.extend([item for item in value if isinstance(item, _AST)])
    return found


def nodes(node: ast.AST) -> list[ast.AST]:
    """``node`` and every node under it (in no particular order), as :func:`children`
    lists them: ``list(ast.walk(node))`` without names' contexts and operators."""
    found, stack = [], [node]
    pop, extend, append = stack.pop, stack.extend, found.append
    while stack:
        current = pop()
        append(current)
        extend(children(current))
    return found


def load_names(node: ast.AST) -> set[str]:
    """The names the code under ``node`` reads (a `Name` in a Load context)."""
    name_kind, load = ast.Name, ast.Load
    return {n.id for n in nodes(node) if type(n) is name_kind and type(n.ctx) is load}
