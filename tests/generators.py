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


__all__ = ["dense_nnsight_script", "plain_python"]
