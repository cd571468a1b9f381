"""Tiny, seeded stand-ins for the models NDIF hosts — no hub, no weights downloaded.

A script names a checkpoint (``LanguageModel("meta-llama/Llama-3.1-70B")``); the
execution check gives it a model of the same *family* (module tree, attribute paths
such as ``model.layers[i]`` or ``transformer.h[i]``) and the *real* layer count, but
64 hidden dimensions, random weights seeded from the repo id, fp32, ``eval()`` mode.
Layer loops, ``.skip()`` over layer ranges and per-layer saves therefore behave as on
the real model, only thousands of times cheaper.

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
    family: str  # "gpt2" | "llama"
    n_layers: int
    approximate: bool  # True when family or depth was guessed
    note: str = ""


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


def _stable_seed(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


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
    tokenizer = build_tokenizer()
    vocab = len(tokenizer)
    special = tokenizer.eos_token_id
    if spec.family == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=vocab,
            n_positions=MAX_POSITIONS,
            n_embd=HIDDEN,
            n_layer=spec.n_layers,
            n_head=4,
            n_inner=4 * HIDDEN,
            bos_token_id=special,
            eos_token_id=special,
            pad_token_id=special,
        )
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=special,
        eos_token_id=special,
        pad_token_id=special,
    )


@functools.lru_cache(maxsize=None)
def _canonical_module(key: str, family: str, n_layers: int):
    """Build (once per key) the seeded fp32 module; never handed out directly."""
    import torch

    spec = ModelSpec(key, key, family, n_layers, False)
    config = _config(spec)
    if family == "gpt2":
        from transformers import GPT2LMHeadModel as cls
    else:
        from transformers import LlamaForCausalLM as cls
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
    """The decoder layers of a GPT-2 / Llama style torch module (empty if none found)."""
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
