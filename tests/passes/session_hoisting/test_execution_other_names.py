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
