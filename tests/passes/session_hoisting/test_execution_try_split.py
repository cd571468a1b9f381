"""Execution checks for a `try` around a remote trace whose handler ends the iteration
(`except Exception: continue`), in a loop split between the session and a replay.

The `try` runs in the session as written, so a trace that fails is handled there, item by
item; the session records whether the handler ended the iteration, and the replay skips
the same iterations. The trace itself never runs again on your machine (it did: the replay
held the `try` with its remote trace, sent each request again after the session, and the
pipeline's next round wrapped that replay in a session of its own, round after round).
Each script runs on a tiny model of each family: the original locally, the original and the
optimized script through the NDIF emulation; stdout and every module-level value must match.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

# a layer index past the model's last fails the trace of that item, on NDIF as locally
PRINTED = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    ok = {}
    for i, layer in enumerate(INDICES):
        try:
            with model.trace("The Eiffel Tower is in", remote=True):
                val = LAYERS[layer].output[0].norm().save()
        except Exception:
            continue
        print("ok", i, round(val.item(), 3))
        ok[i] = round(val.item(), 3)
    print(ok)
'''


def _after_the_session(code: str) -> str:
    """The code after the session's block: the replay."""
    lines = code.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("with model.session("))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    return "\n".join(lines[end:])


@both
@pytest.mark.parametrize("indices", ["[0, 1]", "[0, 99, 1]", "[0, 1, 99]"])
def test_a_handler_that_continues_is_replayed_without_the_trace(family, indices):
    result, report = optimized_and_verified(PRINTED.replace("INDICES", indices), family)
    assert report.after.requests == 1 < report.before.requests, report.to_text() + result.code
    replay = _after_the_session(result.code)
    assert "model.trace" not in replay and "if next(_ndif_items):\n        continue" in replay, result.code
    assert result.code.count("with model.session(") == 1, result.code


# the loop's name printed after a `try` that may have failed: bound in the replay only on
# the iterations it prints, so it is not brought back (and the finding says so)
SWALLOWED = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    vals = {}
    for layer in [0, 99, 1, 98]:
        v = None
        try:
            with model.trace("Exceptions everywhere", remote=True):
                v = LAYERS[layer].output[0].norm().save()
        except Exception:
            pass
        if v is None:
            print("failed", layer)
            continue
        vals[layer] = round(v.item(), 4)
    print(vals)
'''


@both
def test_a_name_the_replay_binds_on_some_iterations_is_listed_as_not_brought_back(family):
    result, report = optimized_and_verified(SWALLOWED, family)
    assert report.after.requests == 1, report.to_text() + result.code
    hoisted = next(f for f in result.findings if f.pass_id == "session-hoisting")
    assert "not brought back: `layer`" in hoisted.message, hoisted.message
    assert "layer" in result.unreturned


# failures recorded, then a `continue` on a value the session computed
RECORDED = '''
    import math
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    ok, failed = {}, []
    for i, layer in enumerate([0, 99, 1]):
        try:
            with model.trace("short", remote=True):
                val = LAYERS[layer].output[0].norm().save()
        except Exception:
            failed.append(i)
            continue
        v = val.item()
        if math.isnan(v):
            continue
        print(i, round(v, 3))
        ok[i] = v
    print(sorted(ok), failed)
'''


@both
def test_a_recorded_failure_then_a_continue_on_a_value(family):
    result, report = optimized_and_verified(RECORDED, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "model.trace" not in _after_the_session(result.code), result.code


# a `try` around a call of the function that holds the loop: the second trace fails (a
# layer past the last), the handler lets the script go on with what the first appended.
# One session lost it all (verify: MISMATCH, `results: expected list of 1, got list of
# 0`); it now falls back on the code as written, as a `try` of the loop's own does
HANDLED_AROUND_THE_CALL = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    results = []


    def run_all(layers):
        for layer in layers:
            with model.trace("The Eiffel Tower is in", remote=True):
                val = LAYERS[layer].output[0].norm().save()
            results.append(round(val.item(), 3))


    try:
        run_all(INDICES)
    except Exception:
        pass
    print(len(results))
'''


@both
@pytest.mark.parametrize("indices", ["[0, 1]", "[0, 99, 1]"])
def test_a_failure_a_try_around_the_call_handles_keeps_what_came_before(family, indices):
    result, report = optimized_and_verified(HANDLED_AROUND_THE_CALL.replace("INDICES", indices), family)
    assert "with model.session(" in result.code and "except Exception:  # the session failed" in result.code, \
        result.code
    assert any("a `try` around a call of `run_all`" in f.message for f in result.findings), result.findings


# prompts taken from an iterator of yours, a `try` in the loop with code of your machine
# after its trace: the prompts were prepared before the session, and the session's
# fallback (the code as written, should it fail) took them from the iterator again: the
# rewrite raised StopIteration where the original ran
PREPARED_THEN_FALLEN_BACK = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    it = iter(["The cat sat on the", "A dog ran to the", "Birds fly over the"])
    for i in range(3):
        prompt = next(it)
        try:
            with model.trace(prompt, remote=True):
                val = LAYERS[i * 50].output.norm().save()
            print(i, round(val.item(), 3))
        except Exception:
            print("failed", i)
    left = list(it)
'''


@both
def test_a_fallback_does_not_take_prepared_values_again(family):
    result, report = optimized_and_verified(PREPARED_THEN_FALLEN_BACK, family)
    assert "session(" not in result.code, result.code
    assert any("would compute again what the session took" in (f.reason or "") for f in result.findings), \
        [(f.message, f.reason) for f in result.findings]
