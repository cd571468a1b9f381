"""The model registry: published facts, lookup, fallback, config.json and overrides."""

from __future__ import annotations

import pytest

from ndif_opt.cost.model_registry import (
    DTYPE_SIZES,
    FAMILIES,
    REGISTRY,
    ModelDims,
    canonical_dtype,
    dims_for,
    dims_from_hf_config,
    estimate_n_params,
    guess_family,
    load_overrides,
)

# repo id, family, layers, hidden, vocab, heads, kv heads, intermediate, dtype
FACTS = [
    ("meta-llama/Llama-3.1-8B", "llama", 32, 4096, 128256, 32, 8, 14336, "bfloat16"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama", 32, 4096, 128256, 32, 8, 14336, "bfloat16"),
    ("meta-llama/Llama-3.1-70B", "llama", 80, 8192, 128256, 64, 8, 28672, "bfloat16"),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama", 80, 8192, 128256, 64, 8, 28672, "bfloat16"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama", 80, 8192, 128256, 64, 8, 28672, "bfloat16"),
    ("meta-llama/Llama-3.1-405B", "llama", 126, 16384, 128256, 128, 8, 53248, "bfloat16"),
    ("meta-llama/Llama-3.1-405B-Instruct", "llama", 126, 16384, 128256, 128, 8, 53248, "bfloat16"),
    ("meta-llama/Llama-3.2-1B", "llama", 16, 2048, 128256, 32, 8, 8192, "bfloat16"),
    ("meta-llama/Llama-3.2-3B", "llama", 28, 3072, 128256, 24, 8, 8192, "bfloat16"),
    ("openai-community/gpt2", "gpt2", 12, 768, 50257, 12, 12, 3072, "float32"),
    ("openai-community/gpt2-medium", "gpt2", 24, 1024, 50257, 16, 16, 4096, "float32"),
    ("openai-community/gpt2-large", "gpt2", 36, 1280, 50257, 20, 20, 5120, "float32"),
    ("openai-community/gpt2-xl", "gpt2", 48, 1600, 50257, 25, 25, 6400, "float32"),
    ("EleutherAI/gpt-j-6b", "gptj", 28, 4096, 50400, 16, 16, 16384, "float32"),
    ("Qwen/Qwen2.5-7B", "qwen2", 28, 3584, 152064, 28, 4, 18944, "bfloat16"),
    ("Qwen/Qwen2.5-14B", "qwen2", 48, 5120, 152064, 40, 8, 13824, "bfloat16"),
    ("Qwen/Qwen2.5-32B", "qwen2", 64, 5120, 152064, 40, 8, 27648, "bfloat16"),
    ("Qwen/Qwen2.5-72B", "qwen2", 80, 8192, 152064, 64, 8, 29568, "bfloat16"),
    ("google/gemma-2-2b", "gemma", 26, 2304, 256000, 8, 4, 9216, "bfloat16"),
    ("google/gemma-2-9b", "gemma", 42, 3584, 256000, 16, 8, 14336, "bfloat16"),
    ("google/gemma-2-27b", "gemma", 46, 4608, 256000, 32, 16, 36864, "bfloat16"),
    ("allenai/OLMo-2-1124-7B", "olmo", 32, 4096, 100352, 32, 32, 11008, "bfloat16"),
    ("allenai/OLMo-2-1124-13B", "olmo", 40, 5120, 100352, 40, 40, 13824, "bfloat16"),
    ("mistralai/Mistral-7B-v0.1", "mistral", 32, 4096, 32000, 32, 8, 14336, "bfloat16"),
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistral", 32, 4096, 32000, 32, 8, 14336, "bfloat16"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "deepseek", 80, 8192, 128256, 64, 8, 28672, "bfloat16"),
]


@pytest.mark.parametrize("repo,family,layers,hidden,vocab,heads,kv,inter,dtype", FACTS)
def test_registry_facts(repo, family, layers, hidden, vocab, heads, kv, inter, dtype):
    d = dims_for(repo)
    assert d.known
    assert d.name == repo
    assert (d.family, d.n_layers, d.hidden_size, d.vocab_size) == (family, layers, hidden, vocab)
    assert (d.n_heads, d.n_kv_heads, d.intermediate_size, d.dtype) == (heads, kv, inter, dtype)


# Published parameter counts (model cards / safetensors totals).
@pytest.mark.parametrize(
    "repo,params",
    [
        ("meta-llama/Llama-3.1-8B", 8_030_261_248),
        ("meta-llama/Llama-3.1-70B", 70_553_706_496),
        ("meta-llama/Llama-3.1-405B", 405_853_388_800),
        ("meta-llama/Llama-3.2-1B", 1_235_814_400),
        ("gpt2", 124_439_808),
        ("gpt2-xl", 1_557_611_200),
        ("EleutherAI/gpt-j-6b", 6_053_381_344),
        ("Qwen/Qwen2.5-32B", 32_763_876_352),
        ("google/gemma-2-2b", 2_614_341_888),
        ("mistralai/Mistral-7B-v0.1", 7_241_732_096),
    ],
)
def test_published_param_counts(repo, params):
    assert dims_for(repo).n_params == params


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_registry_entry_is_consistent(name):
    d = REGISTRY[name]
    assert d.known and d.name == name
    assert d.family in FAMILIES and d.family != "unknown"
    assert d.dtype in DTYPE_SIZES
    assert d.hidden_size % d.n_heads == 0
    assert d.n_heads % d.n_kv_heads == 0
    assert d.q_dim % d.n_heads == 0 and d.kv_dim == d.n_kv_heads * d.attn_head_dim
    assert d.max_position >= 1024
    estimate = estimate_n_params(d)
    assert abs(estimate - d.n_params) <= 0.2 * d.n_params, (estimate, d.n_params)


def test_estimator_reproduces_published_counts_closely():
    # The estimator is exact for every llama-like entry and GPT-2; GPT-J within 0.1%.
    for d in REGISTRY.values():
        assert abs(d.estimated_n_params() - d.n_params) <= 0.001 * d.n_params, d.name


@pytest.mark.parametrize(
    "query,expected",
    [
        ("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),
        ("META-LLAMA/llama-3.1-70b", "meta-llama/Llama-3.1-70B"),
        ("Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),
        ("llama-3.1-70b-instruct", "meta-llama/Llama-3.1-70B-Instruct"),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("meta-llama/Meta-Llama-3.1-405B-Instruct", "meta-llama/Meta-Llama-3.1-405B-Instruct"),
        ("gpt2", "gpt2"),
        ("openai-community/GPT2-XL", "openai-community/gpt2-xl"),
        ("eleutherai/GPT-J-6B", "EleutherAI/gpt-j-6b"),
        ("qwen2.5-72b-instruct", "Qwen/Qwen2.5-72B-Instruct"),
        ("  google/gemma-2-9b-it  ", "google/gemma-2-9b-it"),
    ],
)
def test_lookup_is_case_insensitive_and_org_optional(query, expected):
    d = dims_for(query)
    assert d.known
    assert d.name == expected


def test_instruct_variants_have_shorter_context_for_qwen():
    assert dims_for("Qwen/Qwen2.5-7B").max_position == 131072
    assert dims_for("Qwen/Qwen2.5-7B-Instruct").max_position == 32768
    assert dims_for("meta-llama/Meta-Llama-3-8B").max_position == 8192


def test_fallback_default_for_an_unrecognised_name():
    d = dims_for("acme/mystery-model")
    assert not d.known
    assert d.name == "acme/mystery-model"
    assert d.family == "unknown"
    # Llama-3.1-8B dimensions, llama-like paths
    assert (d.n_layers, d.hidden_size, d.vocab_size, d.dtype) == (32, 4096, 128256, "bfloat16")
    assert d.module_paths.layers == "model.layers"


@pytest.mark.parametrize(
    "name,family,layers,hidden",
    [
        ("someone/my-llama-finetune", "llama", 32, 4096),
        ("someone/Llama-70B-merge", "llama", 80, 8192),
        ("someone/tiny-llama-1b", "llama", 16, 2048),
        ("org/Qwen2.5-3B", "qwen2", 28, 3584),  # nearest known Qwen2.5 is 7B
        ("org/qwen-72b-chat", "qwen2", 80, 8192),
        ("org/gpt2-finetuned-imdb", "gpt2", 12, 768),
        ("org/gemma-2-27b-sft", "gemma", 46, 4608),
        ("org/OLMo-2-13B-sft", "olmo", 40, 5120),
        ("org/mistral-7b-v9", "mistral", 32, 4096),
        ("org/gpt-j-6b-lora", "gptj", 28, 4096),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek", 80, 8192),
    ],
)
def test_fallback_guesses_family_and_size(name, family, layers, hidden):
    d = dims_for(name)
    assert not d.known
    assert d.family == family
    assert (d.n_layers, d.hidden_size) == (layers, hidden)


@pytest.mark.parametrize(
    "name,family",
    [("x/llama-foo", "llama"), ("x/GPT2", "gpt2"), ("x/gptj", "gptj"), ("x/olmo", "olmo"), ("x/zzz", "unknown")],
)
def test_guess_family(name, family):
    assert guess_family(name) == family


def test_module_paths_by_family():
    gpt2 = dims_for("gpt2").module_paths
    assert (gpt2.layers, gpt2.lm_head, gpt2.final_norm, gpt2.embed, gpt2.attn, gpt2.mlp) == (
        "transformer.h", "lm_head", "transformer.ln_f", "transformer.wte", "attn", "mlp",
    )  # fmt: skip
    assert dims_for("EleutherAI/gpt-j-6b").module_paths.layers == "transformer.h"
    for repo in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "google/gemma-2-2b", "mistralai/Mistral-7B-v0.1"):
        paths = dims_for(repo).module_paths
        assert (paths.layers, paths.final_norm, paths.embed, paths.attn) == (
            "model.layers", "model.norm", "model.embed_tokens", "self_attn",
        )  # fmt: skip
    assert dims_for("meta-llama/Llama-3.1-8B").module_paths.layer(5) == "model.layers[5]"


@pytest.mark.parametrize(
    "dtype,size", [("bfloat16", 2), ("float32", 4), ("float16", 2), ("float64", 8), ("int64", 8), ("bool", 1)]
)
def test_bytes_per_element(dtype, size):
    assert dims_for("gpt2").replace(dtype=dtype).bytes_per_element == size


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("torch.bfloat16", "bfloat16"),
        ("bf16", "bfloat16"),
        ("float", "float32"),
        ("half", "float16"),
        ("auto", "bfloat16"),
        (None, "bfloat16"),
    ],
)
def test_canonical_dtype(text, canonical):
    assert canonical_dtype(text) == canonical


def test_head_dim_and_projection_widths():
    gemma = dims_for("google/gemma-2-2b")
    assert gemma.attn_head_dim == 256 and gemma.q_dim == 2048 and gemma.kv_dim == 1024
    llama = dims_for("meta-llama/Llama-3.1-70B")
    assert llama.attn_head_dim == 128 and llama.q_dim == 8192 and llama.kv_dim == 1024


# --- config.json ----------------------------------------------------------------------

LLAMA_31_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}

GPT2_CONFIG = {  # as published: no dtype, n_inner null, tied embeddings by default
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_inner": None,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}

GEMMA2_2B_CONFIG = {
    "model_type": "gemma2",
    "head_dim": 256,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "max_position_embeddings": 8192,
    "num_attention_heads": 8,
    "num_hidden_layers": 26,
    "num_key_value_heads": 4,
    "torch_dtype": "float32",
    "vocab_size": 256000,
}


def test_dims_from_llama_config_matches_registry():
    d = dims_from_hf_config(LLAMA_31_8B_CONFIG, "meta-llama/Llama-3.1-8B")
    assert d == dims_for("meta-llama/Llama-3.1-8B")
    assert d.n_params == 8_030_261_248  # estimated, exact


def test_dims_from_gpt2_config():
    d = dims_from_hf_config(GPT2_CONFIG, "gpt2")
    assert (d.family, d.n_layers, d.hidden_size, d.n_heads, d.intermediate_size) == ("gpt2", 12, 768, 12, 3072)
    assert d.tie_word_embeddings and d.max_position == 1024
    assert d.dtype == "bfloat16"  # no dtype in config.json → the stated default
    assert dims_from_hf_config(GPT2_CONFIG, "gpt2", default_dtype="float32").dtype == "float32"
    assert d.n_params == 124_439_808
    assert d.module_paths.layers == "transformer.h"


def test_dims_from_gemma2_config_keeps_head_dim_and_dtype():
    d = dims_from_hf_config(GEMMA2_2B_CONFIG, "google/gemma-2-2b")
    assert d.family == "gemma" and d.head_dim == 256 and d.dtype == "float32"
    assert d.n_params == 2_614_341_888


def test_dims_from_config_transformers5_dtype_key_and_text_config():
    rest = {k: v for k, v in LLAMA_31_8B_CONFIG.items() if k not in ("model_type", "torch_dtype")}
    cfg = {"model_type": "qwen2", "dtype": "float16", **rest}
    assert dims_from_hf_config(cfg, "x").dtype == "float16"
    assert dims_from_hf_config(cfg, "x").family == "qwen2"
    text = {**GEMMA2_2B_CONFIG, "model_type": "gemma3_text"}
    nested = {"model_type": "gemma3", "torch_dtype": "bfloat16", "text_config": text}
    d = dims_from_hf_config(nested, "google/gemma-3-x")
    assert (d.family, d.n_layers, d.hidden_size, d.dtype) == ("gemma", 26, 2304, "bfloat16")


def test_dims_from_config_unknown_type_guesses_from_name_and_rejects_missing():
    cfg = dict(LLAMA_31_8B_CONFIG, model_type="weird_arch")
    assert dims_from_hf_config(cfg, "org/some-mistral").family == "mistral"
    assert dims_from_hf_config(cfg, "org/zzz").family == "unknown"
    with pytest.raises(ValueError):
        dims_from_hf_config({"model_type": "llama"}, "x")


# --- overrides ------------------------------------------------------------------------


def test_load_overrides_merges_partial_tables():
    table = {
        "meta-llama/Llama-3.1-8B": {"dtype": "float32"},
        "gpt2": {"max-position": 2048},
    }
    out = load_overrides(table)
    llama = out["meta-llama/Llama-3.1-8B"]
    assert llama.dtype == "float32" and llama.n_layers == 32 and llama.known
    assert llama.n_params == 8_030_261_248  # not a dimension change
    assert out["gpt2"].max_position == 2048


def test_load_overrides_dimension_change_reestimates_params():
    out = load_overrides({"meta-llama/Llama-3.1-8B": {"n_layers": 16}})
    d = out["meta-llama/Llama-3.1-8B"]
    assert d.n_layers == 16
    assert d.n_params == estimate_n_params(d) < 8_030_261_248


def test_load_overrides_new_model_and_hf_keys():
    fields = {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "vocab_size": 1000,
        "n_heads": 4,
        "n_kv_heads": 4,
        "torch_dtype": "torch.float32",
        "family": "llama",
    }
    out = load_overrides({"acme/tiny": fields})
    d = out["acme/tiny"]
    assert d.known and d.name == "acme/tiny"
    assert (d.n_layers, d.hidden_size, d.vocab_size, d.dtype, d.family) == (4, 64, 1000, "float32", "llama")
    partial = load_overrides({"acme/other": {"dtype": "float16"}})["acme/other"]
    assert not partial.known


@pytest.mark.parametrize("fields", [{"layerz": 3}, {"dtype": "float13"}, {"family": "transformer-xl"}])
def test_load_overrides_rejects_bad_fields(fields):
    with pytest.raises(ValueError):
        load_overrides({"gpt2": fields})


def test_dims_for_with_overrides():
    table = load_overrides({"meta-llama/Llama-3.1-70B": {"dtype": "float16"}})
    assert dims_for("llama-3.1-70b", table).dtype == "float16"
    assert dims_for("meta-llama/Llama-3.1-8B", table).dtype == "bfloat16"
    # raw TOML-style table and a plain field dict
    assert dims_for("gpt2", {"openai-community/gpt2": {"dtype": "bf16"}}).dtype == "bfloat16"
    assert dims_for("gpt2", {"dtype": "float16"}).dtype == "float16"
    custom = ModelDims("x/y", "llama", 2, 64, 100, 4, 4, 128, 1000)
    assert dims_for("x/y", {"x/y": custom}) is custom
