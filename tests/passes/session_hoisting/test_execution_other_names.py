"""A same-file function with a remote block, called by another name: `score = top_token`
or `top3 = functools.partial(top_token, k=3)`. Each call runs the function, so the bill
counts its requests (it counted none: 1 request billed where 3 ran), and a loop or
comprehension of such calls gets a finding that says how to make it one session (it got
none). Each script runs on a tiny model of each family: the original locally, the original
and the optimized script through the NDIF emulation; stdout and every module-level value
must match, and the harness checks the bill of each run against what it measured."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

PARTIAL = '''
    import functools
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    PROMPTS = ["The capital of France is", "The capital of Italy is", "The capital of Spain is"]


    def top_token(prompt, k=1):
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output[0, -1].save()
        return logits.topk(k).indices.tolist()


    top3 = functools.partial(top_token, k=3)
    results = [top3(p) for p in PROMPTS]
    print(results)
'''

ALIAS = PARTIAL.replace("functools.partial(top_token, k=3)", "top_token").replace(
    "results = [top3(p) for p in PROMPTS]", "results = []\n    for p in PROMPTS:\n        results.append(top3(p))")


@both
@pytest.mark.parametrize("template, how", [(PARTIAL, "a `functools.partial` of `top_token`"),
                                           (ALIAS, "another name of `top_token`")], ids=["partial", "alias"])
def test_calls_of_a_remote_function_by_another_name_are_billed_and_explained(family, template, how):
    result, report = optimized_and_verified(template, family)
    assert report.before.requests == 3 and result.costs[0].before.requests == 3, report.to_text()
    hoisting = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert len(hoisting) == 1 and how in hoisting[0].message, [f.message for f in result.findings]
    assert "call `top_token(...)`" in (hoisting[0].reason or ""), hoisting[0].reason


# the function is also called directly in a loop, which becomes a session: session-hoisting
# gives it a `remote` parameter and passes `remote=False` there. The partial's calls keep the
# default (remote), which the analysis read as "every call passes False" (it saw only calls
# by name): the optimized script's bill said 1 request where 3 ran (the harness compares
# each run's bill with what it measured)
CALLED_BOTH_WAYS = '''
    import functools
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def top_token(prompt, k=1):
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output[0, -1].save()
        return logits.topk(k).indices.tolist()


    first = {p: top_token(p) for p in ["The cat sat", "A dog ran"]}
    top3 = functools.partial(top_token, k=3)
    results = []
    for p in ["The capital of France is", "The capital of Italy is", "The capital of Spain is"]:
        results.append(top3(p))
    print(first, results)
'''


@both
def test_a_function_called_by_name_in_a_session_and_through_a_partial_outside_is_billed(family):
    result, report = optimized_and_verified(CALLED_BOTH_WAYS, family)
    assert (report.before.requests, report.after.requests) == (5, 4), report.to_text() + result.code
    assert result.costs[-1].after.requests == 4, result.costs
