"""A saved name bound again after its trace (`probs = probs.softmax(-1)`): nnsight sends back
saved objects, not names, so at the session's end the name holds a value nobody saved. The
session must bring that value back (or leave the loop); the name must exist after the script
with the value the original leaves in it. Each script runs on GPT-2 and Llama, and every
module-level name the original leaves bound is compared (let_go: only the loop variable)."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

IN_THE_LOOP = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
tops = []
for prompt in ["a b", "c d e"]:
    with model.trace(prompt, remote=True):
        probs = model.lm_head.output[0, -1].save()
    probs = probs.softmax(-1)
    tops.append(probs.max().item())
print(tops, probs.shape)
"""

AUGMENTED = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
for layer in range(2):
    with model.trace("The Eiffel Tower is in", remote=True):
        mean = LAYERS[layer].output.norm().item().save()
    mean /= 2
print(mean)
"""

STACKED_IN_A_FUNCTION = """\
import torch
from nnsight import LanguageModel
model = LanguageModel("REPO")


def last_states(prompts):
    states = None
    for prompt in prompts:
        with model.trace(prompt, remote=True):
            states = LAYERS[1].output[0, -1].save()
        states = torch.stack([states, states * 2])
    return states


print(last_states(["a b", "c d e"]).shape)
"""


@pytest.mark.parametrize("template", [IN_THE_LOOP, AUGMENTED, STACKED_IN_A_FUNCTION],
                         ids=["in-the-loop", "augmented", "in-a-function"])
@both
def test_a_saved_name_bound_again_comes_back_with_its_last_value(family, template):
    result, report = optimized_and_verified(template, family, let_go=frozenset({"prompt", "layer"}))
    assert report.after.requests == 1, report.to_text() + result.code
