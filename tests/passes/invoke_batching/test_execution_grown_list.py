"""A loop that adds to the list it walks visits what it adds: batched, the invokes would be
the items the list holds before the loop. Not batched (with --unsafe-fixes too), with the
reason; the session around it keeps the loop's order. GPT-2 and Llama."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

GROWN = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
queue = ["Once", "Twice"]
for prompt in queue:
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    if len(prompt) < 8:
        queue.append(prompt + "x")
print(queue)
"""


@both
def test_a_loop_that_grows_its_list_is_not_batched(family):
    result, report = optimized_and_verified(GROWN, family, unsafe=True)
    assert "tracer.invoke" not in result.code
    reasons = [f.reason or "" for f in result.findings if f.pass_id == "invoke-batching"]
    assert any("the list it walks" in r for r in reasons), reasons
    assert report.after.requests == 1
