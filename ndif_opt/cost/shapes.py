"""Static shape of a saved nnsight expression.

Given the libcst expression a script calls ``.save()`` on, the model's dimensions and the
prompt's length, :func:`shape_of` predicts the shape and dtype of the value, hence how
many bytes the save downloads::

    >>> from ndif_opt.cost.model_registry import dims_for
    >>> s = shape_of("model.lm_head.output[0, -1].argmax()", dims_for("meta-llama/Llama-3.1-70B"), seq_len=10)
    >>> s.describe(), s.nbytes
    ('scalar int64', 8)

The evaluator is a set of small functions dispatching on the libcst node type. It never
raises: whatever it cannot follow gives ``Shape(kind="unknown", reason=...)``. Defaults
it had to take on the way (an index whose length it cannot see, a slice bound it cannot
evaluate) are recorded in ``Shape.notes``.

This module is the evaluator: names, literals, attributes, indexing, operators and the
dispatch of calls. The values it computes and the helpers every rule shares are in
:mod:`ndif_opt.cost.shape_values`; what each module of the model outputs in
:mod:`ndif_opt.cost.module_values`; the rules of torch operations in :mod:`ndif_opt.cost.torch_ops`.

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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import libcst as cst

from ndif_opt.analysis.names import target_names
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.model_registry import CONFIG_NUMBERS, ModelDims, config_number
from ndif_opt.cost.module_values import (
    PASSTHROUGH_CALLS,
    call_module,
    causal_lm_output,
    generate_output,
    module_attr,
    module_subscript,
    role_of,
)
from ndif_opt.cost.shape_values import (
    DEFAULT_INDEX_LENGTH,
    DEFAULT_SEQ_LEN,
    DTYPE_ATTRS,
    NOT_CONST,
    Evaluation,
    ModuleRef,
    Shape,
    ShapeContext,
    UnknownShape,
    as_shape,
    broadcast,
    const_int,
    const_value,
    evaluate,
    evaluate_shape,
    length_of,
    literal_dims,
)
from ndif_opt.cost.torch_ops import FUNCTION_NAMESPACES, binary, builtin_call, function_call, matmul, method_call
from ndif_opt.syntax.expressions import dotted_name
from ndif_opt.syntax.literals import literal_value

__all__ = ["shape_of", "value_of"]


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
    iterable = comp.iter
    if type(iterable) is cst.Call and dotted_name(iterable.func) in ("reversed", "list", "tuple") \
            and len(iterable.args) == 1 and not iterable.args[0].star:
        iterable = iterable.args[0].value  # the same elements, in another order or container
    layers = _layer_list(iterable, ev)
    count = _iter_length(iterable, ev) if layers is None else ev.dims.n_layers
    if count is None:
        raise UnknownShape("a comprehension over an iterable of unknown length")
    sub = Evaluation(ev.ctx, ev.dispatch, ev.env)
    shared = _shared_element(iterable, ev) if layers is None and type(comp.target) is cst.Name else None
    for name in target_names(comp.target):
        # `[layer.output ... for layer in model.transformer.h]`: each one decoder layer;
        # `[a.grad for a in acts]`: the shape every element of `acts` has
        sub.env[name] = layers.child(None) if layers is not None else (shared or Shape.python("int"))
    try:
        element = as_shape(evaluate(node.elt, sub))
    except UnknownShape as unknown:  # its elements not known, its length still is
        element = Shape.unknown(str(unknown) or "an element of a comprehension")
    for text in sub.notes:
        ev.note(text)
    return Shape.container([element] * count)


def _layer_list(node: cst.BaseExpression, ev: Evaluation) -> ModuleRef | None:
    """``model.transformer.h``, ``model.model.layers``: the decoder-layer list iterated."""
    if type(node) not in (cst.Attribute, cst.Name):  # `is`: see const_value
        return None
    try:
        value = evaluate(node, ev)
    except UnknownShape:
        return None
    if isinstance(value, ModuleRef) and value.path and value.path[-1] in LAYER_LISTS:
        return value
    return None


def _shared_element(node: cst.BaseExpression, ev: Evaluation) -> Shape | ModuleRef | None:
    """The value every element of the container ``node`` has, when it holds one of a known
    kind (not a `range`: its elements are ints, the default)."""
    if type(node) is cst.Call:
        return None
    try:
        value = evaluate(node, ev)
    except UnknownShape:
        return None
    if not (isinstance(value, Shape) and value.kind == "container" and value.elements):
        return None
    first = value.elements[0]
    if isinstance(first, Shape) and first.kind == "unknown":
        return None
    return first if all(element == first for element in value.elements) else None


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
    return length_of(value)


# ---------------------------------------------------------------------------------------
# Attribute access
# ---------------------------------------------------------------------------------------


def _eval_attribute(node: cst.Attribute, ev: Evaluation) -> Shape | ModuleRef:
    attr = node.attr.value
    if type(node.value) is cst.Name:  # `is`: see const_value
        state = ev.env.get(f"{node.value.value}.{attr}")
        if state is not None:  # `self.clean`: what the object was given (the cost walker binds it)
            return state
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
        if base.path == ("config",) and attr in CONFIG_NUMBERS:  # `model.config.n_embd`: the model's
            return Shape.python("int", config_number(ev.dims, attr))
        return module_attr(base, attr, ev)
    return _value_attr(base, attr, ev)


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
        if attr == "grad":  # (read in `with loss.backward():`, where it is a tensor like the value)
            return Shape.tensor(dims, value.dtype)
        if attr == "grad_fn":
            raise UnknownShape("'.grad_fn' is not a tensor")
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
    if base.dtype == "str" and len(items) == 1:
        return _str_subscript(base, items[0], ev)
    if base.dtype == "list" and base.dims:
        indexed = _tensor_index(Shape.tensor(base.dims, "int64"), items, ev)
        if indexed.dims == ():
            return Shape.python("number")
        return Shape.python("list", dims=indexed.dims or ())
    raise UnknownShape(f"indexing {base.describe()}")


def _str_subscript(base: Shape, item: cst.BaseSlice, ev: Evaluation) -> Shape:
    """``prompt[:12]``, ``word[0]``: a string again, its text where both are known."""
    text = base.value if isinstance(base.value, str) else None
    if text is None:
        return Shape.python("str")
    if isinstance(item, cst.Index):
        key = const_int(item.value, ev)
        return Shape.python("str", text[key] if key is not None and -len(text) <= key < len(text) else None)
    bounds = [None if x is None else const_int(x, ev) for x in (item.lower, item.upper, item.step)]
    if any(b is None and x is not None for b, x in zip(bounds, (item.lower, item.upper, item.step))) or bounds[2] == 0:
        return Shape.python("str")
    return Shape.python("str", text[slice(*bounds)])


def _tensor_index(base: Shape, items: list[cst.BaseSlice], ev: Evaluation) -> Shape:
    """torch indexing: ints select first; slices/None/...; lists and tensors are advanced."""
    dims = list(base.dims or ())
    parsed = _index_kinds(items, ev)

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


def _index_kinds(items: list[cst.BaseSlice], ev: Evaluation) -> list[tuple[str, Any]]:
    """Each index item classified: ("slice", node), ("ellipsis", None), ("none", None),
    ("int", value), ("adv", dims) or ("mask", its dims)."""
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
    return parsed


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
# Operators
# ---------------------------------------------------------------------------------------


def _eval_binary(node: cst.BinaryOperation, ev: Evaluation) -> Shape:
    a = evaluate_shape(node.left, ev)
    b = evaluate_shape(node.right, ev)
    op = type(node.operator)
    if op is cst.MatrixMultiply:
        return matmul(a, b)
    return binary(a, b, op, ev)


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
