"""The values the shape evaluator computes, and what every shape rule shares.

:class:`Shape` is the static shape and dtype of a value (hence its bytes), :class:`ModuleRef`
a module of the model (an nnsight Envoy), :class:`ShapeContext` what an evaluation knows
besides the expression. An :class:`Evaluation` is one run of the evaluator
(:mod:`ndif_opt.cost.shapes`): it carries the evaluator's handlers by node type, so that the
rules of :mod:`ndif_opt.cost.torch_ops` and :mod:`ndif_opt.cost.module_values` evaluate their
operands with :func:`evaluate` without importing the evaluator back.

Also here: :class:`UnknownShape` (what a rule raises when it cannot follow a value),
statically known constants (:func:`const_value`, :func:`dtype_from`), call arguments
(:class:`CallArgs`), and torch's dtype promotion and broadcasting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from ndif_opt.cost.model_registry import ModelDims, canonical_dtype, dtype_size
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.literals import literal_value

__all__ = [
    "ARITH",
    "CallArgs",
    "DEFAULT_INDEX_LENGTH",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_SEQ_LEN",
    "DTYPE_ATTRS",
    "Evaluation",
    "ModuleRef",
    "NOT_CONST",
    "Shape",
    "ShapeContext",
    "UnknownShape",
    "as_shape",
    "broadcast",
    "const_int",
    "const_value",
    "dtype_category",
    "dtype_from",
    "evaluate",
    "evaluate_shape",
    "literal_dims",
    "norm_dim",
    "promote",
    "promote_shapes",
    "require_tensor",
]

#: Prompt length assumed when the caller does not know it.
DEFAULT_SEQ_LEN = 16
#: Length assumed for an index whose size cannot be seen (an unbound name, a mask).
DEFAULT_INDEX_LENGTH = 1
#: New tokens assumed for ``generate`` when ``max_new_tokens`` is not given (transformers'
#: own default ``max_length`` is 20 tokens in all).
DEFAULT_MAX_NEW_TOKENS = 20

_PY_SIZE = 8  # bytes torch.save is charged for a Python number or a 0-d tensor


# ---------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """The static shape of a value.

    ``kind`` is one of

    * ``"tensor"`` — ``dims`` and ``dtype`` (a key of ``DTYPE_SIZES``) are known;
    * ``"scalar"`` — a 0-d tensor (``dims == ()``);
    * ``"python"`` — a Python value: ``dtype`` is ``"int"``, ``"float"``, ``"bool"``,
      ``"number"``, ``"str"``, ``"none"``, ``"list"`` (a ``.tolist()``, ``dims`` its
      nesting) or ``"tuple"`` (a ``.shape``); ``value`` holds it when statically known;
    * ``"container"`` — a tuple, list, dict or ModelOutput of ``elements`` (``names`` for
      the named ones: ``("values", "indices")`` of ``topk``, ``("logits", …)``);
    * ``"unknown"`` — ``reason`` says why.

    ``notes`` lists the defaults taken to get here (shown in reports).
    """

    dims: tuple[int, ...] | None = None
    dtype: str = "unknown"
    kind: str = "unknown"
    elements: tuple[Shape, ...] = ()
    names: tuple[str, ...] = ()
    value: Any = None
    reason: str | None = field(default=None, compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)

    # constructors -------------------------------------------------------------------
    @staticmethod
    def tensor(dims: Iterable[int], dtype: str) -> Shape:
        dims = tuple(map(int, dims))
        return Shape(dims=dims, dtype=dtype, kind="scalar" if not dims else "tensor")

    @staticmethod
    def python(dtype: str = "number", value: Any = None, dims: tuple[int, ...] = ()) -> Shape:
        return Shape(dims=tuple(dims), dtype=dtype, kind="python", value=value)

    @staticmethod
    def container(elements: Iterable[Shape], names: Iterable[str] = ()) -> Shape:
        return Shape(kind="container", elements=tuple(elements), names=tuple(names), dtype="container")

    @staticmethod
    def unknown(reason: str) -> Shape:
        return Shape(kind="unknown", reason=reason)

    # properties ---------------------------------------------------------------------
    @property
    def known(self) -> bool:
        if self.kind == "unknown":
            return False
        if self.kind == "container":
            return all(e.known for e in self.elements)
        return self.dims is not None

    @property
    def is_tensor(self) -> bool:
        return self.kind in ("tensor", "scalar")

    @property
    def ndim(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    @property
    def numel(self) -> int | None:
        if self.dims is None or self.kind in ("unknown", "container"):
            return None
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int | None:
        """Bytes ``torch.save`` stores for the value (None when unknown)."""
        if self.kind == "unknown" or (self.dims is None and self.kind != "container"):
            return None
        if self.kind == "container":
            total = 0
            for element in self.elements:
                size = element.nbytes
                if size is None:
                    return None
                total += size
            return total
        if self.kind == "scalar":
            return _PY_SIZE
        if self.kind == "python":
            if self.dtype == "none":
                return 0
            if self.dtype == "str":
                return len(self.value) if isinstance(self.value, str) else _PY_SIZE
            return _PY_SIZE * max(math.prod(self.dims), 1) if self.dims else _PY_SIZE
        return math.prod(self.dims) * dtype_size(self.dtype)

    def describe(self) -> str:
        """``[1, 7, 128256] bfloat16``, ``scalar int64``, ``python int``, ``(values: …, indices: …)``."""
        if self.kind == "unknown":
            return f"unknown ({self.reason})" if self.reason else "unknown"
        if self.kind == "scalar":
            return f"scalar {self.dtype}"
        if self.kind == "tensor":
            return f"[{', '.join(map(str, self.dims or ()))}] {self.dtype}"
        if self.kind == "python":
            if self.dims:
                return f"python {self.dtype}[{', '.join(map(str, self.dims))}]"
            return f"python {self.dtype}"
        parts: list[str] = []
        i = 0
        while i < len(self.elements):
            element = self.elements[i]
            label = self.names[i] if i < len(self.names) and self.names[i] else ""
            run = 1
            while (
                not label
                and i + run < len(self.elements)
                and self.elements[i + run] == element
                and not (i + run < len(self.names) and self.names[i + run])
            ):
                run += 1
            text = element.describe()
            if run > 1:
                text = f"{run} × {text}"
            parts.append(f"{label}: {text}" if label else text)
            i += run
        if len(parts) > 8:
            parts = parts[:8] + [f"… {len(parts) - 8} more"]
        return "(" + ", ".join(parts) + ")"

    def with_notes(self, notes: Iterable[str]) -> Shape:
        if not self.notes and not notes:  # the usual case: nothing to merge
            return self
        merged = tuple(dict.fromkeys((*self.notes, *notes)))
        return replace(self, notes=merged) if merged != self.notes else self


@dataclass(frozen=True)
class ModuleRef:
    """A module of the model (an nnsight Envoy), not a value: ``path`` from the model root.

    Path items are attribute names (str) and ModuleList indices (int; None when the index
    is not a literal).
    """

    path: tuple[str | int | None, ...] = ()

    def child(self, item: str | int | None) -> ModuleRef:
        return ModuleRef(self.path + (item,))

    def dotted(self) -> str:
        out = ""
        for item in self.path:
            if isinstance(item, str):
                out += ("." if out else "") + item
            else:
                out += f"[{'?' if item is None else item}]"
        return out


@dataclass(frozen=True)
class ShapeContext:
    """What :func:`shape_of` needs besides the expression."""

    dims: ModelDims
    model_names: frozenset[str] = frozenset({"model"})
    seq_len: int = DEFAULT_SEQ_LEN
    batch: int = 1
    env: Mapping[str, Shape | ModuleRef] = field(default_factory=dict)
    max_new_tokens: int | None = None


class UnknownShape(Exception):
    """Raised by the evaluator and its rules where they cannot follow a value;
    :func:`ndif_opt.cost.shapes.value_of` turns it into ``Shape.unknown(reason)``."""


class Evaluation:
    """One evaluation: the context, the notes gathered on the way, and the evaluator's
    handlers by node type (``dispatch``: the shape rules evaluate their operands with
    :func:`evaluate`, which reads it, so they need not import the evaluator)."""

    def __init__(
        self,
        ctx: ShapeContext,
        dispatch: Mapping[type, Callable[[Any, Evaluation], Any]],
        extra_env: Mapping[str, Any] | None = None,
    ):
        self.ctx = ctx
        self.dispatch = dispatch
        self.dims = ctx.dims
        self.b = max(int(ctx.batch), 1)
        self.s = max(int(ctx.seq_len), 1)
        if extra_env is None:  # the evaluation of value_of: its env is only read
            self.env: dict[str, Any] = ctx.env
        else:  # a nested scope binds names of its own
            self.env = dict(ctx.env)
            self.env.update(extra_env)
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @property
    def act_dtype(self) -> str:
        return canonical_dtype(self.dims.dtype)


# ---------------------------------------------------------------------------------------
# Evaluating a sub-expression
# ---------------------------------------------------------------------------------------


def evaluate(node: cst.BaseExpression, ev: Evaluation) -> Shape | ModuleRef:
    """The value of ``node``, by the evaluator's handler for its type."""
    handler = ev.dispatch.get(type(node))
    if handler is None:
        raise UnknownShape(f"unsupported expression ({type(node).__name__})")
    return handler(node, ev)


def evaluate_shape(node: cst.BaseExpression, ev: Evaluation) -> Shape:
    value = evaluate(node, ev)
    if isinstance(value, ModuleRef):
        raise UnknownShape(f"'{value.dotted() or 'model'}' is a module, not a value")
    if value.kind == "unknown":
        raise UnknownShape(value.reason or "unknown value")
    return value


def as_shape(value: Shape | ModuleRef) -> Shape:
    if isinstance(value, ModuleRef):
        raise UnknownShape(f"'{value.dotted() or 'model'}' is a module, not a value")
    return value


# ---------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------


class _NotConst:
    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "<not const>"


NOT_CONST: Any = _NotConst()


def const_value(node: cst.BaseExpression | None, ev: Evaluation) -> Any:
    """The statically known Python value of ``node``, or ``NOT_CONST``."""
    # node classes compared with `is`: libcst's are final, and isinstance against them is
    # an ABC check (several times slower)
    kind = type(node)
    if kind is cst.Integer:
        return int(literal_value(node))
    if kind is cst.Name:
        if node.value in ("True", "False"):
            return node.value == "True"
        if node.value == "None":
            return None
        bound = ev.env.get(node.value)
        if isinstance(bound, Shape) and bound.kind == "python" and bound.value is not None:
            return bound.value
        return NOT_CONST
    if kind is cst.Float:
        return float(literal_value(node))
    if kind is cst.SimpleString or kind is cst.ConcatenatedString:
        value = literal_value(node)
        return value if isinstance(value, str) else NOT_CONST
    if kind is cst.UnaryOperation:
        inner = const_value(node.expression, ev)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            operator = type(node.operator)
            if operator is cst.Minus:
                return -inner
            if operator is cst.Plus:
                return inner
        return NOT_CONST
    if kind is cst.Tuple or kind is cst.List:
        values = []
        for element in node.elements:
            if type(element) is cst.StarredElement:
                return NOT_CONST
            value = const_value(element.value, ev)
            if value is NOT_CONST:
                return NOT_CONST
            values.append(value)
        return tuple(values) if kind is cst.Tuple else values
    if kind is cst.BinaryOperation:
        left, right = const_value(node.left, ev), const_value(node.right, ev)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            return NOT_CONST
        op = ARITH.get(type(node.operator))
        if op is None:
            return NOT_CONST
        try:
            return op(left, right)
        except (ArithmeticError, ValueError):
            return NOT_CONST
    if kind is cst.Call and dotted_name(node.func) == "len" and len(node.args) == 1:
        try:
            value = evaluate(node.args[0].value, ev)
        except UnknownShape:
            return NOT_CONST
        length = length_of(value)
        return NOT_CONST if length is None else length
    if kind is cst.Attribute or kind is cst.Subscript:
        try:
            value = evaluate(node, ev)
        except UnknownShape:
            return NOT_CONST
        if isinstance(value, Shape) and value.kind == "python" and value.value is not None:
            return value.value
    return NOT_CONST


ARITH: dict[type, Callable[[Any, Any], Any]] = {
    cst.Add: lambda a, b: a + b,
    cst.Subtract: lambda a, b: a - b,
    cst.Multiply: lambda a, b: a * b,
    cst.FloorDivide: lambda a, b: a // b,
    cst.Divide: lambda a, b: a / b,
    cst.Modulo: lambda a, b: a % b,
    cst.Power: lambda a, b: a**b if abs(b) < 64 else NOT_CONST,
}


def const_int(node: cst.BaseExpression | None, ev: Evaluation) -> int | None:
    value = const_value(node, ev)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


DTYPE_ATTRS = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64",
    "long": "int64", "int32": "int32", "int": "int32", "int16": "int16", "short": "int16",
    "int8": "int8", "uint8": "uint8", "bool": "bool", "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2", "complex64": "complex64", "cfloat": "complex64",
    "complex128": "complex128",
}  # fmt: skip


def dtype_from(node: cst.BaseExpression | None, ev: Evaluation) -> str | None:
    """``torch.float32`` / ``t.float16`` / ``x.dtype`` → canonical dtype, else None."""
    if node is None:
        return None
    dotted = dotted_name(node)
    if dotted and "." in dotted:
        root, attr = dotted.rsplit(".", 1)
        if attr in DTYPE_ATTRS and root.split(".")[0] not in ev.env:
            return DTYPE_ATTRS[attr]
        if attr == "dtype":
            try:
                value = evaluate(node.value, ev)  # type: ignore[attr-defined]
            except UnknownShape:
                return None
            if isinstance(value, Shape) and value.is_tensor:
                return value.dtype
    return None


# ---------------------------------------------------------------------------------------
# Literal indices, dims and call arguments
# ---------------------------------------------------------------------------------------


def literal_dims(value: Any) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        if not value:
            return (0,)
        inner = {literal_dims(v) for v in value}
        if len(inner) != 1:
            raise UnknownShape("a ragged list used as an index")
        return (len(value),) + inner.pop()
    return ()


class CallArgs:
    """Positional and keyword argument nodes of a call, with constant helpers."""

    def __init__(self, args: Sequence[cst.Arg], ev: Evaluation):
        self.ev = ev
        self.pos: list[cst.BaseExpression] = []
        self.kw: dict[str, cst.BaseExpression] = {}
        for arg in args:
            if arg.star:
                raise UnknownShape("a call with *args or **kwargs")
            if arg.keyword is not None:
                self.kw[arg.keyword.value] = arg.value
            else:
                self.pos.append(arg.value)

    def node(self, index: int | None, name: str | None) -> cst.BaseExpression | None:
        if name is not None and name in self.kw:
            return self.kw[name]
        if index is not None and index < len(self.pos):
            return self.pos[index]
        return None

    def const(self, index: int | None, name: str | None, default: Any = None) -> Any:
        node = self.node(index, name)
        if node is None:
            return default
        value = const_value(node, self.ev)
        if value is NOT_CONST:
            raise UnknownShape(f"argument '{name or index}' is not a literal")
        return value

    def dim(self, index: int | None, name: str | None = "dim") -> Any:
        """A dim argument: None, an int, or a tuple of ints."""
        value = self.const(index, name, None)
        if value is None or isinstance(value, int):
            return value
        if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            return tuple(value)
        raise UnknownShape(f"dim argument {value!r}")

    def flag(self, index: int | None, name: str, default: bool = False) -> bool:
        value = self.const(index, name, default)
        return bool(value)

    def sizes(self, start: int = 0, name: str | None = None) -> list[int]:
        """``view(2, 3)``, ``view((2, 3))``, ``view(size=(2, 3))``."""
        if name and name in self.kw:
            values = const_value(self.kw[name], self.ev)
        elif len(self.pos) == start + 1:
            values = const_value(self.pos[start], self.ev)
            if isinstance(values, int):
                values = [values]
        else:
            values = [const_value(p, self.ev) for p in self.pos[start:]]
        if values is NOT_CONST or not isinstance(values, (list, tuple)):
            raise UnknownShape("shape arguments are not literals")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise UnknownShape("shape arguments are not literal ints")
        return list(values)


def norm_dim(dim: int, ndim: int) -> int:
    size = max(ndim, 1)
    if not -size <= dim < size:
        raise UnknownShape(f"dim {dim} out of range for {ndim} dims")
    return dim % size


def require_tensor(value: Shape, what: str) -> tuple[int, ...]:
    if not value.is_tensor or value.dims is None:
        raise UnknownShape(f"'{what}' on {value.describe()}")
    return value.dims


# ---------------------------------------------------------------------------------------
# dtype promotion and broadcasting
# ---------------------------------------------------------------------------------------

_FLOATS = ("float16", "bfloat16", "float32", "float64")
_INTS = ("bool", "uint8", "int8", "int16", "int32", "int64")


def dtype_category(dtype: str) -> int:
    if dtype == "bool":
        return 0
    if dtype in _INTS:
        return 1
    if dtype.startswith("complex"):
        return 3
    return 2


def promote(a: str, b: str) -> str:
    if a == b:
        return a
    ca, cb = dtype_category(a), dtype_category(b)
    if ca != cb:
        return a if ca > cb else b
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    order = _INTS + _FLOATS + ("complex64", "complex128")
    ia = order.index(a) if a in order else 0
    ib = order.index(b) if b in order else 0
    return a if ia >= ib else b


def promote_shapes(a: Shape, b: Shape) -> str:
    """torch's result dtype for a binary op on two tensors (0-d tensors act as scalars)."""
    a_zero, b_zero = a.dims == (), b.dims == ()
    if a_zero != b_zero:
        dim_t, zero_t = (b, a) if a_zero else (a, b)
        if dtype_category(zero_t.dtype) <= dtype_category(dim_t.dtype):
            return dim_t.dtype
        return "float32" if dtype_category(zero_t.dtype) == 2 else zero_t.dtype
    return promote(a.dtype, b.dtype)


def broadcast(*shapes: Sequence[int]) -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        sizes = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise UnknownShape(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def length_of(value: "Shape | ModuleRef") -> int | None:
    """``len(value)`` when it is known: a container's count of elements, a tensor's first dimension."""
    if isinstance(value, Shape):
        if value.kind == "container":
            return len(value.elements)
        if value.dims:
            return value.dims[0]
    return None
