"""skip-insertion on a loop a `break` (or `continue`) stops early, by execution: the bill
counts the iterations that run, skip-insertion is not applied where it would not reduce
what runs, and the measured run is never worse than the original."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

BREAK = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
table = {}
for layer in range(12):
    if layer > 3:
        break
    with model.trace("a b c", remote=True):
        v = LAYERS[layer].output.mean().save()
    table[layer] = v.item()
print(table)
"""

CONTINUE = BREAK.replace("break", "continue").replace("layer > 3", "layer > 1")

NESTED = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
PROMPTS = ["hi", "The history of Rome is long", "ok", "Science advances by experiment"]
MAX_LAYER = 6
table = {}
for prompt in PROMPTS:
    if len(prompt.split()) < 3:
        continue
    for layer in range(12):
        if layer > MAX_LAYER:
            break
        with model.trace(prompt, remote=True):
            v = LAYERS[layer].output[0, -1].abs().mean().save()
        table[(prompt, layer)] = v.item()
print(len(table))
"""


def _finding(result, pass_id):
    return next(f for f in result.findings if f.pass_id == pass_id)


def _words(result, pass_id):
    finding = _finding(result, pass_id)
    return f"{finding.message} — {finding.reason or ''}"


def _not_worse(report):
    assert report.after.forward_passes <= report.before.forward_passes or \
        report.after.layer_calls < report.before.layer_calls, report.to_text()
    assert report.after.layer_calls <= report.before.layer_calls, report.to_text()


def _bill_is_measured(result, report):
    first, last = result.costs[0].before, result.costs[-1].after
    assert (first.requests, first.forward_passes, first.layer_evaluations) == \
        (report.before.requests, report.before.forward_passes, report.before.layer_calls)
    assert (last.requests, last.forward_passes, last.layer_evaluations) == \
        (report.after.requests, report.after.forward_passes, report.after.layer_calls)


@both
def test_a_loop_a_constant_break_stops_is_billed_to_it_and_not_made_worse(family):
    result, report = optimized_and_verified(BREAK, family)
    assert report.before.requests == 4 and report.after.requests == 1
    assert "_ndif_cache" not in result.code
    assert "would not pay off (layer evaluations" in _words(result, "skip-insertion")
    fusion = _words(result, "trace-fusion")
    assert "not fused: the loop body uses `break`" in fusion and "runs 4 forward passes" in fusion
    _bill_is_measured(result, report)
    _not_worse(report)


@both
def test_skip_insertion_that_would_evaluate_more_layers_is_let_go(family):
    result, report = optimized_and_verified(CONTINUE, family)
    assert "_ndif_cache" not in result.code
    assert "more work than before" in _words(result, "skip-insertion")
    _bill_is_measured(result, report)
    _not_worse(report)


@both
def test_the_finding_quotes_the_bill_of_a_loop_stopped_early(family):
    result, report = optimized_and_verified(NESTED, family)
    assert report.before.forward_passes == 14
    _bill_is_measured(result, report)
    skip = _finding(result, "skip-insertion")
    first, last = result.costs[0].before, result.costs[-1].after
    if skip.applied:
        assert f"layer evaluations {first.layer_evaluations} → {last.layer_evaluations}" in skip.message
        assert f"forward passes {first.forward_passes} → {last.forward_passes}" in skip.message
    assert report.after.layer_calls <= report.before.layer_calls


# a `break` decided by what the traces return (here, always at the first layer): the caching
# trace would run every layer before the loop, two forward passes where one ran (a trial's:
# layer calls 24 -> 36)
STOPPED_BY_A_RESULT = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
PROMPT = "One, two, three, four,"
first = None
for layer in range(12):
    with model.trace(PROMPT, remote=True):
        h = LAYERS[layer].output
        top = model.lm_head.output[0, -1].argmax().save()
    if top.item() >= 0:
        first = layer
        break
print("first layer:", first)
"""


@both
def test_a_loop_that_may_stop_on_a_result_gets_no_caching_trace(family):
    result, report = optimized_and_verified(STOPPED_BY_A_RESULT, family)
    assert "_ndif_cache" not in result.code
    assert "the loop may stop early (`break`)" in _words(result, "skip-insertion")
    assert report.after.forward_passes == report.before.forward_passes == 1, report.to_text()
    _not_worse(report)
