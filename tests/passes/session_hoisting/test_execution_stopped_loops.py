"""Loops that their own remote work keeps from one session get one finding (issue 33).

A session runs one model with one remote flag. A loop whose traces are of two models
(`small.trace(...)` then `big.trace(...)` per item, or a helper called with each model),
take two remote flags, open a session of their own in each iteration, mix a trace on
your machine with remote ones, or pass `remote=` inside `**kwargs` is left as it is —
and was left silently. Now it gets exactly one session-hoisting finding, at the loop,
naming what stops it and what to change; refusals of runs inside it are not repeated.

The two-model loops run on tiny GPT-2 and Llama models (the original locally, the
original and the optimized script through verify's emulation of NDIF): left as they are,
they still compute the same.
"""

from __future__ import annotations

import textwrap

import pytest
from execution import FAMILIES, both, optimized_and_verified, script

from ndif_opt import Status, optimize

TWO_MODELS = '''
    from nnsight import LanguageModel

    small = LanguageModel("REPO")
    big = LanguageModel("OTHER")
    agree = []
    for prompt in ["The weather today is", "My favourite food is", "Once upon a"]:
        with small.trace(prompt, remote=True):
            a = small.lm_head.output[0, -1].argmax().save()
        with big.trace(prompt, remote=True):
            b = big.lm_head.output[0, -1].argmax().save()
        agree.append(small.tokenizer.decode(a) == big.tokenizer.decode(b))
    print(agree)
'''

TWO_MODELS_THROUGH_A_HELPER = '''
    import torch.nn.functional as F
    from nnsight import LanguageModel

    REMOTE = True
    small = LanguageModel("REPO")
    big = LanguageModel("OTHER")


    def word_logprobs(model, prompt, ids):
        with model.trace(prompt, remote=REMOTE):
            lp = F.log_softmax(model.lm_head.output[0, -1].float(), dim=-1)[ids].save()
        return lp


    gaps = {}
    for prompt in ["The weather today is", "My favourite food is"]:
        lp_small = word_logprobs(small, prompt, [5, 7, 9])
        lp_big = word_logprobs(big, prompt, [5, 7, 9])
        gaps[prompt] = round((lp_big - lp_small).mean().item(), 4)
        print(prompt, gaps[prompt])
'''


def _other(family: str) -> str:
    return next(repo for name, (repo, _layers) in FAMILIES.items() if name != family)


def _hoisting_findings(result) -> list:
    return [f for f in result.findings if f.pass_id == "session-hoisting" and f.status is not Status.APPLIED]


def _line_of(code: str, text: str) -> int:
    return code[: code.index(text)].count("\n")


@both
@pytest.mark.parametrize("template, what", [
    (TWO_MODELS, "`with small.trace(prompt, remote=True)`) and `big` (`with big.trace(prompt, remote=True)`"),
    (TWO_MODELS_THROUGH_A_HELPER, ("`word_logprobs(small, prompt, [5, 7, 9])`) and `big` "
                                   "(`word_logprobs(big, prompt, [5, 7, 9])`")),
])
def test_a_loop_over_two_models_is_left_with_one_finding_that_names_them(family, template, what):
    template = template.replace("OTHER", _other(family))
    result, report = optimized_and_verified(template, family)
    assert "session(" not in result.code, result.code
    assert report.after.requests == report.before.requests
    [found] = _hoisting_findings(result)
    assert found.range.start.line == _line_of(script(template, family), "for prompt in"), found
    assert "to 2 models (`small`, `big`)" in found.message, found.message
    assert "a session runs one model" in found.reason and what in found.reason, found.reason
    assert "give each model a loop of its own" in found.reason


LOOP = textwrap.dedent('''\
    import json
    from nnsight import LanguageModel

    model = LanguageModel("openai-community/gpt2")
    other = LanguageModel("meta-llama/Llama-3.1-8B")
    KW = {"remote": True}
    REMOTE = True
    tops = []
    for prompt in ["a b", "c d", "e f"]:
    BODY
    print(tops)
''')


def _loop(body: str) -> str:
    return LOOP.replace("BODY\n", textwrap.indent(textwrap.dedent(body), "    "))


@pytest.mark.parametrize("body, message, reason", [
    ('''\
        with model.trace(prompt, remote=True):
            tops.append(model.lm_head.output.argmax().save())
        with model.trace(prompt, remote=REMOTE):
            tops.append(model.lm_head.output.argmax().save())
    ''', "to `model` with 2 remote flags",
     "this loop's requests take `remote=True` (`with model.trace(prompt, remote=True)`) and `remote=REMOTE`"),
    ('''\
        with model.session(remote=True):
            with model.trace(prompt):
                tops.append(model.lm_head.output.argmax().save())
    ''', "to `model`, opening a session in each iteration",
     # (it said "a session cannot open inside another": a local one can, in a remote one)
     "NDIF refuses a remote session opened inside a running one, and ndif-opt leaves "
     "`with model.session(remote=True)`, a session you wrote, as it is"),
    ('''\
        with model.trace(prompt):
            local = model.lm_head.output.argmax().save()
        with model.trace(prompt, remote=True):
            tops.append(model.lm_head.output.argmax().save())
    ''', "to `model`", "`with model.trace(prompt)` runs on your machine (it has no `remote=`)"),
    ('''\
        with model.trace(prompt, **KW):
            tops.append(model.lm_head.output.argmax().save())
    ''', "to `model`", "`with model.trace(prompt, **KW)` passes `remote=` inside `**kwargs`"),
    # loops in it stopped for the same reason: one finding, the outermost loop's
    ('''\
        for layer in range(3):
            with model.trace(prompt, remote=True):
                tops.append(model.transformer.h[layer].output.sum().save())
            with other.trace(prompt, remote=True):
                tops.append(other.model.layers[layer].output.sum().save())
    ''', "to 2 models (`model`, `other`)", "a session runs one model"),
    # a run inside it that is refused (json feeds the remote part): the loop's finding only
    ('''\
        with model.trace(prompt, remote=True):
            a = model.lm_head.output.argmax().save()
        text = json.dumps({"a": a.item()})
        with model.trace(text, remote=True):
            tops.append(model.lm_head.output.argmax().save())
        with other.trace(prompt, remote=True):
            tops.append(other.lm_head.output.argmax().save())
    ''', "to 2 models (`model`, `other`)", "a session runs one model"),
])
def test_a_loop_its_own_remote_work_keeps_from_a_session_gets_one_finding(body, message, reason):
    source = _loop(body)
    result = optimize(source)
    found = _hoisting_findings(result)
    assert len(found) == 1, found
    assert found[0].range.start.line == _line_of(source, "for prompt in"), found
    assert message in found[0].message and reason in found[0].reason, (found[0].message, found[0].reason)


def test_a_loop_whose_inner_loop_became_a_session_keeps_the_reason_it_was_refused_for():
    # round one hoists the inner loop and refuses the outer one (json feeds its remote
    # part); round two sees a session in the outer loop: that session is ndif-opt's own,
    # not a reason to give
    source = _loop('''\
        if prompt == "c d":
            continue
        text = json.dumps({"prompt": prompt})
        for layer in range(3):
            with model.trace(text, remote=True):
                tops.append(model.transformer.h[layer].output.sum().save())
    ''')
    result = optimize(source)
    assert "model.session(" in result.code, result.code
    [found] = _hoisting_findings(result)
    assert "a session you wrote" not in found.reason and "`text` is computed" in found.reason, found.reason


CHUNKED = ("a 405B sweep over an hour is split",
           "a list the session fills and nothing reads is made again by each session, not merged")


@pytest.mark.parametrize("name", CHUNKED)
def test_the_loop_of_sessions_session_chunking_writes_gets_no_finding(name):
    from ndif_opt.passes.session_chunking import SessionChunking

    [case] = [c for c in SessionChunking.cases if c.name == name]
    result = optimize(case.before)
    assert "_ndif_chunk" in result.code, result.code
    assert not _hoisting_findings(result), _hoisting_findings(result)


# an `if __name__ == "__main__":` whose one loop of helper calls becomes a session (its print
# replayed after it): the `if` was also refused as a run of its own ("the code calls
# `print` ... in the same statement as remote work"), a [not fixed] next to the [fixable]
# that does what it asked for
MAIN_GUARD_AROUND_A_HOISTED_LOOP = '''
    import torch
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def last_norm(text, layer, remote=True):
        with model.trace(text, remote=remote):
            norm = LAYERS[layer].output[0, -1].norm().save()
        return norm


    if __name__ == "__main__":
        texts = ["A dog is an animal", "A car is a vehicle"]
        for layer in (0, 1):
            norms = [round(last_norm(t, layer).item(), 4) for t in texts]
            print(f"layer {layer}: {norms}")
'''


@both
def test_a_run_whose_remote_work_one_session_takes_gets_no_refusal(family):
    result, report = optimized_and_verified(MAIN_GUARD_AROUND_A_HOISTED_LOOP, family)
    assert report.before.requests == 4 and report.after.requests == 1, report.to_text() + result.code
    assert not _hoisting_findings(result), [(f.message, f.reason) for f in _hoisting_findings(result)]


# a comprehension of calls of a function the pass refuses (it declares `global`, changes a
# class attribute, passes `remote=` in `**kwargs`) sends a request per element, as
# the same calls in a `for` loop do: it was left silently, the loop with a finding
REFUSED_HELPER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    calls = 0


    def norm_at(layer):
        global calls
        calls += 1
        with model.trace("The weather today is", remote=True):
            n = LAYERS[layer].output[0, -1].norm().save()
        return round(n.item(), 4)


    class Probe:
        runs = 0

        def run(self, prompt):
            Probe.runs += 1
            with model.trace(prompt, remote=True):
                v = LAYERS[0].output[0, -1].norm().save()
            return round(v.item(), 4)


    def norm_kw(layer, **kw):
        with model.trace("The weather today is", **kw):
            n = LAYERS[layer].output[0, -1].norm().save()
        return round(n.item(), 4)


    probe = Probe()
    BUILT
    print(calls, Probe.runs, values)
'''


@both
@pytest.mark.parametrize("built, called, reason", [
    ("values = [norm_at(layer) for layer in range(2)]", "norm_at", "`norm_at` uses `global`"),
    ("values = {layer: norm_at(layer) for layer in range(2)}", "norm_at", "`norm_at` uses `global`"),
    ("values = sum(norm_at(layer) for layer in range(2))", "norm_at", "`norm_at` uses `global`"),
    ('values = [probe.run(p) for p in ["a b", "c d"]]', "probe.run", "changes `Probe`, which lives on your machine"),
    ("values = [norm_kw(layer, remote=True) for layer in range(2)]", "norm_kw",
     "`norm_kw` passes `remote=` inside `**kwargs`"),
])
def test_a_comprehension_of_a_refused_function_gets_one_finding_that_names_it(family, built, called, reason):
    result, report = optimized_and_verified(REFUSED_HELPER.replace("BUILT", built), family)
    assert report.before.requests == report.after.requests == 2, report.to_text() + result.code
    found = _hoisting_findings(result)
    assert len(found) == 1, [(f.message, f.reason) for f in found]
    source = script(REFUSED_HELPER.replace("BUILT", built), family)
    assert found[0].range.start.line == _line_of(source, built), found
    assert found[0].message.startswith(f"this comprehension calls `{called}`"), found[0].message
    assert reason in found[0].reason, found[0].reason
