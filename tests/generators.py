"""Deterministic large inputs for the hostile-input tests and ``benchmarks/bench.py``.

No Hypothesis here: the same arguments always give the same text, so timings taken in
different runs compare.
"""

from __future__ import annotations

HEADER = '''\
"""A long naive experiment: one remote request per step, results reduced on the client."""
import json

from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
REMOTE = True
PROMPT = "The Eiffel Tower is in the city of"
PROMPTS = ["The Eiffel Tower is in the city of", "The capital of Japan is", "The cat sat on the"]
LAYERS = [0, 3, 7, 11]
COEFFICIENTS = [0.0, 1.0, 2.0, 4.0]


def top_token(logits):
    # the most likely next token
    return logits[0, -1].argmax().item()

'''

# Units of naive code; `{i}` makes every name unique. Each is a real pattern.
UNITS = (
    '''\
# layer sweep {i}
acts_{i} = []
for layer in range(12):
    with model.trace(PROMPT, remote=True):
        acts_{i}.append(model.transformer.h[layer].output[:, -1].save())
norms_{i} = [a.norm().item() for a in acts_{i}]
''',
    '''\
top_{i} = {{}}
for prompt in PROMPTS:
    with model.trace(prompt, remote=REMOTE):
        logits = model.lm_head.output.save()
    # the most likely next token for this prompt
    top_{i}[prompt] = logits[0, -1].argmax().item()
''',
    '''\
probs_{i} = {{}}
for coefficient in COEFFICIENTS:
    with model.trace(PROMPT, remote=True):
        model.transformer.h[6].output = model.transformer.h[6].output * coefficient
        logits = model.lm_head.output.save()
    probs_{i}[coefficient] = logits[0, -1].softmax(dim=-1).max().item()
''',
    '''\
with model.trace(PROMPTS[0], remote=True):
    clean_{i} = model.transformer.h[5].output.mean(dim=1).save()
with model.trace(PROMPTS[1], remote=True):
    corrupt_{i} = model.transformer.h[5].output.mean(dim=1).save()
distance_{i} = (clean_{i} - corrupt_{i}).norm().item()  # a client reduction
''',
    '''\
stats_{i} = {{}}
for layer in LAYERS:
    with model.trace(PROMPT, remote=True):
        hidden = model.transformer.h[layer].output.save()
    stats_{i}[layer] = hidden.norm().item()
    print(layer, stats_{i}[layer])
''',
    '''\
with model.trace(PROMPT, remote=True):
    logits_{i} = model.lm_head.output.save()
prediction_{i} = top_token(logits_{i})
with open("predictions_{i}.json", "w") as handle:
    json.dump({{"top": prediction_{i}}}, handle)
''',
)


def dense_nnsight_script(lines: int) -> str:
    """About ``lines`` lines of naive nnsight code: one remote pattern every ~7 lines."""
    parts, count, i = [HEADER], HEADER.count("\n"), 0
    while count < lines:
        unit = UNITS[i % len(UNITS)].format(i=i) + "\n"
        parts.append(unit)
        count += unit.count("\n")
        i += 1
    return "".join(parts)


PLAIN_UNIT = '''\
def function_{i}(values, scale={i}):
    """Scale and sum values (unit {i}); mentions no model at all."""
    total = 0
    for value in values:  # a loop
        if value > scale:
            total += value * scale
        else:
            total -= value
    return {{"total": total, "count": len(values), "name": "unit-{i}"}}


RESULT_{i} = function_{i}([1, 2, 3])

'''


def plain_python(lines: int) -> str:
    """About ``lines`` lines of ordinary Python without nnsight."""
    parts, count, i = ['"""Plain Python: no model, no tracing."""\nimport math\n\n'], 3, 0
    while count < lines:
        unit = PLAIN_UNIT.format(i=i)
        parts.append(unit)
        count += unit.count("\n")
        i += 1
    return "".join(parts)


REALISTIC_HEADER = '''\
"""Where does GPT-2 recall facts? A week of probing, one remote request at a time.

Each section below is an experiment run on NDIF: sweeps over layers, prompts and
steering strengths, with the results printed and written to disk as they arrive.
"""
import json
import math
import os
from collections import defaultdict

import torch
from nnsight import CONFIG, LanguageModel

REMOTE = True  # set to False to debug on a local GPU
CONFIG.set_default_api_key(os.environ.get("NDIF_API_KEY", ""))

model = LanguageModel("openai-community/gpt2")
N_LAYERS = 12
PROMPT = "The Eiffel Tower is in the city of"
PROMPTS = [
    "The Eiffel Tower is in the city of",
    "The capital of Japan is",
    "The Colosseum is located in",
    "Big Ben stands in the city of",
]
ANSWERS = [" Paris", " Tokyo", " Rome", " London"]
OUT_DIR = "results"


def answer_id(word):
    # the first token of the answer, with its leading space
    return model.tokenizer(word)["input_ids"][0]


def logit_diff(logits, good, bad):
    last = logits[0, -1]
    return (last[good] - last[bad]).item()


def fmt_row(label, values):
    """One line of a table: a label, then the values with two decimals."""
    return f"{label:<12}" + " ".join(f"{v:+.2f}" for v in values)


def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def residual_norm(prompt, layer, remote=REMOTE):
    """The norm of the residual stream at the last token after ``layer``."""
    with model.trace(prompt, remote=remote):
        hidden = model.transformer.h[layer].output[0].save()
    return hidden[0, -1].norm().item()


os.makedirs(OUT_DIR, exist_ok=True)
PAIRS = list(zip(PROMPTS, ANSWERS))

'''

# Sections of a realistic research script; `{i}` makes every name unique. Each mixes
# remote work with the plain Python around it (prompts built, results tabulated, printed
# and written), as scripts by people do.
REALISTIC_SECTIONS = (
    '''\
# ---- experiment {i}: logit lens over the layers --------------------------------
lens_{i} = {{}}
for layer in range(N_LAYERS):
    with model.trace(PROMPT, remote=REMOTE):
        hidden = model.transformer.h[layer].output[0]
        logits = model.lm_head(model.transformer.ln_f(hidden)).save()
    token = logits[0, -1].argmax().item()
    lens_{i}[layer] = model.tokenizer.decode(token)
    print(f"layer {{layer:2d}}: {{lens_{i}[layer]!r}}")

first_correct_{i} = next((layer for layer, word in lens_{i}.items() if word == " Paris"), None)
print(f"first layer that says Paris: {{first_correct_{i}}}")

''',
    '''\
# ---- experiment {i}: which prompts does the model get right? -------------------
# every prompt once, the answer's probability read on the client
correct_{i} = []
for prompt, answer in PAIRS:
    with model.trace(prompt, remote=REMOTE):
        logits = model.lm_head.output.save()
    probs = torch.softmax(logits[0, -1], dim=-1)
    p = probs[answer_id(answer)].item()
    correct_{i}.append((prompt, p))
    print(f"{{prompt[:30]:<30}} p({{answer.strip()}}) = {{p:.3f}}")

ranked_{i} = sorted(correct_{i}, key=lambda item: -item[1])
best_{i}, worst_{i} = ranked_{i}[0], ranked_{i}[-1]
print("easiest:", best_{i}[0])
print("hardest:", worst_{i}[0])

''',
    '''\
# ---- experiment {i}: zero-ablate each MLP --------------------------------------
good_{i}, bad_{i} = answer_id(" Paris"), answer_id(" Rome")
with model.trace(PROMPT, remote=REMOTE):
    clean_logits_{i} = model.lm_head.output.save()
clean_{i} = logit_diff(clean_logits_{i}, good_{i}, bad_{i})

drops_{i} = []
for layer in range(N_LAYERS):
    with model.trace(PROMPT, remote=REMOTE):
        model.transformer.h[layer].mlp.output[:] = 0
        logits = model.lm_head.output.save()
    diff = logit_diff(logits, good_{i}, bad_{i})
    drops_{i}.append(clean_{i} - diff)
    print(f"MLP {{layer:2d}} ablated: diff={{diff:+.4f}} drop={{clean_{i} - diff:+.4f}}")

top3_{i} = sorted(range(len(drops_{i})), key=lambda k: -abs(drops_{i}[k]))[:3]
print(fmt_row("drops", drops_{i}))
print("most important MLP layers:", top3_{i})

''',
    '''\
# ---- experiment {i}: residual norms per layer (helper) -------------------------
norms_{i} = defaultdict(list)
for prompt in PROMPTS:
    for layer in (0, 4, 8, 11):
        norms_{i}[layer].append(residual_norm(prompt, layer))

summary_{i} = {{layer: mean(values) for layer, values in norms_{i}.items()}}
for layer, value in sorted(summary_{i}.items()):
    bar = "#" * int(math.log1p(value) * 4)
    print(f"{{layer:2d}} {{value:8.2f}} {{bar}}")

''',
    '''\
# ---- experiment {i}: steering with a difference of means ----------------------
with model.trace("I love this so much", remote=REMOTE):
    positive_{i} = model.transformer.h[6].output[0].mean(dim=1).save()
with model.trace("I hate this so much", remote=REMOTE):
    negative_{i} = model.transformer.h[6].output[0].mean(dim=1).save()
steer_{i} = positive_{i} - negative_{i}
great_{i} = answer_id(" great")

strengths_{i} = [0.0, 0.5, 1.0, 2.0, 4.0]
shift_{i} = {{}}
for alpha in strengths_{i}:
    with model.trace("I think this movie is", remote=REMOTE):
        model.transformer.h[6].output[0][:] += alpha * steer_{i}
        logits = model.lm_head.output.save()
    shift_{i}[alpha] = torch.softmax(logits[0, -1], dim=-1)[great_{i}].item()
    print(f"alpha={{alpha:>4}}: p(great)={{shift_{i}[alpha]:.4f}}")

with open(os.path.join(OUT_DIR, "steering_{i}.json"), "w") as handle:
    json.dump({{str(k): v for k, v in shift_{i}.items()}}, handle, indent=2)

''',
    '''\
# ---- bookkeeping {i}: plain Python between experiments -------------------------
def describe_{i}(table, title="table {i}"):
    lines = [title, "-" * len(title)]
    for key in sorted(table):
        value = table[key]
        if isinstance(value, float):
            lines.append(f"{{key!s:>8}}  {{value:10.4f}}")
        else:
            lines.append(f"{{key!s:>8}}  {{value}}")
    return "\\n".join(lines)


config_{i} = {{"model": "gpt2", "layers": N_LAYERS, "prompts": len(PROMPTS), "run": {i}}}
print(describe_{i}(config_{i}))
counts_{i} = {{}}
for word in " ".join(PROMPTS).split():
    counts_{i}[word.lower()] = counts_{i}.get(word.lower(), 0) + 1
common_{i} = [word for word, count in counts_{i}.items() if count > 1]
print(f"{{len(common_{i})}} words appear more than once: {{', '.join(common_{i})}}")

''',
)


def realistic_script(lines: int) -> str:
    """About ``lines`` lines of a realistic research script: comments, helpers, loops of
    remote traces with prints and f-strings, plain Python in between. Deterministic."""
    parts, count, i = [REALISTIC_HEADER], REALISTIC_HEADER.count("\n"), 0
    while count < lines:
        section = REALISTIC_SECTIONS[i % len(REALISTIC_SECTIONS)].format(i=i)
        parts.append(section)
        count += section.count("\n")
        i += 1
    return "".join(parts)


__all__ = ["dense_nnsight_script", "plain_python", "realistic_script"]
