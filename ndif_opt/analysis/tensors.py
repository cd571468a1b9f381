"""Is an expression inside a trace a tensor? Does a name hold plain scalars only? Small,
conservative type guesses.

Used where a rewrite is only valid on tensors (`.detach().cpu()`), to recognise
reductions, and to tell an augmented assignment that makes a new value (`n += 1` of a
number) from one that changes an object in place (`xs += [x]` of a list, `t += u` of a
tensor). "Unknown" always counts as "not a tensor" and "not a scalar".
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts, child_suites
from ndif_opt.analysis.names import collect
from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.syntax.expressions import dotted_name

# Modules whose `.output` is a single tensor (transformers >= 5, which nnsight 0.8 uses).
TENSOR_MODULES = frozenset(
    {
        "lm_head", "mlp", "norm", "ln_f", "ln_1", "ln_2", "wte", "wpe", "embed_tokens",
        "c_fc", "c_proj", "c_attn", "act", "act_fn", "q_proj", "k_proj", "v_proj", "o_proj",
        "gate_proj", "up_proj", "down_proj", "input_layernorm", "post_attention_layernorm",
        "final_layernorm", "embed_out", "unembed",
    }
)
# Methods that take a tensor to a tensor.
TENSOR_METHODS = frozenset(
    {
        "argmax", "argmin", "sum", "mean", "norm", "std", "var", "softmax", "log_softmax",
        "float", "half", "bfloat16", "double", "to", "abs", "exp", "log", "sqrt", "squeeze",
        "unsqueeze", "flatten", "view", "reshape", "clone", "contiguous", "permute",
        "transpose", "detach", "cpu", "cuda", "pow", "sigmoid", "relu", "tanh", "cumsum",
        "logsumexp", "amax", "amin", "prod", "round", "sign", "clamp", "expand", "repeat",
        "narrow", "select", "index_select", "gather", "masked_fill", "type", "long", "int",
        "matmul", "mm", "dot", "einsum", "diff", "neg", "square",
    }
)
TORCH_TENSOR_FUNCTIONS = frozenset(
    {
        "torch.softmax", "torch.log_softmax", "torch.argmax", "torch.argmin", "torch.mean",
        "torch.sum", "torch.norm", "torch.stack", "torch.cat", "torch.exp", "torch.log",
        "torch.abs", "torch.nn.functional.softmax", "torch.nn.functional.log_softmax",
        "torch.cosine_similarity", "torch.nn.functional.cosine_similarity", "torch.matmul",
        "torch.einsum", "torch.linalg.norm", "torch.where", "torch.sigmoid", "torch.tanh",
        "F.softmax", "F.log_softmax", "F.cosine_similarity",
    }
)


def is_envoy_tensor(expr: cst.BaseExpression, models: set[str]) -> bool:
    """`<model path>.output` / `.input` of a module that yields one tensor, possibly
    indexed; or `model.output.logits`."""
    if isinstance(expr, cst.Subscript):
        base = expr.value
        # `x.output[...]` on a layer: indexing a tensor is a tensor
        return is_envoy_tensor(base, models) or _is_output_of_layer(base, models)
    if isinstance(expr, cst.Attribute):
        if expr.attr.value in ("output", "input"):
            return _module_attr(expr.value) in TENSOR_MODULES or _is_layer(expr.value, models)
        if expr.attr.value == "logits":
            inner = expr.value
            return isinstance(inner, cst.Attribute) and inner.attr.value == "output"
    return False


def _module_attr(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def _is_layer(expr: cst.BaseExpression, models: set[str]) -> bool:
    """`model.model.layers[i]` / `model.transformer.h[i]` / `model.layers[i]`."""
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute):
        return expr.value.attr.value in LAYER_LISTS
    return False


def _is_output_of_layer(expr: cst.BaseExpression, models: set[str]) -> bool:
    return isinstance(expr, cst.Attribute) and expr.attr.value == "output" and _is_layer(expr.value, models)


def is_tensor(expr: cst.BaseExpression, models: set[str], tensors: set[str]) -> bool:
    """Conservatively: does ``expr`` evaluate to a single torch tensor?

    ``tensors`` are names already known to hold tensors in the same block.
    """
    if isinstance(expr, cst.Name):
        return expr.value in tensors
    if is_envoy_tensor(expr, models):
        return True
    if isinstance(expr, cst.Subscript):
        return is_tensor(expr.value, models, tensors)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute):
            if func.attr.value in TENSOR_METHODS:
                return is_tensor(func.value, models, tensors)
            return False
        name = dotted_name(func)
        if name in TORCH_TENSOR_FUNCTIONS and expr.args:
            return is_tensor(expr.args[0].value, models, tensors) or name in ("torch.stack", "torch.cat")
        return False
    if isinstance(expr, cst.BinaryOperation):
        return is_tensor(expr.left, models, tensors) or is_tensor(expr.right, models, tensors)
    if isinstance(expr, cst.UnaryOperation):
        return is_tensor(expr.expression, models, tensors)
    return False


def has_detach_cpu(expr: cst.BaseExpression) -> bool:
    """Is `.cpu()`/`.detach()`/`.to(...)` already applied anywhere along the chain?"""
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if expr.func.attr.value in ("cpu", "detach", "numpy", "tolist", "item", "to"):
                return True
            expr = expr.func.value
        elif isinstance(expr, (cst.Subscript, cst.Attribute)):
            expr = expr.value
        else:
            return False


# builtins whose result is a plain scalar whatever they are given (`int(t)` of a tensor
# is an int), and those whose result is one when what they are given is (`abs(t)` of a
# tensor is a tensor)
_SCALAR_BUILTINS = frozenset({"int", "float", "bool", "str", "len", "repr", "ord", "chr", "hash", "format"})
_SCALAR_OF_SCALARS = frozenset({"abs", "round", "min", "max", "pow", "divmod"})
_SCALAR_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                    cst.FormattedString)


def holds_only_scalars(facts: Facts, name: str) -> bool:
    """Does ``name`` hold a plain scalar (a number, string or bool) wherever the file binds
    it? Only when every binding is a simple assignment (`n = 0`, `n += 1`, `n: int = 0`)
    of a scalar expression: a loop target, an unpacking, a parameter or a `with ... as`
    may bind anything. Then `n += v` binds a new value and changes no object in place."""
    return facts.once(_holds_only_scalars, name)


def _holds_only_scalars(facts: Facts, name: str) -> bool:
    return _scalar_name(facts, name, frozenset())


def _scalar_name(facts: Facts, name: str, seen: frozenset[str]) -> bool:
    if name in ("True", "False", "None"):
        return True
    bindings = facts.bindings.get(name)
    if not bindings or name in seen or name in _bound_otherwise(facts):
        return False
    seen = seen | {name}
    for info, value in bindings:
        values = [value] if value is not None else augmented_values(info.node, name)
        if not values or not all(_scalar_expression(facts, v, seen) for v in values):
            return False
    return True


def augmented_values(line: cst.CSTNode, name: str) -> list[cst.BaseExpression]:
    """The right sides of the line's `name op= value` statements."""
    return [small.value for small in getattr(line, "body", ())
            if type(small) is cst.AugAssign and type(small.target) is cst.Name and small.target.value == name]


def _scalar_expression(facts: Facts, expr: cst.BaseExpression, seen: frozenset[str]) -> bool:
    if isinstance(expr, _SCALAR_LITERALS):
        return True
    if isinstance(expr, cst.Name):
        return _scalar_name(facts, expr.value, seen)
    if isinstance(expr, cst.UnaryOperation):
        return _scalar_expression(facts, expr.expression, seen)
    if isinstance(expr, cst.BinaryOperation):
        return _scalar_expression(facts, expr.left, seen) and _scalar_expression(facts, expr.right, seen)
    if isinstance(expr, cst.IfExp):
        return _scalar_expression(facts, expr.body, seen) and _scalar_expression(facts, expr.orelse, seen)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute):
            return func.attr.value == "item" and not expr.args  # a tensor's one element, as a number
        if not isinstance(func, cst.Name) or func.value in facts.functions or func.value in facts.bindings:
            return False  # (the script's own `len`, or a name bound to something else)
        if func.value in _SCALAR_BUILTINS:
            return True
        return func.value in _SCALAR_OF_SCALARS and bool(expr.args) and all(
            not arg.star and _scalar_expression(facts, arg.value, seen) for arg in expr.args)
    return False


def _bound_otherwise(facts: Facts) -> frozenset[str]:
    """Names some statement binds other than by a simple assignment to the name alone."""
    return facts.once(_names_bound_otherwise)


def _names_bound_otherwise(facts: Facts) -> frozenset[str]:
    found: set[str] = set()
    for info in facts.statements.values():
        node = info.node
        if type(node) is not cst.SimpleStatementLine:  # its header: a loop's target, `as x`, a walrus...
            found |= set(collect(node, skip=tuple(child_suites(node))).binds)
            continue
        for small in node.body:
            binds = set(collect(small).binds)
            target = _simple_target(small)
            found |= binds - {target} if target is not None else binds
    return frozenset(found)


def _simple_target(small: cst.BaseSmallStatement) -> str | None:
    """The name `n = v`, `n: T = v` or `n += v` binds (of `n = m = v` or `a, b = v`, none)."""
    kind = type(small)
    if kind is cst.Assign:
        target = small.targets[0].target if len(small.targets) == 1 else None
    elif kind is cst.AnnAssign or kind is cst.AugAssign:
        target = small.target
    else:
        return None
    return target.value if type(target) is cst.Name else None
