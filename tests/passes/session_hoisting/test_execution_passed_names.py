"""Execution checks for functions that read a module name the session computes.

`vec = last_resid(a) - last_resid(b)` followed by a loop of `steered(prompt, alpha)`,
where `steered` reads the module's `vec`: in one session, the copy of `steered` that
the request carries cannot see the `vec` the session binds (NDIF raises NameError), so
the session hands it over: `def steered(prompt, alpha, remote=True, *, vec)` and
`steered(prompt, alpha, remote=False, vec=vec)`. Refused — the work stays in a session
of its own per part, as before — when a function the session's functions call reads the
name (it is not handed over twice), or when the function is also called where the
argument would be missing. Each script runs on a tiny model of each family: the original
locally, the original and the optimized script through the NDIF emulation; stdout and
every module-level value must match.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

STEERING = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    tok = model.tokenizer


    def last_resid(text):
        with model.trace(text, remote=True):
            h = LAYERS[1].output.save()
        return h[0, -1]


    def closeness(x):
        return round(torch.cosine_similarity(x, vec, dim=0).item(), 4)


    def steered_top(prompt, alpha):
        with model.trace(prompt, remote=True):
            LAYERS[1].output[0, -1] += alpha * vec
            logits = model.lm_head.output.save()
        return logits[0, -1].argmax().item()


    import torch

    vec = last_resid("the cat sat") - last_resid("a dog ran")
    print(f"norm {vec.norm().item():.3f}")
    found = {}
    for prompt in ["one two three", "the cat sat on the"]:
        tops = [steered_top(prompt, alpha) for alpha in (0.0, 4.0, 16.0)]
        print(prompt, [tok.decode(t) for t in tops])
        found[prompt] = tops
    self_similarity = closeness(last_resid("the cat sat"))
    print("self", self_similarity)
'''


@both
def test_a_name_the_session_computes_is_handed_to_the_functions_that_read_it(family):
    result, report = optimized_and_verified(STEERING, family)
    assert report.before.requests == 9 and report.after.requests == 1, report.to_text() + result.code
    assert "def steered_top(prompt, alpha, remote=True, *, vec):" in result.code
    assert "def closeness(x, *, vec):" in result.code
    assert "steered_top(prompt, alpha, remote=False, vec=vec)" in result.code


@both
def test_a_function_also_called_on_your_machine_keeps_reading_the_module_name(family):
    # `closeness` runs once more after the experiment, outside any session: it keeps its
    # signature, so the session cannot hand `vec` to it and the work stays in two parts
    script = STEERING + '    print("again", closeness(vec))\n'
    result, report = optimized_and_verified(script, family)
    assert "def closeness(x):" in result.code
    assert report.after.requests == 2, report.to_text() + result.code


NESTED = '''
    import torch
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def last_resid(text):
        with model.trace(text, remote=True):
            h = LAYERS[1].output.save()
        return h[0, -1]


    def push(alpha):
        return alpha * vec


    def steered_norm(prompt, alpha):
        with model.trace(prompt, remote=True):
            LAYERS[1].output[0, -1] += push(alpha)
            out = LAYERS[1].output[0, -1].norm().save()
        return round(out.item(), 3)


    vec = last_resid("the cat sat") - last_resid("a dog ran")
    norms = [steered_norm("one two three", a) for a in (0.0, 2.0)]
    print(norms)
'''


@both
def test_a_name_read_by_a_function_the_sessions_functions_call_is_not_hidden(family):
    # `push` reads `vec` and is called by `steered_norm`, not by the session itself: the
    # session cannot hand it over, so `vec` is computed in a session of its own first
    result, report = optimized_and_verified(NESTED, family)
    assert report.after.requests == 2, report.to_text() + result.code


MAIN_GUARD = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def steered_top(prompt, alpha):
        with model.trace(prompt, remote=True):
            LAYERS[1].output[0, -1] += alpha * vec
            top = model.lm_head.output[0, -1].argmax().item().save()
        return top


    if __name__ == "__main__":
        with model.trace("the cat sat", remote=True):
            vec = LAYERS[1].output[0, -1].save()
        print([steered_top("one two three", alpha) for alpha in (1.0, 8.0)])
'''


@both
def test_names_bound_under_a_main_guard_are_the_modules_too(family):
    # code under `if __name__ == "__main__":` binds module names: the function reads them
    result, report = optimized_and_verified(MAIN_GUARD, family)
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code
    assert "def steered_top(prompt, alpha, remote=True, *, vec):" in result.code
