"""Is an expression inside a trace a tensor? A small, conservative type guess.

Used where a rewrite is only valid on tensors (`.detach().cpu()`), and to recognise
reductions. "Unknown" always counts as "not a tensor".
"""

from __future__ import annotations

import libcst as cst

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
