"""Static shapes of saved nnsight expressions."""

from __future__ import annotations

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndif_opt.cost.model_registry import dims_for
from ndif_opt.cost.shape_values import DEFAULT_MAX_NEW_TOKENS, ModuleRef, Shape
from ndif_opt.cost.shapes import shape_of, value_of

L70 = dims_for("meta-llama/Llama-3.1-70B")  # 80 layers, hidden 8192, vocab 128256, 8 kv heads, bf16
L8 = dims_for("meta-llama/Llama-3.1-8B")  # hidden 4096, intermediate 14336
GPT2 = dims_for("gpt2")  # 12 layers, hidden 768, vocab 50257, float32
GEMMA = dims_for("google/gemma-2-2b")  # 8 heads of 256, 4 kv heads

V, H = 128256, 8192


def _shape(expr, dims=L70, seq=10, batch=1, env=None, model="model", **kw):
    return shape_of(cst.parse_expression(expr), dims, model_name=model, seq_len=seq, batch=batch, env=env, **kw)


# (expression, expected dims, expected dtype, expected nbytes) on Llama-3.1-70B, seq 10
LLAMA_CASES = [
    ("model.lm_head.output", (1, 10, V), "bfloat16", 1 * 10 * V * 2),
    ("model.lm_head.output.save()", (1, 10, V), "bfloat16", 10 * V * 2),
    ("model.output.logits", (1, 10, V), "bfloat16", 10 * V * 2),
    ("model.output[0]", (1, 10, V), "bfloat16", 10 * V * 2),
    ('model.output["logits"]', (1, 10, V), "bfloat16", 10 * V * 2),
    ("model.lm_head.output[0, -1]", (V,), "bfloat16", V * 2),
    ("model.lm_head.output[:, -1, :]", (1, V), "bfloat16", V * 2),
    ("model.lm_head.output[0, -1].argmax()", (), "int64", 8),
    ("model.lm_head.output[0, -1].argmax().item()", (), "int", 8),
    ("model.lm_head.output.argmax(dim=-1)", (1, 10), "int64", 80),
    ("model.lm_head.output.argmax(-1, keepdim=True)", (1, 10, 1), "int64", 80),
    ("model.model.layers[5].output", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.layers[-1].output[:, -1]", (1, H), "bfloat16", H * 2),
    ("model.model.layers[5].output[0]", (10, H), "bfloat16", 10 * H * 2),  # transformers 5: batch row
    ("model.model.layers[5].input", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.layers[5].self_attn.output[0]", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.layers[5].mlp.output", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.layers[5].mlp.down_proj.input", (1, 10, 28672), "bfloat16", 10 * 28672 * 2),
    ("model.model.layers[5].self_attn.k_proj.output", (1, 10, 1024), "bfloat16", 10 * 1024 * 2),
    ("model.model.layers[5].self_attn.o_proj.input", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.layers[5].input_layernorm.output", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.norm.output", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.embed_tokens.output", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.embed_tokens.input", (1, 10), "int64", 80),
    ("model.lm_head.next().output[0, -1]", (V,), "bfloat16", V * 2),
    # nnterp names
    ("model.layers[40].output[:, -1]", (1, H), "bfloat16", H * 2),
    ("model.layers_output[40]", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.layers[40].self_attn.attention_probabilities[0, :, -1]", (64, 10), "bfloat16", 64 * 10 * 2),
    ("model.logits", (1, 10, V), "bfloat16", 10 * V * 2),
    ("model.next_token_probs", (1, V), "bfloat16", V * 2),
    ("model.layers_input[3]", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.attentions_output[3][:, -1]", (1, H), "bfloat16", H * 2),
    ("model.mlps_output[79]", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.layers[2].mlp.mlp_output", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.layers[2].mlp.mlp_output[0, -1].norm()", (), "bfloat16", 8),
    ("model.next_token_probs[0].topk(5).indices", (5,), "int64", 40),
    # logit lens through module calls
    ("model.lm_head(model.model.norm(model.model.layers[3].output))[:, -1]", (1, V), "bfloat16", V * 2),
    # reductions and conversions
    # a gradient (read in `with loss.backward():`) is shaped like its value
    ("model.model.layers[5].output.grad[:, -1]", (1, H), "bfloat16", H * 2),
    ("[h.grad for h in reversed([model.model.layers[i].output for i in range(2)])][0]", (1, 10, H), "bfloat16",
     10 * H * 2),
    ("model.lm_head.output.max()", (), "bfloat16", 8),
    ("model.lm_head.output.max(dim=-1).values", (1, 10), "bfloat16", 20),
    ("model.lm_head.output.max(-1)[1]", (1, 10), "int64", 80),
    ("model.lm_head.output.sum(dim=-1)", (1, 10), "bfloat16", 20),
    ("model.lm_head.output.mean(dim=(0, 1), keepdim=True)", (1, 1, V), "bfloat16", V * 2),
    ("model.model.layers[5].output.norm(dim=-1)", (1, 10), "bfloat16", 20),
    ("model.model.layers[5].output.std()", (), "bfloat16", 8),
    ("model.lm_head.output[0, -1].topk(5).indices", (5,), "int64", 40),
    ("model.lm_head.output[0, -1].topk(k=5, dim=-1)[0]", (5,), "bfloat16", 10),
    ("model.lm_head.output.sort(dim=-1, descending=True).indices", (1, 10, V), "int64", 10 * V * 8),
    ("model.lm_head.output.softmax(-1)", (1, 10, V), "bfloat16", 10 * V * 2),
    ("model.lm_head.output.log_softmax(dim=-1)[0, -1, [1, 2]]", (2,), "bfloat16", 4),
    ("torch.softmax(model.lm_head.output, dim=-1)", (1, 10, V), "bfloat16", 10 * V * 2),
    ("torch.nn.functional.softmax(model.lm_head.output[:, -1], -1)", (1, V), "bfloat16", V * 2),
    ("F.log_softmax(model.lm_head.output, dim=-1)", (1, 10, V), "bfloat16", 10 * V * 2),
    ("torch.softmax(model.lm_head.output, -1, dtype=torch.float32)", (1, 10, V), "float32", 10 * V * 4),
    ("torch.argmax(model.lm_head.output, dim=-1)", (1, 10), "int64", 80),
    ("torch.topk(model.lm_head.output[0, -1], 10).values", (10,), "bfloat16", 20),
    ("model.lm_head.output.float()", (1, 10, V), "float32", 10 * V * 4),
    ("model.lm_head.output.half()", (1, 10, V), "float16", 10 * V * 2),
    ("model.lm_head.output.double()", (1, 10, V), "float64", 10 * V * 8),
    ("model.lm_head.output.to(torch.float32)", (1, 10, V), "float32", 10 * V * 4),
    ('model.lm_head.output.to("cpu", dtype=torch.float16)', (1, 10, V), "float16", 10 * V * 2),
    ("model.lm_head.output.to(torch.bfloat16).float().bfloat16()", (1, 10, V), "bfloat16", 10 * V * 2),
    ("model.lm_head.output.detach().cpu().clone().contiguous()", (1, 10, V), "bfloat16", 10 * V * 2),
    ("model.lm_head.output[0, -1].tolist()", (V,), "list", V * 8),
    ("model.lm_head.output.shape", (3,), "tuple", 24),
    ("model.lm_head.output.size(-1)", (), "int", 8),
    ("model.lm_head.output.squeeze()", (10, V), "bfloat16", 10 * V * 2),
    ("model.lm_head.output.squeeze(0).unsqueeze(1)", (10, 1, V), "bfloat16", 10 * V * 2),
    ("model.lm_head.output.flatten()", (10 * V,), "bfloat16", 10 * V * 2),
    ("model.lm_head.output.view(-1, 128256)", (10, V), "bfloat16", 10 * V * 2),
    ("model.lm_head.output.reshape(10, -1)", (10, V), "bfloat16", 10 * V * 2),
    ("model.model.layers[5].output[0].T", (H, 10), "bfloat16", 10 * H * 2),
    ("model.model.layers[5].output.transpose(1, 2)", (1, H, 10), "bfloat16", 10 * H * 2),
    ("model.model.layers[5].output.permute(2, 0, 1)", (H, 1, 10), "bfloat16", 10 * H * 2),
    # arithmetic and comparisons
    ("model.lm_head.output[0, -1, 100] - model.lm_head.output[0, -1, 200]", (), "bfloat16", 8),
    ("model.lm_head.output * 2", (1, 10, V), "bfloat16", 10 * V * 2),
    ("2.0 * model.lm_head.output[:, -1]", (1, V), "bfloat16", V * 2),
    ("model.lm_head.output[:, -1] > 0", (1, V), "bool", V),
    ("model.model.layers[5].output - model.model.layers[4].output[:, -1:]", (1, 10, H), "bfloat16", 10 * H * 2),
    ("model.model.layers[5].output[0, -1] @ model.model.layers[5].output[0].T", (10,), "bfloat16", 20),
    ("torch.stack([model.model.layers[i].output[:, -1] for i in range(80)])", (80, 1, H), "bfloat16", 80 * H * 2),
    ("torch.cat([model.lm_head.output, model.lm_head.output], dim=1)", (1, 20, V), "bfloat16", 20 * V * 2),
    ("torch.stack([model.lm_head.output[0, -1], model.lm_head.output[0, -2]], dim=0)", (2, V), "bfloat16", 2 * V * 2),
]


@pytest.mark.parametrize("expr,dims,dtype,nbytes", LLAMA_CASES)
def test_llama_70b_shapes(expr, dims, dtype, nbytes):
    s = _shape(expr)
    assert s.known, s.reason
    assert s.dims == dims, s.describe()
    assert s.dtype == dtype
    assert s.nbytes == nbytes


def test_seq_and_batch_scale_module_outputs():
    s = _shape("model.lm_head.output", seq=7, batch=3)
    assert s.dims == (3, 7, V) and s.nbytes == 3 * 7 * V * 2
    assert s.describe() == "[3, 7, 128256] bfloat16"


GPT2_CASES = [
    ("model.transformer.h[0].output", (1, 7, 768), "float32"),
    ("model.transformer.h[11].output[:, -1, :]", (1, 768), "float32"),
    ("model.transformer.h[0].attn.output[0]", (1, 7, 768), "float32"),
    ("model.transformer.h[0].attn.c_attn.output", (1, 7, 2304), "float32"),
    ("model.transformer.h[0].mlp.c_fc.output", (1, 7, 3072), "float32"),
    ("model.transformer.h[0].mlp.c_proj.input", (1, 7, 3072), "float32"),
    ("model.transformer.h[0].attn.c_proj.input", (1, 7, 768), "float32"),
    ("model.transformer.ln_f.output", (1, 7, 768), "float32"),
    ("model.transformer.wte.output", (1, 7, 768), "float32"),
    ("model.lm_head.output", (1, 7, 50257), "float32"),
    ("model.output.logits[0, -1].softmax(-1)", (50257,), "float32"),
    # a client tensor shaped by the config (`W_enc`, trial48 min_11: its upload was not billed)
    ("torch.randn(model.config.n_embd, 24576) * 0.01", (768, 24576), "float32"),
    ("torch.zeros(model.config.num_attention_heads)", (12,), "float32"),
]


@pytest.mark.parametrize("expr,dims,dtype", GPT2_CASES)
def test_gpt2_shapes(expr, dims, dtype):
    s = _shape(expr, dims=GPT2, seq=7)
    assert (s.dims, s.dtype) == (dims, dtype), s.describe()


def test_gemma_projection_widths_use_head_dim():
    assert _shape("model.model.layers[0].self_attn.q_proj.output", dims=GEMMA, seq=4).dims == (1, 4, 2048)
    assert _shape("model.model.layers[0].self_attn.v_proj.output", dims=GEMMA, seq=4).dims == (1, 4, 1024)
    assert _shape("model.model.layers[0].output", dims=GEMMA, seq=4).dims == (1, 4, 2304)


def test_model_output_includes_kv_cache():
    s = _shape("model.output", dims=L8, seq=10)
    assert s.kind == "container" and s.names == ("logits", "cache")
    cache = 2 * 32 * (1 * 8 * 10 * 128) * 2
    assert s.nbytes == 10 * V * 2 + cache
    assert any("cache" in n for n in s.notes)
    assert _shape("model.output.past_key_values", dims=L8, seq=10).nbytes == cache


def test_attention_output_is_a_tuple():
    s = _shape("model.model.layers[3].self_attn.output")
    assert s.kind == "container"
    assert s.elements[0].dims == (1, 10, H)
    assert s.nbytes == 10 * H * 2  # the weights are None


def test_layer_output_zero_index_is_flagged():
    s = _shape("model.model.layers[5].output[0]")
    assert any("batch row 0" in n for n in s.notes)
    assert not _shape("model.model.layers[5].output[:, -1]").notes
    assert not _shape("model.model.layers[5].output[0, -1]").notes  # batch 0, last token: fine


def test_generate_output():
    s = _shape("model.generator.output", seq=10, max_new_tokens=5)
    assert (s.dims, s.dtype, s.nbytes) == ((1, 15), "int64", 15 * 8)
    assert _shape("tracer.result", seq=10, max_new_tokens=5).dims == (1, 15)
    default = _shape("model.generator.output", seq=10)
    assert default.dims == (1, 10 + DEFAULT_MAX_NEW_TOKENS)
    assert any("max_new_tokens" in n for n in default.notes)
    assert _shape("model.generator.output[:, 10:]", seq=10, max_new_tokens=5).dims == (1, 5)


def test_other_model_variable_names():
    assert _shape("llm.lm_head.output", model="llm").dims == (1, 10, V)
    assert _shape("lm.lm_head.output", model={"llm", "lm"}).dims == (1, 10, V)
    assert _shape("llm.lm_head.output", model="model").kind == "unknown"


# --- env ------------------------------------------------------------------------------

ENV = {
    "logits": Shape.tensor((1, 10, V), "bfloat16"),
    "x": Shape.tensor((3, 4, 5), "float32"),
    "ids": Shape.tensor((3,), "int64"),
    "mask": Shape.tensor((3, 4, 5), "bool"),
    "k": Shape.python("int", 7),
    "j": Shape.python("int"),
    "layer": ModuleRef(("model", "layers", 5)),
}


ENV_CASES = [
    ("logits[0, -1]", (V,), "bfloat16"),
    ("logits[:, -1, [1, 2]]", (1, 2), "bfloat16"),
    ("logits[0, -1, ids]", (3,), "bfloat16"),
    ("logits[0, -1].topk(k).indices", (7,), "int64"),
    ("logits[:, -k:]", (1, 7, V), "bfloat16"),
    ("logits[:, j]", (1, V), "bfloat16"),  # a bound int of unknown value drops its dim
    ("layer.output[:, -1]", (1, H), "bfloat16"),
    # torch indexing semantics (checked against torch 2.13): ints are basic and go first
    ("x[0, :, [1, 2]]", (4, 2), "float32"),
    ("x[:, [0, 1], [1, 2]]", (3, 2), "float32"),
    ("x[[0, 1], :, [1, 2]]", (2, 4), "float32"),
    ("x[..., None, 0]", (3, 4, 1), "float32"),
    ("x[1:, ::2]", (2, 2, 5), "float32"),
    ("x[None]", (1, 3, 4, 5), "float32"),
    ("x[:, -1, [1, 2]]", (3, 2), "float32"),
    ("x[0][1][2]", (), "float32"),
    ("x[[[0, 1], [1, 2]]]", (2, 2, 4, 5), "float32"),
    ("x[..., 1:3]", (3, 4, 2), "float32"),
    ("x[:, :, :]", (3, 4, 5), "float32"),
    ("x[-10:100]", (3, 4, 5), "float32"),
    ("x.sum()", (), "float32"),
    ("ids.sum()", (), "int64"),
    ("ids.float().mean()", (), "float32"),
    ("ids / 2", (3,), "float32"),
    ("x.max(1)[0]", (3, 5), "float32"),
    ("x.min(dim=0, keepdim=True).indices", (1, 4, 5), "int64"),
    ("x.var(-1)", (3, 4), "float32"),
    ("x.std(dim=(1, 2))", (3,), "float32"),
    ("x + ids[:, None, None]", (3, 4, 5), "float32"),
    ("x * mask", (3, 4, 5), "float32"),
    ("x == 0", (3, 4, 5), "bool"),
    ("(x > 0).sum(-1)", (3, 4), "int64"),
    ("x.argmin()", (), "int64"),
    ("x.flatten(1)", (3, 20), "float32"),
    ("x.unsqueeze(-1)", (3, 4, 5, 1), "float32"),
    ("x.view(3, 20)", (3, 20), "float32"),
    ("x.reshape((-1,))", (60,), "float32"),
    ("x.mT", (3, 5, 4), "float32"),
    ("x.cumsum(0)", (3, 4, 5), "float32"),
    ("x.narrow(1, 0, 2)", (3, 2, 5), "float32"),
    ("x.expand(2, 3, 4, 5)", (2, 3, 4, 5), "float32"),
    ("x.repeat(2, 1, 1)", (6, 4, 5), "float32"),
    ("x.index_select(2, ids)", (3, 4, 3), "float32"),
    ("x.chunk(2, dim=1)[0]", (3, 2, 5), "float32"),
    ("torch.stack([x, x, x], dim=1)", (3, 3, 4, 5), "float32"),
    ("torch.cat([x, x], -1)", (3, 4, 10), "float32"),
    ("torch.where(mask, x, 0.0)", (3, 4, 5), "float32"),
    ("torch.tensor([1, 2, 3])", (3,), "int64"),
    ("torch.zeros(2, 3)", (2, 3), "float32"),
    ("torch.arange(10)", (10,), "int64"),
    ("torch.einsum('bij,bjk->bik', x, x.transpose(1, 2))", (3, 4, 4), "float32"),
    ("F.cosine_similarity(x, x, dim=-1)", (3, 4), "float32"),
    ("torch.nn.functional.cross_entropy(x, ids)", (), "float32"),
    ("torch.matmul(x, x.mT)", (3, 4, 4), "float32"),
    ("torch.linalg.norm(x, dim=-1)", (3, 4), "float32"),
    ("(x[0, 0, 0] if k else x[0, 0, 1])", (), "float32"),
    ("nnsight.save(x[0])", (4, 5), "float32"),
    ("x.save().value", (3, 4, 5), "float32"),
]


@pytest.mark.parametrize("expr,dims,dtype", ENV_CASES)
def test_env_shapes(expr, dims, dtype):
    s = _shape(expr, env=ENV)
    assert s.known, s.reason
    assert (s.dims, s.dtype) == (dims, dtype), s.describe()


def test_unknown_index_defaults_to_length_one_and_is_flagged():
    s = _shape("logits[:, t]", env=ENV)
    assert s.dims == (1, 1, V)
    assert s.nbytes == V * 2  # same bytes as an int index
    assert any("'t'" in n for n in s.notes)


def test_mask_index_defaults_and_is_flagged():
    s = _shape("x[mask]", env=ENV)
    assert s.dims == (1,)
    assert any("mask" in n for n in s.notes)


def test_unknown_slice_bound_takes_whole_dim():
    s = _shape("logits[:, -n:]", env=ENV)
    assert s.dims == (1, 10, V)
    assert s.notes


def test_python_values():
    assert _shape("logits[0, -1, 5].item()", env=ENV).nbytes == 8
    assert _shape("logits.shape[-1]", env=ENV) == Shape.python("int", V)
    assert _shape("len(logits)", env=ENV).value == 1
    assert _shape("logits.size()", env=ENV).value == (1, 10, V)
    assert _shape("k * 2", env=ENV).value == 14
    tl = _shape("logits[0, :, :3].tolist()", env=ENV)
    assert (tl.kind, tl.dims, tl.nbytes) == ("python", (10, 3), 10 * 3 * 8)
    assert _shape("x[0, 0, 0].tolist()", env=ENV).nbytes == 8


def test_containers():
    s = _shape("(logits[0, -1].argmax(), x.sum())", env=ENV)
    assert s.kind == "container" and s.nbytes == 16
    d = _shape('{"a": x, "b": ids}', env=ENV)
    assert d.names == ("a", "b") and d.nbytes == 60 * 4 + 3 * 8
    assert _shape("x.topk(2)", env=ENV).describe() == "(values: [3, 4, 2] float32, indices: [3, 4, 2] int64)"


def test_describe():
    assert _shape("model.lm_head.output", seq=7).describe() == "[1, 7, 128256] bfloat16"
    assert _shape("model.lm_head.output[0, -1].argmax()").describe() == "scalar int64"
    assert _shape("model.lm_head.output[0, -1].argmax().item()").describe() == "python int"
    assert "unknown" in _shape("foo(1)").describe()
    assert "160 ×" in _shape("model.output.cache").describe()


def test_value_of_returns_module_refs():
    ref = value_of("model.model.layers[5]", L70)
    assert isinstance(ref, ModuleRef) and ref.dotted() == "model.layers[5]"
    assert _shape("layer.mlp.output", env={"layer": ref}).dims == (1, 10, H)
    assert _shape("model.model.layers").kind == "unknown"  # a module, not a value


def test_accepts_source_text():
    assert shape_of("model.lm_head.output[0, -1]", L70, seq_len=10).dims == (V,)


# --- robustness -------------------------------------------------------------------------

ODD = [
    "foo",
    "foo()",
    "foo.bar.baz()",
    "model",
    "model.model.layers",
    "model.model.layers[5]",
    "model.model.layers[1:3].output",
    "model.model.layers[i].output",
    "model.model.layers[5].output.foo()",
    "model.model.layers[5].output.foo",
    "model.model.layers[5].inputs",
    "model.model.rotary_emb.output",
    "model.model.layers[5].self_attn.output[2]",
    "model.output.hidden_states",
    "model.output[5]",
    'model.output["nope"]',
    "model.lm_head.output[0, 0, 0, 0]",
    "model.lm_head.output[0, 20]",
    "model.lm_head.output[..., ...]",
    "model.lm_head.output[1.5]",
    "model.lm_head.output[::0]",
    "model.lm_head.output.view(7, 7)",
    "model.lm_head.output.view(-1, -1)",
    "model.lm_head.output.topk(10**9)",
    "model.lm_head.output.transpose(0, 7)",
    "model.lm_head.output.sum(dim=9)",
    "model.lm_head.output.item()",
    "model.lm_head.output @ model.lm_head.output",
    "model.lm_head.output + model.model.layers[0].output",
    "model.lm_head.output.to(some_dtype)",
    "model.lm_head.output.argmax(dim=d)",
    "model.lm_head.output.view(*shape)",
    "torch.stack(acts)",
    "torch.stack([])",
    "torch.cat([x, ids])",
    "torch.where(mask)",
    "torch.einsum(eq, x)",
    "torch.unknown_fn(x)",
    "np.mean(x)",
    "math.sqrt(2)",
    "lambda t: t",
    "[t for t in foo]",
    "[x[i] for i in range(3) if i]",
    "{**d}",
    "[*acts]",
    "x if y else z",
    "not x",
    "x and ids",
    "x in ids",
    "await x",
    "(yield)",
    "f'{x}'",
    "b'bytes'",
    "1j",
    "...",
    "None",
    "list()",
    "nnsight.list()",
    "dict()",
    "str(x)",
    "x[mask, mask]",
    "x[ids.float()]",
    "x[[1, [2]]]",
    "x.max(k)",
    "model.lm_head.save()",
    "model.lm_head()",
    "model.lm_head(x, y)",
    "model.skip()",
    "layer.output[0][0][0][0][0]",
    "",
    "1 +",
]


@pytest.mark.parametrize("expr", ODD)
def test_odd_expressions_never_raise(expr):
    s = shape_of(expr, L70, seq_len=10, env=ENV)
    assert isinstance(s, Shape)
    if s.kind == "unknown":
        assert s.reason
        assert s.nbytes is None


def test_odd_inputs_never_raise():
    assert shape_of(cst.Name("model"), L70).kind == "unknown"
    assert shape_of(cst.parse_expression("x"), L70, env={"x": 42}).kind == "unknown"  # type: ignore[dict-item]
    assert shape_of("model.lm_head.output", L70, seq_len=0).dims == (1, 1, V)


_ATOMS = ["model", "x", "ids", "logits", "k", "layer", "torch", "F", "0", "-1", "2", "None", "[1, 2]", "..."]
_SUFFIXES = [
    ".output", ".input", ".lm_head", ".model", ".layers", ".transformer", ".h", ".self_attn", ".mlp",
    "[0]", "[-1]", "[:, -1]", "[0, -1, [1, 2]]", "[..., 0]", "[i]", ".argmax()", ".argmax(dim=-1)",
    ".max(-1)", ".sum()", ".topk(3)", ".softmax(-1)", ".item()", ".tolist()", ".float()", ".T",
    ".shape", ".view(-1)", ".unsqueeze(0)", ".squeeze()", ".values", ".indices", ".save()", " * 2",
    " - x", " > 0", ".next()", ".norm(dim=-1)", ".detach().cpu()", "(x)",
]  # fmt: skip


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from(_ATOMS), st.lists(st.sampled_from(_SUFFIXES), max_size=6))
def test_random_chains_never_raise(atom, suffixes):
    expr = atom + "".join(suffixes)
    s = shape_of(expr, L70, seq_len=5, env=ENV)
    assert isinstance(s, Shape)
    if s.kind == "unknown":
        assert s.reason
    elif s.kind in ("tensor", "scalar", "python"):
        assert s.dims is not None and s.nbytes is not None and s.nbytes >= 0
