"""Code that must run on your machine after the session (the replay) may not change what the
session reads: not through a function of the script (`push(x)` appending to the list the loop
walks), nor through another name of the same list (`alias.append(...)` where `alias =
prompts`). The original visits the items appended as it goes; a session would walk only the
first ones. The loop is left as it is, with the reason. GPT-2 and Llama."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

THROUGH_A_FUNCTION = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
queue = ["Once", "Twice"]


def push(item):
    if len(queue) < 5:
        queue.append(item)


for prompt in queue:
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    push(prompt + " again")
print(queue)
"""

THROUGH_AN_ALIAS = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
prompts = ["Once", "Twice"]
also = prompts
for prompt in prompts:
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    if len(also) < 5:
        also.append(prompt + " again")
print(prompts)
"""


@pytest.mark.parametrize("template", [THROUGH_A_FUNCTION, THROUGH_AN_ALIAS], ids=["function", "alias"])
@both
def test_a_loop_whose_list_the_replay_would_grow_is_left_with_the_reason(family, template):
    result, report = optimized_and_verified(template, family)
    assert report.before.requests == report.after.requests == 5
    reasons = [f.reason for f in result.findings if f.pass_id == "session-hoisting"]
    assert any("prompts" in (r or "") or "queue" in (r or "") or "also" in (r or "") for r in reasons), reasons
