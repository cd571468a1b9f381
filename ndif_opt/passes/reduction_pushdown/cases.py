"""reduction-pushdown's cases, as data: checked by tests/passes/test_cases.py, shown in docs/passes.md."""

from __future__ import annotations

from ndif_opt.passes.base import Case


CASES = (
    Case(
        name="a reduction under a condition stays on the client",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
POS = 40
prompt = "The Eiffel Tower is in"
with model.trace(prompt, remote=True):
    logits = model.lm_head.output.save()
if len(prompt.split()) > POS:
    subject = logits[0, POS].argmax().item()
else:
    subject = None
print(subject, logits[0, -1].argmax().item())
""",
        reason="`logits[0, POS].argmax().item()` runs only when `len(prompt.split()) > POS`",
    ),
    Case(
        name="a reduction whose error a handler catches stays on the client",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("Hi there", remote=True):
    logits = model.lm_head.output.save()
try:
    subject = logits[0, 40].argmax().item()
except IndexError:
    subject = None  # the prompt is too short
print(subject)
""",
        reason="runs only inside `try:`, whose handler may catch what it raises",
    ),
    Case(
        name="a reduction after an early return stays on the client",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
POS = 40


def subject_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    if len(prompt.split()) <= POS:
        return None
    top = logits[0, POS].argmax().item()
    return top


print(subject_token("Hi there"))
""",
        reason="after `return None`, which may end the code first",
    ),
    Case(
        name="nnterp: reductions of StandardizedTransformer values move into the block",
        before="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B", enable_attention_probs=True)
with model.trace("The Eiffel Tower is in the city of", remote=True):
    attn = model.attentions_output[2].save()
    pattern = model.attention_probabilities[3].save()
    mlp = model.mlps_output[5].save()
print(pattern[0, :, -1].max(dim=-1).values, mlp[0, -1].norm(), attn.mean())
""",
        after="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B", enable_attention_probs=True)
with model.trace("The Eiffel Tower is in the city of", remote=True):
    attn = model.attentions_output[2]
    pattern = model.attention_probabilities[3]
    mlp = model.mlps_output[5]
    attn_mean = attn.mean().save()
    pattern_reduced = pattern[0, :, -1].max(dim=-1).values.save()
    mlp_norm = mlp[0, -1].norm().save()
print(pattern_reduced, mlp_norm, attn_mean)
""",
    ),
    Case(
        name="saved value only read inside the session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output
        top[prompt] = logits[0, -1].argmax().item()
print(top)
""",
    ),
    Case(
        name="saved in a loop inside a trace, only read inside the session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    with model.trace("The Eiffel Tower is in"):
        for layer in range(3):
            hidden = model.transformer.h[layer].output.save()
            norms.append(hidden.norm().item())
print(norms)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    with model.trace("The Eiffel Tower is in"):
        for layer in range(3):
            hidden = model.transformer.h[layer].output
            norms.append(hidden.norm().item())
print(norms)
""",
    ),
    Case(
        name="a notebook's kernel keeps a value saved at module level",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
        top[prompt] = logits[0, -1].argmax().item()
""",
        reason="a cell you add later may read it",
    ),
    Case(
        name="a notebook's value saved at module level, not downloaded",
        notebook=True,
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
        top[prompt] = logits[0, -1].argmax().item()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    top = dict().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output
        top[prompt] = logits[0, -1].argmax().item()
""",
    ),
    Case(
        name="a notebook's value saved at module level, reduced on the client",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()
""",
        reason="need not be downloaded whole",
    ),
    Case(
        name="a notebook's value saved inside a function",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def next_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


print(next_token("The Eiffel Tower is in"))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def next_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output
        logits_argmax = logits[0, -1].argmax().item().save()
    return logits_argmax


print(next_token("The Eiffel Tower is in"))
""",
    ),
    Case(
        name="argmax after a standalone remote trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()  # the next token
print(top)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output
    top = logits[0, -1].argmax().item().save()  # the next token
print(top)
""",
    ),
    Case(
        name="a comprehension's own variable of the same name is another value",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()
sizes = [len(logits) for logits in ["a b", "c"]]  # another `logits`: the comprehension's own
print(top, sizes)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output
    top = logits[0, -1].argmax().item().save()
sizes = [len(logits) for logits in ["a b", "c"]]  # another `logits`: the comprehension's own
print(top, sizes)
""",
    ),
    Case(
        name="several reductions of one value, a logit difference and a helper",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
target, distractor = 5, 7


def entropy(logits):
    probs = torch.softmax(logits, dim=-1)
    return -(probs * probs.log()).sum()


with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
diff = logits[0, -1, target] - logits[0, -1, distractor]
print(logits[0, -1].topk(5).indices.tolist(), entropy(logits[0, -1]).item())
""",
        after="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
target, distractor = 5, 7


def entropy(logits):
    probs = torch.softmax(logits, dim=-1)
    return -(probs * probs.log()).sum()


with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output
    diff = (logits[0, -1, target] - logits[0, -1, distractor]).save()
    logits_tolist = logits[0, -1].topk(5).indices.tolist().save()
    logits_item = entropy(logits[0, -1]).item().save()
print(logits_tolist, logits_item)
""",
    ),
    Case(
        name="the full value is needed: written to disk",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax()
torch.save(logits, "logits.pt")
""",
        reason="uses it whole",
    ),
    Case(
        name="a library NDIF does not allow stays on the client",
        before="""\
import scipy.special
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("hello", remote=True):
    logits = model.lm_head.output.save()
probs = scipy.special.softmax(logits.numpy())
""",
    ),
    Case(
        name="saved value read after the session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            logits = model.lm_head.output.save()
print(logits.shape)
""",
    ),
    Case(
        name="the elements of a saved list, read through one reduction, are reduced where the block stores them (a result of the script: unsafe)",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output)
tops = [logits[0, -1].argmax().item() for logits in logits_by_prompt]
print(tops)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output[0, -1].argmax().item())
tops = list(logits_by_prompt)
print(tops)
""",
    ),
    Case(
        name="the elements of a list the script ends with stay as they are",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output)
tops = [logits[0, -1].argmax().item() for logits in logits_by_prompt]
print(tops)
""",
        reason="`logits_by_prompt` is a result of the script",
    ),
    Case(
        name="the elements of a saved dict, read by a loop over its items (a result of the script: unsafe)",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    ablated = dict().save()
    for layer in range(12):
        with model.trace("The Eiffel Tower is in the city of"):
            model.transformer.h[layer].mlp.output[:] = 0
            ablated[layer] = model.lm_head.output
for layer, logits in ablated.items():
    print(layer, logits[0, -1].softmax(-1).max().item())
print(len(ablated), "layers")
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    ablated = dict().save()
    for layer in range(12):
        with model.trace("The Eiffel Tower is in the city of"):
            model.transformer.h[layer].mlp.output[:] = 0
            ablated[layer] = model.lm_head.output[0, -1].softmax(-1).max().item()
for layer, logits in ablated.items():
    print(layer, logits)
print(len(ablated), "layers")
""",
    ),
    Case(
        name="an element also used whole keeps the list whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    logits_by_prompt = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            logits_by_prompt.append(model.lm_head.output)
for logits in logits_by_prompt:
    print(logits[0, -1].argmax().item(), logits.shape)
""",
        reason="`logits.shape` uses an element whole, on your machine",
    ),
    Case(
        name="an element the block changes in place after storing it is downloaded whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    hidden = list().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            hidden.append(model.transformer.h[6].output)
            model.transformer.h[6].output[:] = 0
print([h[0, -1].norm().item() for h in hidden])
""",
        reason="changes a value in place after the block stores it",
    ),
    Case(
        name="saved values a loop goes over in a written-out list are reduced in their blocks",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output.save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output.save()
for name, logits in [("clean", clean), ("patched", patched)]:
    print(name, logits[0, -1].argmax().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output
    clean_argmax = clean[0, -1].argmax().item().save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output
    patched_argmax = patched[0, -1].argmax().item().save()
for name, logits in [("clean", clean_argmax), ("patched", patched_argmax)]:
    print(name, logits)
""",
    ),
    Case(
        name="a loop variable read after the loop keeps the values whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output.save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output.save()
for name, logits in [("clean", clean), ("patched", patched)]:
    print(name, logits[0, -1].argmax().item())
print(logits.shape)
""",
    ),
    Case(
        name="in a notebook the values a loop goes over still come back whole without --unsafe-fixes",
        notebook=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    clean = model.lm_head.output.save()
with model.trace("The Colosseum is in the city of", remote=True):
    model.transformer.h[0].output[0, -1] = 0
    patched = model.lm_head.output.save()
for name, logits in [("clean", clean), ("patched", patched)]:
    print(name, logits[0, -1].argmax().item())
""",
        reason="the kernel keeps it after the last cell",
    ),
    Case(
        name="a number taken with float() is computed in the block",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    logits = model.lm_head.output.save()
print(float(logits[0, -1, 5] - logits[0, -1, 7]))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    logits = model.lm_head.output
    logits_float = float(logits[0, -1, 5] - logits[0, -1, 7]).save()
print(logits_float)
""",
    ),
    Case(
        name="a value the client changes in place is downloaded whole",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    logits = model.lm_head.output.save()
logits[0, -1, 50256] = float("-inf")
print(logits[0, -1].argmax().item())
""",
        reason="changes it in place on your machine",
    ),
    Case(
        name="a dict read by key in a loop over its keys (a result of the script: unsafe)",
        unsafe_fixes=True,
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    cache = dict().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            cache[prompt] = model.lm_head.output
for prompt in cache:
    print(prompt, cache[prompt][0, -1].argmax().item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    cache = dict().save()
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt):
            cache[prompt] = model.lm_head.output[0, -1].argmax().item()
for prompt in cache:
    print(prompt, cache[prompt])
""",
    ),
    Case(
        name="a list saved by `nnsight.save(x)` that only the session reads loses the line",
        before="""\
import torch
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    cache = dict().save()
    for t in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(t):
            acts = []
            for layer in (2, 5):
                acts.append(model.transformer.h[layer].output[:, -1])
            acts = nnsight.save(acts)
        cache[t] = torch.cat(acts, dim=0).norm()
print({t: round(v.item(), 3) for t, v in cache.items()})
""",
        after="""\
import torch
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    cache = dict().save()
    for t in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(t):
            acts = []
            for layer in (2, 5):
                acts.append(model.transformer.h[layer].output[:, -1])
        cache[t] = torch.cat(acts, dim=0).norm()
print({t: round(v.item(), 3) for t, v in cache.items()})
""",
    ),
)
