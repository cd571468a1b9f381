"""Messages read right for 0, 1 and many: counted nouns, and no broken template in any
finding of scripts whose loops run once, twice or many times."""

from __future__ import annotations

from pathlib import Path

import pytest

from ndif_opt import optimize
from ndif_opt.passes.common.sweeps import passes_text
from ndif_opt.wording import broken_template, counted, per

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("n, noun, text", [
    (0, "forward pass", "0 forward passes"),
    (1, "forward pass", "1 forward pass"),
    (3, "forward pass", "3 forward passes"),
    (1, "iteration", "1 iteration"),
    (1024, "token", "1,024 tokens"),
    (1, "back-to-back session", "1 back-to-back session"),
])
def test_counted(n, noun, text):
    assert counted(n, noun) == text


def test_per_and_passes():
    assert per(1, "iteration") == "one per iteration"
    assert per(32, "iteration") == "one per 32 iterations"
    assert [passes_text(n) for n in (0, 1, 2)] == ["0 forward passes", "1 forward pass", "2 forward passes"]
    assert passes_text(None) == "one forward pass per iteration"


@pytest.mark.parametrize("message, broken", [
    ("these 0 consecutive remote blocks send 0 requests", "zero of a plural"),
    ("these 1 consecutive remote blocks sends", "1 with a plural"),
    ("this loop runs one forward pass per iteration, one per iteration", "a phrase said twice"),
    ("`x` is printed, which must run on your machine, which must run on your machine", "a phrase said twice"),
    ("added `None`", "an unrendered value"),
    ("reads `x`, whose layout I do not know", "the tool in the first person"),
    ("wrapped 2 requests → 1", None),
    ("1.1 requests", None),
])
def test_the_broken_templates_are_recognized(message, broken):
    assert broken_template(message) == broken


LOOP = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompts = {prompts}
logits = []
for prompt in prompts:
    with model.trace(prompt, remote=True):
        logits.append(model.lm_head.output[0, -1].argmax().save())
print(logits)
for layer in range({layers}):
    with model.trace("The Eiffel Tower is in", remote=True):
        model.transformer.h[layer].output[:] = 0
        out = model.lm_head.output.save()
    print(layer, out.shape)
'''


@pytest.mark.parametrize("count", [0, 1, 2, 40])
@pytest.mark.parametrize("unsafe, max_batch", [(False, 32), (True, 32), (True, 1)])
def test_no_message_is_broken_for_loops_of_any_length(count, unsafe, max_batch):
    source = LOOP.format(prompts=[f"prompt number {i}" for i in range(count)], layers=count)
    result = optimize(source, unsafe_fixes=unsafe, max_batch=max_batch)
    broken = [(broken_template(f.message) or broken_template(f.reason or ""), f.message) for f in result.findings]
    assert [b for b in broken if b[0]] == []
    notes = [(broken_template(n), n) for n in result.assumptions]
    assert [n for n in notes if n[0]] == []


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_no_message_of_the_examples_is_broken(path):
    for unsafe in (False, True):
        result = optimize(path.read_text(), unsafe_fixes=unsafe)
        assert [f.message for f in result.findings
                if broken_template(f.message) or broken_template(f.reason or "")] == []


# a loop that logs through a logger of your machine (a new user's script): its refusal
# said "uses `log`, which exists only on your machine, which must run on your machine"
LOGGED_LENS = '''\
import logging
from nnsight import LanguageModel

log = logging.getLogger("lens")
model = LanguageModel("openai-community/gpt2")
for layer in range(12):
    with model.trace("The capital of Germany is", remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    log.info("layer %d top %s", layer, top.item())
    if top.item() == 11:
        break
else:
    print("never")
'''


def test_a_refusal_says_once_that_code_runs_on_your_machine():
    result = optimize(LOGGED_LENS)
    reasons = [f.reason or "" for f in result.findings if f.pass_id == "session-hoisting"]
    assert reasons and all(broken_template(r) is None for r in reasons), reasons
    assert any("`log`, which exists only on your machine" in r for r in reasons), reasons


# a method that counts its calls (`self.n_calls += 1`) was said to change `self` "not
# only `self.x = ...`", with no word of the change
COUNTING_METHOD = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


class Probe:
    def __init__(self):
        self.n_calls = 0

    def top(self, prompt):
        self.n_calls += 1
        with model.trace(prompt, remote=True):
            t = model.lm_head.output[0, -1].argmax().save()
        return t.item()


probe = Probe()
tops = [probe.top(p) for p in ["a b", "c d"]]
print(tops, probe.n_calls)
'''


def test_a_refusal_quotes_the_change_of_self():
    reasons = [f.reason or "" for f in optimize(COUNTING_METHOD).findings if f.pass_id == "session-hoisting"]
    assert any("changes `self` in place (`self.n_calls += 1`: not a plain `self.x = ...`)" in r
               for r in reasons), reasons
