"""The values the cost walk binds on the client, and the key of an evaluation.

Literals as Python values (:data:`NO_VALUE` when an expression is none), Python values as
shapes (:func:`python_shape`, :func:`literal_shape`; shared where immutable), and the key
under which :func:`value_in` caches one evaluation of an expression: the first node met
that spells it, with the exact values of the names it reads.
"""

from __future__ import annotations

import functools
from typing import Any

import libcst as cst

from ndif_opt.cost.shape_values import ModuleRef, Shape
from ndif_opt.cost.shapes import value_of
from ndif_opt.syntax.literals import literal_value
from ndif_opt.syntax.walk import content_children


class _NoValue:
    pass


NO_VALUE: Any = _NoValue()


def python_literal(expr: cst.BaseExpression) -> Any:
    """The Python value of a literal (strings, numbers, lists/tuples/dicts of them), or NO_VALUE."""
    return _fresh(_shared_literal(expr))


@functools.lru_cache(maxsize=8192)
def _shared_literal(expr: cst.BaseExpression) -> Any:
    # a pure function of an immutable node, cached (every version of a tree walks the
    # same literals again); its lists are shared between callers: see _fresh
    if type(expr) in (cst.SimpleString, cst.ConcatenatedString):
        value = literal_value(expr)
        return value if isinstance(value, str) else NO_VALUE
    if type(expr) is cst.Integer:
        return int(literal_value(expr))
    if type(expr) is cst.Float:
        return float(literal_value(expr))
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus:
        inner = _shared_literal(expr.expression)
        return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else NO_VALUE
    if type(expr) is cst.Name and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if type(expr) in (cst.List, cst.Tuple):
        values = []
        for element in expr.elements:
            if type(element) is cst.StarredElement:
                return NO_VALUE
            value = _shared_literal(element.value)
            if value is NO_VALUE:
                return NO_VALUE
            values.append(value)
        return tuple(values) if type(expr) is cst.Tuple else values
    if type(expr) is cst.Dict:  # `{"id": 1, "text": "The cat sat on the"}`: a record
        record = {}
        for element in expr.elements:
            if type(element) is not cst.DictElement:
                return NO_VALUE
            key, value = _shared_literal(element.key), _shared_literal(element.value)
            if not isinstance(key, (str, int)) or value is NO_VALUE:
                return NO_VALUE
            record[key] = value
        return record
    return NO_VALUE


UNBOUND: Any = _NoValue()  # a name env does not hold (a key part: hashable, unequal to any value)


@functools.lru_cache(maxsize=4096)
def _names_read(expr: cst.BaseExpression) -> tuple[str, ...]:
    """The names spelled in an expression: every key of env :func:`value_of` may read."""
    found: dict[str, None] = {}
    stack = [expr]
    while stack:  # walk_nodes's nodes (in another order), with the leaves and attributes inline
        node = stack.pop()
        kind = type(node)
        if kind is cst.Name:
            found[node.value] = None
        elif kind is cst.Attribute:
            found[node.attr.value] = None
            if type(node.value) is cst.Name:
                found[f"{node.value.value}.{node.attr.value}"] = None  # object state (see assign)
            stack.append(node.value)
        else:
            stack.extend(content_children(node))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def expression_key(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, tuple[str, ...]]:
    """(the node to evaluate for ``expr``, the names it spells): the first node met that
    spells the same expression (a pass rebuilds the expressions of a statement it
    changes, and a script repeats its expressions: one evaluation serves every copy), or
    ``expr`` itself when it holds a kind of node :func:`_fingerprint` does not list."""
    names: dict[str, None] = {}
    try:
        fingerprint = _fingerprint(expr, names)
    except (_Unlisted, RecursionError):
        return expr, _names_read(expr)
    return _first_spelling(fingerprint, expr), tuple(names)


_FIRST_SPELLINGS: dict[Any, cst.BaseExpression] = {}


_FIRST_SPELLINGS_LIMIT = 4096


def _first_spelling(fingerprint: Any, expr: cst.BaseExpression) -> cst.BaseExpression:
    first = _FIRST_SPELLINGS.get(fingerprint)
    if first is None:
        if len(_FIRST_SPELLINGS) >= _FIRST_SPELLINGS_LIMIT:
            _FIRST_SPELLINGS.clear()  # bounded like an lru (a miss costs one evaluation)
        first = _FIRST_SPELLINGS[fingerprint] = expr
    return first


class _Unlisted(Exception):
    """An expression with a kind of node :func:`_fingerprint` does not list."""


def _fingerprint(node: cst.BaseExpression, names: dict[str, None]) -> Any:
    """What :func:`value_of` reads of an expression: its nodes' kinds, names, operators
    and literals, not its layout (whitespace, parentheses, commas), which it never reads;
    the names spelled are added to ``names``. Only the usual kinds of an nnsight value
    are listed: any other raises :class:`_Unlisted`."""
    kind = type(node)
    if kind is cst.Name:
        names[node.value] = None
        return node.value
    if kind is cst.Attribute:
        value = _fingerprint(node.value, names)
        names[node.attr.value] = None
        if type(node.value) is cst.Name:
            names[f"{node.value.value}.{node.attr.value}"] = None  # `self.clean`: object state (see assign)
        return (kind, value, node.attr.value)
    if kind is cst.Subscript:
        return (kind, _fingerprint(node.value, names), tuple([_fingerprint(e.slice, names) for e in node.slice]))
    if kind is cst.Index:
        return (kind, _fingerprint(node.value, names), node.star)
    if kind is cst.Slice:
        return (kind, *[None if part is None else _fingerprint(part, names)
                        for part in (node.lower, node.upper, node.step)])
    if kind is cst.Call:
        parts: list[Any] = [kind, _fingerprint(node.func, names)]
        for arg in node.args:
            keyword = arg.keyword
            if keyword is not None:
                names[keyword.value] = None
            parts.append((None if keyword is None else keyword.value, arg.star, _fingerprint(arg.value, names)))
        return tuple(parts)
    if kind is cst.Integer or kind is cst.Float or kind is cst.SimpleString:
        return (kind, node.value)
    if kind is cst.BinaryOperation:
        return (kind, type(node.operator), _fingerprint(node.left, names), _fingerprint(node.right, names))
    if kind is cst.UnaryOperation:
        return (kind, type(node.operator), _fingerprint(node.expression, names))
    if kind is cst.Tuple or kind is cst.List:
        parts = [kind]
        for element in node.elements:
            if type(element) is not cst.Element:
                raise _Unlisted
            parts.append(_fingerprint(element.value, names))
        return tuple(parts)
    raise _Unlisted


def exact(value: Any) -> tuple:
    """``value`` as a key part equal only to an identical value: a Shape compares its
    Python value with ==, which holds between 1, 1.0 and True, and not its reason, which
    a value of unknown size carries into the report."""
    return (value, _types_in(value)) if isinstance(value, Shape) else (value, None)


def _types_in(shape: Shape) -> tuple:
    elements = shape.elements
    return (_value_types(shape.value), tuple([_types_in(e) for e in elements]) if elements else (),
            shape.reason if shape.kind == "unknown" else None)


def _value_types(value: Any) -> Any:
    if type(value) is tuple or type(value) is list:
        return type(value), tuple(_value_types(v) for v in value)
    if type(value) is float:
        return float, repr(value)  # -0.0 == 0.0, and NaN equals nothing
    return type(value)


@functools.lru_cache(maxsize=4096)
def value_in(expr, dims, model_names, seq, batch, max_new_tokens, read) -> Shape | ModuleRef:
    """:func:`value_of` in an env of the names it reads (a pure function of its key, cached;
    the result is immutable; the cost model reads no Shape's notes, and a reason only of
    the expression evaluated, whose nodes and names' values are the key)."""
    env = {name: value for name, (value, _) in read if value is not UNBOUND}
    return value_of(expr, dims, model_name=model_names, seq_len=seq, batch=batch, env=env,
                    max_new_tokens=max_new_tokens)


def _fresh(value: Any) -> Any:
    """A cached literal with new lists, so that no caller can change the cache's (a
    literal's lists and tuples are exactly those types)."""
    kind = type(value)
    if kind is list:
        return [_fresh(v) for v in value]
    if kind is dict:
        return {k: _fresh(v) for k, v in value.items()}
    if kind is tuple and any(type(v) is list or type(v) is tuple for v in value):
        return tuple(_fresh(v) for v in value)
    return value


def is_container(value: Shape | ModuleRef | None) -> bool:
    return isinstance(value, Shape) and value.kind == "container"


_SHARED_SCALARS = {bool: "bool", int: "int", str: "str"}  # float: -0.0 == 0.0, and NaN equals nothing


@functools.lru_cache(maxsize=1024)
def _scalar_shape(dtype: str, value: Any) -> Shape:
    """``Shape.python(dtype, value)``, shared (a Shape is immutable; the walk binds the
    same loop values and constants in every version of a tree)."""
    return Shape.python(dtype, value)


def python_shape(value: Any, keep: bool) -> Shape:
    dtype = _SHARED_SCALARS.get(type(value))
    if dtype is not None:
        return _scalar_shape(dtype, value if keep else None)
    if isinstance(value, bool):
        return Shape.python("bool", value if keep else None)
    if isinstance(value, int):
        return Shape.python("int", value if keep else None)
    if isinstance(value, float):
        return Shape.python("float", value if keep else None)
    if isinstance(value, str):
        return Shape.python("str", value if keep else None)
    if value is None:
        return Shape.python("none", None)
    if isinstance(value, (list, tuple)):
        # Shape.container's fields with the value (dataclasses.replace costs several times more)
        elements = tuple([python_shape(v, keep) for v in value])
        return Shape(kind="container", elements=elements, names=(), dtype="container",
                     value=tuple(value) if keep else None)
    if isinstance(value, dict):  # a record: its items by key (`example["text"]`)
        return Shape.container([python_shape(v, keep) for v in value.values()], [str(k) for k in value])
    return Shape.unknown("a value")


def literal_shape(expr: cst.BaseExpression) -> Shape | None:
    """What a name assigned ``expr`` is bound to when ``expr`` is a literal, else None."""
    shape = _shared_literal_shape(expr)
    if shape is _HOLDS_LISTS:
        return python_shape(python_literal(expr), True)
    return shape


_HOLDS_LISTS: Any = _NoValue()


@functools.lru_cache(maxsize=4096)
def _shared_literal_shape(expr: cst.BaseExpression) -> Any:
    # a pure function of an immutable node, cached (the prelude's constants are bound in
    # every version of every window): the Shape is shared, so not when its value would
    # hold the cached literal's lists (_HOLDS_LISTS: see _fresh)
    value = _shared_literal(expr)
    if value is NO_VALUE:
        return None
    if type(value) in (list, tuple, dict) and any(_holds_list(v) for v in _items(value)):
        return _HOLDS_LISTS
    return python_shape(value, True)


def _items(value: Any) -> Any:
    return value.values() if type(value) is dict else value


def _holds_list(value: Any) -> bool:
    return type(value) is list or (type(value) in (tuple, dict) and any(_holds_list(v) for v in _items(value)))


def has_str(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, (list, tuple, dict)):
        return any(has_str(v) for v in _items(value))
    return False
