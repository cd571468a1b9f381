"""A session never opens inside another one (issue "Never wrong").

A helper whose body is a run of remote traces gets a session of its own; a loop in another
function that calls that helper may get one too. Planned in the same run, the helper's
session (`remote=True`, written out) would run inside the loop's: NDIF refuses a remote
request opened from inside a running one. The loop waits for the next run, where the
helper takes the flag and its session runs inside the loop's.

The helper also calls `torch.sort(x)`: a function of the module `torch`, not a list's
`.sort()`, so it changes nothing on your machine (it used to stop the loop's session with
"changes `torch`, which lives on your machine").
"""

from __future__ import annotations

from execution import both, optimized_and_verified

HELPER_WITH_TWO_TRACES = '''
    import torch
    from nnsight import LanguageModel


    def hidden_of(model, prompt):
        with model.trace(prompt, remote=True):
            hidden = LAYERS[1].output[0, -1].save()
        return hidden


    def logits_of(model, prompt):
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output[0, -1].save()
        return logits


    def top_of(model, prompt):
        hidden = hidden_of(model, prompt)
        logits = logits_of(model, prompt)
        ordered, order = torch.sort(logits, descending=True)
        return order[0].item(), hidden.norm().item()


    def sweep(model, prompts):
        found = []
        for prompt in prompts:
            found.append(top_of(model, prompt))
            found.append(logits_of(model, prompt).argmax().item())
        return found


    model = LanguageModel("REPO")
    results = sweep(model, ["The cat sat on the", "Paris is the capital of"])
    print(results)
'''


@both
def test_a_helper_with_its_own_session_called_from_a_loop_gets_no_nested_remote_session(family):
    result, report = optimized_and_verified(HELPER_WITH_TWO_TRACES, family)
    assert report.before.requests == 6, report.to_text()
    assert report.after.requests <= 3, report.to_text() + result.code
    assert "changes `torch`" not in "\n".join(f.reason or "" for f in result.findings)
