"""Execution checks for real-world shapes of code: remote flags in parameters and
config objects, traces inside helper functions."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("nnsight")

from execution import verified  # noqa: E402

from ndif_opt import optimize  # noqa: E402


def check(source: str, **kwargs):
    source = textwrap.dedent(source)
    result = optimize(source, **kwargs)
    report = verified(source, result, filename="script.py")
    assert report.intended_ok, report.to_text()
    assert not report.errors["optimized"], report.errors
    return result, report


def test_trace_inside_a_helper_called_from_a_loop():
    result, report = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("openai-community/gpt2")
        PROMPTS = ["a b c", "the cat sat", "hello world", "one two"]


        def top_token(prompt):
            """The most likely next token."""
            with model.trace(prompt, remote=True):
                logits = model.lm_head.output.save()
            return logits[0, -1].argmax().item()


        tops = []
        for prompt in PROMPTS:
            tops.append(top_token(prompt))
        single = top_token("another prompt")
        print(single)
        '''
    )
    assert "top_token(prompt, remote=False)" in result.code
    assert 'single = top_token("another prompt", remote=False).save()' in result.code
    assert (report.before.requests, report.after.requests) == (5, 1)


def test_helper_filling_an_accumulator_argument():
    result, report = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("meta-llama/Llama-3.1-8B")


        def collect(prompt, out, remote=True):
            with model.trace(prompt, remote=remote):
                hidden = model.model.layers[2].output[:, -1].save()
            out.append(hidden.norm().item())


        norms = []
        for prompt in ["a b", "c d e", "f"]:
            collect(prompt, norms)
        '''
    )
    assert "collect(prompt, norms, remote=False)" in result.code
    assert report.before.requests == 3 and report.after.requests == 1


@pytest.mark.parametrize(
    "setup, flag",
    [
        ("REMOTE = True", "REMOTE"),
        ("CONFIG = {'remote': True}", "CONFIG['remote']"),
        ("class Settings:\n    remote = True", "Settings.remote"),
    ],
)
def test_remote_flag_through_constants_and_config(setup, flag):
    result, report = check(
        f'''
from nnsight import LanguageModel

{setup}
model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in ["a b", "c d"]:
    with model.trace(prompt, remote={flag}):
        outs.append(model.lm_head.output[0, -1].argmax().save())
'''
    )
    assert f"model.session(remote={flag})" in result.code
    assert (report.before.requests, report.after.requests) == (2, 1)


def test_remote_flag_as_a_parameter():
    result, report = check(
        '''
        from nnsight import LanguageModel

        model = LanguageModel("openai-community/gpt2")


        def sweep(prompts, remote=False):
            outs = []
            for prompt in prompts:
                with model.trace(prompt, remote=remote):
                    outs.append(model.lm_head.output[0, -1].argmax().save())
            return outs


        tops = sweep(["a b", "c d", "e f"], remote=True)
        '''
    )
    assert "with model.session(remote=remote):" in result.code
    assert (report.before.requests, report.after.requests) == (3, 1)
