"""A save keeps an object, and every name bound to it: `d = diff.save()` brings back `diff`
too (nnsight sends back the names whose value is a saved object). A rewrite that copies the
value before saving it (detach-cpu) or drops the save (reduction-pushdown, inside a session)
must keep every such name the code after reads, or that is a result of the script; a loop
temporary it lets go is declared (verify compares every other name). GPT-2 and Llama."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

ONE_TRACE = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
with model.trace("The nurse said that", remote=True):
    diff = model.lm_head.output[0, -1, :3]
    d = diff.save()
print(d, diff)
"""

READ_AFTER_THE_LOOP = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
scores = []
for prompt in ["a b c", "d e f"]:
    with model.trace(prompt, remote=True):
        h = LAYERS[0].output
        act = h.save()
    scores.append(act.sum().item())
print(scores, h.shape)
"""

A_LOOP_TEMPORARY = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
scores = {}
for prompt in ["a b c", "d e f"]:
    with model.trace(prompt, remote=True):
        h = LAYERS[0].output[0, -1]
        act = h.save()
    scores[prompt] = act.norm().item()
print(scores)
"""


@pytest.mark.parametrize("template", [ONE_TRACE, READ_AFTER_THE_LOOP, A_LOOP_TEMPORARY],
                         ids=["one-trace", "read-after-the-loop", "a-loop-temporary"])
@both
def test_every_name_of_a_saved_object_comes_back_or_is_declared_let_go(family, template):
    result, report = optimized_and_verified(template, family)
    if template is A_LOOP_TEMPORARY:
        assert "h" in result.unreturned or ".detach().cpu()" not in result.code
