"""Execution checks for what a session no longer downloads in a script.

A script's module-level names are its results (`python -i`, `%run`, an import or a
debugger sees them when it ends), except its intermediates: a name bound only to a
saved model value, and a loop temporary that every iteration binds afresh. So a result
the session binds at module level comes back whether or not the code after it reads it
(verify compares it), while a value saved in a trace inside the session, which only the
session's code reads, is not downloaded however often the name is bound there (a greedy
loop's `logits` and the scoring trace's `logits` after it), nor is a function's local.
In a notebook the kernel keeps the names for cells to come, and they still come back (a
case of session-hoisting). Each script runs on a tiny model of each family: the original
locally, the original and the optimized script through the NDIF emulation; stdout and
every result must match.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

GREEDY = '''
    import torch
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    ids = model.tokenizer("Once upon a time", return_tensors="pt")["input_ids"]
    start = ids.shape[1]
    for step in range(3):
        with model.trace(ids, remote=True):
            logits = model.lm_head.output.save()
        next_id = logits[0, -1].argmax()
        ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
        print(f"step {step}: {model.tokenizer.decode(next_id)!r}")
    with model.trace(ids, remote=True):
        logits = model.lm_head.output.save()
    logprobs = torch.log_softmax(logits[0, :-1], dim=-1)
    chosen = logprobs.gather(-1, ids[0, 1:, None])[:, 0]
    print("continuation log-prob", round(chosen[start - 1:].sum().item(), 3))
'''


@both
def test_values_only_the_session_reads_are_not_downloaded(family):
    result, report = optimized_and_verified(GREEDY, family)
    assert report.after.requests == 1, report.to_text() + result.code
    # neither value of `logits` (the loop's, and the scoring trace's after it) comes
    # back whole: the session reads the first, the second is reduced in its trace
    assert "logits = model.lm_head.output.save()" not in result.code, result.code
    assert "logits = model.lm_head.output\n" in result.code, result.code


PATCH = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("the cat sat on the", remote=True):
        clean = LAYERS[1].output.save()
    shift = clean[0, -1] - clean[0, 0]
    with model.trace("one two three", remote=True):
        LAYERS[1].output[0, -1] += shift
        top = model.lm_head.output[0, -1].argmax().save()
    print("patched top", top.item())
'''


@both
def test_a_module_name_the_session_computes_comes_back_as_a_result(family):
    # `shift` is read by the session only, but the script ends with it: it comes back
    result, report = optimized_and_verified(PATCH, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "    shift = (clean[0, -1] - clean[0, 0]).save()\n" in result.code, result.code
    assert "shift" not in result.unreturned


PATCH_IN_FUNCTION = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def patched_top():
        with model.trace("the cat sat on the", remote=True):
            clean = LAYERS[1].output.save()
        shift = clean[0, -1] - clean[0, 0]
        with model.trace("one two three", remote=True):
            LAYERS[1].output[0, -1] += shift
            top = model.lm_head.output[0, -1].argmax().save()
        return top.item()


    print("patched top", patched_top())
'''


@both
def test_a_function_local_only_the_session_reads_is_not_downloaded(family):
    result, report = optimized_and_verified(PATCH_IN_FUNCTION, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "shift = clean[0, -1] - clean[0, 0]\n" in result.code and "shift = (" not in result.code, result.code


@both
def test_a_module_name_read_after_the_session_still_comes_back(family):
    result, report = optimized_and_verified(GREEDY + '    print("shape", tuple(logprobs.shape))\n', family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "logprobs = torch.log_softmax(logits[0, :-1], dim=-1).save()" in result.code, result.code


REFINE = '''
    import torch
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("the cat sat on the", remote=True):
        goal = LAYERS[-1].output[0, -1].save()
    vec = torch.zeros_like(goal)
    for rnd in range(3):
        with model.trace("one two three", remote=True):
            LAYERS[0].output[0, -1] += vec
            now = LAYERS[-1].output[0, -1].save()
        cos = torch.cosine_similarity(now, goal, dim=0).item()
        print(f"round {rnd}: cos={cos:.4f} |vec|={vec.norm().item():.3f}")
        vec = vec + 0.5 * (goal - now)
'''


@both
def test_a_print_of_a_value_the_loop_changes_later_records_only_what_it_prints(family):
    # `vec` is bound again after the print: its record is what the print reads of it
    # (`vec.norm().item()`, a number), not a copy of the whole vector every round
    result, report = optimized_and_verified(REFINE, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert '"vec_norm": vec.norm().item()}' in result.code, result.code


LENS = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def lens(prompt, layer):
        with model.trace(prompt, remote=True):
            logits = model.lm_head(model.MODEL_NORM(LAYERS[layer].output)).save()
        return logits


    for prompt in ["the cat sat on the", "one two three"]:
        for layer in range(2):
            logits = lens(prompt, layer)
            print(prompt, layer, logits[0, -1].argmax().item())
'''
NORMS = {"gpt2": "transformer.ln_f", "llama": "model.norm"}


@both
def test_what_a_function_saved_and_returned_is_let_go_when_nothing_reads_it_after(family):
    # the last `logits` a helper saved and returned would come back with the session;
    # nothing after it reads the name, so the session ends by letting it go
    script = LENS.replace("MODEL_NORM", NORMS[family])
    result, report = optimized_and_verified(script, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "    logits = None  # nothing after the session reads it" in result.code, result.code
    kept, kept_report = optimized_and_verified(script + '    print("last", tuple(logits.shape))\n', family)
    assert "logits = None" not in kept.code, kept.code
    # the full logits of the last call are what the first run does not download
    assert report.after.download_bytes < kept_report.after.download_bytes, (report.to_text(), kept_report.to_text())


@both
def test_several_names_let_go_are_one_line(family):
    # two helper results nothing after the session reads: one line lets both go
    script = LENS.replace("MODEL_NORM", NORMS[family]).replace(
        "            logits = lens(prompt, layer)\n            print(prompt, layer, logits[0, -1].argmax().item())\n",
        "            first = lens(prompt, 0)\n            logits = lens(prompt, layer)\n"
        "            print(prompt, layer, logits[0, -1].argmax().item(), first[0, -1].argmax().item())\n",
    )
    result, report = optimized_and_verified(script, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "    first = logits = None  # nothing after the session reads them" in result.code, result.code


@both
def test_names_a_helpers_returned_tuple_binds_are_let_go_too(family):
    # `resid, logits = probe(prompt)`: the helper returns two saved values; the names the
    # unpacking binds came back with the session (one iteration's full values downloaded)
    script = (
        "\n    from nnsight import LanguageModel\n\n    model = LanguageModel(\"REPO\")\n\n\n"
        "    def probe(prompt):\n        with model.trace(prompt, remote=True):\n"
        "            resid = LAYERS[1].output.save()\n            logits = model.lm_head.output.save()\n"
        "        return resid, logits\n\n\n    norms = {}\n"
        "    for prompt in [\"The cat sat on the\", \"A dog ran to the\"]:\n"
        "        resid, logits = probe(prompt)\n"
        "        norms[prompt] = (round(resid[0, -1].norm().item(), 4), round(logits[0, -1].max().item(), 4))\n"
        "    print(norms)\n"
    )
    result, report = optimized_and_verified(script, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "    resid = logits = None  # nothing after the session reads them" in result.code, result.code
    assert report.after.download_bytes * 10 < report.before.download_bytes, report.to_text()


COUNT = '''
    import torch
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    states = []
    for p in ["the cat sat", "one two three", "a b c d"]:
        with model.trace(p, remote=True):
            h = LAYERS[1].output.save()
        states.append(h[0, -1])
    mean = torch.stack(states).mean(dim=0)
    print(f"{len(states)} states, mean norm {mean.norm().item():.3f}")
    with model.trace("the cat", remote=True):
        LAYERS[1].output[0, -1] += mean
        top = model.lm_head.output[0, -1].argmax().item().save()
    print("steered top", top)
'''


@both
def test_a_print_of_how_many_values_a_list_holds_records_the_count(family):
    # the print reads `len(states)` only: its record is the number, not the list of vectors
    result, report = optimized_and_verified(COUNT, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert '_ndif_log["len_states"] = len(states)' in result.code, result.code
    assert '_ndif_log["mean_norm"] = mean.norm().item()' in result.code, result.code


@both
def test_a_module_level_list_the_session_fills_comes_back_as_a_result(family):
    # `states` is filled by the loop and read by the session's code only (the mean, and
    # the print's count, which the replay records), but the script ends with it
    result, report = optimized_and_verified(COUNT, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "states = list().save()" in result.code, result.code


COUNT_IN_FUNCTION = '''
    import torch
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def steered_top():
        states = []
        for p in ["the cat sat", "one two three", "a b c d"]:
            with model.trace(p, remote=True):
                h = LAYERS[1].output.save()
            states.append(h[0, -1])
        mean = torch.stack(states).mean(dim=0)
        print(f"{len(states)} states, mean norm {mean.norm().item():.3f}")
        with model.trace("the cat", remote=True):
            LAYERS[1].output[0, -1] += mean
            top = model.lm_head.output[0, -1].argmax().item().save()
        return top


    print("steered top", steered_top())
'''


@both
def test_a_list_a_function_fills_for_the_session_only_is_made_there_and_not_downloaded(family):
    result, report = optimized_and_verified(COUNT_IN_FUNCTION, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "states = []\n" in result.code and "states = list().save()" not in result.code, result.code
    kept_source = COUNT_IN_FUNCTION.replace("        return top", '        print("kept", len(states))\n        return top')
    kept, kept_report = optimized_and_verified(kept_source, family)
    assert "states = list().save()" in kept.code, kept.code
    # the vectors it holds are what the first run does not download
    assert report.after.download_bytes < kept_report.after.download_bytes, (report.to_text(), kept_report.to_text())


# a function defined after the loop binds its own `tracer`: it reads no `tracer` of the
# module (a trial's: the loop's tracer was brought back from the session, which cannot
# pickle it: the optimized script raised)
TRACER_NAME_REUSED_IN_A_FUNCTION = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    vals = []
    for layer in range(2):
        with model.trace("I think", remote=True) as tracer:
            n = LAYERS[layer].output.norm().save()
        vals.append(round(n.item(), 4))
    print(vals)


    def first_layer(prompt):
        with model.trace(prompt, remote=True) as tracer:
            h = LAYERS[0].output.save()
            tracer.stop()
        return h
'''


@both
def test_a_name_a_later_function_binds_for_itself_is_not_brought_back(family):
    result, report = optimized_and_verified(TRACER_NAME_REUSED_IN_A_FUNCTION, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert '_ndif_log["tracer"]' not in result.code, result.code
