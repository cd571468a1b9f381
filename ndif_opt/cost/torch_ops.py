"""The torch-op table: the shape and dtype rules of operators, tensor methods, torch /
``torch.nn.functional`` functions and Python builtins.

Each rule takes the operands' :class:`~ndif_opt.cost.shape_values.Shape` and the call's
arguments (:class:`~ndif_opt.cost.shape_values.CallArgs`) and gives the result's shape, or
raises :class:`~ndif_opt.cost.shape_values.UnknownShape`. ``_METHODS`` holds the tensor
methods (``x.sum(dim=-1)``), ``_FUNCTIONS`` the functions with rules of their own
(``torch.stack``, ``F.cross_entropy``, ``torch.where``); any other function that is also
a method (``torch.softmax(x, -1)``) runs the method's rule on its first argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import libcst as cst

from ndif_opt.cost.model_registry import dtype_size
from ndif_opt.cost.shape_values import (
    ARITH,
    NOT_CONST,
    CallArgs,
    Evaluation,
    Shape,
    UnknownShape,
    as_shape,
    broadcast,
    const_value,
    dtype_category,
    dtype_from,
    evaluate,
    evaluate_shape,
    literal_dims,
    norm_dim,
    promote,
    promote_shapes,
    require_tensor,
)

__all__ = [
    "FUNCTION_NAMESPACES",
    "binary",
    "builtin_call",
    "function_call",
    "matmul",
    "method_call",
]


# ---------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------


FUNCTION_NAMESPACES = {"torch", "F", "nn", "functional", "np", "numpy", "math", "nnsight", "einops", "operator"}


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
