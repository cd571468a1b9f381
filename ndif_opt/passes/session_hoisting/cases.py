"""session-hoisting's cases, as data: checked by tests/passes/test_cases.py, shown in docs/passes.md.

Which code becomes a session, here; what crosses its edge (failures, inputs, results, retries,
progress bars), in cases_edges.py. ``CASES`` holds both, in the docs' order.
"""

from __future__ import annotations

from ndif_opt.passes.base import Case
from ndif_opt.passes.session_hoisting.cases_edges import EDGE_CASES


CASES = (
    Case(
        name="a loop that calls a callback handed the model is named, not guessed",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def sweep(llm, prompts, measure):
    scores = []
    for prompt in prompts:
        scores.append(measure(llm, prompt))
    return scores


def top(llm, prompt):
    with llm.trace(prompt, remote=True):
        token = llm.lm_head.output[0, -1].argmax().item().save()
    return token


print(sweep(model, ["a b", "c d"], top))
""",
        reason="which requests `measure` sends is decided by the caller of `sweep` (a callback)",
    ),
    Case(
        name="nnsight code written as a string is named, not guessed",
        before="""\
import importlib.util
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CODE = (
    "def run(model, prompt):\\n"
    "    with model.trace(prompt, remote=True):\\n"
    "        return model.lm_head.output.save()\\n"
)
with open("generated.py", "w") as f:
    f.write(CODE)
spec = importlib.util.spec_from_file_location("generated", "generated.py")
""",
        reason="ndif-opt reads the code, not the code it writes",
    ),
    Case(
        name="a block opened through a name is named, not guessed",
        before="""\
from contextlib import nullcontext

from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def last_hidden(prompts, remote=True, open_context=True):
    context = model.trace(prompts, remote=remote) if open_context else nullcontext()
    with context:
        hidden = model.transformer.h[-1].output[:, -1].save()
    return hidden


for batch in (["a b", "c d"], ["e f"]):
    print(last_hidden(batch).shape)
""",
        reason="ndif-opt reads the nnsight blocks written in a `with` statement",
    ),
    Case(
        name="loop over layers",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
prompt = "The Eiffel Tower is in the city of"
# one hidden state per layer
hidden = []
for layer in range(32):
    with model.trace(prompt, remote=True):
        hidden.append(model.model.layers[layer].output[:, -1].save())
print(len(hidden))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
prompt = "The Eiffel Tower is in the city of"
with model.session(remote=True):
    # one hidden state per layer
    hidden = list().save()
    for layer in range(32):
        with model.trace(prompt):
            hidden.append(model.model.layers[layer].output[:, -1])
print(len(hidden))
""",
    ),
    Case(
        name="remote flag in a variable is kept",
        before="""\
from nnsight import LanguageModel

REMOTE = True
model = LanguageModel("openai-community/gpt2")
for prompt in ["a b", "c d"]:
    with model.trace(prompt, remote=REMOTE):
        out = model.lm_head.output.save()
""",
        after="""\
from nnsight import LanguageModel

REMOTE = True
model = LanguageModel("openai-community/gpt2")
with model.session(remote=REMOTE):
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            out = model.lm_head.output.save()
""",
    ),
    Case(
        name="remote flag as a parameter of a helper function",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def collect(prompts, remote=False):
    outs = []
    for prompt in prompts:
        with model.trace(prompt, remote=remote):
            outs.append(model.lm_head.output[0, -1].argmax().save())
    return outs


tops = collect(["a b", "c d"], remote=True)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def collect(prompts, remote=False):
    with model.session(remote=remote):
        outs = list().save()
        for prompt in prompts:
            with model.trace(prompt):
                outs.append(model.lm_head.output[0, -1].argmax())
    return outs


tops = collect(["a b", "c d"], remote=True)
""",
    ),
    Case(
        name="trace inside a helper function called from a loop",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


tops = []
for prompt in ["a b", "c d"]:
    tops.append(top_token(prompt))
print(tops)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt, remote=True):
    with model.trace(prompt, remote=remote):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


with model.session(remote=True):
    tops = list().save()
    for prompt in ["a b", "c d"]:
        tops.append(top_token(prompt, remote=False))
print(tops)
""",
    ),
    Case(
        name="helper that writes a file is not moved",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def run(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    with open("log.txt", "a") as f:
        f.write(prompt)
    return logits


for prompt in ["a b", "c d"]:
    run(prompt)
""",
        reason="calls `open`",
    ),
    Case(
        name="remote flag inside **kwargs",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
KW = {"remote": True}
for prompt in ["a b", "c d"]:
    with model.trace(prompt, **KW):
        out = model.lm_head.output.save()
""",
        reason="passes `remote=` inside `**kwargs`, which a session cannot take from it",
    ),
    Case(
        name="a loop over two models: a session runs one",
        before="""\
from nnsight import LanguageModel

small = LanguageModel("openai-community/gpt2")
big = LanguageModel("meta-llama/Llama-3.1-8B")
agree = []
for prompt in ["The weather today is", "My favourite food is"]:
    with small.trace(prompt, remote=True):
        a = small.lm_head.output[0, -1].argmax().save()
    with big.trace(prompt, remote=True):
        b = big.lm_head.output[0, -1].argmax().save()
    agree.append(small.tokenizer.decode(a) == big.tokenizer.decode(b))
""",
        reason="a session runs one model, and this loop sends requests to `small`",
    ),
    Case(
        name="consecutive remote traces merge",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("clean", remote=True):
    clean = model.transformer.h[3].output.save()
with model.trace("corrupt", remote=True):
    model.transformer.h[3].output[:] = clean
    patched = model.lm_head.output.save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("clean"):
        clean = model.transformer.h[3].output.save()
    with model.trace("corrupt"):
        model.transformer.h[3].output[:] = clean
        patched = model.lm_head.output.save()
""",
    ),
    Case(
        name="client values between the traces come back saved, parenthesized",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("clean", remote=True):
    clean = model.transformer.h[3].output.save()
scale = 3
rows = 0, -1
with model.trace("corrupt", remote=True):
    model.transformer.h[3].output[:, -1] = clean[:, -1] * scale
    patched = model.lm_head.output[:, rows[1]].save()
print(patched.shape, scale, rows)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("clean"):
        clean = model.transformer.h[3].output.save()
    scale = (3).save()
    rows = (0, -1).save()
    with model.trace("corrupt"):
        model.transformer.h[3].output[:, -1] = clean[:, -1] * scale
        patched = model.lm_head.output[:, rows[1]].save()
print(patched.shape, scale, rows)
""",
    ),
    Case(
        name="client effects after the traces: the loop is split",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    for prompt in ["a", "b"]:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
        f.write(str(out.shape))
        f.flush()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    with model.session(remote=True):
        _ndif_rows = list().save()  # one record per iteration, replayed after the session
        for prompt in ["a", "b"]:
            with model.trace(prompt):
                out = model.lm_head.output
            _ndif_rows.append(out.shape)
    for out_shape in _ndif_rows:
        f.write(str(out_shape))
        f.flush()
""",
    ),
    Case(
        name="client effect between traces",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    for prompt in ["a", "b"]:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
        f.write(str(out.shape))
        with model.trace(prompt, remote=True):
            out2 = model.lm_head.output.save()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("out.txt", "w") as f:
    with model.session(remote=True):
        _ndif_rows = list().save()  # one record per iteration, replayed after the session
        for prompt in ["a", "b"]:
            with model.trace(prompt):
                out = model.lm_head.output
            _ndif_rows.append(out.shape)
            with model.trace(prompt):
                out2 = model.lm_head.output.save()
    for out_shape in _ndif_rows:
        f.write(str(out_shape))
""",
    ),
    Case(
        name="client value read after the loop",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    with model.trace(prompt, remote=True):
        out = model.lm_head.output.save()
    total = out.sum()
print(total)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    _ndif_log = dict().save()  # the values the replay after the session reads, by name
    for prompt in ["a", "b"]:
        with model.trace(prompt):
            out = model.lm_head.output.save()
        total = out.sum()
    _ndif_log["total"] = total
total = _ndif_log["total"]
print(total)
""",
    ),
    Case(
        name="what methods store on self that only the session's methods read stays on the server",
        before="""\
import torch
from nnsight import LanguageModel


class Patching:
    def __init__(self, model, clean, corrupt):
        self.model = model
        self.clean, self.corrupt = clean, corrupt

    def run_clean(self):
        with self.model.trace(self.clean, remote=True):
            hidden = torch.stack([self.model.transformer.h[i].output for i in range(12)]).save()
        self.clean_hidden = hidden

    def patch(self, layer):
        with self.model.trace(self.corrupt, remote=True):
            self.model.transformer.h[layer].output[0, -1] = self.clean_hidden[layer, 0, -1]
            top = self.model.lm_head.output[0, -1].argmax().item().save()
        return top

    def sweep(self):
        self.run_clean()
        tops = []
        for layer in range(12):
            tops.append(self.patch(layer))
        return tops


experiment = Patching(LanguageModel("openai-community/gpt2"), "The cat sat on the", "One two three four")
print(experiment.sweep())
""",
        after="""\
import torch
from nnsight import LanguageModel


class Patching:
    def __init__(self, model, clean, corrupt):
        self.model = model
        self.clean, self.corrupt = clean, corrupt

    def run_clean(self, remote=True):
        with self.model.trace(self.clean, remote=remote):
            hidden = torch.stack([self.model.transformer.h[i].output for i in range(12)]).save()
        self.clean_hidden = hidden

    def patch(self, layer, remote=True):
        with self.model.trace(self.corrupt, remote=remote):
            self.model.transformer.h[layer].output[0, -1] = self.clean_hidden[layer, 0, -1]
            top = self.model.lm_head.output[0, -1].argmax().item().save()
        return top

    def sweep(self):
        with self.model.session(remote=True):
            self.run_clean(remote=False)
            tops = list().save()
            for layer in range(12):
                tops.append(self.patch(layer, remote=False))
        return tops


experiment = Patching(LanguageModel("openai-community/gpt2"), "The cat sat on the", "One two three four")
print(experiment.sweep())
""",
    ),
    Case(
        name="a line replayed on your machine reads what a method stores on self in the session",
        before="""\
from nnsight import LanguageModel


class Probe:
    def __init__(self, model):
        self.model = model

    def run(self, prompt):
        with self.model.trace(prompt, remote=True):
            self.last = self.model.lm_head.output.save()

    def sweep(self, prompts):
        for prompt in prompts:
            self.run(prompt)
            print(self.last.shape)
""",
        reason="reads `self.last`, which the session sets on its own copy of `self`",
    ),
    Case(
        name="a helper computes its remote flag inside: no session can take it at the call",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
CONFIG = {"remote": True}


def top(prompt):
    remote = CONFIG["remote"]
    with model.trace(prompt, remote=remote):
        t = model.lm_head.output.save()
    return t


for p in ["a", "b"]:
    print(top(p))
""",
        reason="the remote flag `top` runs with is computed inside it",
    ),
    *EDGE_CASES,
)
