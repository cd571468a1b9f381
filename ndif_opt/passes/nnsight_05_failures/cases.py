"""nnsight-05-failures' cases, as data: checked by tests/passes/test_cases.py, shown in docs/passes.md."""

from __future__ import annotations

from ndif_opt.passes.base import Case


CASES = (
    Case(
        name="a name read after the block is saved where the block binds it",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    hidden = model.transformer.h[5].output[0, -1] * 2
    n_tokens = model.lm_head.output.shape[1]
print(hidden.norm(), n_tokens)
""",
        after="""\
from nnsight import LanguageModel
import nnsight

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    hidden = (model.transformer.h[5].output[0, -1] * 2).save()
    n_tokens = nnsight.save(model.lm_head.output.shape[1])
print(hidden.norm(), n_tokens)
""",
    ),
    Case(
        name="a name that held a value before the block (with --unsafe-fixes)",
        unsafe_fixes=True,
        before="""\
import nnsight
from nnsight import LanguageModel


def top_token(model, prompt):
    token = -1
    with model.trace(prompt, remote=True):
        token = model.lm_head.output[0, -1].argmax().item()
    return token


model = LanguageModel("meta-llama/Llama-3.1-8B")
print(top_token(model, "The Eiffel Tower is in"))
""",
        after="""\
import nnsight
from nnsight import LanguageModel


def top_token(model, prompt):
    token = -1
    with model.trace(prompt, remote=True):
        token = nnsight.save(model.lm_head.output[0, -1].argmax().item())
    return token


model = LanguageModel("meta-llama/Llama-3.1-8B")
print(top_token(model, "The Eiffel Tower is in"))
""",
    ),
    Case(
        name="a name that held a value before the block",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
pattern = "unknown"
with model.trace("hello", remote=True):
    hidden = model.transformer.h[0].output.save()
    pattern = "transformer.h"
print(pattern, hidden.shape)
""",
        reason="still holds the value it had before the block",
    ),
    Case(
        name="the cache a tracer's .cache() returns is saved by nnsight",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True) as tracer:
    cache = tracer.cache(modules=[model.transformer.h[0]])
print(cache["model.transformer.h.0"].output.shape)
""",
    ),
    Case(
        name="a loop variable of the block",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    norms = list().save()
    for layer in model.transformer.h:
        norms.append(layer.output.norm())
print(len(norms), layer)
""",
        reason="save it where the block has its final value",
    ),
    Case(
        name="`return` in the body of a trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def last_logits(prompt):
    with model.trace(prompt, remote=True):
        return model.lm_head.output[0, -1].save()
""",
        reason="SyntaxError: 'return' outside function",
    ),
    Case(
        name="a body that starts with `try:`",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    try:
        hidden = model.transformer.h[0].output.save()
    except AttributeError:
        hidden = model.model.layers[0].output.save()
""",
        reason="ValueError: A traced `with` block cannot start with `try:`",
    ),
    Case(
        name="the LM head read before a layer: the lines are moved into the model's order",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output[0, -1].save()
    hidden = model.model.layers[16].output[0, -1].save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("The Eiffel Tower is in", remote=True):
    hidden = model.model.layers[16].output[0, -1].save()
    logits = model.lm_head.output[0, -1].save()
""",
    ),
    Case(
        name="the LM head read before a layer, by a line that needs the logits",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output[0, -1].save()
    hidden = (model.model.layers[16].output[0, -1] * logits.softmax(-1).max()).save()
""",
        reason="OutOfOrderError: 'model.model.layers.16.output.i0' was requested but the model already ran past it",
    ),
    Case(
        name="the layers read backwards",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
with model.trace("The Eiffel Tower is in", remote=True):
    hiddens = [layer.output[0, -1].save() for layer in reversed(model.model.layers)]
""",
        reason="OutOfOrderError: 'model.model.layers.30.output.i0'",
    ),
    Case(
        name="a layer's output read before its input",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    updates = list().save()
    for layer in model.transformer.h:
        updates.append((layer.output - layer.input).norm())
""",
        reason="OutOfOrderError: 'model.transformer.h.0.input.i0'",
    ),
    Case(
        name="an invoke reads what an earlier invoke binds before it asks for a module",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace(remote=True) as tracer:
    with tracer.invoke("Paris is the capital of France"):
        source = model.transformer.h[2].output[:, -1, :]
    with tracer.invoke("Berlin is the capital of Germany"):
        model.transformer.h[2].output[:, -1, :] = source
        top = model.lm_head.output[0, -1].argmax().save()
print(top)
""",
        reason="NameError: name 'source' is not defined",
    ),
    Case(
        name="reads in the model's order, reads in other invokes, saved names",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
layers = model.model.layers
with model.session(remote=True):
    with model.trace() as tracer:
        with tracer.invoke("The Eiffel Tower is in"):
            logits = model.lm_head.output[0, -1]
        with tracer.invoke("The Colosseum is in"):
            first = model.model.embed_tokens.output[0, -1]
            for layer in layers:
                norm = layer.input.norm() + layer.self_attn.output[0].norm() + layer.mlp.output.norm()
            last = layers[-1].output[0, -1]
            final = model.model.norm.output
            other = model.lm_head.output[0, -1]
    difference = (logits - other).norm().save()
print(difference)
""",
    ),
    Case(
        name="`tracer.stop()` after the invokes of a trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace(remote=True) as tracer:
    with tracer.invoke("The Eiffel Tower is in"):
        hidden = model.transformer.h[3].output[0, -1].save()
    tracer.stop()
print(hidden.norm())
""",
        reason="move it into the last invoke",
    ),
    Case(
        name="`tracer.stop()` inside an invoke",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace(remote=True) as tracer:
    with tracer.invoke("The Eiffel Tower is in"):
        hidden = model.transformer.h[3].output[0, -1].save()
        tracer.stop()
print(hidden.norm())
""",
    ),
    Case(
        name="code after a loop over every generation step",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", max_new_tokens=5, remote=True) as tracer:
    tops = list().save()
    with tracer.all():
        tops.append(model.lm_head.output[0, -1].argmax())
    tokens = tracer.result.save()
print(tops, tokens)
""",
        reason="bound the loop (`tracer.iter[0:N]`",
    ),
    Case(
        name="code after `with tracer.iter[k:]` (a slice with no end)",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", max_new_tokens=5, remote=True) as tracer:
    tops = list().save()
    with tracer.iter[1:]:
        tops.append(model.lm_head.output[0, -1].argmax())
    tokens = tracer.result.save()
print(tops, tokens)
""",
        reason="comes after `with tracer.iter[1:]`",
    ),
    Case(
        name="a bounded step loop, and code after it",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The weather is", max_new_tokens=5, remote=True) as tracer:
    tops = list().save()
    for step in tracer.iter[0:5]:
        tops.append(model.lm_head.output[0, -1].argmax())
    tokens = tracer.result.save()
print(tops, tokens)
""",
    ),
    Case(
        name="remote= on a trace inside a remote session is dropped",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    for prompt in ["The cat", "The dog"]:
        with model.trace(prompt, remote=True):  # copied from a lone trace
            tops.append(model.lm_head.output[0, -1].argmax())
print(tops)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    tops = list().save()
    for prompt in ["The cat", "The dog"]:
        with model.trace(prompt):  # copied from a lone trace
            tops.append(model.lm_head.output[0, -1].argmax())
print(tops)
""",
    ),
    Case(
        name="remote= of another flag inside a session is only reported",
        before="""\
import sys

from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
REMOTE, INNER = "--local" not in sys.argv, "--inner" in sys.argv
with model.session(remote=REMOTE):
    with model.trace("The cat", remote=INNER):
        top = model.lm_head.output[0, -1].argmax().save()
print(top)
""",
        reason="`INNER` may differ from the session's `REMOTE`",
    ),
    Case(
        name="a new tensor saved through an in-place method is sent back",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The cat sat", remote=True):
    total = torch.zeros(3)
    total.add_(model.lm_head.output[0, -1, :3]).save()
print(total)
""",
    ),
    Case(
        name="a list of saved gradients made in the backward block is not sent back",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The cat sat", remote=True):
    acts = [model.transformer.h[layer].output for layer in range(3)]
    metric = model.lm_head.output[0, -1, 5]
    with metric.backward():
        grads = [a.grad.save() for a in reversed(acts)][::-1]
print([float(g.abs().sum()) for g in grads])
""",
        after="""\
from nnsight import LanguageModel
import nnsight

model = LanguageModel("openai-community/gpt2")
with model.trace("The cat sat", remote=True):
    acts = [model.transformer.h[layer].output for layer in range(3)]
    metric = model.lm_head.output[0, -1, 5]
    with metric.backward():
        grads = nnsight.save([a.grad.save() for a in reversed(acts)][::-1])
print([float(g.abs().sum()) for g in grads])
""",
    ),
    Case(
        name="a list made in the block and filled with saved values is not sent back",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The cat sat", remote=True):
    tops = []
    for layer in range(3):
        tops.append(model.transformer.h[layer].output[0, -1].argmax().save())
print([t.item() for t in tops])
""",
        after="""\
from nnsight import LanguageModel
import nnsight

model = LanguageModel("openai-community/gpt2")
with model.trace("The cat sat", remote=True):
    tops = nnsight.save([])
    for layer in range(3):
        tops.append(model.transformer.h[layer].output[0, -1].argmax().save())
print([t.item() for t in tops])
""",
    ),
    Case(
        name="a layer named by a module constant is read in the model's order",
        before="""\
from nnsight import LanguageModel

STOP = 3
model = LanguageModel("openai-community/gpt2")
with model.trace("The quick brown fox", remote=True):
    late = model.transformer.h[STOP].mlp.input.save()
    early = model.transformer.h[0].attn.input.save()
print(late.shape, early.shape)
""",
        after="""\
from nnsight import LanguageModel

STOP = 3
model = LanguageModel("openai-community/gpt2")
with model.trace("The quick brown fox", remote=True):
    early = model.transformer.h[0].attn.input.save()
    late = model.transformer.h[STOP].mlp.input.save()
print(late.shape, early.shape)
""",
    ),
)
