"""Architecture knowledge: what each module of a transformer is, and what its
``.output`` / ``.input`` hold.

The names transformers and nnsight give modules (decoder-layer lists ``layers`` / ``h`` /
``blocks``, attention, MLP, norms, embeddings, the LM head, the generator) decide a
module's :class:`ModuleRole` — what it maps on the last dim of ``[batch, seq, ·]`` — and
from it the shape of its output and input, of a direct call of it, and of the nnterp
``StandardizedTransformer`` accessors (``model.layers_output[i]``, ...). The conventions
(transformers ≥ 5, nnsight 0.8) are listed in :mod:`ndif_opt.cost.shapes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from ndif_opt.analysis.vocabulary import LAYER_LISTS
from ndif_opt.cost.shape_values import (
    DEFAULT_MAX_NEW_TOKENS,
    Evaluation,
    ModuleRef,
    Shape,
    UnknownShape,
    const_int,
    evaluate_shape,
    promote,
)

__all__ = [
    "PASSTHROUGH_CALLS",
    "ModuleRole",
    "call_module",
    "causal_lm_output",
    "forward_order",
    "generate_output",
    "module_attr",
    "module_subscript",
    "role_of",
]


# ---------------------------------------------------------------------------------------
# Modules: what .output / .input of each module is
# ---------------------------------------------------------------------------------------

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
        if len(path) >= 2 and path[-2] in LAYER_LISTS:
            idx = last
            if isinstance(idx, int) and not (-d.n_layers <= idx < d.n_layers):
                ev.note(f"layer index {idx} is out of range for {d.n_layers} layers")
            return ModuleRole("hidden", h, h, label="decoder layer")
        return None
    in_layer = any(isinstance(p, int) or p is None for p in path[:-1]) and any(
        p in LAYER_LISTS for p in path[:-1] if isinstance(p, str)
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


def _nnterp_value(what: str, ev: Evaluation) -> Shape:
    if what == "probs":
        return Shape.tensor((ev.b, ev.dims.n_heads, ev.s, ev.s), ev.act_dtype)
    return _hidden(ev, ev.dims.hidden_size)


# ---------------------------------------------------------------------------------------
# Attribute access and indexing of modules
# ---------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------
# The order of a forward pass
# ---------------------------------------------------------------------------------------

#: a module's hook points: its input is taken when it is called, its output when it returns
INPUT, OUTPUT = 0, 1
_EMBED_NAMES = _EMBEDS | {"wpe"}


def forward_order(a: Sequence, a_hook: int, b: Sequence, b_hook: int) -> int | None:
    """When the hook ``a_hook`` (INPUT/OUTPUT) of module ``a`` fires in a causal LM's forward
    pass, relative to ``b_hook`` of ``b``: -1 before, 0 the same hook, 1 after, None when
    the architecture does not say. A module is its path from the model root (attribute
    names, decoder-layer indices as non-negative ints; any other hashable item is an index
    of unknown value, the same as itself only).

    What every transformers causal LM does: a module's input comes before everything
    inside it, its output after; the base model (``model``/``transformer``...) runs before
    the LM head; inside it the embeddings, then the decoder layers in index order, then
    the final norm; inside a layer its attention before its MLP. Anything else (norms
    inside a layer, projections among themselves, layer lists elsewhere) is not ordered."""
    a, b = tuple(a), tuple(b)
    if a == b:
        return (a_hook > b_hook) - (a_hook < b_hook)
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common == len(a):  # a holds b: its input before, its output after
        return -1 if a_hook == INPUT else 1
    if common == len(b):
        return 1 if b_hook == INPUT else -1
    return _sibling_order(a[:common], a[common], b[common])


def _sibling_order(parent: tuple, x, y) -> int | None:
    """The order of two children of ``parent`` that run one after the other."""
    if not parent:
        if x in _BASES and y in _LM_HEADS:
            return -1
        if y in _BASES and x in _LM_HEADS:
            return 1
        return None
    if len(parent) == 1 and parent[0] in _BASES:
        rank = {**{n: 0 for n in _EMBED_NAMES}, **{n: 1 for n in LAYER_LISTS}, **{n: 2 for n in _FINAL_NORMS}}
        rx, ry = rank.get(x) if isinstance(x, str) else None, rank.get(y) if isinstance(y, str) else None
        if rx is None or ry is None or rx == ry:
            return None
        return -1 if rx < ry else 1
    if len(parent) == 2 and parent[0] in _BASES and parent[1] in LAYER_LISTS:
        if type(x) is int and type(y) is int:  # (bool is not an index)
            return (x > y) - (x < y)
        return None
    if len(parent) == 3 and parent[0] in _BASES and parent[1] in LAYER_LISTS:
        kind = {**{n: 0 for n in _ATTN}, **{n: 1 for n in _MLP}}
        kx, ky = kind.get(x) if isinstance(x, str) else None, kind.get(y) if isinstance(y, str) else None
        if kx is None or ky is None or kx == ky:
            return None
        return -1 if kx < ky else 1
    return None
