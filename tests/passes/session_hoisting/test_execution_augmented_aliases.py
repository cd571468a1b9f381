"""`x += y` on a list or a tensor changes the object in place: another holder sees it.

A new user's scripts (newuser12 W1, W2): a running sum `running += h` whose tensor another
name also held (`stats_sum = running`), and `norms += [v]` on a list a dict also held. The
session took the loop, changed its own copy and brought back a new object for the name
itself; the other holder kept the old one (verify: `stats_sum` all zeros, the dict's list
empty). `.add_()` and `.append` on the same aliases were handled: the rule that a region
may change in place only an object no other name reaches now also holds for an augmented
assignment of a name that still holds the object it had before the region (and for a
parameter, whose caller holds it). Unshared, the loop is hoisted as before.

Real nnsight 0.8 on tiny GPT-2 and Llama models through verify's emulation of NDIF.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

from ndif_opt import Status  # noqa: E402

RUNNING_SUM = '''
import torch
from nnsight import LanguageModel

model = LanguageModel("REPO")
PROMPTS = ["I like apples", "You like pears", "We like plums"]
running = torch.zeros(4)
SHARED
for prompt in PROMPTS:
    with model.trace(prompt, remote=True):
        h = LAYERS[1].output[0, -1, :4].save()
    running += h
print(READ)
'''

EXTENDED_LIST = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
norms = []
run = {"prompt": "Hello world", "norms": norms}
for layer in range(2):
    with model.trace(run["prompt"], remote=True):
        n = LAYERS[layer].output[0, -1].norm().save()
    norms += [round(n.item(), 4)]
print(run)
'''

CALLERS_LIST = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")

def collect_norms(acc, prompts):
    for p in prompts:
        with model.trace(p, remote=True):
            n = LAYERS[0].output[0, -1].norm().save()
        acc += [round(n.item(), 4)]

found = []
collect_norms(found, ["Hello world", "Good morning"])
print(found)
'''


def _hoisting(result):
    return [f for f in result.findings if f.pass_id == "session-hoisting"]


def _refused(result, report, reason: str) -> None:
    assert "model.session(" not in result.code, result.code
    assert any(f.status is Status.SKIPPED and reason in (f.reason or f.message) for f in _hoisting(result)), \
        [f.message for f in _hoisting(result)]
    assert report.before.requests == report.after.requests


@both
def test_a_running_sum_another_name_holds_is_not_hoisted(family):
    source = RUNNING_SUM.replace("SHARED", "stats_sum = running")
    source = source.replace("READ", "stats_sum.tolist(), running.tolist()")
    result, report = optimized_and_verified(source, family)
    _refused(result, report, "`running += ...` may change in place the object `running` holds")


@both
def test_a_list_a_dict_holds_extended_with_plus_equals_is_not_hoisted(family):
    result, report = optimized_and_verified(EXTENDED_LIST, family)
    _refused(result, report, "`norms` is also reachable through another name")


@both
def test_a_parameter_extended_with_plus_equals_is_not_hoisted(family):
    result, report = optimized_and_verified(CALLERS_LIST, family)
    _refused(result, report, "`acc` is a parameter")


@both
def test_a_running_sum_no_other_name_holds_is_hoisted(family):
    source = RUNNING_SUM.replace("SHARED", "").replace("READ", "running.tolist()")
    result, report = optimized_and_verified(source, family)
    assert (report.before.requests, report.after.requests) == (3, 1), result.code
