"""Execution checks for output a reviewer would accept (issue 34.5): what a split
session records for its replay is keyed by name, each expression once, and read back
by name; a helper's flag is passed as the user passes it. Each script runs on a tiny
model of each family: the original locally, the original and the optimized script
through the NDIF emulation; stdout, files and every module-level result must match.
"""

from __future__ import annotations

import pytest

from execution import both, optimized_and_verified

pytest.importorskip("nnsight")

EXAMPLES = '''
    import json
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    examples = [
        {"id": 1, "text": "The cat sat on the", "label": "a"},
        {"id": 2, "text": "Paris is the capital of", "label": "b"},
        {"id": 3, "text": "One two three", "label": "a"},
    ]
    hits = 0
    for n, example in enumerate(examples):
        with model.trace(example["text"], remote=True):
            logits = model.lm_head.output[0, -1].save()
        top = logits.argmax().item()
        margin = (logits[top] - logits.mean()).item()
        hits += top % 2
        print(f"[{n + 1}/{len(examples)}] #{example['id']} {example['text'][:8]!r} label={example['label']}")
        print(f"    top={top} margin={margin:.3f} label again={example['label']} id again={example['id']}")
        with open("/tmp/ndif_opt_readable.jsonl", "a") as f:
            f.write(json.dumps({"id": example["id"], "label": example["label"], "top": top}) + "\\n")
    print("hits", hits)
'''


@both
def test_a_record_is_a_dict_with_each_expression_once(family):
    # `example['label']` and `example["label"]` (and the id) are read three or four times
    # by three replayed lines: the record holds each once, under a name
    result, report = optimized_and_verified(EXAMPLES, family)
    assert report.before.requests == 3 and report.after.requests == 1, report.to_text() + result.code
    record = result.code.split("_ndif_rows.append(")[1].split(")\n")[0]
    assert record.count('"example_label": example') == 1 and record.count('"example_id": example') == 1, record
    assert "example_label_2" not in result.code and "_then" not in result.code, result.code
    replay = result.code.split("for _ndif_row in _ndif_rows:\n")[1]
    assert replay.startswith('    n = _ndif_row["n"]\n'), replay
    assert "{_ndif_row['example_id']}" in replay and '"id": _ndif_row["example_id"]' in replay, replay


SEVERAL = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    prompt = "The Eiffel Tower is in the city of"
    with model.trace(prompt, remote=True):
        hidden = LAYERS[0].output.save()
        clean = model.lm_head.output[0, -1].save()
    print(f"clean top {clean.argmax().item()} of {clean.shape[-1]}, {tuple(hidden.shape)}, {hidden.norm().item()=:.2f}")
    with model.trace(prompt, remote=True):
        LAYERS[0].output[:] = 0
        ablated = model.lm_head.output[0, -1].save()
    print(f"ablated top {ablated.argmax().item()}, drop {(clean.max() - ablated.max()).item():.3f}")
    with model.trace("One two", remote=True):
        other = model.lm_head.output[0, -1].save()
    print("other", other.argmax().item(), clean.argmax().item())
'''


@both
def test_a_print_reading_several_recorded_values_reads_them_by_name(family):
    # a run's record is a dict: the print reads `_ndif_log["clean_shape"]` where it read
    # `clean.shape[-1]`; `f"{x=}"` prints its own text, so what it reads keeps its name
    result, report = optimized_and_verified(SEVERAL, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert "_ndif_log = dict().save()" in result.code and "_ndif_log[0]" not in result.code, result.code
    assert "{_ndif_log['clean_argmax']}" in result.code, result.code
    assert "{hidden.norm().item()=:.2f}" in result.code, result.code


FLAG = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def top(prompt, layer, remote=True):
        with model.trace(prompt, remote=remote):
            LAYERS[layer].mlp.output[:] = 0
            t = model.lm_head.output[0, -1].argmax().item().save()
        return t


    a = top("The cat sat", 0, True)
    b = top("The cat sat", 1)
    print(a, b)
'''


@both
def test_a_flag_left_out_is_passed_as_the_other_calls_pass_it(family):
    # the user passes `remote` by position in one call: the session's calls all do
    result, report = optimized_and_verified(FLAG, family)
    assert report.after.requests == 1, report.to_text() + result.code
    assert 'top("The cat sat", 0, False)' in result.code and 'top("The cat sat", 1, False)' in result.code
