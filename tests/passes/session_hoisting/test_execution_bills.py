"""The bill is what runs (issue 33.6), on shapes a new user's scripts showed: the execution
harness (tests/execution.py) compares the cost model's requests with each emulated run.

- `if layer % 2: continue` before the trace in a loop over `range(12)`: the walk decides a
  test it knows in each unrolled iteration; `%` was not among the operators it computes, so
  the bill said 12 requests where 6 run.
"""

from __future__ import annotations

from execution import both, optimized_and_verified

EVEN_LAYERS = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")

    norms = {}
    for layer in range(4):
        if layer % 2:
            continue  # only even layers
        with model.trace("The capital of Spain is", remote=True):
            n = LAYERS[layer].output[0, -1].norm().save()
        norms[layer] = n.item()
'''


@both
def test_a_continue_on_odd_layers_halves_the_bill(family):
    result, report = optimized_and_verified(EVEN_LAYERS, family, let_go=frozenset({"n", "layer"}))
    assert report.before.requests == 2 and report.after.requests == 1, report.to_text() + result.code


FIRST_HIT = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")

    hits = []
    for prompt in ["The capital of Spain is", "One two three"]:
        for layer in range(4):
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().save()
            if top.item() >= 0:  # (always: the first layer ends each search)
                hits.append((prompt, layer))
                break
'''


@both
def test_a_loop_that_may_break_early_is_counted_up_to_its_iterations(family):
    # the table counts every iteration (8); a `break` decided as the code runs may end the
    # loop sooner (2 ran): the finding says "up to 8 requests"
    result, report = optimized_and_verified(FIRST_HIT, family, let_go=frozenset({"top", "prompt", "layer"}))
    assert report.before.requests == 2 and report.after.requests == 1, report.to_text()
    assert any("one session: up to 8 requests → 1" in f.message for f in result.findings), result.findings
