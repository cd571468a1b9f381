"""`xs += [x]` changes a list (a dict's `|=`, an array's or a tensor's `+=`) in place; `n += 1`
makes a new number. The replay after a session must not record a list by name while the
session keeps growing it (every printed line would show the final list), and a list grown
with `+=` inside a remote trace is a client list the server fills (it stays empty on your
machine, as with `.append`). A counter printed per iteration is still hoisted. GPT-2 and
Llama, original and rewrite through verify's emulation of NDIF."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

PRINTED_AS_IT_GROWS = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
history = []
for prompt in ["One two", "Three four", "Five six"]:
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].max().save()
    history += [round(top.item(), 3)]
    print("so far:", history)
"""

COUNTED = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
done = 0
total = 0.0
for prompt in ["One two", "Three four", "Five six"]:
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].max().save()
    done += 1
    total += top.item()
    print(f"{done}/3 done, total {total:.3f}")
"""

GROWN_IN_THE_TRACE = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
tops = []
for prompt in ["One two", "Three four"]:
    with model.trace(prompt, remote=True):
        tops += [model.lm_head.output[0, -1].argmax().save()]
print([int(t) for t in tops])
"""


@both
def test_a_list_printed_as_it_grows_by_plus_equals_is_not_recorded_by_name(family):
    result, report = optimized_and_verified(PRINTED_AS_IT_GROWS, family)
    refused = [f for f in result.findings if f.pass_id == "session-hoisting" and not f.applied]
    assert refused and "final state" in refused[0].reason, [(f.pass_id, f.reason) for f in result.findings]
    assert report.after.requests == 3


@pytest.mark.parametrize("family", ["llama"])  # (the rule reads the script; the file covers both families)
def test_a_counter_printed_each_iteration_is_still_hoisted(family):
    result, report = optimized_and_verified(COUNTED, family)
    assert report.after.requests == 1, result.code


@pytest.mark.parametrize("family", ["gpt2"])
def test_a_list_grown_by_plus_equals_inside_a_remote_trace_comes_back_filled(family):
    result, report = optimized_and_verified(GROWN_IN_THE_TRACE, family)
    assert any(f.pass_id == "accumulator-relocation" and f.applied for f in result.findings), result.code
    assert report.after.requests == 1
