"""A read-only walk of a libcst tree, five times faster than ``node.visit(visitor)``.

libcst visits a tree by rebuilding it: even a read-only ``CSTVisitor`` makes every node
construct (and validate) a copy of itself, and dispatch looks its ``visit_<Node>``
method up by name at every node. The analyses only read. :func:`walk` calls the same
visitor methods on the same nodes in the same order (``visit_<Node>``, children unless
it returned False, ``leave_<Node>``; a visitor that overrides ``on_visit``/``on_leave``
gets those called instead), without building anything.

The order of a node's children is libcst's own: read once per node class from the field
names its ``_visit_and_replace_children`` visits, in order (the test suite checks it
against libcst's ``children`` on every node of a large corpus). Attribute hooks
(``visit_<Node>_<field>``) and metadata are not supported: no analysis uses them.
"""

from __future__ import annotations

import inspect
import re

import libcst as cst

_VISITED_FIELD = re.compile(r'visit_\w+\(\s*self,\s*"(\w+)"')


class _Fields:
    """Child field names of each node class, in libcst's visiting order (read lazily)."""

    def __init__(self) -> None:
        self._by_class: dict[type, tuple[str, ...]] = {}

    def of(self, cls: type) -> tuple[str, ...]:
        fields = self._by_class.get(cls)
        if fields is None:
            source = inspect.getsource(cls._visit_and_replace_children)
            fields = self._by_class[cls] = tuple(dict.fromkeys(_VISITED_FIELD.findall(source)))
        return fields


_FIELDS = _Fields()  # a fact about the installed libcst, the same for every tree


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node.children``, without rebuilding ``node``."""
    found: list[cst.CSTNode] = []
    for name in _FIELDS.of(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif type(value) is tuple or type(value) is list:
            found.extend(item for item in value if isinstance(item, cst.CSTNode))
    return found


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """What ``node.visit(visitor)`` does for a read-only visitor."""
    cls = type(visitor)
    if cls.on_visit is not cst.CSTVisitor.on_visit or cls.on_leave is not cst.CSTVisitor.on_leave:
        _walk_hooked(node, visitor)
    else:
        _walk_dispatched(node, visitor, {})


def _walk_dispatched(node: cst.CSTNode, visitor: cst.CSTVisitor, methods: dict) -> None:
    node_cls = type(node)
    entry = methods.get(node_cls)
    if entry is None:
        visitor_cls = type(visitor)
        name = node_cls.__name__
        entry = methods[node_cls] = (
            getattr(visitor_cls, "visit_" + name, None),
            getattr(visitor_cls, "leave_" + name, None),
            _FIELDS.of(node_cls),
        )
    visit, leave, fields = entry
    if visit is None or visit(visitor, node) is not False:
        for field in fields:
            value = getattr(node, field)
            if isinstance(value, cst.CSTNode):
                _walk_dispatched(value, visitor, methods)
            elif type(value) is tuple or type(value) is list:
                for item in value:
                    if isinstance(item, cst.CSTNode):
                        _walk_dispatched(item, visitor, methods)
    if leave is not None:
        leave(visitor, node)


def _walk_hooked(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    if visitor.on_visit(node):
        for field in _FIELDS.of(type(node)):
            value = getattr(node, field)
            if isinstance(value, cst.CSTNode):
                _walk_hooked(value, visitor)
            elif type(value) is tuple or type(value) is list:
                for item in value:
                    if isinstance(item, cst.CSTNode):
                        _walk_hooked(item, visitor)
    visitor.on_leave(node)


__all__ = ["children", "walk"]
