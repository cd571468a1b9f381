"""Execution checks for reductions moved into the block that fills a saved list or dict.

A loop of traces fills a list or dict with whole tensors (full logits, a layer's whole
output), and the code after the request reads every element through the same reduction
(`logits[0, -1].argmax().item()`, a norm): each element is reduced where the block
stores it, and only the reduced values are downloaded. Each script runs on a tiny model
of each family: the original locally, the original and the optimized script through the
NDIF emulation; stdout and the values the script reads must match.

At module level the container is a result of the script (it ends with it), so reducing
its elements changes a result: an unsafe fix, applied here with --unsafe-fixes, and the
container itself is not compared (the user accepted that it holds the reductions).
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import FAMILIES, both, optimized_and_verified  # noqa: E402
from execution import script as script_for  # noqa: E402

from ndif_opt import optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

ABLATIONS = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    results = {}
    for layer in range(2):
        with model.trace("The Eiffel Tower is in the city of", remote=True):
            LAYERS[layer].mlp.output[:] = 0
            results[layer] = model.lm_head.output.save()
    for layer, logits in results.items():
        print(layer, logits[0, -1].argmax().item())
'''


@both
def test_a_dict_of_logits_read_through_one_reduction_downloads_the_reduced_values(family):
    result, report = optimized_and_verified(ABLATIONS, family, unsafe=True)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "results[layer] = model.lm_head.output[0, -1].argmax().item()" in result.code, result.code
    assert "    print(layer, logits)\n" in result.code, result.code
    # read whole once more, the logits come back whole: what the first run does not download
    kept, kept_report = optimized_and_verified(ABLATIONS + "    print([tuple(v.shape) for v in results.values()])\n", family, unsafe=True)
    assert "results[layer] = model.lm_head.output\n" in kept.code, kept.code
    assert report.after.download_bytes * 10 < kept_report.after.download_bytes, (report.to_text(), kept_report.to_text())


NORMS = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    states = []
    for prompt in ["The cat sat on the", "One two three", "Hello there"]:
        with model.trace(prompt, remote=True):
            states.append(LAYERS[1].output.save())
    norms = [s[0, -1].norm().item() for s in states]
    print([round(n, 4) for n in norms], len(states))
'''


@both
def test_a_list_read_by_a_comprehension_downloads_the_reduced_values(family):
    result, report = optimized_and_verified(NORMS, family, unsafe=True)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "states.append(LAYERS[1].output[0, -1].norm().item())".replace("LAYERS", FAMILIES[family][1]) \
        in result.code, result.code
    # the comprehension was only the reduction: what is left is a copy of the list
    assert "norms = list(states)" in result.code, result.code


def test_a_comprehension_left_copying_keeps_its_form_where_the_file_names_something_list():
    # `list(states)` would call the file's own `list` where it is bound
    source = script_for(NORMS, "gpt2")
    shadowing = "def tally(list):\n    return len(list)\n\n\n"
    source = source.replace("model = LanguageModel", shadowing + "model = LanguageModel")
    result = optimize(source, options=Options(unsafe_fixes=True))
    assert "states.append(" in result.code and "norms = [s for s in states]" in result.code, result.code


@both
def test_an_element_changed_in_place_after_it_is_stored_is_downloaded_whole(family):
    # the block zeroes the stored tensor after storing it: the client reads the zeros,
    # a reduction at the store would read the values before
    script = NORMS.replace(
        "            states.append(LAYERS[1].output.save())\n",
        "            states.append(LAYERS[1].output.save())\n            LAYERS[1].output[:] = 0\n",
    )
    result, report = optimized_and_verified(script, family, unsafe=True)
    assert "norm().item())" not in result.code.split("norms =")[0], result.code
    reasons = [f.reason or "" for f in result.findings if f.pass_id == "reduction-pushdown" and not f.applied]
    assert any("changes a value in place after the block stores it" in r for r in reasons), reasons


@both
def test_a_change_in_place_of_another_object_after_the_store_does_not_keep_elements_whole(family):
    # a dict of the script's own changed after the store cannot reach the stored tensor (a
    # trial's: the reason cited such a change, in a line session-hoisting wrote)
    script = NORMS.replace("    states = []\n", "    states = []\n    seen = {}\n").replace(
        "            states.append(LAYERS[1].output.save())\n",
        "            states.append(LAYERS[1].output.save())\n            seen[prompt] = len(prompt)\n",
    ).replace("len(states))", "len(states), seen)")
    result, report = optimized_and_verified(script, family, unsafe=True)
    assert "norm().item())" in result.code.split("norms =")[0], result.code
    assert report.after.download_bytes < report.before.download_bytes, report.to_text()


@both
def test_elements_read_only_behind_a_condition_are_downloaded_whole(family):
    # the client reduces an element only when a condition holds: the reduction is not
    # known to work on every element, so it is not moved
    script = NORMS.replace(
        "    norms = [s[0, -1].norm().item() for s in states]\n",
        "    SHOW = True\n    norms = [s[0, -1].norm().item() if SHOW else 0.0 for s in states]\n",
    )
    result, report = optimized_and_verified(script, family, unsafe=True)
    assert "norm().item())" not in result.code.split("norms =")[0], result.code
    reasons = [f.reason or "" for f in result.findings if f.pass_id == "reduction-pushdown" and not f.applied]
    assert any("no loop over all of it reduces every element" in r for r in reasons), reasons


PAIR = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in the city of", remote=True):
        clean = model.lm_head.output.save()
    with model.trace("The Colosseum is in the city of", remote=True):
        LAYERS[0].output[0, -1] = 0
        patched = model.lm_head.output.save()
    for name, logits in [("clean", clean), ("patched", patched)]:
        top = logits[0, -1].softmax(-1).topk(3)
        print(name, top.indices.tolist(), [round(p, 4) for p in top.values.tolist()])
    overlap = set(clean[0, -1].topk(3).indices.tolist()) & set(patched[0, -1].topk(3).indices.tolist())
    print(sorted(overlap))
'''


@both
def test_saved_values_a_loop_goes_over_in_a_written_out_list_are_reduced_in_their_blocks(family):
    # the loop reads each logits tensor through one reduction, the line after through
    # another: both come back reduced, neither whole
    result, report = optimized_and_verified(PAIR, family, unsafe=True)
    assert report.after.requests == 1, report.to_text() + result.code
    assert 'for name, logits in [("clean", clean_topk), ("patched", patched_topk)]:' in result.code, result.code
    assert "clean = model.lm_head.output\n" in result.code, result.code
    kept, kept_report = optimized_and_verified(PAIR + "    print(tuple(clean.shape))\n", family, unsafe=True)
    clean_line = next(line for line in kept.code.splitlines() if line.strip().startswith("clean = "))
    assert clean_line.endswith(".save()"), kept.code  # read whole: its own save stays
    assert 'for name, logits in [("clean", clean_topk), ("patched", patched_topk)]:' in kept.code, kept.code
    assert report.after.download_bytes < kept_report.after.download_bytes, (report.to_text(), kept_report.to_text())


@both
def test_an_element_a_later_iteration_changes_in_place_is_downloaded_whole(family):
    # each iteration doubles the input of its layer — the output stored by the iteration
    # before: the client reads the doubled values, a reduction at the store would not
    script = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The cat sat on the mat", remote=True):
        acts = list().save()
        for layer in range(3):
            if layer > 0:
                LAYERS[layer].input[:] = LAYERS[layer].input * 2
            acts.append(LAYERS[layer].output)
    print([round(a[0, -1].norm().item(), 4) for a in acts])
'''
    result, report = optimized_and_verified(script, family, unsafe=True)
    assert "acts.append(LAYERS[layer].output)".replace("LAYERS", FAMILIES[family][1]) in result.code, result.code
    reasons = [f.reason or "" for f in result.findings if f.pass_id == "reduction-pushdown" and not f.applied]
    assert any("in the loop that stores it" in r for r in reasons), reasons


CACHE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    cache = {}
    for prompt in ["The cat sat on the", "Paris is the capital of"]:
        with model.trace(prompt, remote=True):
            cache[prompt] = model.lm_head.output.save()
    for prompt in cache:
        print(prompt, cache[prompt][0, -1].argmax().item())
'''


@both
def test_a_dict_read_by_key_in_a_loop_over_its_keys_downloads_the_reduced_values(family):
    result, report = optimized_and_verified(CACHE, family, unsafe=True)
    assert "cache[prompt] = model.lm_head.output[0, -1].argmax().item()" in result.code, result.code
    assert "    print(prompt, cache[prompt])\n" in result.code, result.code
    # handed on whole, the dict keeps its elements whole
    kept, _ = optimized_and_verified(CACHE + "    snapshot = dict(cache)\n", family, unsafe=True)
    assert "cache[prompt] = model.lm_head.output\n" in kept.code, kept.code


@both
def test_a_list_read_by_index_in_a_loop_over_its_range_downloads_the_reduced_values(family):
    script = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    acts = []
    for layer in range(2):
        with model.trace("The cat sat on the", remote=True):
            acts.append(LAYERS[layer].output.save())
    for i in range(len(acts)):
        print(i, round(acts[i][0, -1].norm().item(), 4))
'''
    result, report = optimized_and_verified(script, family, unsafe=True)
    assert "acts.append(LAYERS[layer].output[0, -1].norm().item())".replace("LAYERS", FAMILIES[family][1]) \
        in result.code, result.code
    # a loop over part of it does not read every element: the reduction stays on your machine
    part, _ = optimized_and_verified(script.replace("range(len(acts))", "range(len(acts) - 1)"), family, unsafe=True)
    assert "norm().item())\n    for i" not in part.code and "acts.append(LAYERS[layer].output)".replace(
        "LAYERS", FAMILIES[family][1]) in part.code, part.code


@pytest.mark.parametrize("change", [
    "        out = LAYERS[1].output\n        states.append(LAYERS[1].output.save())\n        out[:] = 0\n",
    "        states.append(LAYERS[1].output.save())\n        states[-1][:] = 0\n",
    "        states.append(LAYERS[1].output.save())\n        last = states[-1]\n        last[:] = 0\n",
], ids=["another-name-of-the-module-output", "through-the-container", "through-a-name-of-the-element"])
def test_a_change_that_may_reach_the_stored_element_keeps_it_whole(change):
    source = script_for(NORMS, "gpt2").replace("        states.append(model.transformer.h[1].output.save())\n",
                                               change.replace("LAYERS", "model.transformer.h"))
    assert change.split("\n")[-2].strip() in source, source
    result = optimize(source, options=Options(unsafe_fixes=True))
    assert "norm().item())" not in result.code.split("norms =")[0], result.code
