"""Tiny, seeded stand-ins for the models NDIF hosts — no hub, no weights downloaded.

A script names a checkpoint (``LanguageModel("meta-llama/Llama-3.1-70B")``); the
execution check gives it a model of the same *family* (module tree, attribute paths
such as ``model.layers[i]`` or ``transformer.h[i]``) and the *real* layer count, but
64 hidden dimensions, random weights seeded from the repo id, fp32, ``eval()`` mode.
Layer loops, ``.skip()`` over layer ranges and per-layer saves therefore behave as on
the real model, only thousands of times cheaper.

Families (:data:`FAMILIES`, picked from the id): GPT-2, Llama (and the Llama
distillations), GPT-J, GPT-NeoX/Pythia, Gemma 1/2/3 (Gemma 3 as its text model),
Qwen2/2.5/QwQ, Qwen3, Mistral and Mixtral, each built from transformers' own class for
it, so a script's module paths are that class's (``gpt_neox.layers``, ``lm_head``). An
id of no known family gets a 12-layer GPT-2 (with a :class:`TinyModelWarning`), an
unlisted size of a known family the family's usual depth (warned too).

The tokenizer is a byte-level BPE trained in-process on a short built-in corpus, so
every string tokenizes (byte fallback) and nothing is fetched.

Isolation: the seeded torch module is built once per repo id and cached, but every
:func:`tiny_model` / :func:`tiny_module` call returns a deep copy (and a copy of the
tokenizer), so a script that edits weights, registers hooks or changes
``tokenizer.padding_side`` cannot influence the next run.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAMILIES",
    "ModelSpec",
    "TinyModelWarning",
    "build_tokenizer",
    "model_spec",
    "repo_id_of",
    "tiny_model",
    "tiny_module",
    "tiny_tokenizer",
    "decoder_layers",
    "WRAPPERS",
]

#: Wrapper names :func:`tiny_model` accepts.
WRAPPERS = ("LanguageModel", "TransformersModel", "NNsight", "StandardizedTransformer")

HIDDEN = 64
HEAD_DIM = HIDDEN // 4  # 4 attention heads
VOCAB = 512
MAX_POSITIONS = 512


class TinyModelWarning(UserWarning):
    """A repo id was mapped onto an approximation (unknown family or layer count)."""


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------

_CORPUS = """\
The Eiffel Tower is in the city of Paris. The Colosseum is in the city of Rome.
The capital of France is Paris, and the capital of Germany is Berlin.
The capital of Italy is Rome. The capital of Spain is Madrid. The capital of Japan is Tokyo.
Madison Square Garden is located in New York City. The Space Needle is in Seattle.
Michael Jordan played the sport of basketball. Lionel Messi plays the sport of soccer.
When Mary and John went to the store, John gave a drink to Mary.
When Tom and James went to the park, James gave a ball to Tom.
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step.
Once upon a time there was a little girl who lived in a village near the forest.
She was kind and clever, and everyone who knew her loved her very much.
The cat sat on the mat. The dog slept by the fire. The bird sang in the tree.
Q: What is the opposite of hot? A: cold. Q: What is the opposite of up? A: down.
Q: right A: left. Q: maximum A: minimum. Q: old A: new. Q: inside A: outside.
English: hello French: bonjour. English: cat French: chat. English: dog French: chien.
Water boils at one hundred degrees. Ice melts when it gets warm. The sun rises in the east.
The president of the United States lives in the White House in Washington.
Scientists study the structure of language models, their layers, neurons and attention heads.
Interpretability research asks which features a model represents and how it computes its answer.
One, two, three, four, five, six, seven, eight, nine, ten. 1 2 3 4 5 6 7 8 9 10 100 2024.
Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday are the days of the week.
January, February, March, April, May, June, July, August, September, October, November, December.
Red, orange, yellow, green, blue and purple are colors of the rainbow.
The patient was given medicine by the doctor, and the nurse wrote a report.
"I think, therefore I am," said the philosopher. It was the best of times, it was the worst of times.
def forward(self, x): return self.layer(x)  # Python code, with symbols: ()[]{}<>=+-*/%!?&|^~@#$
"""

EOS = "<|endoftext|>"


@functools.lru_cache(maxsize=1)
def build_tokenizer():
    """A byte-level BPE tokenizer (512 tokens) trained in-process; pad = eos, left padding.

    Cached: the same object is returned on every call. Use :func:`tiny_tokenizer` for
    a private copy that a script may mutate.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = _CORPUS.splitlines()
    tokenizer.train_from_iterator(lines * 3, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=EOS,
        unk_token=EOS,
        padding_side="left",
        # as GPT-2's and Llama's own tokenizers: transformers 4's default adds
        # token_type_ids, which GPT-2 then adds to its embeddings (transformers 5's has none)
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.model_max_length = MAX_POSITIONS
    return fast


def tiny_tokenizer():
    """A private copy of :func:`build_tokenizer` (safe to mutate)."""
    return copy.deepcopy(build_tokenizer())


# ---------------------------------------------------------------------------
# Families and layer counts
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """What a repo id maps to."""

    repo_id: str
    key: str  # normalised id: equal keys give identical weights
    family: str  # one of FAMILIES
    n_layers: int
    approximate: bool  # True when family or depth was guessed
    note: str = ""


#: family -> (the transformers class a checkpoint of it loads as, its decoder layers, its
#: output head); the paths are those of transformers' own classes.
FAMILIES = {
    "gpt2": ("GPT2LMHeadModel", "transformer.h", "lm_head"),
    "llama": ("LlamaForCausalLM", "model.layers", "lm_head"),
    "gptj": ("GPTJForCausalLM", "transformer.h", "lm_head"),
    "gpt_neox": ("GPTNeoXForCausalLM", "gpt_neox.layers", "lm_head"),  # embed_out before transformers 5
    "gemma": ("GemmaForCausalLM", "model.layers", "lm_head"),
    "gemma2": ("Gemma2ForCausalLM", "model.layers", "lm_head"),
    "gemma3": ("Gemma3ForCausalLM", "model.layers", "lm_head"),
    "qwen2": ("Qwen2ForCausalLM", "model.layers", "lm_head"),
    "qwen3": ("Qwen3ForCausalLM", "model.layers", "lm_head"),
    "mistral": ("MistralForCausalLM", "model.layers", "lm_head"),
    "mixtral": ("MixtralForCausalLM", "model.layers", "lm_head"),
}

_GPT2_LAYERS = {
    "gpt2": 12,
    "gpt2-medium": 24,
    "gpt2-large": 36,
    "gpt2-xl": 48,
    "distilgpt2": 6,
}

# Exact Llama checkpoints (lower-cased, org prefix removed, "-instruct"/"-hf" stripped).
_LLAMA_LAYERS = {
    "llama-3.1-8b": 32,
    "meta-llama-3.1-8b": 32,
    "meta-llama-3-8b": 32,
    "llama-3.1-70b": 80,
    "meta-llama-3.1-70b": 80,
    "meta-llama-3-70b": 80,
    "llama-3.3-70b": 80,
    "llama-3.1-405b": 126,
    "meta-llama-3.1-405b": 126,
    "llama-3.2-1b": 16,
    "llama-3.2-3b": 28,
    "llama-2-7b": 32,
    "llama-2-13b": 40,
    "llama-2-70b": 80,
}

# Parameter-count suffix -> a plausible Llama depth, for llama-named ids not listed.
_SIZE_LAYERS = [
    ("405b", 126),
    ("70b", 80),
    ("65b", 80),
    ("34b", 48),
    ("33b", 60),
    ("30b", 60),
    ("13b", 40),
    ("8b", 32),
    ("7b", 32),
    ("3b", 28),
    ("1b", 16),
]

# The other families: the id's lower-cased text -> family (first match wins), then the
# size written in the id -> the checkpoint's num_hidden_layers (config.json), and the
# depth used when the size is not listed.
_FAMILY_PATTERNS = tuple((re.compile(pattern), family) for pattern, family in (
    (r"gpt-?j", "gptj"),
    (r"pythia|gpt[-_]neox", "gpt_neox"),
    (r"gemma-?3(?:[-_]|$)", "gemma3"),  # not gemma-3b...
    (r"gemma-?2(?:[-_]|$)", "gemma2"),  # gemma-2-9b, not gemma-2b (Gemma 1)
    (r"gemma", "gemma"),
    (r"qwen3", "qwen3"),
    (r"qwen|qwq", "qwen2"),
    (r"mixtral", "mixtral"),
    (r"mistral|ministral|mathstral|codestral|devstral|magistral", "mistral"),
))
_FAMILY_LAYERS: dict[str, tuple[dict[str, int], int]] = {
    "gptj": ({"6b": 28}, 28),
    # Pythia (-deduped alike) and GPT-NeoX-20B
    "gpt_neox": ({"14m": 6, "31m": 6, "70m": 6, "160m": 12, "410m": 24, "1b": 16, "1.4b": 24,
                  "2.8b": 32, "6.9b": 32, "12b": 36, "20b": 44}, 32),
    "gemma": ({"2b": 18, "7b": 28}, 28),
    "gemma2": ({"2b": 26, "9b": 42, "27b": 46}, 42),
    "gemma3": ({"270m": 18, "1b": 26, "4b": 34, "12b": 48, "27b": 62}, 34),
    # Qwen2, Qwen2.5, QwQ and the DeepSeek-R1 distillations into Qwen
    "qwen2": ({"0.5b": 24, "1.5b": 28, "3b": 36, "7b": 28, "14b": 48, "32b": 64, "72b": 80}, 28),
    "qwen3": ({"0.6b": 28, "1.7b": 28, "4b": 36, "8b": 36, "14b": 40, "32b": 64}, 36),
    "mistral": ({"7b": 32, "8b": 36, "12b": 40, "24b": 40}, 32),
    "mixtral": ({"8x7b": 32, "8x22b": 56}, 32),
}
_SIZE = re.compile(r"(?<![a-z0-9.])(\d+x\d+b|\d+(?:\.\d+)?[bm])(?![a-z0-9])")


def _stable_seed(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


def _family_of(lowered: str) -> str | None:
    for pattern, family in _FAMILY_PATTERNS:
        if pattern.search(lowered):
            return family
    return None


def _family_spec(repo_id: str, lowered: str, family: str) -> ModelSpec:
    """A spec of ``family`` with the layer count of the size written in the id."""
    sizes, default = _FAMILY_LAYERS[family]
    written = _SIZE.findall(lowered.split("/")[-1])
    for size in written:
        if size in sizes:
            return ModelSpec(repo_id, lowered, family, sizes[size], False)
    return ModelSpec(
        repo_id, lowered, family, default, True,
        f"unknown {family} checkpoint {repo_id!r}: using {default} layers",
    )


def model_spec(repo_id: str) -> ModelSpec:
    """Map a repo id to a family and a layer count (see the module docstring)."""
    if not isinstance(repo_id, str) or not repo_id.strip():
        raise TypeError(f"a model repo id must be a non-empty string, got {repo_id!r}")
    name = repo_id.strip()
    lowered = name.lower()
    base = lowered.split("/")[-1]

    if lowered.startswith("openai-community/") or "/" not in lowered:
        if base in _GPT2_LAYERS:
            return ModelSpec(repo_id, base, "gpt2", _GPT2_LAYERS[base], False)

    if "llama" in lowered:
        stem = re.sub(r"-(instruct|hf|chat-hf|chat)$", "", base)
        if stem in _LLAMA_LAYERS:
            return ModelSpec(repo_id, lowered, "llama", _LLAMA_LAYERS[stem], False)
        for size, layers in _SIZE_LAYERS:
            if re.search(rf"(?<![0-9.]){re.escape(size)}\b", stem):
                return ModelSpec(
                    repo_id, lowered, "llama", layers, True,
                    f"layer count of {repo_id!r} guessed as {layers} from its size",
                )
        return ModelSpec(
            repo_id, lowered, "llama", 32, True,
            f"unknown Llama checkpoint {repo_id!r}: using 32 layers",
        )

    family = _family_of(lowered)
    if family is not None:
        return _family_spec(repo_id, lowered, family)

    return ModelSpec(
        repo_id, lowered, "gpt2", 12, True,
        f"unknown model {repo_id!r}: using a GPT-2 family model with 12 layers",
    )


# ---------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------

# torch module -> the repo id it stands in for (for request records and reports).
_REPO_IDS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def _config(spec: ModelSpec):
    """The family's transformers config, at HIDDEN width with 4 heads (and the family's
    own layout: grouped-query heads, rotary fraction, sliding windows, experts)."""
    import transformers

    tokenizer = build_tokenizer()
    special = tokenizer.eos_token_id
    common = dict(vocab_size=len(tokenizer), bos_token_id=special, eos_token_id=special, pad_token_id=special)
    if spec.family == "gpt2":
        return transformers.GPT2Config(n_positions=MAX_POSITIONS, n_embd=HIDDEN, n_layer=spec.n_layers,
                                       n_head=4, n_inner=4 * HIDDEN, **common)
    if spec.family == "gptj":  # rotary on part of each head (64 of 256 in GPT-J-6B)
        return transformers.GPTJConfig(n_positions=MAX_POSITIONS, n_embd=HIDDEN, n_layer=spec.n_layers,
                                       n_head=4, rotary_dim=HEAD_DIM // 4, **common)
    if spec.family == "gpt_neox":  # Pythia: rotary on a quarter of each head
        return transformers.GPTNeoXConfig(max_position_embeddings=MAX_POSITIONS, hidden_size=HIDDEN,
                                          num_hidden_layers=spec.n_layers, num_attention_heads=4,
                                          intermediate_size=4 * HIDDEN, rotary_pct=0.25, **common)
    decoder = dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=spec.n_layers,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS, **common)
    if spec.family == "llama":
        return transformers.LlamaConfig(**decoder)
    if spec.family == "qwen2":
        return transformers.Qwen2Config(**decoder)
    # the families below set head_dim on their own (256 or 128 by default): the width's
    decoder["head_dim"] = HEAD_DIM
    configs = {
        "gemma": lambda: transformers.GemmaConfig(**decoder),
        "gemma2": lambda: transformers.Gemma2Config(sliding_window=4096, **decoder),
        "gemma3": lambda: transformers.Gemma3TextConfig(sliding_window=512, **decoder),
        "qwen3": lambda: transformers.Qwen3Config(**decoder),
        "mistral": lambda: transformers.MistralConfig(**decoder),
        "mixtral": lambda: transformers.MixtralConfig(num_local_experts=8, num_experts_per_tok=2, **decoder),
    }
    return configs[spec.family]()


@functools.lru_cache(maxsize=None)
def _canonical_module(key: str, family: str, n_layers: int):
    """Build (once per key) the seeded fp32 module; never handed out directly."""
    import torch
    import transformers

    spec = ModelSpec(key, key, family, n_layers, False)
    config = _config(spec)
    cls = getattr(transformers, FAMILIES[family][0])
    # fork_rng: building a model must not move the caller's global RNG, or a cached
    # build and a fresh one would leave the script's random stream in different places.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_stable_seed(key))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = cls(config)
    module = module.to(torch.float32).eval()
    module.requires_grad_(False)
    return module


def tiny_module(repo_id: str, *, warn: bool = True):
    """A fresh deep copy of the seeded tiny torch model for ``repo_id``."""
    spec = model_spec(repo_id)
    if spec.approximate and warn:
        warnings.warn(f"ndif-opt tiny model: {spec.note}", TinyModelWarning, stacklevel=3)
    module = copy.deepcopy(_canonical_module(spec.key, spec.family, spec.n_layers))
    module.eval()
    _REPO_IDS[module] = repo_id
    return module


def repo_id_of(model: Any) -> str | None:
    """The repo id a tiny model (wrapper or torch module) stands in for, if known."""
    module = getattr(model, "_module", model)
    try:
        return _REPO_IDS.get(module)
    except TypeError:
        return None


def decoder_layers(module: Any) -> list:
    """The decoder layers of a torch module of one of :data:`FAMILIES` (empty if none found)."""
    import torch

    for path in ("transformer.h", "model.layers", "gpt_neox.layers", "model.decoder.layers"):
        node = module
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if isinstance(node, torch.nn.ModuleList):
            return list(node)
    # Fallback: the longest ModuleList in the tree.
    best: list = []
    for sub in module.modules():
        if isinstance(sub, torch.nn.ModuleList) and len(sub) > len(best):
            best = list(sub)
    return best


def _real_class(wrapper: str):
    if wrapper == "LanguageModel":
        from nnsight.modeling.language import LanguageModel

        return LanguageModel
    if wrapper == "TransformersModel":
        from nnsight.modeling.transformers import TransformersModel

        return TransformersModel
    if wrapper == "NNsight":
        from nnsight.modeling.base import NNsight

        return NNsight
    raise ValueError(f"unknown wrapper {wrapper!r}; expected one of {WRAPPERS}")


def tiny_model(repo_id: str, *, wrapper: str = "LanguageModel", **kwargs: Any):
    """An nnsight wrapper around a tiny seeded model of ``repo_id``'s family and depth.

    ``wrapper`` is ``"LanguageModel"`` | ``"TransformersModel"`` | ``"NNsight"`` |
    ``"StandardizedTransformer"`` (nnterp's, or ``LanguageModel`` when nnterp is not
    installed). Loading kwargs a script passes (``device_map``, ``dispatch``,
    ``torch_dtype``, ...) are accepted and ignored: the model is always fp32 on CPU.
    Every call returns a new wrapper over a new deep copy of the weights.
    """
    del kwargs  # loading options do not apply to a tiny in-memory model
    if wrapper not in WRAPPERS:
        raise ValueError(f"unknown wrapper {wrapper!r}; expected one of {WRAPPERS}")
    module = tiny_module(repo_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        if wrapper == "StandardizedTransformer":
            model = _standardized(module)
            if model is not None:
                return model
            wrapper = "LanguageModel"
        cls = _real_class(wrapper)
        if wrapper == "NNsight":
            return cls(module)
        if wrapper == "TransformersModel":
            return cls(module, tokenizer=tiny_tokenizer(), task="text-generation")
        return cls(module, tokenizer=tiny_tokenizer())


def _standardized(module: Any):
    """nnterp's StandardizedTransformer over ``module``, or None if unavailable."""
    try:
        from nnterp import StandardizedTransformer  # type: ignore
    except Exception:
        return None
    try:
        return StandardizedTransformer(module, tokenizer=tiny_tokenizer())
    except Exception as error:  # pragma: no cover - depends on nnterp's version
        warnings.warn(
            f"ndif-opt tiny model: nnterp.StandardizedTransformer could not wrap a "
            f"tiny model ({error}); using LanguageModel",
            TinyModelWarning,
            stacklevel=3,
        )
        return None


# a real model's sizes a script may write out as numbers, and the tiny config's attribute
# (transformers maps it for every family) that holds the tiny model's
_WRITTEN_SIZES = (("hidden_size", "hidden_size", "width"), ("vocab_size", "vocab_size", "vocabulary"),
                  ("n_heads", "num_attention_heads", "number of heads"))


def sizes_the_error_names(error: str, models: list[Any]) -> list[str]:
    """Why a run's ``error`` may be the tiny models', not the script's: it names a size of a
    real model (`768`, GPT-2's width) that the tiny model built in its place does not have
    (64), which a script that writes the size as a number meets and the real model does not."""
    from ndif_opt.cost.model_registry import dims_for

    numbers = set(re.findall(r"(?<![\w.])\d+(?![\w.])", error))
    found = []
    for model in models:
        repo, config = repo_id_of(model), getattr(getattr(model, "_module", model), "config", None)
        real = dims_for(repo) if repo else None
        if real is None or not real.known or config is None:
            continue
        for field, attribute, what in _WRITTEN_SIZES:
            size, tiny = getattr(real, field), getattr(config, attribute, None)
            if str(size) in numbers and tiny is not None and tiny != size:
                found.append(f"the error names {size}, the {what} of {repo}; the tiny model verify runs in its "
                             f"place has {tiny}: a size the script writes as a number does not fit it (read it "
                             f"from `model.config.{attribute}` and verify can run the script)")
    return found
