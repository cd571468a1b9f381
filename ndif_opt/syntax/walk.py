"""A read-only walk of a libcst tree, five times faster than ``node.visit(visitor)``.

libcst visits a tree by rebuilding it: even a read-only ``CSTVisitor`` makes every node
construct (and validate) a copy of itself, and dispatch looks its ``visit_<Node>``
method up by name at every node. The analyses only read. :func:`walk` calls the same
visitor methods on the same nodes in the same order (``visit_<Node>``, children unless
it returned False, ``leave_<Node>``; a visitor that overrides ``on_visit``/``on_leave``
gets those called instead), without building anything.

The order of a node's children is libcst's own, learned once per node class through
libcst's public visitor API (:func:`visiting_order`; the test suite checks it against
libcst's ``children`` on every node of a large corpus). Attribute hooks
(``visit_<Node>_<field>``) and metadata are not supported: no analysis uses them.

:func:`paths_to` and :func:`find_nodes` go further for searches: they read only the fields
that may hold more than layout (whitespace, punctuation, operators), per libcst's own
annotations (:func:`content_fields`).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable

import libcst as cst

# whitespace, comments, punctuation and operators: nodes that hold nothing else
_LAYOUT_BASES = (
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline,
    cst.Comment, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
    cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.BaseAugOp, cst.BaseBinaryOp,
    cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp,
)


def _may_hold_content(annotation) -> bool:
    """Can a field so annotated hold a node other than layout? (True when unsure.)"""
    if isinstance(annotation, type):
        return not issubclass(annotation, (*_LAYOUT_BASES, str, bool, int, type(None), cst.MaybeSentinel))
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return False
    if origin is None:
        return True  # a forward reference, say
    return any(_may_hold_content(arg) for arg in typing.get_args(annotation))


class _Fields:
    """Per node class, read lazily: its child fields in libcst's visiting order, those of
    them that may hold more than layout (from libcst's annotations), and whether the
    class itself is layout."""

    def __init__(self) -> None:
        self._by_class: dict[type, tuple[str, ...]] = {}
        self._content: dict[type, tuple[str, ...]] = {}
        self._layout: dict[type, bool] = {}

    def of(self, cls: type) -> tuple[str, ...]:
        fields = self._by_class.get(cls)
        if fields is None:
            fields = self._by_class[cls] = visiting_order(cls)
        return fields

    def content(self, cls: type) -> tuple[str, ...]:
        fields = self._content.get(cls)
        if fields is None:
            annotations = {f.name: f.type for f in dataclasses.fields(cls)}
            fields = self._content[cls] = tuple(f for f in self.of(cls) if _may_hold_content(annotations[f]))
        return fields

    def is_layout(self, cls: type) -> bool:
        found = self._layout.get(cls)
        if found is None:
            found = self._layout[cls] = issubclass(cls, _LAYOUT_BASES)
        return found


_FIELDS = _Fields()  # a fact about the installed libcst, the same for every tree


class _StandIn:
    """The value of every field of the node :func:`visiting_order` makes: visited, it
    stays itself; as a sequence, it is empty."""

    def visit(self, visitor: cst.CSTVisitor) -> "_StandIn":
        return self

    def __iter__(self):
        return iter(())


class _FieldOrder(cst.CSTVisitor):
    """Records the fields of one node in the order libcst visits them."""

    def __init__(self, node: cst.CSTNode) -> None:
        super().__init__()
        self.node = node
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node is self.node  # its children are stand-ins: nothing below to visit

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)


def visiting_order(cls: type) -> tuple[str, ...]:
    """The child fields of a node class, in the order libcst visits them (the order of
    the code). libcst has no public table of it; its visitor API announces each field,
    in that order, as it visits it (``on_visit_attribute``), whatever the field holds.
    So one visit of a node of the class, every field a stand-in, announces them all: the
    node is made without its constructor (stand-ins are no valid values) and the copy
    libcst builds from the visited fields, which its checks refuse, is not wanted."""
    node = object.__new__(cls)
    stand_in = _StandIn()
    for field in dataclasses.fields(cls):
        object.__setattr__(node, field.name, stand_in)  # frozen: set as its constructor does
    recorder = _FieldOrder(node)
    try:
        node.visit(recorder)
    except Exception:  # noqa: BLE001 - the copy made of stand-ins, after every field was announced
        pass
    return tuple(dict.fromkeys(recorder.fields))


def content_fields(cls: type) -> tuple[str, ...]:
    """The child fields of a node class that may hold more than layout, in libcst's order."""
    return _FIELDS.content(cls)


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node.children``, without rebuilding ``node``."""
    return _children_in(node, _FIELDS.of(type(node)))


def content_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of ``node`` in its fields that may hold more than layout
    (:func:`content_fields`), in libcst's order."""
    return _children_in(node, _FIELDS.content(type(node)))


def _children_in(node: cst.CSTNode, fields: tuple[str, ...]) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        kind = type(value)
        if kind is tuple or kind is list:
            found.extend(item for item in value if IS_NODE_TYPE[type(item)])
        elif IS_NODE_TYPE[kind]:
            found.append(value)
    return found


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """What ``node.visit(visitor)`` does for a read-only visitor."""
    cls = type(visitor)
    if cls.on_visit is not cst.CSTVisitor.on_visit or cls.on_leave is not cst.CSTVisitor.on_leave:
        _walk_hooked(node, visitor)
        return
    table = _dispatch(cls)
    entry = table[type(node)]
    if entry is not _SKIP:
        _walk_dispatched(node, entry, visitor, table)


_SKIP = "skip"  # not a node, or layout that the visitor has no method for
_SEQUENCE = "sequence"  # a tuple or list of children


class _Dispatch(dict):
    """For one visitor class, what a walk does at a value of each type, filled on first
    meeting the type: for a node class, its ``visit_``/``leave_`` methods (None for
    libcst's no-op defaults, not worth a call) and the fields to read.

    A visitor with no method for any layout class (whitespace, commas, operators...)
    never sees a call inside layout, which holds only layout: the walk reads only the
    fields that may hold more (:func:`content_fields`) and does not enter layout."""

    def __init__(self, visitor_cls: type) -> None:
        super().__init__()
        self.visitor_cls = visitor_cls
        self.wants_layout = _has_layout_method(visitor_cls)

    def __missing__(self, kind: type):
        if kind is tuple or kind is list:
            entry = _SEQUENCE
        elif not IS_NODE_TYPE[kind]:
            entry = _SKIP  # str, None, MaybeSentinel...
        elif not self.wants_layout and _FIELDS.is_layout(kind):
            entry = _SKIP
        else:
            name = kind.__name__
            fields = _FIELDS.of(kind) if self.wants_layout else _FIELDS.content(kind)
            entry = (_own_method(self.visitor_cls, "visit_" + name), _own_method(self.visitor_cls, "leave_" + name), fields)
            if entry == (None, None, ()) and self.visitor_cls is not cst.CSTVisitor:
                entry = _SKIP  # a leaf (whitespace, a comment...) with no method: nothing to do
        self[kind] = entry
        return entry


@functools.lru_cache(maxsize=256)
def _dispatch(visitor_cls: type) -> _Dispatch:
    # a fact about the class: the walks of one visitor (often many small ones, nested
    # in its own methods) look each node class up once
    return _Dispatch(visitor_cls)


def _own_method(visitor_cls: type, name: str):
    """The visitor's method ``name``; None when missing or libcst's no-op default."""
    method = getattr(visitor_cls, name, None)
    return None if method is None or method is getattr(cst.CSTVisitor, name, None) else method


def _has_layout_method(visitor_cls: type) -> bool:
    """Does the visitor define a ``visit_``/``leave_`` method for a layout class?
    (CSTVisitor's own, and its bases', are no-ops.)"""
    layout = _layout_class_names()
    for klass in visitor_cls.__mro__:
        if klass in cst.CSTVisitor.__mro__:
            continue
        for name in vars(klass):
            if name.startswith(("visit_", "leave_")) and name.split("_", 1)[1] in layout:
                return True
    return False


@functools.lru_cache(maxsize=1)
def _layout_class_names() -> frozenset[str]:
    return frozenset(
        name for name, kind in vars(cst).items()
        if isinstance(kind, type) and issubclass(kind, cst.CSTNode) and issubclass(kind, _LAYOUT_BASES)
    )


def _walk_dispatched(node: cst.CSTNode, entry, visitor: cst.CSTVisitor, table: _Dispatch) -> None:
    visit, leave, fields = entry
    if visit is None or visit(visitor, node) is not False:
        for field in fields:
            value = getattr(node, field)
            entry = table[type(value)]
            if entry is _SEQUENCE:
                for item in value:
                    entry = table[type(item)]
                    if entry is not _SKIP:
                        _walk_dispatched(item, entry, visitor, table)
            elif entry is not _SKIP:
                _walk_dispatched(value, entry, visitor, table)
    if leave is not None:
        leave(visitor, node)


def _walk_hooked(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    if visitor.on_visit(node):
        for field in _FIELDS.of(type(node)):
            value = getattr(node, field)
            kind = type(value)
            if kind is tuple or kind is list:
                for item in value:
                    if IS_NODE_TYPE[type(item)]:
                        _walk_hooked(item, visitor)
            elif IS_NODE_TYPE[kind]:
                _walk_hooked(value, visitor)
    visitor.on_leave(node)


class _IsNodeType(dict):
    """Per type: is it a libcst node class? ``IS_NODE_TYPE[type(value)]`` says what
    ``isinstance(value, cst.CSTNode)`` says, for a fraction of the cost (an ABC check)."""

    def __missing__(self, kind: type) -> bool:
        found = self[kind] = hasattr(kind, "_visit_and_replace_children")
        return found


IS_NODE_TYPE = _IsNodeType()  # a fact about the installed libcst, like _FIELDS


def walk_content(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """:func:`walk` for a visitor whose ``on_visit``/``on_leave`` hooks do nothing at
    layout (whitespace, commas, operators...): the walk does not enter layout, and calls
    the hooks on every other node, in the same order."""
    _walk_content(node, content_fields(type(node)), visitor, _dispatch(cst.CSTVisitor))


def _walk_content(node: cst.CSTNode, fields: tuple[str, ...], visitor: cst.CSTVisitor, table: _Dispatch) -> None:
    # the table of a visitor without methods: content fields only, layout skipped
    if visitor.on_visit(node):
        for field in fields:
            value = getattr(node, field)
            entry = table[type(value)]
            if entry is _SEQUENCE:
                for item in value:
                    entry = table[type(item)]
                    if entry is not _SKIP:
                        _walk_content(item, entry[2], visitor, table)
            elif entry is not _SKIP:
                _walk_content(value, entry[2], visitor, table)
    visitor.on_leave(node)


def paths_to(
    root: cst.CSTNode,
    wanted: Callable[[cst.CSTNode], bool],
    skip: set[int] = frozenset(),
    kinds: frozenset[type] | None = None,
) -> set[int]:
    """ids of the nodes of ``root`` (itself included) that ``wanted`` accepts or that lie
    above one; the subtrees whose ids are in ``skip`` are left out, and so are layout
    nodes (``wanted`` never sees them). With ``kinds``, ``wanted`` is asked only at nodes
    of those classes: the others are not wanted (a call saved at most nodes).

    libcst rebuilds every node a walk passes, even for a visitor that changes nothing;
    reading the children straight from the nodes' fields costs a small fraction of that.
    A walk whose ``on_visit`` enters only these nodes still sees every node it cares
    about, in its usual order."""
    on_path: set[int] = set()
    table = _dispatch(cst.CSTVisitor)  # no methods: content fields only, layout skipped

    def mark(node: cst.CSTNode, fields: tuple[str, ...]) -> bool:
        if id(node) in skip:
            return False
        found = (kinds is None or type(node) in kinds) and wanted(node)
        for name in fields:
            value = getattr(node, name)
            entry = table[type(value)]
            if entry is _SEQUENCE:
                for child in value:
                    entry = table[type(child)]
                    if entry is not _SKIP and mark(child, entry[2]):
                        found = True
            elif entry is not _SKIP and mark(value, entry[2]):
                found = True
        if found:
            on_path.add(id(node))
        return found

    try:
        mark(root, content_fields(type(root)))
    finally:
        del mark  # it refers to itself: freed now, not left to the garbage collector
    return on_path


def transform(root: cst.CSTNode, transformer: cst.CSTTransformer) -> cst.CSTNode:
    """What ``root.visit(transformer)`` gives, for a transformer whose ``on_visit``
    enters only the nodes where it may change something (or above one), and whose hooks
    change nothing at layout (whitespace, commas, operators...).

    libcst rebuilds every node its walk passes. Here the hooks are called at the same
    nodes but layout, in the same order, and a node is rebuilt only when a child changed
    (the others are kept as they are, not copied). Leave hooks must return a node (not a
    removal or a flattening)."""
    if not transformer.on_visit(root):
        return transformer.on_leave(root, root)
    return _transform(root, content_fields(type(root)), transformer, _dispatch(cst.CSTVisitor))


def _transform(node: cst.CSTNode, fields: tuple[str, ...], transformer: cst.CSTTransformer, table: _Dispatch) -> cst.CSTNode:
    # the table of a visitor without methods: content fields only, layout skipped
    changes = {}
    for field in fields:
        value = getattr(node, field)
        entry = table[type(value)]
        if entry is _SEQUENCE:
            items = None
            for index, item in enumerate(value):
                entry = table[type(item)]
                if entry is not _SKIP:
                    if transformer.on_visit(item):
                        new = _transform(item, entry[2], transformer, table)
                    else:
                        new = transformer.on_leave(item, item)
                    if new is not item:
                        if items is None:
                            items = list(value)
                        items[index] = new
            if items is not None:
                changes[field] = tuple(items)  # a tuple, as libcst's visit leaves it
        elif entry is not _SKIP:
            if transformer.on_visit(value):
                new = _transform(value, entry[2], transformer, table)
            else:
                new = transformer.on_leave(value, value)
            if new is not value:
                changes[field] = new
    return transformer.on_leave(node, node.with_changes(**changes) if changes else node)


def find_nodes(root: cst.CSTNode, wanted: Callable[[cst.CSTNode], bool]) -> list[cst.CSTNode]:
    """The nodes of ``root`` that ``wanted`` accepts (layout left out), in the order of the
    code: ``wanted`` is asked at every node in that order."""
    return [node for node in _in_order(root) if wanted(node)]


def all_nodes(root: cst.CSTNode) -> list[cst.CSTNode]:
    """Every node of ``root`` (itself included, layout left out), in the order of the code."""
    return list(_in_order(root))


@functools.lru_cache(maxsize=2048)
def _in_order(root: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """Every node of ``root``, read from the nodes' fields like :func:`paths_to`. A pure
    function of an immutable node (hashed by identity, kept alive while cached): the passes
    and analyses of a run ask for the nodes of the same statements and blocks again and
    again (a third as many roots as questions on a dense script)."""
    found: list[cst.CSTNode] = []
    _collect(root, content_fields(type(root)), found.append, _dispatch(cst.CSTVisitor))
    return tuple(found)


def _collect(node: cst.CSTNode, fields: tuple[str, ...], add, table: _Dispatch) -> None:
    # paths_to's walk with nothing asked at a node: each is added, before its children
    add(node)
    for name in fields:
        value = getattr(node, name)
        entry = table[type(value)]
        if entry is _SEQUENCE:
            for child in value:
                entry = table[type(child)]
                if entry is not _SKIP:
                    _collect(child, entry[2], add, table)
        elif entry is not _SKIP:
            _collect(value, entry[2], add, table)


__all__ = [
    "IS_NODE_TYPE", "all_nodes", "children", "content_children", "content_fields", "find_nodes", "paths_to",
    "transform", "walk", "walk_content",
]
