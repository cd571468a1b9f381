"""Static shape of a saved nnsight expression.

Given the libcst expression a script calls ``.save()`` on, the model's dimensions and the
prompt's length, :func:`shape_of` predicts the shape and dtype of the value, hence how
many bytes the save downloads::

    >>> from ndif_opt.model_registry import dims_for
    >>> s = shape_of("model.lm_head.output[0, -1].argmax()", dims_for("meta-llama/Llama-3.1-70B"), seq_len=10)
    >>> s.describe(), s.nbytes
    ('scalar int64', 8)

The evaluator is a set of small functions dispatching on the libcst node type. It never
raises: whatever it cannot follow gives ``Shape(kind="unknown", reason=...)``. Defaults
it had to take on the way (an index whose length it cannot see, a slice bound it cannot
evaluate) are recorded in ``Shape.notes``.

Conventions (what the server holds, transformers ≥ 5, nnsight 0.8):

* the model runs in ``dims.dtype`` (bfloat16 for NDIF's large models);
* module outputs: ``lm_head`` → ``[b, s, vocab]``; a decoder layer, ``mlp``, a norm, an
  embedding → ``[b, s, hidden]`` (a decoder layer returns a *Tensor* in transformers 5, so
  the old ``.output[0]`` selects batch row 0); attention → a tuple ``(out [b, s, hidden],
  weights None)``; ``model.output`` → ``(logits, past_key_values)``, the cache holding
  ``2 × n_layers`` tensors ``[b, n_kv_heads, s, head_dim]`` (``use_cache`` is on by default);
  ``model.generator.output`` and a generate tracer's ``.result`` → ``[b, s + max_new_tokens]``
  int64;
* torch indexing rules: integers select (basic indexing, applied first), lists and index
  tensors are advanced (broadcast together, placed where the first one is when they are
  adjacent, in front otherwise);
* ``nbytes`` is what ``torch.save`` stores, roughly: ``numel × element size`` for a tensor,
  8 for a 0-d tensor or a Python number, ``numel × 8`` for a ``.tolist()``; the few hundred
  bytes of pickle framing a value carries are ignored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from ndif_opt.model_registry import ModelDims, canonical_dtype, dtype_size
from ndif_opt.names import dotted_name, target_names

__all__ = [
    "DEFAULT_INDEX_LENGTH",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_SEQ_LEN",
    "ModuleRef",
    "Shape",
    "ShapeContext",
    "shape_of",
    "value_of",
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
    """Raised inside the evaluator; turned into ``Shape.unknown(reason)`` at the top."""


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
# Public entry points
# ---------------------------------------------------------------------------------------


def _make_context(
    dims: ModelDims,
    model_name: str | Iterable[str],
    seq_len: int,
    batch: int,
    env: Mapping[str, Any] | None,
    max_new_tokens: int | None,
) -> ShapeContext:
    names = frozenset({model_name} if isinstance(model_name, str) else model_name)
    return ShapeContext(
        dims=dims,
        model_names=names,
        seq_len=seq_len,
        batch=batch,
        env=dict(env or {}),
        max_new_tokens=max_new_tokens,
    )


def value_of(
    expr: cst.BaseExpression | str,
    dims: ModelDims,
    model_name: str | Iterable[str] = "model",
    seq_len: int = DEFAULT_SEQ_LEN,
    batch: int = 1,
    env: Mapping[str, Shape | ModuleRef] | None = None,
    max_new_tokens: int | None = None,
) -> Shape | ModuleRef:
    """Like :func:`shape_of`, but a module expression (``model.model.layers[3]``) gives a
    :class:`ModuleRef`, so that ``layer = model.model.layers[3]`` can be put in ``env``."""
    ctx = _make_context(dims, model_name, seq_len, batch, env, max_new_tokens)
    ev = Evaluation(ctx, _DISPATCH)
    try:
        node = cst.parse_expression(expr) if isinstance(expr, str) else expr
        result = evaluate(node, ev)
    except UnknownShape as exc:
        result = Shape.unknown(str(exc))
    except Exception as exc:  # never raise on odd input
        result = Shape.unknown(f"could not analyse the expression ({type(exc).__name__}: {_safe_str(exc)})")
    if isinstance(result, Shape):
        result = result.with_notes(ev.notes)
    return result


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc).splitlines()[0] if str(exc) else ""
    except Exception:  # some exceptions (libcst's on empty input) fail to format
        return getattr(exc, "message", "") or "error"


def shape_of(
    expr: cst.BaseExpression | str,
    dims: ModelDims,
    model_name: str | Iterable[str] = "model",
    seq_len: int = DEFAULT_SEQ_LEN,
    batch: int = 1,
    env: Mapping[str, Shape | ModuleRef] | None = None,
    max_new_tokens: int | None = None,
) -> Shape:
    """The static :class:`Shape` of ``expr`` (a libcst expression, or its source text).

    ``model_name`` is the script's variable for the model (several aliases may be given);
    ``seq_len`` the prompt's token count; ``batch`` the rows (invokes × prompts);
    ``env`` the shapes (or :class:`ModuleRef`) of names bound earlier in the same block;
    ``max_new_tokens`` the generate length, which also marks ``<tracer>.result`` as a
    generate result (otherwise ``.result`` is the forward's ModelOutput). A trailing
    ``.save()`` (or ``nnsight.save(x)``) is allowed and changes nothing. Never raises.
    """
    result = value_of(expr, dims, model_name, seq_len, batch, env, max_new_tokens)
    if isinstance(result, ModuleRef):
        return Shape.unknown(f"'{result.dotted() or 'model'}' is a module, not a value (read .output or .input)")
    return result


# ---------------------------------------------------------------------------------------
# Dispatch on node type
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


def _eval_name(node: cst.Name, ev: Evaluation) -> Shape | ModuleRef:
    name = node.value
    if name in ev.env:
        value = ev.env[name]
        if isinstance(value, (Shape, ModuleRef)):
            return value
        raise UnknownShape(f"'{name}' is bound to something that is not a Shape")
    if name in ev.ctx.model_names:
        return ModuleRef()
    if name == "None":
        return Shape.python("none", None)
    if name in ("True", "False"):
        return Shape.python("bool", name == "True")
    raise UnknownShape(f"name '{name}' is not bound in this block")


@functools.lru_cache(maxsize=8192)
def literal_value(node: cst.Integer | cst.Float | cst.SimpleString | cst.ConcatenatedString) -> Any:
    """``node.evaluated_value``: libcst compiles the literal with ``ast.literal_eval`` at
    every read. A pure function of an immutable node (hashed by identity and kept alive
    while cached); the cost model reads the same literals in every version of a tree."""
    kind = type(node)
    if kind is cst.Integer or kind is cst.SimpleString:
        plain = _plain_literal(node.value)
        if plain is not None:
            return plain
    return node.evaluated_value


def _plain_literal(text: str) -> int | str | None:
    """The value of a decimal integer (``12``) or a string without prefix, escape or
    carriage return (``"The cat"``), read without compiling it; None for any other."""
    if text.isdigit() and text.isascii():
        return int(text)
    first = text[:1]
    if (first == '"' or first == "'") and "\\" not in text and "\r" not in text:
        quote = text[:3] if text[:3] == first * 3 and len(text) >= 6 else first
        return text[len(quote) : len(text) - len(quote)]
    return None


def _eval_integer(node: cst.Integer, ev: Evaluation) -> Shape:
    return Shape.python("int", int(literal_value(node)))


def _eval_float(node: cst.Float, ev: Evaluation) -> Shape:
    return Shape.python("float", float(literal_value(node)))


def _eval_string(node: cst.BaseExpression, ev: Evaluation) -> Shape:
    value = None if isinstance(node, cst.FormattedString) else literal_value(node)  # an f-string has none
    return Shape.python("str", value if isinstance(value, str) else None)


def _eval_sequence(node: cst.BaseExpression, ev: Evaluation) -> Shape:
    elements = []
    for element in node.elements:
        if isinstance(element, cst.StarredElement):
            raise UnknownShape("a starred element in a literal")
        elements.append(as_shape(evaluate(element.value, ev)))
    return Shape.container(elements)


def _eval_dict(node: cst.Dict, ev: Evaluation) -> Shape:
    elements, names = [], []
    for element in node.elements:
        if not isinstance(element, cst.DictElement):
            raise UnknownShape("a ** expansion in a dict literal")
        key = const_value(element.key, ev)
        names.append(str(key) if key is not NOT_CONST else "")
        elements.append(as_shape(evaluate(element.value, ev)))
    return Shape.container(elements, names)


def _eval_ifexp(node: cst.IfExp, ev: Evaluation) -> Shape:
    a = evaluate_shape(node.body, ev)
    b = evaluate_shape(node.orelse, ev)
    if a == b:
        return a
    ev.note("conditional expression: the larger branch is assumed")
    return a if (a.nbytes or 0) >= (b.nbytes or 0) else b


def _eval_named_expr(node: cst.NamedExpr, ev: Evaluation) -> Shape | ModuleRef:
    return evaluate(node.value, ev)


def _eval_ellipsis(node: cst.Ellipsis, ev: Evaluation) -> Shape:
    return Shape.python("ellipsis", Ellipsis)


def _eval_listcomp(node: cst.BaseExpression, ev: Evaluation) -> Shape:
    # [elt for x in range(n)] (one for, no if): n copies of elt's shape.
    comp = node.for_in
    if comp.inner_for_in is not None or comp.ifs or getattr(comp, "asynchronous", None):
        raise UnknownShape("a comprehension with several for/if clauses")
    count = _iter_length(comp.iter, ev)
    if count is None:
        raise UnknownShape("a comprehension over an iterable of unknown length")
    sub = Evaluation(ev.ctx, ev.dispatch, ev.env)
    for name in target_names(comp.target):
        sub.env[name] = Shape.python("int")
    element = as_shape(evaluate(node.elt, sub))
    for text in sub.notes:
        ev.note(text)
    return Shape.container([element] * count)


def _iter_length(node: cst.BaseExpression, ev: Evaluation) -> int | None:
    if isinstance(node, cst.Call) and dotted_name(node.func) == "range":
        args = [const_value(a.value, ev) for a in node.args]
        if args and all(isinstance(a, int) for a in args):
            return len(range(*args))
        return None
    if isinstance(node, (cst.List, cst.Tuple)):
        return len(node.elements)
    try:
        value = evaluate(node, ev)
    except UnknownShape:
        return None
    if isinstance(value, Shape):
        if value.kind == "container":
            return len(value.elements)
        if value.dims:
            return value.dims[0]
    return None


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
        if isinstance(value, Shape):
            if value.kind == "container":
                return len(value.elements)
            if value.dims:
                return value.dims[0]
        return NOT_CONST
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
# Modules: what .output / .input of each module is
# ---------------------------------------------------------------------------------------

_LAYER_LISTS = {"layers", "h", "blocks", "layer"}
_ATTN = {"self_attn", "attn", "attention", "self_attention"}
_MLP = {"mlp", "feed_forward", "ffn"}
_NORMS = {
    "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
    "post_feedforward_layernorm", "ln_1", "ln_2", "ln", "layernorm", "norm",
}  # fmt: skip
_FINAL_NORMS = {"norm", "ln_f", "final_layernorm", "final_layer_norm", "ln_final"}
_EMBEDS = {"embed_tokens", "wte", "embed_in", "word_embeddings"}
_BASES = {"model", "transformer", "gpt_neox", "language_model", "base_model"}
_LM_HEADS = {"lm_head", "embed_out", "unembed"}
_GENERATORS = {"generator"}
PASSTHROUGH_CALLS = {"next", "all", "iter", "skip_next"}  # envoy methods returning the envoy


@dataclass(frozen=True)
class ModuleRole:
    """What a module computes: ``in_last`` → ``out_last`` on the last dim of ``[b, s, ·]``."""

    kind: str  # "hidden" | "logits" | "embed" | "attn" | "base" | "root" | "generator" | "proj"
    in_last: int | None = None
    out_last: int | None = None
    label: str = ""


def role_of(ref: ModuleRef, ev: Evaluation) -> ModuleRole | None:
    d = ev.dims
    h, v, i_dim = d.hidden_size, d.vocab_size, d.intermediate_size
    path = list(ref.path)
    if not path:
        return ModuleRole("root", label="the model")
    names = [p for p in path if isinstance(p, str)]
    last = path[-1]
    if not isinstance(last, str):
        if len(path) >= 2 and path[-2] in _LAYER_LISTS:
            idx = last
            if isinstance(idx, int) and not (-d.n_layers <= idx < d.n_layers):
                ev.note(f"layer index {idx} is out of range for {d.n_layers} layers")
            return ModuleRole("hidden", h, h, label="decoder layer")
        return None
    in_layer = any(isinstance(p, int) or p is None for p in path[:-1]) and any(
        p in _LAYER_LISTS for p in path[:-1] if isinstance(p, str)
    )
    parent = names[-2] if len(names) >= 2 else None
    if last in _LM_HEADS:
        return ModuleRole("logits", h, v, label=last)
    if last in _GENERATORS:
        return ModuleRole("generator", label=last)
    if not in_layer:
        if last in _BASES and len(names) == 1:
            return ModuleRole("base", label=last)
        if last in _FINAL_NORMS:
            return ModuleRole("hidden", h, h, label=last)
        if last in _EMBEDS:
            return ModuleRole("embed", None, h, label=last)
        if last == "wpe":
            return ModuleRole("embed", None, h, label=last)
        return None
    # inside a decoder layer
    if last in _ATTN:
        return ModuleRole("attn", h, h, label=last)
    if last in _MLP:
        return ModuleRole("hidden", h, h, label=last)
    if last in _NORMS:
        return ModuleRole("hidden", h, h, label=last)
    if parent in _ATTN:
        if last == "q_proj":
            return ModuleRole("proj", h, d.q_dim, label=last)
        if last in ("k_proj", "v_proj"):
            return ModuleRole("proj", h, d.kv_dim, label=last)
        if last in ("o_proj", "out_proj", "dense"):
            return ModuleRole("proj", d.q_dim, h, label=last)
        if last in ("c_attn", "query_key_value"):
            return ModuleRole("proj", h, d.q_dim + 2 * d.kv_dim, label=last)
        if last == "c_proj":
            return ModuleRole("proj", h, h, label=last)
        return None
    if parent in _MLP:
        if last in ("gate_proj", "up_proj", "c_fc", "fc_in", "dense_h_to_4h", "fc1", "w1", "w3"):
            return ModuleRole("proj", h, i_dim, label=last)
        if last in ("act_fn", "act", "activation_fn"):
            return ModuleRole("proj", i_dim, i_dim, label=last)
        if last in ("down_proj", "c_proj", "fc_out", "dense_4h_to_h", "fc2", "w2"):
            return ModuleRole("proj", i_dim, h, label=last)
        return None
    return None


def _hidden(ev: Evaluation, last: int) -> Shape:
    return Shape.tensor((ev.b, ev.s, last), ev.act_dtype)


def _cache_shape(ev: Evaluation) -> Shape:
    d = ev.dims
    kv = Shape.tensor((ev.b, d.n_kv_heads, ev.s, d.attn_head_dim), ev.act_dtype)
    return Shape.container([kv] * (2 * d.n_layers))


def generate_output(ev: Evaluation) -> Shape:
    new = ev.ctx.max_new_tokens
    if new is None:
        new = DEFAULT_MAX_NEW_TOKENS
        ev.note(f"max_new_tokens not given: {DEFAULT_MAX_NEW_TOKENS} new tokens assumed")
    return Shape.tensor((ev.b, ev.s + int(new)), "int64")


_CACHE_NOTE = "a ModelOutput includes the KV cache (use_cache is on by default): slice what you need"


def causal_lm_output(ev: Evaluation) -> Shape:
    logits = _hidden(ev, ev.dims.vocab_size)
    return Shape.container([logits, _cache_shape(ev)], ("logits", "cache")).with_notes([_CACHE_NOTE])


def _module_output(ref: ModuleRef, ev: Evaluation) -> Shape:
    role = role_of(ref, ev)
    if role is None:
        raise UnknownShape(f"no known output shape for module '{ref.dotted()}'")
    if role.kind == "root":
        return causal_lm_output(ev)
    if role.kind == "base":
        return Shape.container(
            [_hidden(ev, ev.dims.hidden_size), _cache_shape(ev)], ("last_hidden_state", "cache")
        ).with_notes([_CACHE_NOTE])
    if role.kind == "generator":
        return generate_output(ev)
    if role.kind == "attn":
        return Shape.container([_hidden(ev, ev.dims.hidden_size), Shape.python("none")], ("", "attn_weights"))
    if role.kind == "embed" and role.label == "wpe":
        return Shape.tensor((1, ev.s, ev.dims.hidden_size), ev.act_dtype)
    assert role.out_last is not None
    return _hidden(ev, role.out_last)


def _module_input(ref: ModuleRef, ev: Evaluation) -> Shape:
    role = role_of(ref, ev)
    if role is None:
        raise UnknownShape(f"no known input shape for module '{ref.dotted()}'")
    if role.kind in ("root", "embed", "base"):
        return Shape.tensor((ev.b, ev.s), "int64")
    if role.kind == "generator":
        raise UnknownShape("the generator has no input")
    return _hidden(ev, role.in_last if role.in_last is not None else ev.dims.hidden_size)


def call_module(ref: ModuleRef, args: Sequence[cst.Arg], ev: Evaluation) -> Shape:
    """``model.lm_head(h)``, ``model.model.norm(h)``: map the last dim of the argument."""
    role = role_of(ref, ev)
    if role is None or role.kind not in ("hidden", "logits", "proj", "embed") or not args:
        raise UnknownShape(f"calling module '{ref.dotted() or 'model'}' directly")
    x = evaluate_shape(args[0].value, ev)
    if not x.is_tensor or x.dims is None:
        raise UnknownShape("calling a module on a value of unknown shape")
    if role.kind == "embed":
        return Shape.tensor(x.dims + (role.out_last,), ev.act_dtype)
    if not x.dims:
        raise UnknownShape("calling a module on a 0-d tensor")
    return Shape.tensor(x.dims[:-1] + (role.out_last,), promote(x.dtype, ev.act_dtype))


# nnterp StandardizedTransformer accessors -----------------------------------------------

_NNTERP_ROOT_LISTS = {
    "layers_output": "hidden", "layers_input": "hidden", "attentions_output": "hidden",
    "attentions_input": "hidden", "mlps_output": "hidden", "mlps_input": "hidden",
    "attention_probabilities": "probs",
}  # fmt: skip
_NNTERP_MODULE_VALUES = {
    "layer_output": "hidden", "layer_input": "hidden", "mlp_output": "hidden",
    "mlp_input": "hidden", "attention_output": "hidden", "attention_input": "hidden",
    "attention_probabilities": "probs",
}  # fmt: skip


@dataclass(frozen=True)
class _NnterpList:
    """``model.layers_output`` before it is indexed."""

    what: str


def _nnterp_value(what: str, ev: Evaluation) -> Shape:
    if what == "probs":
        return Shape.tensor((ev.b, ev.dims.n_heads, ev.s, ev.s), ev.act_dtype)
    return _hidden(ev, ev.dims.hidden_size)


# ---------------------------------------------------------------------------------------
# Attribute access
# ---------------------------------------------------------------------------------------


def _eval_attribute(node: cst.Attribute, ev: Evaluation) -> Shape | ModuleRef:
    attr = node.attr.value
    if (
        attr == "result"
        and type(node.value) is cst.Name  # `is`: see const_value
        and node.value.value not in ev.env
        and node.value.value not in ev.ctx.model_names
    ):
        # `tracer.result`: the generated ids of a generate tracer, else the forward's output.
        if ev.ctx.max_new_tokens is not None:
            return generate_output(ev)
        ev.note("'.result' of a tracer read as the forward's ModelOutput (no max_new_tokens given)")
        return causal_lm_output(ev)
    # `torch.float16`: the dotted name is worked out only for a dtype's attribute name
    dotted = dotted_name(node) if attr in DTYPE_ATTRS else None
    if dotted and dotted.split(".")[0] not in ev.env and dotted.split(".")[0] not in ev.ctx.model_names:
        if dotted.startswith("torch."):
            return Shape.python("dtype", DTYPE_ATTRS[attr])
    base = evaluate(node.value, ev)
    if isinstance(base, ModuleRef):
        return module_attr(base, attr, ev)
    return _value_attr(base, attr, ev)


def module_attr(ref: ModuleRef, attr: str, ev: Evaluation) -> Shape | ModuleRef:
    if attr == "output":
        return _module_output(ref, ev)
    if attr == "input":
        return _module_input(ref, ev)
    if attr == "inputs":
        raise UnknownShape("'.inputs' holds keyword arguments of unknown size; read '.input'")
    if not ref.path:
        if attr == "logits":
            return _hidden(ev, ev.dims.vocab_size)
        if attr == "next_token_probs":
            return Shape.tensor((ev.b, ev.dims.vocab_size), ev.act_dtype)
        if attr in _NNTERP_ROOT_LISTS:
            return ModuleRef(("__nnterp__", attr))
    if ref.path and ref.path[-1] is not None and attr in _NNTERP_MODULE_VALUES and role_of(ref, ev) is not None:
        return _nnterp_value(_NNTERP_MODULE_VALUES[attr], ev)
    if attr in ("source", "_module"):
        raise UnknownShape(f"'.{attr}' of a module")
    return ref.child(attr)


_SAME_VALUE_ATTRS = {"data", "value", "real"}
_FIELD_ALIASES = {"past_key_values": "cache", "cache_params": "cache"}


def _value_attr(value: Shape, attr: str, ev: Evaluation) -> Shape:
    if attr in _SAME_VALUE_ATTRS:
        return value
    if value.kind == "container":
        key = _FIELD_ALIASES.get(attr, attr) if attr not in value.names else attr
        if key in value.names:
            return value.elements[value.names.index(key)]
        raise UnknownShape(f"no field '{attr}' in {value.describe()}")
    if value.kind == "unknown":
        raise UnknownShape(value.reason or "unknown value")
    if value.is_tensor and value.dims is not None:
        dims = value.dims
        if attr == "shape":
            return Shape.python("tuple", tuple(dims), dims=(len(dims),))
        if attr == "ndim":
            return Shape.python("int", len(dims))
        if attr in ("dtype", "device", "layout"):
            return Shape.python(attr, value.dtype if attr == "dtype" else None)
        if attr == "T":
            return Shape.tensor(tuple(reversed(dims)), value.dtype)
        if attr in ("mT", "mH"):
            if len(dims) < 2:
                raise UnknownShape(f"'.{attr}' of a tensor with fewer than 2 dims")
            return Shape.tensor(dims[:-2] + (dims[-1], dims[-2]), value.dtype)
        if attr == "H":
            return Shape.tensor(tuple(reversed(dims)), value.dtype)
        if attr in ("grad", "grad_fn"):
            raise UnknownShape(f"'.{attr}' is None in a forward-only trace")
        if attr == "is_cuda":
            return Shape.python("bool")
    raise UnknownShape(f"attribute '.{attr}' of {value.describe()}")


# ---------------------------------------------------------------------------------------
# Subscripts
# ---------------------------------------------------------------------------------------


def _index_nodes(node: cst.Subscript) -> list[cst.BaseSlice]:
    items: list[cst.BaseSlice] = []
    for element in node.slice:
        sl = element.slice
        if len(node.slice) == 1 and type(sl) is cst.Index and type(sl.value) is cst.Tuple:  # see const_value
            # x[(0, 1)] is x[0, 1]
            return [cst.Index(value=e.value) for e in sl.value.elements]
        items.append(sl)
    return items


def _eval_subscript(node: cst.Subscript, ev: Evaluation) -> Shape | ModuleRef:
    base = evaluate(node.value, ev)
    items = _index_nodes(node)
    if isinstance(base, ModuleRef):
        return module_subscript(base, items, ev)
    first = items[0] if len(items) == 1 else None
    if (
        type(node.value) is cst.Attribute  # `is`: see const_value
        and node.value.attr.value == "output"
        and type(first) is cst.Index
        and const_value(first.value, ev) == 0
    ):
        ref = evaluate(node.value.value, ev)
        if isinstance(ref, ModuleRef):
            role = role_of(ref, ev)
            if role is not None and role.label == "decoder layer":
                ev.note(
                    "a decoder layer's .output is a Tensor in transformers 5: .output[0] selects "
                    "batch row 0, not the hidden states"
                )
    if base.kind == "container":
        return _container_subscript(base, items, ev)
    if base.kind == "python":
        return _python_subscript(base, items, ev)
    if base.is_tensor:
        return _tensor_index(base, items, ev)
    raise UnknownShape(f"indexing {base.describe()}")


def module_subscript(ref: ModuleRef, items: list[cst.BaseSlice], ev: Evaluation) -> Shape | ModuleRef:
    if len(items) != 1 or not isinstance(items[0], cst.Index):
        raise UnknownShape(f"slicing module list '{ref.dotted()}'")
    index = const_int(items[0].value, ev)
    if ref.path and ref.path[0] == "__nnterp__":
        what = _NNTERP_ROOT_LISTS[str(ref.path[1])]
        return _nnterp_value(what, ev)
    if index is None:
        try:
            evaluate_shape(items[0].value, ev)
        except UnknownShape:
            pass
    return ref.child(index)


def _container_subscript(base: Shape, items: list[cst.BaseSlice], ev: Evaluation) -> Shape:
    if len(items) != 1:
        raise UnknownShape("multi-dimensional index into a tuple or list")
    item = items[0]
    n = len(base.elements)
    if isinstance(item, cst.Slice):
        bounds = [const_value(x, ev) if x is not None else None for x in (item.lower, item.upper, item.step)]
        if any(b is NOT_CONST for b in bounds):
            raise UnknownShape("slice of a tuple with non-literal bounds")
        picked = range(n)[slice(*bounds)]
        return Shape.container(
            [base.elements[i] for i in picked], [base.names[i] for i in picked] if base.names else ()
        )
    key = const_value(item.value, ev)
    if isinstance(key, int) and not isinstance(key, bool):
        if not -n <= key < n:
            raise UnknownShape(f"index {key} out of range for a tuple of {n}")
        return base.elements[key]
    if isinstance(key, str):
        key = key if key in base.names else _FIELD_ALIASES.get(key, key)
        if key in base.names:
            return base.elements[base.names.index(key)]
        raise UnknownShape(f"no key {key!r} in {base.describe()}")
    if base.elements and all(e == base.elements[0] for e in base.elements):
        ev.note("a non-literal index into a list of equal elements")
        return base.elements[0]
    raise UnknownShape("a non-literal index into a tuple or list")


def _python_subscript(base: Shape, items: list[cst.BaseSlice], ev: Evaluation) -> Shape:
    if base.dtype == "tuple" and isinstance(base.value, tuple) and len(items) == 1:
        item = items[0]
        if isinstance(item, cst.Index):
            key = const_int(item.value, ev)
            if key is not None and -len(base.value) <= key < len(base.value):
                return Shape.python("int", base.value[key])
            return Shape.python("int")
        bounds = [const_value(x, ev) if x is not None else None for x in (item.lower, item.upper, item.step)]
        if not any(b is NOT_CONST for b in bounds):
            sub = base.value[slice(*bounds)]
            return Shape.python("tuple", sub, dims=(len(sub),))
    if base.dtype == "list" and base.dims:
        indexed = _tensor_index(Shape.tensor(base.dims, "int64"), items, ev)
        if indexed.dims == ():
            return Shape.python("number")
        return Shape.python("list", dims=indexed.dims or ())
    raise UnknownShape(f"indexing {base.describe()}")


def _tensor_index(base: Shape, items: list[cst.BaseSlice], ev: Evaluation) -> Shape:
    """torch indexing: ints select first; slices/None/...; lists and tensors are advanced."""
    dims = list(base.dims or ())
    # Classify each index item.
    parsed: list[tuple[str, Any]] = []
    for item in items:
        if type(item) is cst.Slice:  # `is`: see const_value
            parsed.append(("slice", item))
            continue
        expr = item.value
        if type(expr) is cst.Ellipsis:
            parsed.append(("ellipsis", None))
            continue
        const = const_value(expr, ev)
        if const is None:
            parsed.append(("none", None))
            continue
        if isinstance(const, bool):
            parsed.append(("none", None))  # x[True] adds a dim of 1
            continue
        if isinstance(const, int):
            parsed.append(("int", const))
            continue
        if isinstance(const, (list, tuple)):
            parsed.append(("adv", literal_dims(const)))
            continue
        if type(expr) is cst.Name and expr.value not in ev.env and expr.value not in ev.ctx.model_names:
            ev.note(
                f"index '{expr.value}' is not bound here: it is taken to keep its dim with length "
                f"{DEFAULT_INDEX_LENGTH} (right in bytes for an int index)"
            )
            parsed.append(("adv", (DEFAULT_INDEX_LENGTH,)))
            continue
        try:
            value = evaluate_shape(expr, ev)
        except UnknownShape as exc:
            ev.note(f"an index of unknown shape ({exc}): length {DEFAULT_INDEX_LENGTH} assumed")
            parsed.append(("adv", (DEFAULT_INDEX_LENGTH,)))
            continue
        if value.kind == "python" and value.dtype in ("int", "number"):
            parsed.append(("int", value.value))
        elif value.kind == "python" and value.dtype == "list" and value.dims:
            parsed.append(("adv", value.dims))
        elif value.kind == "container" and value.elements:
            parsed.append(("adv", (len(value.elements),)))
        elif value.is_tensor and value.dtype == "bool":
            ev.note(f"a boolean mask index: {DEFAULT_INDEX_LENGTH} selected element(s) assumed")
            parsed.append(("mask", len(value.dims or ())))
        elif value.is_tensor:
            if value.dtype.startswith("float") or value.dtype == "bfloat16":
                raise UnknownShape("indexing with a floating-point tensor")
            parsed.append(("adv", value.dims or ()))
        else:
            raise UnknownShape(f"indexing with {value.describe()}")

    consumed = sum(1 if k in ("int", "slice", "adv") else (v if k == "mask" else 0) for k, v in parsed)
    if sum(1 for k, _ in parsed if k == "ellipsis") > 1:
        raise UnknownShape("more than one ellipsis in an index")
    if consumed > len(dims):
        raise UnknownShape(f"too many indices ({consumed}) for a tensor of {len(dims)} dims")
    # Expand the ellipsis (or pad with full slices at the end).
    expanded: list[tuple[str, Any]] = []
    for kind, val in parsed:
        if kind == "ellipsis":
            expanded.extend([("full", None)] * (len(dims) - consumed))
        else:
            expanded.append((kind, val))
    if not any(k == "ellipsis" for k, _ in parsed):
        expanded.extend([("full", None)] * (len(dims) - consumed))

    # Pass 1: basic indexing (ints drop their dim; slices; None adds a dim).
    out: list[Any] = []  # ints, or ("adv", dims) markers
    pos = 0
    for kind, val in expanded:
        if kind == "none":
            out.append(1)
        elif kind == "full":
            out.append(dims[pos])
            pos += 1
        elif kind == "int":
            if isinstance(val, int) and not -dims[pos] <= val < dims[pos]:
                raise UnknownShape(f"index {val} is out of range for a dim of {dims[pos]}")
            pos += 1
        elif kind == "slice":
            out.append(_slice_length(val, dims[pos], ev))
            pos += 1
        elif kind == "adv":
            out.append(("adv", tuple(val)))
            pos += 1
        elif kind == "mask":
            out.append(("adv", (DEFAULT_INDEX_LENGTH,)))
            pos += val
    adv_positions = [i for i, x in enumerate(out) if isinstance(x, tuple)]
    if not adv_positions:
        return Shape.tensor(out, base.dtype)
    joint = broadcast(*[out[i][1] for i in adv_positions])
    contiguous = adv_positions == list(range(adv_positions[0], adv_positions[-1] + 1))
    rest = [x for x in out if not isinstance(x, tuple)]
    if contiguous:
        first = adv_positions[0]
        result = rest[:first] + list(joint) + rest[first:]
    else:
        result = list(joint) + rest
    return Shape.tensor(result, base.dtype)


def literal_dims(value: Any) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        if not value:
            return (0,)
        inner = {literal_dims(v) for v in value}
        if len(inner) != 1:
            raise UnknownShape("a ragged list used as an index")
        return (len(value),) + inner.pop()
    return ()


def _slice_length(item: cst.Slice, size: int, ev: Evaluation) -> int:
    bounds = []
    for part in (item.lower, item.upper, item.step):
        if part is None:
            bounds.append(None)
            continue
        value = const_value(part, ev)
        if isinstance(value, int) and not isinstance(value, bool):
            bounds.append(value)
        elif value is None:
            bounds.append(None)
        else:
            ev.note(f"a slice bound is not a literal: the whole dim ({size}) is assumed (an upper bound)")
            return size
    if bounds[2] == 0:
        raise UnknownShape("slice step cannot be zero")
    return len(range(*slice(*bounds).indices(size)))


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


# ---------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------


def _eval_binary(node: cst.BinaryOperation, ev: Evaluation) -> Shape:
    a = evaluate_shape(node.left, ev)
    b = evaluate_shape(node.right, ev)
    op = type(node.operator)
    if op is cst.MatrixMultiply:
        return matmul(a, b)
    return binary(a, b, op, ev)


def binary(a: Shape, b: Shape, op: type, ev: Evaluation, comparison: bool = False) -> Shape:
    if a.kind == "python" and b.kind == "python":
        if a.dtype in ("list", "tuple", "str") or b.dtype in ("list", "tuple", "str"):
            raise UnknownShape("arithmetic on Python sequences")
        if comparison:
            return Shape.python("bool")
        value = None
        fn = ARITH.get(op)
        if fn and isinstance(a.value, (int, float)) and isinstance(b.value, (int, float)):
            try:
                value = fn(a.value, b.value)
            except (ArithmeticError, ValueError):
                value = None
            value = None if value is NOT_CONST else value
        dtype = "float" if "float" in (a.dtype, b.dtype) or op is cst.Divide else a.dtype
        return Shape.python(dtype if dtype in ("int", "float", "bool") else "number", value)
    if a.is_tensor and b.kind == "python" or a.kind == "python" and b.is_tensor:
        t, p = (a, b) if a.is_tensor else (b, a)
        if p.dtype not in ("int", "float", "bool", "number"):
            raise UnknownShape(f"arithmetic between a tensor and {p.describe()}")
        if comparison:
            return Shape.tensor(t.dims or (), "bool")
        dtype = t.dtype
        if dtype_category(dtype) < 2 and (p.dtype == "float" or op is cst.Divide):
            dtype = "float32"
        elif dtype == "bool" and p.dtype == "int" and op is not cst.BitAnd and op is not cst.BitOr:
            dtype = "int64"
        return Shape.tensor(t.dims or (), dtype)
    if a.is_tensor and b.is_tensor:
        dims = broadcast(a.dims or (), b.dims or ())
        if comparison:
            return Shape.tensor(dims, "bool")
        dtype = promote_shapes(a, b)
        if op is cst.Divide and dtype_category(dtype) < 2:
            dtype = "float32"
        return Shape.tensor(dims, dtype)
    raise UnknownShape(f"operator on {a.describe()} and {b.describe()}")


def matmul(a: Shape, b: Shape) -> Shape:
    if not (a.is_tensor and b.is_tensor) or not a.dims or not b.dims:
        raise UnknownShape("matrix product of values of unknown or 0-d shape")
    da, db = list(a.dims), list(b.dims)
    squeeze_a = squeeze_b = False
    if len(da) == 1:
        da, squeeze_a = [1] + da, True
    if len(db) == 1:
        db, squeeze_b = db + [1], True
    if da[-1] != db[-2]:
        raise UnknownShape(f"matrix product of {list(a.dims)} and {list(b.dims)}")
    batch = broadcast(da[:-2], db[:-2])
    out = list(batch) + ([] if squeeze_a else [da[-2]]) + ([] if squeeze_b else [db[-1]])
    return Shape.tensor(out, promote_shapes(a, b))


def _eval_unary(node: cst.UnaryOperation, ev: Evaluation) -> Shape:
    value = evaluate_shape(node.expression, ev)
    if isinstance(node.operator, cst.Not):
        return Shape.python("bool")
    if value.kind == "python":
        if isinstance(node.operator, cst.Minus) and isinstance(value.value, (int, float)):
            return Shape.python(value.dtype, -value.value)
        return Shape.python(value.dtype)
    if value.is_tensor:
        return value
    raise UnknownShape(f"unary operator on {value.describe()}")


def _eval_comparison(node: cst.Comparison, ev: Evaluation) -> Shape:
    left = evaluate_shape(node.left, ev)
    result = None
    for target in node.comparisons:
        if isinstance(target.operator, (cst.In, cst.NotIn, cst.Is, cst.IsNot)):
            return Shape.python("bool")
        right = evaluate_shape(target.comparator, ev)
        part = binary(left, right, type(target.operator), ev, comparison=True)
        result = part if result is None else binary(result, part, cst.BitAnd, ev)
        left = right
    if result is None:
        raise UnknownShape("empty comparison")
    return result


def _eval_boolean(node: cst.BooleanOperation, ev: Evaluation) -> Shape:
    left = evaluate_shape(node.left, ev)
    right = evaluate_shape(node.right, ev)
    if left == right:
        return left
    raise UnknownShape("'and'/'or' of values of different shapes")


# ---------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------


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


FUNCTION_NAMESPACES = {"torch", "F", "nn", "functional", "np", "numpy", "math", "nnsight", "einops", "operator"}


def _eval_call(node: cst.Call, ev: Evaluation) -> Shape | ModuleRef:
    func = node.func
    dotted = dotted_name(func)
    root = dotted.split(".")[0] if dotted else None
    # Functions: torch.*, F.*, nnsight.*, builtins.
    if dotted and root not in ev.env and root not in ev.ctx.model_names:
        if "." not in dotted:
            return builtin_call(dotted, node.args, ev)
        if root in FUNCTION_NAMESPACES or dotted.startswith("torch."):
            return function_call(dotted, node.args, ev)
    if type(func) is cst.Attribute:  # `is`: see const_value
        receiver = evaluate(func.value, ev)
        method = func.attr.value
        if isinstance(receiver, ModuleRef):
            if method in PASSTHROUGH_CALLS:
                return receiver
            if method in ("save", "value"):
                raise UnknownShape("saving a module")
            target = module_attr(receiver, method, ev)
            if isinstance(target, ModuleRef) and role_of(target, ev) is not None:
                return call_module(target, node.args, ev)
            raise UnknownShape(f"method '.{method}()' of module '{receiver.dotted() or 'model'}'")
        return method_call(receiver, method, node.args, ev)
    target = evaluate(func, ev)
    if isinstance(target, ModuleRef):
        return call_module(target, node.args, ev)
    raise UnknownShape("a call of a value")


def method_call(value: Shape, method: str, call_args: Sequence[cst.Arg], ev: Evaluation) -> Shape:
    if value.kind == "unknown":
        raise UnknownShape(value.reason or "unknown value")
    if method in ("save", "value", "detach", "cpu", "cuda", "clone", "contiguous", "requires_grad_", "numpy",
                  "retain_grad", "pin_memory", "detach_", "coalesce"):  # fmt: skip
        if method in ("numpy",) and not value.is_tensor:
            raise UnknownShape(".numpy() of a non-tensor")
        return value
    args = CallArgs(call_args, ev)
    if value.kind == "container":
        raise UnknownShape(f"method '.{method}()' of {value.describe()}")
    if value.kind == "python":
        return _python_method(value, method, args)
    handler = _METHODS.get(method)
    if handler is None:
        if method.endswith("_") and method[:-1] in _METHODS:
            handler = _METHODS[method[:-1]]
        else:
            raise UnknownShape(f"tensor method '.{method}()' is not modelled")
    require_tensor(value, method)
    return handler(value, args, ev)


def _python_method(value: Shape, method: str, args: CallArgs) -> Shape:
    if method in ("item", "__int__", "__float__", "bit_length", "is_integer"):
        return Shape.python(value.dtype if value.dtype in ("int", "float") else "number")
    if method == "tolist" and value.dtype == "list":
        return value
    if method in ("copy", "index", "count") and value.dtype in ("list", "tuple"):
        return value if method == "copy" else Shape.python("int")
    raise UnknownShape(f"method '.{method}()' of {value.describe()}")


# tensor methods -----------------------------------------------------------------------


def _m_same(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    return value


def _m_float_result(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    """exp, sqrt, sigmoid …: ints become float32."""
    return Shape.tensor(value.dims or (), value.dtype if dtype_category(value.dtype) >= 2 else "float32")


def _m_binary(op: type, comparison: bool = False) -> Callable[[Shape, CallArgs, Evaluation], Shape]:
    def handler(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
        other_node = args.node(0, "other")
        if other_node is None:
            raise UnknownShape("binary tensor method without an operand")
        other = evaluate_shape(other_node, ev)
        return binary(value, other, op, ev, comparison)

    return handler


def _m_cast(dtype: str) -> Callable[[Shape, CallArgs, Evaluation], Shape]:
    def handler(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
        return Shape.tensor(value.dims or (), dtype)

    return handler


def _m_to(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    if "dtype" in args.kw:
        dtype = dtype_from(args.kw["dtype"], ev)
        if dtype is None:
            raise UnknownShape("'.to(dtype=...)' with a dtype that is not a literal")
        return Shape.tensor(value.dims or (), dtype)
    for node in args.pos:
        dtype = dtype_from(node, ev)
        if dtype is not None:
            return Shape.tensor(value.dims or (), dtype)
        const = const_value(node, ev)
        if isinstance(const, str) or const is None:
            continue  # a device
        try:
            other = evaluate(node, ev)
        except UnknownShape:
            other = None
        if isinstance(other, Shape) and other.is_tensor:
            return Shape.tensor(value.dims or (), other.dtype)
        if isinstance(other, Shape) and other.kind == "python" and other.dtype == "dtype" and other.value:
            return Shape.tensor(value.dims or (), other.value)
        if not (isinstance(other, Shape) and other.dtype == "device"):
            ev.note("'.to(...)' with an argument that is not a literal: dtype kept")
    return value


def _m_type(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    if not args.pos and "dtype" not in args.kw:
        return Shape.python("str")
    dtype = dtype_from(args.node(0, "dtype"), ev)
    if dtype is None:
        raise UnknownShape("'.type(...)' with a dtype that is not a literal")
    return Shape.tensor(value.dims or (), dtype)


def _reduced(value: Shape, dim: Any, keepdim: bool, dtype: str) -> Shape:
    dims = list(value.dims or ())
    if dim is None:
        return Shape.tensor([1] * len(dims) if keepdim else [], dtype)
    targets = {norm_dim(d, len(dims)) for d in (dim if isinstance(dim, tuple) else (dim,))}
    if not dims:
        return Shape.tensor([], dtype)
    out = (
        [1 if i in targets else n for i, n in enumerate(dims)]
        if keepdim
        else [n for i, n in enumerate(dims) if i not in targets]
    )
    return Shape.tensor(out, dtype)


def _m_reduce(kind: str, dim_pos: int | None = 0) -> Callable[[Shape, CallArgs, Evaluation], Shape]:
    """sum/mean/…: ``kind`` picks the result dtype; ``dim_pos`` where a positional dim sits."""

    def handler(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
        dim = args.dim(dim_pos, "dim")
        if dim is None and "axis" in args.kw:
            dim = args.dim(None, "axis")
        keepdim = args.flag(None if dim_pos is None else dim_pos + 1, "keepdim")
        dtype = value.dtype
        explicit = dtype_from(args.kw.get("dtype"), ev) if "dtype" in args.kw else None
        if explicit:
            dtype = explicit
        elif kind == "sum" and dtype_category(dtype) < 2:
            dtype = "int64"
        elif kind == "bool":
            dtype = "bool"
        elif kind == "count":
            dtype = "int64"
        elif kind == "float" and dtype_category(dtype) < 2:
            dtype = "float32"
        return _reduced(value, dim, keepdim, dtype)

    return handler


def _m_norm(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dim = args.dim(1, "dim")
    keepdim = args.flag(2, "keepdim")
    dtype = value.dtype if dtype_category(value.dtype) >= 2 else "float32"
    return _reduced(value, dim, keepdim, dtype)


def _m_arg(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dim = args.dim(0, "dim")
    return _reduced(value, dim, args.flag(1, "keepdim"), "int64")


def _m_maxmin(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    first = args.node(0, "dim")
    if first is not None and "dim" not in args.kw and const_value(first, ev) is NOT_CONST:
        other = evaluate_shape(first, ev)  # max(other): elementwise
        return binary(value, other, cst.Add, ev)
    dim = args.dim(0, "dim")
    if dim is None:
        return Shape.tensor([], value.dtype)
    keepdim = args.flag(1, "keepdim")
    values = _reduced(value, dim, keepdim, value.dtype)
    indices = _reduced(value, dim, keepdim, "int64")
    return Shape.container([values, indices], ("values", "indices"))


def _m_median(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dim = args.dim(0, "dim")
    if dim is None:
        return Shape.tensor([], value.dtype)
    return _m_maxmin(value, args, ev)


def _m_topk(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    k = args.const(0, "k")
    if not isinstance(k, int):
        raise UnknownShape("topk with a k that is not a literal")
    dim = args.const(1, "dim", -1)
    dims = list(value.dims or ())
    d = norm_dim(dim, len(dims))
    if dims:
        if k > dims[d]:
            raise UnknownShape(f"topk k={k} is larger than the dim ({dims[d]})")
        dims[d] = k
    return Shape.container([Shape.tensor(dims, value.dtype), Shape.tensor(dims, "int64")], ("values", "indices"))


def _m_kthvalue(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dim = args.const(1, "dim", -1)
    keepdim = args.flag(2, "keepdim")
    vals = _reduced(value, dim, keepdim, value.dtype)
    return Shape.container([vals, _reduced(value, dim, keepdim, "int64")], ("values", "indices"))


def _m_sort(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = value.dims or ()
    return Shape.container([Shape.tensor(dims, value.dtype), Shape.tensor(dims, "int64")], ("values", "indices"))


def _m_argsort(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    return Shape.tensor(value.dims or (), "int64")


def _m_softmax(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dim = args.const(0, "dim", None)
    if dim is not None:
        norm_dim(dim, len(value.dims or ()))
    dtype = dtype_from(args.kw.get("dtype"), ev) if "dtype" in args.kw else None
    if dtype is None:
        dtype = value.dtype if dtype_category(value.dtype) >= 2 else "float32"
    return Shape.tensor(value.dims or (), dtype)


def _m_cum(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dim = args.const(0, "dim", None)
    if dim is not None:
        norm_dim(dim, len(value.dims or ()))
    dtype = "int64" if dtype_category(value.dtype) < 2 else value.dtype
    return Shape.tensor(value.dims or (), dtype)


def _m_item(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    if value.numel != 1:
        raise UnknownShape(f".item() of a tensor of {value.numel} elements")
    return Shape.python("int" if dtype_category(value.dtype) == 1 else "bool" if value.dtype == "bool" else "float")


def _m_tolist(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    if not value.dims:
        return _m_item(value, args, ev)
    return Shape.python("list", dims=value.dims)


def _m_size(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = value.dims or ()
    dim = args.const(0, "dim", None)
    if dim is None:
        return Shape.python("tuple", tuple(dims), dims=(len(dims),))
    return Shape.python("int", dims[norm_dim(dim, len(dims))])


def _m_int_of(fn: Callable[[tuple[int, ...]], int]) -> Callable[[Shape, CallArgs, Evaluation], Shape]:
    def handler(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
        return Shape.python("int", fn(value.dims or ()))

    return handler


def _m_squeeze(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    dim = args.dim(0, "dim")
    if dim is None:
        return Shape.tensor([n for n in dims if n != 1], value.dtype)
    targets = {norm_dim(d, len(dims)) for d in (dim if isinstance(dim, tuple) else (dim,))}
    return Shape.tensor([n for i, n in enumerate(dims) if not (i in targets and n == 1)], value.dtype)


def _m_unsqueeze(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    dim = args.const(0, "dim")
    if not isinstance(dim, int):
        raise UnknownShape("unsqueeze without a literal dim")
    d = norm_dim(dim, len(dims) + 1)
    return Shape.tensor(dims[:d] + [1] + dims[d:], value.dtype)


def _m_flatten(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    if not dims:
        return Shape.tensor([1], value.dtype)
    start = norm_dim(args.const(0, "start_dim", 0), len(dims))
    end = norm_dim(args.const(1, "end_dim", -1), len(dims))
    if start > end:
        raise UnknownShape("flatten with start_dim after end_dim")
    return Shape.tensor(dims[:start] + [math.prod(dims[start : end + 1])] + dims[end + 1 :], value.dtype)


def _reshaped(value: Shape, sizes: list[int]) -> Shape:
    numel = math.prod(value.dims or ())
    if sizes.count(-1) > 1:
        raise UnknownShape("more than one -1 in a view")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if known == 0 or numel % known:
            raise UnknownShape(f"cannot view {numel} elements as {sizes}")
        sizes = [numel // known if s == -1 else s for s in sizes]
    if math.prod(sizes) != numel:
        raise UnknownShape(f"cannot view {list(value.dims or ())} as {sizes}")
    return Shape.tensor(sizes, value.dtype)


def _m_view(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    if len(args.pos) == 1:
        dtype = dtype_from(args.pos[0], ev)
        if dtype is not None:
            raise UnknownShape("a dtype view")
    return _reshaped(value, args.sizes(0, "shape" if "shape" in args.kw else "size"))


def _m_view_as(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    other = evaluate_shape(args.node(0, "other"), ev)
    require_tensor(other, "view_as")
    return _reshaped(value, list(other.dims or ()))


def _m_expand_as(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    other = evaluate_shape(args.node(0, "other"), ev)
    require_tensor(other, "expand_as")
    return Shape.tensor(other.dims or (), value.dtype)


def _m_permute(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    order = args.sizes(0, "dims")
    if sorted(norm_dim(d, len(dims)) for d in order) != list(range(len(dims))):
        raise UnknownShape(f"permute {order} of a tensor of {len(dims)} dims")
    return Shape.tensor([dims[norm_dim(d, len(dims))] for d in order], value.dtype)


def _m_transpose(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    a, b = args.const(0, "dim0"), args.const(1, "dim1")
    if not (isinstance(a, int) and isinstance(b, int)):
        raise UnknownShape("transpose without literal dims")
    a, b = norm_dim(a, len(dims)), norm_dim(b, len(dims))
    dims[a], dims[b] = dims[b], dims[a]
    return Shape.tensor(dims, value.dtype)


def _m_t(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = value.dims or ()
    if len(dims) > 2:
        raise UnknownShape(".t() of a tensor with more than 2 dims")
    return Shape.tensor(tuple(reversed(dims)), value.dtype)


def _m_expand(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    sizes = args.sizes(0, "size")
    dims = list(value.dims or ())
    if len(sizes) < len(dims):
        raise UnknownShape("expand to fewer dims")
    pad = [1] * (len(sizes) - len(dims)) + dims
    return Shape.tensor([p if s == -1 else s for s, p in zip(sizes, pad, strict=False)], value.dtype)


def _m_repeat(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    sizes = args.sizes(0, "repeats")
    dims = list(value.dims or ())
    if len(sizes) < len(dims):
        raise UnknownShape("repeat with fewer sizes than dims")
    pad = [1] * (len(sizes) - len(dims)) + dims
    return Shape.tensor([s * p for s, p in zip(sizes, pad, strict=False)], value.dtype)


def _m_narrow(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    dim, length = args.const(0, "dim"), args.const(2, "length")
    if not (isinstance(dim, int) and isinstance(length, int)):
        raise UnknownShape("narrow without literal arguments")
    dims[norm_dim(dim, len(dims))] = length
    return Shape.tensor(dims, value.dtype)


def _m_select(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    dim = args.const(0, "dim")
    if not isinstance(dim, int):
        raise UnknownShape("select without a literal dim")
    del dims[norm_dim(dim, len(dims))]
    return Shape.tensor(dims, value.dtype)


def _m_index_select(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    dims = list(value.dims or ())
    dim = args.const(0, "dim")
    index = evaluate_shape(args.node(1, "index"), ev)
    if not isinstance(dim, int) or not index.dims or len(index.dims) != 1:
        raise UnknownShape("index_select needs a literal dim and a 1-d index of known length")
    dims[norm_dim(dim, len(dims))] = index.dims[0]
    return Shape.tensor(dims, value.dtype)


def _m_gather(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    index = evaluate_shape(args.node(1, "index"), ev)
    require_tensor(index, "gather")
    return Shape.tensor(index.dims or (), value.dtype)


def _m_chunk(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    chunks = args.const(0, "chunks")
    dim = args.const(1, "dim", 0)
    dims = list(value.dims or ())
    if not isinstance(chunks, int) or chunks <= 0:
        raise UnknownShape("chunk without a literal count")
    d = norm_dim(dim, len(dims))
    size = -(-dims[d] // chunks)
    parts = []
    remaining = dims[d]
    while remaining > 0:
        part = dims.copy()
        part[d] = min(size, remaining)
        parts.append(Shape.tensor(part, value.dtype))
        remaining -= size
    return Shape.container(parts)


def _m_split(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    size = args.const(0, "split_size")
    if size is None:
        size = args.const(None, "split_size_or_sections")
    dim = args.const(1, "dim", 0)
    dims = list(value.dims or ())
    d = norm_dim(dim, len(dims))
    if isinstance(size, int) and size > 0:
        sections = [min(size, dims[d] - start) for start in range(0, dims[d], size)]
    elif isinstance(size, (list, tuple)) and sum(size) == dims[d]:
        sections = list(size)
    else:
        raise UnknownShape("split without literal sizes")
    parts = []
    for n in sections:
        part = dims.copy()
        part[d] = n
        parts.append(Shape.tensor(part, value.dtype))
    return Shape.container(parts)


def _m_where(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    cond = evaluate_shape(args.node(0, "condition"), ev)
    other = evaluate_shape(args.node(1, "other"), ev)
    shape = binary(value, other, cst.Add, ev)
    return Shape.tensor(broadcast(shape.dims or (), cond.dims or ()), shape.dtype)


def _m_matmul(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    return matmul(value, evaluate_shape(args.node(0, "other"), ev))


def _m_masked_fill(value: Shape, args: CallArgs, ev: Evaluation) -> Shape:
    return value


_METHODS: dict[str, Callable[[Shape, CallArgs, Evaluation], Shape]] = {
    # elementwise, shape and dtype kept
    **{name: _m_same for name in (
        "abs", "neg", "negative", "relu", "clamp", "clip", "clamp_min", "clamp_max", "round",
        "floor", "ceil", "trunc", "sign", "fill_", "zero_", "nan_to_num", "square", "masked_fill",
        "masked_scatter", "flip", "roll", "fliplr", "flipud", "tril", "triu", "copy_", "normal_",
        "uniform_", "index_fill", "scatter", "scatter_add", "index_add", "index_copy", "lerp",
        "logit", "positive", "conj", "resolve_conj", "resolve_neg", "bernoulli",
    )},
    **{name: _m_float_result for name in (
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sigmoid",
        "tanh", "sin", "cos", "tan", "erf", "reciprocal", "pow", "float_power", "softplus",
        "gelu", "silu", "atan", "asin", "acos", "sinh", "cosh", "frac",
    )},
    "float_power": _m_cast("float64"),
    # binary
    "add": _m_binary(cst.Add), "sub": _m_binary(cst.Subtract), "subtract": _m_binary(cst.Subtract),
    "mul": _m_binary(cst.Multiply), "multiply": _m_binary(cst.Multiply),
    "div": _m_binary(cst.Divide), "divide": _m_binary(cst.Divide), "true_divide": _m_binary(cst.Divide),
    "floor_divide": _m_binary(cst.FloorDivide), "remainder": _m_binary(cst.Modulo),
    "fmod": _m_binary(cst.Modulo), "maximum": _m_binary(cst.Add), "minimum": _m_binary(cst.Add),
    "eq": _m_binary(cst.Add, True), "ne": _m_binary(cst.Add, True), "gt": _m_binary(cst.Add, True),
    "lt": _m_binary(cst.Add, True), "ge": _m_binary(cst.Add, True), "le": _m_binary(cst.Add, True),
    "greater": _m_binary(cst.Add, True), "less": _m_binary(cst.Add, True),
    "isclose": _m_binary(cst.Add, True), "logical_and": _m_binary(cst.BitAnd, True),
    "logical_or": _m_binary(cst.BitOr, True), "isnan": _m_cast("bool"), "isinf": _m_cast("bool"),
    "isfinite": _m_cast("bool"), "logical_not": _m_cast("bool"),
    "matmul": _m_matmul, "mm": _m_matmul, "bmm": _m_matmul, "dot": _m_matmul, "where": _m_where,
    # dtype
    "float": _m_cast("float32"), "double": _m_cast("float64"), "half": _m_cast("float16"),
    "bfloat16": _m_cast("bfloat16"), "long": _m_cast("int64"), "int": _m_cast("int32"),
    "short": _m_cast("int16"), "char": _m_cast("int8"), "byte": _m_cast("uint8"),
    "bool": _m_cast("bool"), "to": _m_to, "type": _m_type, "type_as": lambda v, a, e: Shape.tensor(
        v.dims or (), evaluate_shape(a.node(0, "other"), e).dtype),
    # reductions
    "sum": _m_reduce("sum"), "nansum": _m_reduce("sum"), "prod": _m_reduce("sum"),
    "mean": _m_reduce("float"), "nanmean": _m_reduce("float"), "std": _m_reduce("float"),
    "var": _m_reduce("float"), "logsumexp": _m_reduce("float"), "amax": _m_reduce("same"),
    "amin": _m_reduce("same"), "all": _m_reduce("bool"), "any": _m_reduce("bool"),
    "count_nonzero": _m_reduce("count"), "norm": _m_norm, "vector_norm": _m_norm,
    "argmax": _m_arg, "argmin": _m_arg, "max": _m_maxmin, "min": _m_maxmin,
    "median": _m_median, "nanmedian": _m_median, "mode": _m_maxmin,
    "topk": _m_topk, "kthvalue": _m_kthvalue, "sort": _m_sort, "argsort": _m_argsort,
    "softmax": _m_softmax, "log_softmax": _m_softmax, "cumsum": _m_cum, "cumprod": _m_cum,
    "cummax": lambda v, a, e: Shape.container(
        [Shape.tensor(v.dims or (), v.dtype), Shape.tensor(v.dims or (), "int64")], ("values", "indices")),
    # Python conversions
    "item": _m_item, "tolist": _m_tolist, "size": _m_size,
    "dim": _m_int_of(len), "ndimension": _m_int_of(len), "numel": _m_int_of(math.prod),
    "nelement": _m_int_of(math.prod), "element_size": lambda v, a, e: Shape.python("int", dtype_size(v.dtype)),
    "__len__": lambda v, a, e: Shape.python("int", (v.dims or (0,))[0]),
    # shape
    "squeeze": _m_squeeze, "unsqueeze": _m_unsqueeze, "flatten": _m_flatten, "ravel": _m_flatten,
    "view": _m_view, "reshape": _m_view, "view_as": _m_view_as, "reshape_as": _m_view_as,
    "expand_as": _m_expand_as, "permute": _m_permute, "transpose": _m_transpose,
    "swapaxes": _m_transpose, "swapdims": _m_transpose, "t": _m_t, "expand": _m_expand,
    "repeat": _m_repeat, "narrow": _m_narrow, "select": _m_select, "index_select": _m_index_select,
    "gather": _m_gather, "take_along_dim": _m_gather, "chunk": _m_chunk, "split": _m_split,
}  # fmt: skip


# functions ------------------------------------------------------------------------------

_FUNCTIONAL_PREFIXES = (
    "torch.nn.functional.",
    "nn.functional.",
    "F.",
    "functional.",
    "torch.special.",
    "torch.linalg.",
    "torch.",
)
_SAVE_FUNCS = {"nnsight.save", "save"}


def _strip_namespace(dotted: str) -> str | None:
    for prefix in _FUNCTIONAL_PREFIXES:
        if dotted.startswith(prefix):
            return dotted[len(prefix) :]
    return None


def function_call(dotted: str, call_args: Sequence[cst.Arg], ev: Evaluation) -> Shape:
    if dotted in _SAVE_FUNCS:
        if not call_args:
            raise UnknownShape("save() without an argument")
        return as_shape(evaluate(call_args[0].value, ev))
    if dotted in ("nnsight.list", "nnsight.dict"):
        raise UnknownShape("an accumulator created empty; its size depends on what is appended")
    name = _strip_namespace(dotted)
    if name is None:
        if dotted.startswith("math."):
            return Shape.python("float")
        raise UnknownShape(f"function '{dotted}' is not modelled")
    args = CallArgs(call_args, ev)
    special = _FUNCTIONS.get(name)
    if special is not None:
        return special(args, ev)
    if name in _METHODS and args.pos:
        receiver = evaluate_shape(args.pos[0], ev)
        require_tensor(receiver, name)
        rest = CallArgs([], ev)
        rest.pos, rest.kw = args.pos[1:], {k: v for k, v in args.kw.items() if k != "input"}
        return _METHODS[name](receiver, rest, ev)
    if name in _METHODS and "input" in args.kw:
        receiver = evaluate_shape(args.kw["input"], ev)
        require_tensor(receiver, name)
        rest = CallArgs([], ev)
        rest.kw = {k: v for k, v in args.kw.items() if k != "input"}
        return _METHODS[name](receiver, rest, ev)
    raise UnknownShape(f"function '{dotted}' is not modelled")


def _seq_elements(node: cst.BaseExpression | None, ev: Evaluation) -> list[Shape]:
    if node is None:
        raise UnknownShape("stack/cat without tensors")
    value = evaluate_shape(node, ev)
    if value.kind != "container" or not value.elements:
        raise UnknownShape("stack/cat of a sequence of unknown length")
    for element in value.elements:
        require_tensor(element, "stack/cat")
    return list(value.elements)


def _f_stack(args: CallArgs, ev: Evaluation) -> Shape:
    elements = _seq_elements(args.node(0, "tensors"), ev)
    first = elements[0]
    if any(e.dims != first.dims for e in elements):
        raise UnknownShape("stack of tensors of different shapes")
    dims = list(first.dims or ())
    d = norm_dim(args.const(1, "dim", 0), len(dims) + 1)
    dtype = first.dtype
    for e in elements[1:]:
        dtype = promote(dtype, e.dtype)
    return Shape.tensor(dims[:d] + [len(elements)] + dims[d:], dtype)


def _f_cat(args: CallArgs, ev: Evaluation) -> Shape:
    elements = _seq_elements(args.node(0, "tensors"), ev)
    first = list(elements[0].dims or ())
    d = norm_dim(args.const(1, "dim", 0), len(first))
    total = 0
    dtype = elements[0].dtype
    for e in elements:
        dims = list(e.dims or ())
        if len(dims) != len(first) or any(a != b for i, (a, b) in enumerate(zip(dims, first, strict=False)) if i != d):
            raise UnknownShape("cat of tensors whose other dims differ")
        total += dims[d]
        dtype = promote(dtype, e.dtype)
    out = first.copy()
    out[d] = total
    return Shape.tensor(out, dtype)


def _f_tensor(args: CallArgs, ev: Evaluation) -> Shape:
    data = args.const(0, "data")
    dims = literal_dims(data)
    explicit = dtype_from(args.kw.get("dtype"), ev) if "dtype" in args.kw else None
    if explicit:
        return Shape.tensor(dims, explicit)
    flat = _flatten_literal(data)
    if flat and all(isinstance(v, bool) for v in flat):
        dtype = "bool"
    elif all(isinstance(v, int) for v in flat):
        dtype = "int64"
    else:
        dtype = "float32"
    return Shape.tensor(dims, dtype)


def _flatten_literal(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten_literal(v)]
    return [value]


def _f_factory(args: CallArgs, ev: Evaluation) -> Shape:
    sizes = args.sizes(0, "size")
    dtype = dtype_from(args.kw.get("dtype"), ev) if "dtype" in args.kw else None
    return Shape.tensor(sizes, dtype or "float32")


def _f_full(args: CallArgs, ev: Evaluation) -> Shape:
    sizes = args.const(0, "size")
    if not isinstance(sizes, (list, tuple)):
        raise UnknownShape("full() without a literal size")
    dtype = dtype_from(args.kw.get("dtype"), ev) if "dtype" in args.kw else None
    if dtype is None:
        fill = args.const(1, "fill_value", 0.0)
        dtype = "bool" if isinstance(fill, bool) else "int64" if isinstance(fill, int) else "float32"
    return Shape.tensor(list(sizes), dtype)


def _f_like(args: CallArgs, ev: Evaluation) -> Shape:
    other = evaluate_shape(args.node(0, "input"), ev)
    require_tensor(other, "*_like")
    dtype = dtype_from(args.kw.get("dtype"), ev) if "dtype" in args.kw else None
    return Shape.tensor(other.dims or (), dtype or other.dtype)


def _f_arange(args: CallArgs, ev: Evaluation) -> Shape:
    values = [args.const(i, None) for i in range(min(len(args.pos), 3))]
    if "end" in args.kw:
        values = [args.const(0, "start", 0), args.const(None, "end")]
    if not values or not all(isinstance(v, (int, float)) for v in values):
        raise UnknownShape("arange without literal bounds")
    if len(values) == 1:
        values = [0, values[0]]
    start, end = values[0], values[1]
    step = values[2] if len(values) > 2 else 1
    n = max(math.ceil((end - start) / step), 0)
    dtype = dtype_from(args.kw.get("dtype"), ev) if "dtype" in args.kw else None
    return Shape.tensor([n], dtype or ("int64" if all(isinstance(v, int) for v in values) else "float32"))


def _f_where(args: CallArgs, ev: Evaluation) -> Shape:
    if len(args.pos) < 3:
        raise UnknownShape("torch.where(cond) returns indices of unknown count")
    cond = evaluate_shape(args.pos[0], ev)
    a = evaluate_shape(args.pos[1], ev)
    b = evaluate_shape(args.pos[2], ev)
    shape = binary(a, b, cst.Add, ev)
    return Shape.tensor(broadcast(shape.dims or (), cond.dims or ()), shape.dtype)


def _f_binary(op: type, comparison: bool = False) -> Callable[[CallArgs, Evaluation], Shape]:
    def handler(args: CallArgs, ev: Evaluation) -> Shape:
        a = evaluate_shape(args.node(0, "input"), ev)
        b = evaluate_shape(args.node(1, "other"), ev)
        return binary(a, b, op, ev, comparison)

    return handler


def _f_cosine_similarity(args: CallArgs, ev: Evaluation) -> Shape:
    a = evaluate_shape(args.node(0, "x1"), ev)
    b = evaluate_shape(args.node(1, "x2"), ev)
    dims = broadcast(a.dims or (), b.dims or ())
    dim = args.const(2, "dim", 1)
    return _reduced(Shape.tensor(dims, promote_shapes(a, b)), dim, False, promote_shapes(a, b))


def _f_loss(args: CallArgs, ev: Evaluation) -> Shape:
    a = evaluate_shape(args.node(0, "input"), ev)
    reduction = args.const(None, "reduction", "mean")
    dtype = a.dtype if dtype_category(a.dtype) >= 2 else "float32"
    if reduction == "none":
        raise UnknownShape("a loss with reduction='none'")
    return Shape.tensor([], dtype)


def _f_normalize(args: CallArgs, ev: Evaluation) -> Shape:
    return evaluate_shape(args.node(0, "input"), ev)


def _f_einsum(args: CallArgs, ev: Evaluation) -> Shape:
    spec = args.const(0, "equation")
    if not isinstance(spec, str) or "->" not in spec or "..." in spec:
        raise UnknownShape("einsum without an explicit literal equation")
    inputs, output = spec.replace(" ", "").split("->")
    operands = [evaluate_shape(n, ev) for n in args.pos[1:]]
    if len(operands) == 1 and operands[0].kind == "container":
        operands = list(operands[0].elements)
    letters = inputs.split(",")
    if len(letters) != len(operands):
        raise UnknownShape("einsum operand count does not match the equation")
    sizes: dict[str, int] = {}
    dtype = None
    for subs, op in zip(letters, operands, strict=False):
        dims = require_tensor(op, "einsum")
        if len(subs) != len(dims):
            raise UnknownShape("einsum subscripts do not match an operand's dims")
        for ch, n in zip(subs, dims, strict=False):
            if sizes.get(ch, n) != n and 1 not in (n, sizes[ch]):
                raise UnknownShape("einsum sizes disagree")
            sizes[ch] = max(sizes.get(ch, 1), n)
        dtype = op.dtype if dtype is None else promote(dtype, op.dtype)
    return Shape.tensor([sizes[ch] for ch in output], dtype or "float32")


_FUNCTIONS: dict[str, Callable[[CallArgs, Evaluation], Shape]] = {
    "stack": _f_stack, "vstack": _f_stack, "cat": _f_cat, "concat": _f_cat, "concatenate": _f_cat,
    "tensor": _f_tensor, "as_tensor": _f_tensor, "LongTensor": _f_tensor,
    "zeros": _f_factory, "ones": _f_factory, "empty": _f_factory, "randn": _f_factory,
    "rand": _f_factory, "full": _f_full,
    "zeros_like": _f_like, "ones_like": _f_like, "empty_like": _f_like, "randn_like": _f_like,
    "rand_like": _f_like, "full_like": _f_like, "arange": _f_arange, "where": _f_where,
    "maximum": _f_binary(cst.Add), "minimum": _f_binary(cst.Add), "add": _f_binary(cst.Add),
    "sub": _f_binary(cst.Subtract), "mul": _f_binary(cst.Multiply), "div": _f_binary(cst.Divide),
    "eq": _f_binary(cst.Add, True), "ne": _f_binary(cst.Add, True), "gt": _f_binary(cst.Add, True),
    "lt": _f_binary(cst.Add, True), "ge": _f_binary(cst.Add, True), "le": _f_binary(cst.Add, True),
    "matmul": lambda a, e: matmul(evaluate_shape(a.node(0, "input"), e), evaluate_shape(a.node(1, "other"), e)),
    "cosine_similarity": _f_cosine_similarity, "normalize": _f_normalize, "layer_norm": _f_normalize,
    "dropout": _f_normalize, "relu": _f_normalize, "gelu": _f_normalize, "silu": _f_normalize,
    "cross_entropy": _f_loss, "mse_loss": _f_loss, "kl_div": _f_loss, "nll_loss": _f_loss,
    "l1_loss": _f_loss, "binary_cross_entropy_with_logits": _f_loss, "einsum": _f_einsum,
}  # fmt: skip


def builtin_call(name: str, call_args: Sequence[cst.Arg], ev: Evaluation) -> Shape:
    if name in _SAVE_FUNCS:
        return function_call(name, call_args, ev)
    args = CallArgs(call_args, ev)
    if name == "len":
        value = const_value(cst.Call(func=cst.Name("len"), args=tuple(call_args)), ev)
        return Shape.python("int", value if isinstance(value, int) else None)
    if name in ("int", "float", "bool", "round"):
        if args.pos:
            inner = evaluate_shape(args.pos[0], ev)
            if inner.is_tensor and inner.numel != 1:
                raise UnknownShape(f"{name}() of a tensor of {inner.numel} elements")
        dtype = {"round": "int" if len(args.pos) < 2 else "float"}.get(name, name)
        return Shape.python(dtype)
    if name == "abs" and args.pos:
        return evaluate_shape(args.pos[0], ev)
    if name in ("list", "dict", "set", "tuple") and not args.pos:
        raise UnknownShape("an accumulator created empty; its size depends on what is appended")
    if name in ("list", "tuple") and args.pos:
        inner = evaluate_shape(args.pos[0], ev)
        if inner.kind == "container":
            return inner
        if inner.kind == "python" and inner.dtype == "tuple":
            return inner
        raise UnknownShape(f"{name}() of {inner.describe()}")
    if name == "str":
        return Shape.python("str")
    raise UnknownShape(f"call of '{name}' is not modelled")


_DISPATCH: dict[type, Callable[[Any, Evaluation], Any]] = {
    cst.Name: _eval_name,
    cst.Attribute: _eval_attribute,
    cst.Subscript: _eval_subscript,
    cst.Call: _eval_call,
    cst.Integer: _eval_integer,
    cst.Float: _eval_float,
    cst.SimpleString: _eval_string,
    cst.ConcatenatedString: _eval_string,
    cst.FormattedString: _eval_string,
    cst.List: _eval_sequence,
    cst.Tuple: _eval_sequence,
    cst.Set: _eval_sequence,
    cst.Dict: _eval_dict,
    cst.IfExp: _eval_ifexp,
    cst.NamedExpr: _eval_named_expr,
    cst.Ellipsis: _eval_ellipsis,
    cst.ListComp: _eval_listcomp,
    cst.GeneratorExp: _eval_listcomp,
    cst.BinaryOperation: _eval_binary,
    cst.UnaryOperation: _eval_unary,
    cst.Comparison: _eval_comparison,
    cst.BooleanOperation: _eval_boolean,
}
