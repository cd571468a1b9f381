"""invoke-batching's cases, as data: checked by tests/passes/test_cases.py, shown in docs/passes.md."""

from __future__ import annotations

from ndif_opt.passes.base import Case


CASES = (
    Case(
        name="prompt loop, reported without --unsafe-fixes",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The cat sat on the", "Hello, my name is"]
with model.session(remote=True):
    top = dict().save()
    for prompt in PROMPTS:
        with model.trace(prompt):
            logits = model.lm_head.output
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
        reason="3 forward passes, one per iteration; as invokes of one trace it would run 1",
    ),
    Case(
        name="prompt loop",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The cat sat on the", "Hello, my name is"]
with model.session(remote=True):
    top = dict().save()
    # one prediction per prompt
    for prompt in PROMPTS:
        with model.trace(prompt):
            logits = model.lm_head.output
        # the most likely next token
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The cat sat on the", "Hello, my name is"]
with model.session(remote=True):
    top = dict().save()
    # one prediction per prompt
    with model.trace() as tracer:
        for prompt in PROMPTS:
            with tracer.invoke(prompt):
                logits = model.lm_head.output
                # the most likely next token
                top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
    ),
    Case(
        name="steering sweep, with code before the trace",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.session(remote=True):
    with model.trace("I love it"):
        steer = model.model.layers[8].output.mean(dim=1)
    scores = list().save()
    for alpha in [0.0, 2.0, 4.0]:
        scale = alpha / 2
        with model.trace("I think this movie is"):
            model.model.layers[8].output = model.model.layers[8].output + scale * steer
            scores.append(model.lm_head.output[0, -1].softmax(dim=-1).max().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.session(remote=True):
    with model.trace("I love it"):
        steer = model.model.layers[8].output.mean(dim=1)
    scores = list().save()
    with model.trace() as tracer:
        for alpha in [0.0, 2.0, 4.0]:
            scale = alpha / 2
            with tracer.invoke("I think this movie is"):
                model.model.layers[8].output = model.model.layers[8].output + scale * steer
                scores.append(model.lm_head.output[0, -1].softmax(dim=-1).max().item())
""",
    ),
    Case(
        name="a prompt built and tokenized in the loop",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
NAMES = ["Mary", "John", "Christopher"]
with model.session(remote=True):
    tops = list().save()
    for name in NAMES:
        prompt = f"{name} went to the store and bought"
        ids = model.tokenizer(prompt, return_tensors="pt")["input_ids"]
        weight = len(name)
        # one trace per name
        with model.trace(ids):
            logits = model.lm_head.output
        tops.append((weight, logits[0, -1].argmax().item()))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
NAMES = ["Mary", "John", "Christopher"]
with model.session(remote=True):
    tops = list().save()
    with model.trace() as tracer:
        for name in NAMES:
            prompt = f"{name} went to the store and bought"
            ids = model.tokenizer(prompt, return_tensors="pt")["input_ids"]
            weight = len(name)
            # one trace per name
            with tracer.invoke(ids):
                logits = model.lm_head.output
                tops.append((weight, logits[0, -1].argmax().item()))
""",
    ),
    Case(
        name="an input the loop feeds",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    prompts = ["The weather today is"]
    tops = list().save()
    for step in range(3):
        with model.trace(prompts[-1]):
            tops.append(model.lm_head.output[0, -1].argmax().item())
        prompts.append(prompts[0] + " very" * (step + 1))
""",
        reason="every iteration's input is computed before any invoke runs",
    ),
    Case(
        name="a layer list from a config dict",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "probe": {"mid": 6}}
layers = CONFIG["layers"]
with model.session(remote=True):
    norms = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            norms.append(layers[CONFIG["probe"]["mid"]].output[0, -1].norm().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "probe": {"mid": 6}}
layers = CONFIG["layers"]
with model.session(remote=True):
    norms = list().save()
    with model.trace() as tracer:
        for prompt in ["The cat sat on the", "Hello"]:
            with tracer.invoke(prompt):
                norms.append(layers[CONFIG["probe"]["mid"]].output[0, -1].norm().item())
""",
    ),
    Case(
        name="sizes an invoke reads of its own rows",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "layer": 6}
layers = CONFIG["layers"]
with model.session(remote=True):
    widths = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            hidden = layers[CONFIG["layer"]].output
            width = hidden.shape[-1]
            widths.append((width, hidden[0, -1].norm().item()))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"layers": model.transformer.h, "layer": 6}
layers = CONFIG["layers"]
with model.session(remote=True):
    widths = list().save()
    with model.trace() as tracer:
        for prompt in ["The cat sat on the", "Hello"]:
            with tracer.invoke(prompt):
                hidden = layers[CONFIG["layer"]].output
                width = hidden.shape[-1]
                widths.append((width, hidden[0, -1].norm().item()))
""",
    ),
    Case(
        name="the token count read under padding",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    lengths = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            lengths.append(model.transformer.h[3].output.shape[1])
""",
        reason="reads the token count `model.transformer.h[3].output.shape[1]`",
    ),
    Case(
        name="generations of full length read by their last tokens",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    answers = list().save()
    for prompt in ["The capital of France is", "Hi"]:
        with model.generate(prompt, max_new_tokens=4, min_new_tokens=4):
            answers.append(model.generator.output[0, -4:])
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    answers = list().save()
    with model.generate(max_new_tokens=4, min_new_tokens=4) as tracer:
        for prompt in ["The capital of France is", "Hi"]:
            with tracer.invoke(prompt):
                answers.append(model.generator.output[0, -4:])
""",
    ),
    Case(
        name="a generation that may stop early",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    answers = list().save()
    for prompt in ["The capital of France is", "Hi"]:
        with model.generate(prompt, max_new_tokens=4):
            answers.append(model.generator.output[0, -4:])
""",
        reason="a generation that stops early (end of sequence) is padded after it in a batch",
    ),
    Case(
        name="the inner loop of nested sweeps",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "Hello"]
with model.session(remote=True):
    res = dict().save()
    for layer in range(3):
        for prompt in PROMPTS:
            with model.trace(prompt):
                model.transformer.h[layer].output[:, -1] = 0
                top = model.lm_head.output[0, -1].argmax()
            res[(layer, prompt)] = top.item()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "Hello"]
with model.session(remote=True):
    res = dict().save()
    for layer in range(3):
        with model.trace() as tracer:
            for prompt in PROMPTS:
                with tracer.invoke(prompt):
                    model.transformer.h[layer].output[:, -1] = 0
                    top = model.lm_head.output[0, -1].argmax()
                    res[(layer, prompt)] = top.item()
""",
    ),
    Case(
        name="long loops run in chunks",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    for i in range(100):
        with model.trace(f"Number {i} is"):
            tops.append(model.lm_head.output[0, -1].argmax().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    _ndif_items = list(range(100))  # the inputs, listed once: one trace takes 32 at a time
    for _ndif_start in range(0, len(_ndif_items), 32):
        with model.trace() as tracer:
            for i in _ndif_items[_ndif_start : _ndif_start + 32]:
                with tracer.invoke(f"Number {i} is"):
                    tops.append(model.lm_head.output[0, -1].argmax().item())
""",
    ),
    Case(
        name="dependent iterations",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    carry = 0
    for prompt in ["a b", "c d", "e f"]:
        with model.trace(prompt):
            model.transformer.h[0].output[:, -1] += carry
            carry = model.transformer.h[0].output[:, -1].clone()
            tops.append(model.lm_head.output[0, -1].argmax().item())
""",
        reason="`carry` is read before the iteration sets it",
    ),
    Case(
        name="positive position index under padding",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    firsts = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            firsts.append(model.lm_head.output[0, 0].argmax().item())
""",
        reason="positive position indices are wrong under left padding",
    ),
    Case(
        # a tensor method of a module's value is the tensor's, not a call of the module:
        # `log_softmax(-1)` keeps the positions, and the sum over them sees the padding
        name="a reduction over positions of a module value's method",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    totals = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            lp = model.lm_head.output.log_softmax(-1)
            totals.append(lp[0].max(-1).values.sum().item())
""",
        reason="calls `.max()` on `lp[0]`, which has padded positions",
    ),
    Case(
        name="a whole activation saved under padding",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    hidden = list().save()
    for prompt in ["The cat sat on the", "Hello"]:
        with model.trace(prompt):
            hidden.append(model.transformer.h[3].output.mean(dim=1))
""",
        reason="has padded positions",
    ),
    Case(
        name="a name read after the loop",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            last = model.lm_head.output[0, -1].argmax().save()
print(last)
""",
        reason="`last` is read after the loop",
    ),
    Case(
        name="filled in layer order",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    seen = list().save()
    for layer in [5, 2]:
        with model.trace("hello world"):
            model.transformer.h[layer].output[:] = 0
            seen.append(model.transformer.h[layer].output[0, -1])
""",
        reason="which changes with the loop",
    ),
)
