"""trace-fusion: one trace for a loop that only reads activations of the same input.

## What it does
Inside a session (written around it, or around every call of the function it is in),
a loop whose iterations each run a trace of the *same* input and only read activations
— one decoder layer per iteration, in increasing layer order (a
per-layer collection, a logit lens) — becomes a single trace with the loop inside:
``with model.trace(PROMPT): for layer in ...: ...``. Code of the loop body around the
trace (filling a dict of statistics, reducing a value) moves into the trace with it.

## Why is this bad?
Every trace is a full forward pass. A loop that reads layer ``l`` of the same prompt in
iteration ``l`` runs the whole model once per layer to look at one layer each time;
one forward pass already computes every layer. For a 32-layer model that is 32 forward
passes where 1 does.

## Example
```python
with model.session(remote=True):
    hidden = list().save()
    for layer in range(32):
        with model.trace(prompt):
            hidden.append(model.model.layers[layer].output[:, -1])
```

## Use instead
```python
with model.session(remote=True):
    hidden = list().save()
    with model.trace(prompt):
        for layer in range(32):
            hidden.append(model.model.layers[layer].output[:, -1])
```

## Fix safety
Safe: the forward pass is the same in every iteration, so reading it once gives the same
values, bit for bit. Applied only when the trace's input does not depend on the loop,
the loop visits layers in strictly increasing order (nnsight raises ``OutOfOrderError``
when a later layer is read before an earlier one in one trace), every module value the
body reads is ``<layers>[<loop variable>]``'s own ``.input``/``.output`` or that of a module
inside it (``.mlp``, then ``.self_attn``: in the order each trace as written reads them,
which nnsight serves in the model's order or stops at; every module of a layer runs before
the next layer's), calling modules as functions (``model.lm_head(model.model.norm(hidden))``)
is fine, and nothing
writes to the model: no assignment to ``.output``/``.input``, no ``.skip()``, no in-place
operation on an activation. Loops that write are left to skip-insertion; loops over
different inputs to invoke-batching.
"""

from __future__ import annotations

import libcst as cst

from ndif_opt.analysis.facts import Facts
from ndif_opt.passes.base import Case, Context, Pass
from ndif_opt.passes.common.sweeps import Sweep, find_sweeps, fusion_problem, passes_text, tally, with_leading
from ndif_opt.syntax.rewrite import SuitePlan, reindentable
from ndif_opt.wording import tense

# ---------------------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------------------


class TraceFusion(Pass):
    __doc__ = __doc__
    fix_safety = "safe, exact"

    def run(self, module: cst.Module, facts: Facts, context: Context) -> cst.Module:
        plan = SuitePlan()
        for sweep in find_sweeps(facts):
            trips = sweep.trips(facts)
            if trips is not None and trips < 2:
                continue
            problem, candidate = fusion_problem(sweep, facts)
            if problem and not candidate:
                continue
            counts = tally(sweep, facts, context.options)  # over the script, as the cost table counts
            if problem:
                runs = passes_text(trips) if trips is None else counts.count(trips, "forward pass")
                context.skipped(
                    sweep.loop,
                    f"this loop runs {runs} on the same input; one trace with the loop inside would run "
                    f"{1 if trips is None else counts.number(1)}",
                    f"not fused: {problem}",
                )
                continue
            plan.replace(sweep.info.suite, sweep.info.index, sweep.info.index + 1, _fused(sweep))
            change = f"{passes_text(trips)} → 1" if trips is None else counts.change(trips, 1, "forward pass")
            context.applied(
                sweep.loop,
                f"the loop's traces of the same input {tense('now run', 'would run')} as one trace with the loop "
                f"inside: {change}",
            )
        return plan.apply(module, facts) if plan else module


def _fused(sweep: Sweep):
    loop, trace = sweep.loop, sweep.block.node

    def build(_stmts):
        inner = list(sweep.inner)
        inner[0] = with_leading(inner[0], trace.leading_lines)
        inner = [reindentable(s) for s in inner]
        body = [reindentable(s) for s in sweep.pre] + inner + [reindentable(s) for s in sweep.post]
        footer = list(trace.body.footer) + list(loop.body.footer)
        new_loop = loop.with_changes(
            leading_lines=[], body=loop.body.with_changes(body=body, footer=footer)
        )
        return [
            trace.with_changes(
                leading_lines=loop.leading_lines,
                body=trace.body.with_changes(body=[new_loop], footer=[]),
            )
        ]

    return build


TraceFusion.cases = (
    Case(
        name="per-layer activations of one prompt",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
prompt = "The Eiffel Tower is in the city of"
with model.session(remote=True):
    hidden = list().save()
    # one hidden state per layer
    for layer in range(32):
        with model.trace(prompt):
            hidden.append(model.model.layers[layer].output[:, -1])
print(len(hidden))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
prompt = "The Eiffel Tower is in the city of"
with model.session(remote=True):
    hidden = list().save()
    # one hidden state per layer
    with model.trace(prompt):
        for layer in range(32):
            hidden.append(model.model.layers[layer].output[:, -1])
print(len(hidden))
""",
    ),
    Case(
        name="logit lens with code after the trace",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
PROMPT = "The Eiffel Tower is in the city of"
with model.session(remote=True):
    stats = dict().save()
    for layer in range(0, 32, 4):
        with model.trace(PROMPT):  # one forward pass per layer
            hidden = model.model.layers[layer].output
            # decode through the final norm and the unembedding
            logits = model.lm_head(model.model.norm(hidden))
        stats[layer] = logits[0, -1].argmax().item()
print(stats)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
PROMPT = "The Eiffel Tower is in the city of"
with model.session(remote=True):
    stats = dict().save()
    with model.trace(PROMPT):  # one forward pass per layer
        for layer in range(0, 32, 4):
            hidden = model.model.layers[layer].output
            # decode through the final norm and the unembedding
            logits = model.lm_head(model.model.norm(hidden))
            stats[layer] = logits[0, -1].argmax().item()
print(stats)
""",
    ),
    Case(
        name="two modules of each layer, in the order the model runs them",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    for layer in range(12):
        with model.trace("hello"):
            attn = model.transformer.h[layer].attn.output[0][0, -1].norm()
            mlp = model.transformer.h[layer].mlp.output[0, -1].norm()
        norms.append((attn, mlp))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    with model.trace("hello"):
        for layer in range(12):
            attn = model.transformer.h[layer].attn.output[0][0, -1].norm()
            mlp = model.transformer.h[layer].mlp.output[0, -1].norm()
            norms.append((attn, mlp))
""",
    ),
    Case(
        name="an enumerated layer list: the item is the layer, the count rides along",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
LAYERS = [0, 5, 11]
with model.session(remote=True):
    norms = dict().save()
    for i, layer in enumerate(LAYERS):
        with model.trace("hello"):
            norms[i] = model.transformer.h[layer].output[0, -1].norm()
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
LAYERS = [0, 5, 11]
with model.session(remote=True):
    norms = dict().save()
    with model.trace("hello"):
        for i, layer in enumerate(LAYERS):
            norms[i] = model.transformer.h[layer].output[0, -1].norm()
""",
    ),
    Case(
        name="an enumerated layer list out of order is not fused",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = dict().save()
    for i, layer in enumerate([11, 5, 0]):
        with model.trace("hello"):
            norms[i] = model.transformer.h[layer].output[0, -1].norm()
""",
        reason="does not visit layers in increasing order (`[11, 5, 0]`)",
    ),
    Case(
        name="layers read from a file: their order is not known, and the finding says so",
        before="""\
import json
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with open("layers.json") as f:
    layers = json.load(f)
with model.session(remote=True):
    norms = dict().save()
    for layer in layers:
        with model.trace("hello"):
            norms[layer] = model.transformer.h[layer].output[0, -1].norm()
""",
        reason="cannot tell whether the loop visits layers in increasing order (`layers`)",
    ),
    Case(
        name="interventions are not fused (each iteration needs its own pass)",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for layer in range(12):
        with model.trace("hello"):
            model.transformer.h[layer].output[:] = 0
            out.append(model.lm_head.output[0, -1].argmax().item())
""",
    ),
    Case(
        name="layers in decreasing order",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for layer in [11, 5, 0]:
        with model.trace("hello"):
            out.append(model.transformer.h[layer].output[0, -1])
""",
        reason="increasing order",
    ),
    Case(
        name="a module after the layers in every iteration",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for layer in range(12):
        with model.trace("hello"):
            hidden = model.transformer.h[layer].output
            out.append((hidden[0, -1], model.lm_head.output[0, -1]))
""",
        reason="which does not follow the loop's layer",
    ),
    Case(
        name="in-place change of an activation",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for layer in range(12):
        with model.trace("hello"):
            hidden = model.transformer.h[layer].output
            hidden.mul_(2)
            out.append(model.transformer.h[layer].output[0, -1])
""",
        reason="in place",
    ),
    Case(
        name="augmented assignment to an activation",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for layer in range(3):
        with model.trace("hello"):
            hidden = model.transformer.h[layer].output
            hidden += 1
            out.append(hidden.norm())
""",
        reason="changes `hidden` in place",
    ),
    Case(
        name="write into a value computed from an activation",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for layer in range(3):
        with model.trace("hello"):
            last = model.transformer.h[layer].output[:, -1]
            last[0] = 0
            out.append(model.transformer.h[layer].output.norm())
""",
        reason="writes into `last[0]` in place",
    ),
    Case(
        name="different inputs are left to invoke-batching",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            out.append(model.transformer.h[0].output[0, -1])
""",
    ),
    Case(
        name="a loop that breaks over traces whose inputs are their invokes is no candidate",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    out = list().save()
    for a, b in [("a b", "c d"), ("e f", "g h")]:
        with model.trace() as tracer:
            with tracer.invoke(a):
                first = model.transformer.h[0].output[0, -1]
            with tracer.invoke(b):
                second = model.transformer.h[0].output[0, -1]
        out.append((first - second).norm())
        if len(out) > 1:
            break
""",
    ),
    Case(
        name="a helper's loop, every call of which runs in a session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def norms(prompt, remote=True):
    found = []
    for layer in range(12):
        with model.trace(prompt, remote=remote):
            found.append(model.transformer.h[layer].output[0, -1].norm())
    return found


with model.session(remote=True):
    table = dict().save()
    for prompt in ["The Eiffel Tower is in", "Water boils at"]:
        table[prompt] = norms(prompt, remote=False)
print(table)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def norms(prompt, remote=True):
    found = []
    with model.trace(prompt, remote=remote):
        for layer in range(12):
            found.append(model.transformer.h[layer].output[0, -1].norm())
    return found


with model.session(remote=True):
    table = dict().save()
    for prompt in ["The Eiffel Tower is in", "Water boils at"]:
        table[prompt] = norms(prompt, remote=False)
print(table)
""",
    ),
)
