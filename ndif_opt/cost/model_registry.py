"""Dimensions of the models NDIF serves, for the static cost model.

The cost model needs a handful of numbers per model — layer count, hidden size,
vocabulary, head layout, parameter count, the dtype activations come back in — and
the attribute paths of the modules a script touches (``model.model.layers`` for a
Llama, ``model.transformer.h`` for GPT-2). This module keeps those facts, as published
in each checkpoint's ``config.json``, in a small registry:

* :func:`dims_for` looks a model up by its Hugging Face repo id (case-insensitive,
  with or without the organisation prefix) and falls back to a stated default;
* :func:`dims_from_hf_config` builds the dimensions from a ``config.json`` dict;
* :func:`load_overrides` reads a ``[tool.ndif-opt.models."org/name"]`` table.

``dtype`` is the dtype activations are assumed to have *on the server*: ``bfloat16``
for the large checkpoints NDIF hosts, and what the checkpoint's ``config.json`` declares
for the small float32 checkpoints (GPT-2, GPT-J). Everything here is pure data: no I/O.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DTYPE_SIZES",
    "FAMILIES",
    "ModelDims",
    "ModulePaths",
    "REGISTRY",
    "canonical_dtype",
    "dims_for",
    "dims_from_hf_config",
    "dims_of_family",
    "dtype_size",
    "estimate_n_params",
    "family_of_layer_list",
    "guess_family",
    "load_overrides",
    "registry_names",
]

FAMILIES = ("gpt2", "llama", "gptj", "qwen2", "gemma", "olmo", "mistral", "deepseek", "unknown")

#: Bytes per element of each canonical dtype name.
DTYPE_SIZES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}

_DTYPE_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "double": "float64",
    "fp64": "float64",
    "f64": "float64",
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "char": "int8",
    "byte": "uint8",
    "cfloat": "complex64",
    "cdouble": "complex128",
}


# the names canonical_dtype returns unchanged whatever the default
_CANONICAL_DTYPES = frozenset(
    key for key in DTYPE_SIZES
    if key == key.strip().lower() and not key.startswith("torch.") and _DTYPE_ALIASES.get(key, key) == key
)


def canonical_dtype(name: object, default: str = "bfloat16") -> str:
    """``"torch.bfloat16"``, ``"bf16"``, ``"float"`` … → a key of :data:`DTYPE_SIZES`.

    ``None``, ``"auto"`` and unrecognised names give ``default``.
    """
    if type(name) is str and name in _CANONICAL_DTYPES:  # already canonical: the usual case
        return name
    if name is None:
        return default
    text = str(name).strip().lower()
    if text.startswith("torch."):
        text = text[len("torch.") :]
    text = _DTYPE_ALIASES.get(text, text)
    return text if text in DTYPE_SIZES else default


def dtype_size(dtype: str) -> int:
    """Bytes per element of ``dtype`` (any spelling :func:`canonical_dtype` accepts); 4 if unknown."""
    return DTYPE_SIZES.get(canonical_dtype(dtype, default="float32"), 4)


@dataclass(frozen=True)
class ModulePaths:
    """Attribute paths, relative to the nnsight model object, of the modules a script uses.

    ``layers`` is the ModuleList of decoder layers (``model.model.layers[i]`` in a script
    is ``layers + "[i]"``); ``attn`` and ``mlp`` are attribute names *inside* one layer.
    """

    layers: str
    lm_head: str
    final_norm: str
    embed: str
    attn: str
    mlp: str

    def layer(self, index: int | str) -> str:
        """The path of decoder layer ``index``: ``"model.layers[5]"``."""
        return f"{self.layers}[{index}]"


_GPT2_PATHS = ModulePaths(
    layers="transformer.h",
    lm_head="lm_head",
    final_norm="transformer.ln_f",
    embed="transformer.wte",
    attn="attn",
    mlp="mlp",
)
_LLAMA_PATHS = ModulePaths(
    layers="model.layers",
    lm_head="lm_head",
    final_norm="model.norm",
    embed="model.embed_tokens",
    attn="self_attn",
    mlp="mlp",
)

_FIELD_NAMES = (
    "name",
    "family",
    "n_layers",
    "hidden_size",
    "vocab_size",
    "n_heads",
    "n_kv_heads",
    "intermediate_size",
    "n_params",
    "dtype",
    "max_position",
    "known",
    "head_dim",
    "tie_word_embeddings",
)
_DIM_FIELDS = frozenset(
    {
        "n_layers", "hidden_size", "vocab_size", "n_heads", "n_kv_heads", "intermediate_size",
        "head_dim", "tie_word_embeddings", "family", "max_position",
    }
)  # fmt: skip


@dataclass(frozen=True)
class ModelDims:
    """The static facts about one model that the cost model uses.

    ``head_dim`` is ``None`` when it is ``hidden_size // n_heads`` (Gemma-2 is the
    exception: its heads are 256 wide whatever the hidden size). ``known`` is False for
    the fallback :func:`dims_for` returns for a model it does not know.
    """

    name: str
    family: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    n_heads: int
    n_kv_heads: int
    intermediate_size: int
    n_params: int
    dtype: str = "bfloat16"
    max_position: int = 4096
    known: bool = True
    head_dim: int | None = None
    tie_word_embeddings: bool = False

    @property
    def bytes_per_element(self) -> int:
        return dtype_size(self.dtype)

    @property
    def attn_head_dim(self) -> int:
        """Width of one attention head."""
        if self.head_dim:
            return self.head_dim
        return self.hidden_size // max(self.n_heads, 1)

    @property
    def q_dim(self) -> int:
        """Output width of the query projection (``n_heads * head_dim``)."""
        return self.n_heads * self.attn_head_dim

    @property
    def kv_dim(self) -> int:
        """Output width of the key (or value) projection (``n_kv_heads * head_dim``)."""
        return self.n_kv_heads * self.attn_head_dim

    @property
    def llama_like(self) -> bool:
        """True for every family laid out as ``model.layers`` / ``self_attn`` / gated MLP."""
        return self.family not in ("gpt2", "gptj")

    @property
    def module_paths(self) -> ModulePaths:
        return _GPT2_PATHS if self.family in ("gpt2", "gptj") else _LLAMA_PATHS

    def estimated_n_params(self) -> int:
        """The parameter count implied by the dimensions (see :func:`estimate_n_params`)."""
        return estimate_n_params(self)

    def replace(self, **changes) -> ModelDims:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def estimate_n_params(dims: ModelDims) -> int:
    """Parameters implied by ``dims``: embeddings + per-layer attention, MLP and norms.

    * attention: Q and O are ``hidden × n_heads·head_dim``, K and V ``hidden ×
      n_kv_heads·head_dim``; biases for GPT-2 (all projections) and Qwen2 (Q, K, V);
    * MLP: gated (gate, up, down: ``3 × hidden × intermediate``) for llama-like families,
      two biased matrices for GPT-2 and GPT-J;
    * norms: two RMSNorms a layer (four for Gemma-2; Q/K norms too for OLMo-2), LayerNorms
      with bias for GPT-2 (two a layer) and GPT-J (one, parallel block);
    * token embedding, plus GPT-2's position embedding, plus an untied LM head (with a
      bias for GPT-J).

    Reproduces the published counts of Llama-3.x, Qwen2.5, Gemma-2, OLMo-2, Mistral and
    GPT-2 exactly; GPT-J within 0.1%.
    """
    h = dims.hidden_size
    q, kv = dims.q_dim, dims.kv_dim
    inter = dims.intermediate_size
    fam = dims.family

    attn = h * q + 2 * h * kv + q * h
    if fam == "gpt2":
        attn += q + 2 * kv + h
    elif fam == "qwen2":
        attn += q + 2 * kv

    if fam in ("gpt2", "gptj"):
        mlp = 2 * h * inter + inter + h
    else:
        mlp = 3 * h * inter

    if fam == "gpt2":
        norms, final_norm = 4 * h, 2 * h
    elif fam == "gptj":
        norms, final_norm = 2 * h, 2 * h
    elif fam == "gemma":
        norms, final_norm = 4 * h, h
    elif fam == "olmo":
        norms, final_norm = 2 * h + q + kv, h
    else:
        norms, final_norm = 2 * h, h

    embed = dims.vocab_size * h
    if fam == "gpt2":
        embed += dims.max_position * h
    head = 0 if dims.tie_word_embeddings else dims.vocab_size * h
    if fam == "gptj" and not dims.tie_word_embeddings:
        head += dims.vocab_size

    return dims.n_layers * (attn + mlp + norms) + final_norm + embed + head


# ---------------------------------------------------------------------------------------
# The registry: values from each checkpoint's published config.json.
# ---------------------------------------------------------------------------------------

REGISTRY: dict[str, ModelDims] = {}
_BY_KEY: dict[str, str] = {}  # lower-cased full id or bare name → canonical id


def _add(
    names: tuple[str, ...],
    *,
    family: str,
    n_layers: int,
    hidden_size: int,
    vocab_size: int,
    n_heads: int,
    n_kv_heads: int,
    intermediate_size: int,
    n_params: int,
    max_position: int,
    dtype: str = "bfloat16",
    head_dim: int | None = None,
    tie_word_embeddings: bool = False,
    max_position_overrides: Mapping[str, int] | None = None,
) -> None:
    for name in names:
        dims = ModelDims(
            name=name,
            family=family,
            n_layers=n_layers,
            hidden_size=hidden_size,
            vocab_size=vocab_size,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            intermediate_size=intermediate_size,
            n_params=n_params,
            dtype=dtype,
            max_position=(max_position_overrides or {}).get(name, max_position),
            known=True,
            head_dim=head_dim,
            tie_word_embeddings=tie_word_embeddings,
        )
        REGISTRY[name] = dims
        _BY_KEY[name.lower()] = name
        bare = name.rsplit("/", 1)[-1].lower()
        _BY_KEY.setdefault(bare, name)


# Llama 3 / 3.1 / 3.2 / 3.3 (meta-llama). 3.1 repos were first published as "Meta-Llama-3.1-…".
_add(
    (
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3-8B",
        "meta-llama/Meta-Llama-3-8B-Instruct",
    ),
    family="llama",
    n_layers=32,
    hidden_size=4096,
    vocab_size=128256,
    n_heads=32,
    n_kv_heads=8,
    intermediate_size=14336,
    n_params=8_030_261_248,
    max_position=131072,
    max_position_overrides={"meta-llama/Meta-Llama-3-8B": 8192, "meta-llama/Meta-Llama-3-8B-Instruct": 8192},
)
_add(
    (
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B",
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
        "meta-llama/Meta-Llama-3-70B",
        "meta-llama/Meta-Llama-3-70B-Instruct",
    ),
    family="llama",
    n_layers=80,
    hidden_size=8192,
    vocab_size=128256,
    n_heads=64,
    n_kv_heads=8,
    intermediate_size=28672,
    n_params=70_553_706_496,
    max_position=131072,
    max_position_overrides={"meta-llama/Meta-Llama-3-70B": 8192, "meta-llama/Meta-Llama-3-70B-Instruct": 8192},
)
_add(
    (
        "meta-llama/Llama-3.1-405B",
        "meta-llama/Llama-3.1-405B-Instruct",
        "meta-llama/Meta-Llama-3.1-405B",
        "meta-llama/Meta-Llama-3.1-405B-Instruct",
    ),
    family="llama",
    n_layers=126,
    hidden_size=16384,
    vocab_size=128256,
    n_heads=128,
    n_kv_heads=8,
    intermediate_size=53248,
    n_params=405_853_388_800,
    max_position=131072,
)
_add(
    ("meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-1B-Instruct"),
    family="llama",
    n_layers=16,
    hidden_size=2048,
    vocab_size=128256,
    n_heads=32,
    n_kv_heads=8,
    intermediate_size=8192,
    n_params=1_235_814_400,
    max_position=131072,
    head_dim=64,
    tie_word_embeddings=True,
)
_add(
    ("meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.2-3B-Instruct"),
    family="llama",
    n_layers=28,
    hidden_size=3072,
    vocab_size=128256,
    n_heads=24,
    n_kv_heads=8,
    intermediate_size=8192,
    n_params=3_212_749_824,
    max_position=131072,
    head_dim=128,
    tie_word_embeddings=True,
)
# DeepSeek-R1 distilled into Llama (config model_type "llama"; family kept as "deepseek").
_add(
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B",),
    family="deepseek",
    n_layers=80,
    hidden_size=8192,
    vocab_size=128256,
    n_heads=64,
    n_kv_heads=8,
    intermediate_size=28672,
    n_params=70_553_706_496,
    max_position=131072,
)
_add(
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B",),
    family="deepseek",
    n_layers=32,
    hidden_size=4096,
    vocab_size=128256,
    n_heads=32,
    n_kv_heads=8,
    intermediate_size=14336,
    n_params=8_030_261_248,
    max_position=131072,
)

# GPT-2 (config.json declares no dtype: float32). n_inner is null → 4 × n_embd.
for _names, _layers, _hidden, _heads, _params in (
    (("openai-community/gpt2", "gpt2"), 12, 768, 12, 124_439_808),
    (("openai-community/gpt2-medium", "gpt2-medium"), 24, 1024, 16, 354_823_168),
    (("openai-community/gpt2-large", "gpt2-large"), 36, 1280, 20, 774_030_080),
    (("openai-community/gpt2-xl", "gpt2-xl"), 48, 1600, 25, 1_557_611_200),
):
    _add(
        _names,
        family="gpt2",
        n_layers=_layers,
        hidden_size=_hidden,
        vocab_size=50257,
        n_heads=_heads,
        n_kv_heads=_heads,
        intermediate_size=4 * _hidden,
        n_params=_params,
        max_position=1024,
        dtype="float32",
        tie_word_embeddings=True,
    )

# GPT-J-6B: 16 heads of 256, rotary, parallel attention/MLP block; config dtype float32.
_add(
    ("EleutherAI/gpt-j-6b",),
    family="gptj",
    n_layers=28,
    hidden_size=4096,
    vocab_size=50400,
    n_heads=16,
    n_kv_heads=16,
    intermediate_size=16384,
    n_params=6_053_381_344,
    max_position=2048,
    dtype="float32",
)

# Qwen2.5 (base: 131072 positions; -Instruct: 32768).
for _size, _layers, _hidden, _heads, _kv, _inter, _params in (
    ("7B", 28, 3584, 28, 4, 18944, 7_615_616_512),
    ("14B", 48, 5120, 40, 8, 13824, 14_770_033_664),
    ("32B", 64, 5120, 40, 8, 27648, 32_763_876_352),
    ("72B", 80, 8192, 64, 8, 29568, 72_706_203_648),
):
    _add(
        (f"Qwen/Qwen2.5-{_size}", f"Qwen/Qwen2.5-{_size}-Instruct"),
        family="qwen2",
        n_layers=_layers,
        hidden_size=_hidden,
        vocab_size=152064,
        n_heads=_heads,
        n_kv_heads=_kv,
        intermediate_size=_inter,
        n_params=_params,
        max_position=131072,
        max_position_overrides={f"Qwen/Qwen2.5-{_size}-Instruct": 32768},
    )

# Gemma-2: tied embeddings, explicit head_dim, four norms a layer.
for _size, _layers, _hidden, _heads, _kv, _hd, _inter, _params in (
    ("2b", 26, 2304, 8, 4, 256, 9216, 2_614_341_888),
    ("9b", 42, 3584, 16, 8, 256, 14336, 9_241_705_984),
    ("27b", 46, 4608, 32, 16, 128, 36864, 27_227_128_320),
):
    _add(
        (f"google/gemma-2-{_size}", f"google/gemma-2-{_size}-it"),
        family="gemma",
        n_layers=_layers,
        hidden_size=_hidden,
        vocab_size=256000,
        n_heads=_heads,
        n_kv_heads=_kv,
        intermediate_size=_inter,
        n_params=_params,
        max_position=8192,
        head_dim=_hd,
        tie_word_embeddings=True,
    )

# OLMo-2 (November 2024 release).
_add(
    ("allenai/OLMo-2-1124-7B", "allenai/OLMo-2-1124-7B-Instruct"),
    family="olmo",
    n_layers=32,
    hidden_size=4096,
    vocab_size=100352,
    n_heads=32,
    n_kv_heads=32,
    intermediate_size=11008,
    n_params=7_298_617_344,
    max_position=4096,
)
_add(
    ("allenai/OLMo-2-1124-13B", "allenai/OLMo-2-1124-13B-Instruct"),
    family="olmo",
    n_layers=40,
    hidden_size=5120,
    vocab_size=100352,
    n_heads=40,
    n_kv_heads=40,
    intermediate_size=13824,
    n_params=13_716_198_400,
    max_position=4096,
)

# Mistral-7B.
_add(
    ("mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.1", "mistralai/Mistral-7B-Instruct-v0.2"),
    family="mistral",
    n_layers=32,
    hidden_size=4096,
    vocab_size=32000,
    n_heads=32,
    n_kv_heads=8,
    intermediate_size=14336,
    n_params=7_241_732_096,
    max_position=32768,
)
_add(
    ("mistralai/Mistral-7B-v0.3", "mistralai/Mistral-7B-Instruct-v0.3"),
    family="mistral",
    n_layers=32,
    hidden_size=4096,
    vocab_size=32768,
    n_heads=32,
    n_kv_heads=8,
    intermediate_size=14336,
    n_params=7_248_023_552,
    max_position=32768,
)


def registry_names() -> tuple[str, ...]:
    """Every repo id the registry knows, in registration order."""
    return tuple(REGISTRY)


# ---------------------------------------------------------------------------------------
# Lookup and fallback
# ---------------------------------------------------------------------------------------

_FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("deepseek", "deepseek"),
    ("gpt-j", "gptj"),
    ("gptj", "gptj"),
    ("gpt2", "gpt2"),
    ("gpt-2", "gpt2"),
    ("distilgpt", "gpt2"),
    ("qwen", "qwen2"),
    ("gemma", "gemma"),
    ("olmo", "olmo"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("llama", "llama"),
)

#: The registry entry whose dimensions a fallback of each guessed family copies when the
#: name carries no parameter count.
_FAMILY_DEFAULT = {
    "llama": "meta-llama/Llama-3.1-8B",
    "deepseek": "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "gpt2": "openai-community/gpt2",
    "gptj": "EleutherAI/gpt-j-6b",
    "qwen2": "Qwen/Qwen2.5-7B",
    "gemma": "google/gemma-2-9b",
    "olmo": "allenai/OLMo-2-1124-7B",
    "mistral": "mistralai/Mistral-7B-v0.1",
    "unknown": "meta-llama/Llama-3.1-8B",
}

_MODEL_TYPE_FAMILY = {
    "gpt2": "gpt2",
    "gptj": "gptj",
    "gpt-j": "gptj",
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen2",
    "gemma": "gemma",
    "gemma2": "gemma",
    "gemma3": "gemma",
    "gemma3_text": "gemma",
    "olmo": "olmo",
    "olmo2": "olmo",
    "olmo3": "olmo",
    "mistral": "mistral",
    "mixtral": "mistral",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
}

_SIZE_RE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)


def _normalize_id(repo_id: str) -> str:
    text = str(repo_id).strip().strip("/").lower()
    for prefix in ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text.split("@", 1)[0]


def _lookup(repo_id: str) -> ModelDims | None:
    key = _normalize_id(repo_id)
    name = _BY_KEY.get(key) or _BY_KEY.get(key.rsplit("/", 1)[-1])
    return REGISTRY[name] if name else None


def guess_family(name: str) -> str:
    """The family a repo id suggests (``"…Llama…"`` → ``"llama"``), or ``"unknown"``."""
    text = str(name).lower()
    for needle, family in _FAMILY_PATTERNS:
        if needle in text:
            return family
    return "unknown"


def _size_from_name(name: str) -> float | None:
    """Parameter count written in a name: ``"…-13B-…"`` → 13e9, ``"…-350m"`` → 350e6."""
    matches = list(_SIZE_RE.finditer(str(name)))
    if not matches:
        return None
    match = matches[-1]
    scale = 1e9 if match.group(2).lower() == "b" else 1e6
    return float(match.group(1)) * scale


def _fallback(repo_id: str) -> ModelDims:
    family = guess_family(repo_id)
    template = REGISTRY[_FAMILY_DEFAULT[family]]
    size = _size_from_name(repo_id)
    if size and family != "unknown":
        candidates = [d for d in REGISTRY.values() if d.family == family]
        template = min(candidates, key=lambda d: abs(math.log(d.n_params) - math.log(size)))
    return template.replace(name=str(repo_id), family=family, known=False)


def family_of_layer_list(path: str) -> str | None:
    """The family whose decoder layers a model keeps at ``path`` (``"transformer.h"``: GPT-2's)."""
    return {_GPT2_PATHS.layers: "gpt2", _LLAMA_PATHS.layers: "llama"}.get(path)


def dims_of_family(name: str, family: str) -> ModelDims:
    """A model whose repo is not known, of ``family`` (as its code shows): the dimensions of
    the family's default registry entry, not known (as :func:`dims_for`'s default)."""
    return REGISTRY[_FAMILY_DEFAULT[family]].replace(name=str(name), family=family, known=False)


def dims_for(repo_id: str, overrides: Mapping | None = None) -> ModelDims:
    """The dimensions of ``repo_id``.

    Lookup is case-insensitive and accepts the id with or without its organisation
    (``"meta-llama/Llama-3.1-70B"``, ``"llama-3.1-70b"``); a ``https://huggingface.co/``
    prefix and an ``@revision`` suffix are ignored.

    ``overrides`` is either

    * a table of models, as :func:`load_overrides` returns (name → :class:`ModelDims`) or
      as written in ``pyproject.toml`` (name → dict of fields): an entry matching
      ``repo_id`` (same matching rules) wins over the registry, a dict entry merging
      onto it; or
    * a dict of :class:`ModelDims` fields (``{"dtype": "float32"}``) applied to this model.

    **Default for an unknown model** (``known=False``): the family is guessed from the
    name (``"llama"`` → llama, also ``"qwen"``, ``"gemma"``, ``"olmo"``, ``"mistral"``,
    ``"deepseek"``, ``"gpt2"``, ``"gpt-j"``); the dimensions are copied from the registry
    entry of that family whose parameter count is nearest a size written in the name
    (``"…-13B"``), or else from the family's default entry (llama: Llama-3.1-8B,
    qwen2: Qwen2.5-7B, gemma: gemma-2-9b, olmo: OLMo-2-7B, mistral: Mistral-7B-v0.1,
    deepseek: R1-Distill-Llama-70B, gpt2: gpt2, gptj: gpt-j-6b). A name that suggests no
    family gets Llama-3.1-8B's dimensions (32 layers, hidden 4096, vocabulary 128256,
    bfloat16) with ``family="unknown"`` and llama-like module paths.
    """
    base = _lookup(repo_id) or _fallback(repo_id)
    if not overrides:
        return base
    if _is_field_dict(overrides):
        return _merge(base, overrides)
    wanted = _normalize_id(repo_id)
    wanted_bare = wanted.rsplit("/", 1)[-1]
    exact = bare = None
    for name, entry in overrides.items():
        key = _normalize_id(name)
        if key == wanted:
            exact = entry
        elif key.rsplit("/", 1)[-1] == wanted_bare and bare is None:
            bare = entry
    entry = exact if exact is not None else bare
    if entry is None:
        return base
    if isinstance(entry, ModelDims):
        return entry
    if isinstance(entry, Mapping):
        return _merge(base, entry)
    raise TypeError(f"override for {repo_id!r} must be a ModelDims or a table of fields, not {type(entry).__name__}")


# ---------------------------------------------------------------------------------------
# config.json and overrides
# ---------------------------------------------------------------------------------------


def _first(config: Mapping, *keys: str, default=None):
    for key in keys:
        if key in config and config[key] is not None:
            return config[key]
    return default


def dims_from_hf_config(config: Mapping, name: str, *, default_dtype: str = "bfloat16") -> ModelDims:
    """Build :class:`ModelDims` from a Hugging Face ``config.json`` dict.

    Reads ``num_hidden_layers``/``n_layer``, ``hidden_size``/``n_embd``, ``vocab_size``,
    ``num_attention_heads``/``n_head``, ``num_key_value_heads`` (default: the head count),
    ``head_dim``, ``intermediate_size``/``n_inner``/``ffn_dim`` (default 4 × hidden),
    ``max_position_embeddings``/``n_positions``/``n_ctx``, ``tie_word_embeddings`` (default
    True, as in transformers), ``torch_dtype`` or ``dtype`` (default ``default_dtype``) and
    ``model_type`` (→ family; an unrecognised type falls back to a guess from ``name``).
    Multimodal configs are read from their ``text_config``. ``n_params`` is estimated from
    the dimensions (:func:`estimate_n_params`) unless the config states ``num_parameters``.
    Raises ``ValueError`` when the layer count, hidden size or vocabulary is missing.
    """
    config = dict(config)
    text_config = config.get("text_config")
    if isinstance(text_config, Mapping) and "hidden_size" not in config and "n_embd" not in config:
        merged = dict(text_config)
        for key in ("torch_dtype", "dtype"):  # the outer config's dtype is the one loaded
            if config.get(key) is not None:
                merged.pop("torch_dtype", None)
                merged.pop("dtype", None)
                merged[key] = config[key]
                break
        for key in ("model_type", "tie_word_embeddings"):
            if key in config and key not in merged:
                merged[key] = config[key]
        config = merged

    model_type = str(config.get("model_type") or "").lower()
    family = _MODEL_TYPE_FAMILY.get(model_type) or guess_family(name)
    if family == "unknown" and model_type:
        family = guess_family(model_type)

    n_layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    vocab = _first(config, "vocab_size")
    missing = [k for k, v in (("layers", n_layers), ("hidden size", hidden), ("vocab_size", vocab)) if v is None]
    if missing:
        raise ValueError(f"config for {name!r} lacks {', '.join(missing)}")
    n_heads = int(_first(config, "num_attention_heads", "n_head", "num_heads", default=max(int(hidden) // 128, 1)))
    n_kv = int(_first(config, "num_key_value_heads", "num_kv_heads", default=n_heads))
    inter = int(_first(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * int(hidden)))
    max_pos = int(_first(config, "max_position_embeddings", "n_positions", "n_ctx", default=4096))
    head_dim = config.get("head_dim")
    head_dim = int(head_dim) if head_dim and int(head_dim) != int(hidden) // max(n_heads, 1) else None
    dims = ModelDims(
        name=name,
        family=family,
        n_layers=int(n_layers),
        hidden_size=int(hidden),
        vocab_size=int(vocab),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        intermediate_size=inter,
        n_params=0,
        dtype=canonical_dtype(_first(config, "torch_dtype", "dtype"), default=canonical_dtype(default_dtype)),
        max_position=max_pos,
        known=True,
        head_dim=head_dim,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
    )
    n_params = config.get("num_parameters")
    return dims.replace(n_params=int(n_params) if n_params else estimate_n_params(dims))


_KEY_ALIASES = {
    "layers": "n_layers",
    "num_hidden_layers": "n_layers",
    "n_layer": "n_layers",
    "hidden": "hidden_size",
    "n_embd": "hidden_size",
    "d_model": "hidden_size",
    "vocab": "vocab_size",
    "heads": "n_heads",
    "num_attention_heads": "n_heads",
    "n_head": "n_heads",
    "kv_heads": "n_kv_heads",
    "num_key_value_heads": "n_kv_heads",
    "n_inner": "intermediate_size",
    "params": "n_params",
    "num_parameters": "n_params",
    "torch_dtype": "dtype",
    "max_position_embeddings": "max_position",
    "n_positions": "max_position",
}


def _field_key(key: str) -> str | None:
    norm = str(key).strip().lower().replace("-", "_")
    norm = _KEY_ALIASES.get(norm, norm)
    return norm if norm in _FIELD_NAMES else None


def _is_field_dict(mapping: Mapping) -> bool:
    return bool(mapping) and all(
        not isinstance(v, (Mapping, ModelDims)) and _field_key(k) is not None for k, v in mapping.items()
    )


def _merge(base: ModelDims, fields: Mapping) -> ModelDims:
    changes: dict = {}
    for key, value in fields.items():
        field_name = _field_key(key)
        if field_name is None:
            valid = ", ".join(f for f in _FIELD_NAMES if f != "name")
            raise ValueError(f"unknown model field {key!r}; expected one of: {valid}")
        if field_name == "dtype":
            value = canonical_dtype(value, default="")
            if not value:
                raise ValueError(f"unknown dtype {fields[key]!r}; expected one of: {', '.join(DTYPE_SIZES)}")
        elif field_name == "family":
            value = str(value).lower()
            if value not in FAMILIES:
                raise ValueError(f"unknown family {fields[key]!r}; expected one of: {', '.join(FAMILIES)}")
        elif field_name in ("known", "tie_word_embeddings"):
            value = bool(value)
        elif field_name == "name":
            value = str(value)
        elif value is not None:
            value = int(value)
        changes[field_name] = value
    merged = base.replace(**changes)
    dims_changed = any(k in _DIM_FIELDS for k in changes)
    if dims_changed and "n_params" not in changes:
        merged = merged.replace(n_params=estimate_n_params(merged))
    if "known" not in changes and not merged.known:
        core = {"n_layers", "hidden_size", "vocab_size"}
        merged = merged.replace(known=core <= set(changes))
    return merged


def load_overrides(table: Mapping) -> dict[str, ModelDims]:
    """Turn a ``[tool.ndif-opt.models]`` table into ``{repo_id: ModelDims}``.

    ``table`` maps repo ids to tables of :class:`ModelDims` fields, e.g. the TOML
    ``[tool.ndif-opt.models."meta-llama/Llama-3.1-8B"]`` / ``dtype = "float32"``. Each entry
    is merged onto what :func:`dims_for` gives for that id (the registry entry, or the
    fallback), so a partial table changes only the fields it names. Keys may also be
    spelled as in ``config.json`` (``num_hidden_layers``, ``torch_dtype`` …) or with
    dashes. Changing a dimension without giving ``n_params`` re-estimates ``n_params``; an
    entry for an unknown model that gives ``n_layers``, ``hidden_size`` and
    ``vocab_size`` counts as known. An unknown key, dtype or family raises ``ValueError``.
    """
    result: dict[str, ModelDims] = {}
    for name, fields in (table or {}).items():
        if isinstance(fields, ModelDims):
            result[str(name)] = fields
            continue
        if not isinstance(fields, Mapping):
            raise ValueError(f"[tool.ndif-opt.models.{name!r}] must be a table of fields")
        base = dims_for(str(name))
        merged = _merge(base, fields)
        if "name" not in {(_field_key(k) or "") for k in fields}:
            merged = merged.replace(name=str(name))
        result[str(name)] = merged
    return result


# a model config's numbers, by the names configs of the families give them -> ModelDims' field
CONFIG_NUMBERS = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers"), "n_layers"),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "n_heads"), "n_heads"),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), "hidden_size"),
    "num_key_value_heads": "n_kv_heads",
    "vocab_size": "vocab_size",
}


def config_number(dims: ModelDims, attribute: str) -> int:
    """``model.config.<attribute>`` of the model ``dims`` describes (one of
    :data:`CONFIG_NUMBERS`)."""
    return getattr(dims, CONFIG_NUMBERS[attribute])
