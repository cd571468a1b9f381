"""Migrations proven by running: the pre-0.5 original on nnsight 0.4 (transformers 4, where a
decoder layer returns a tuple) in ``.venv-nnsight04``, its migration on nnsight 0.8 through
the NDIF emulation, every result compared (``verify_sources(..., original_nnsight="0.4")``).

Run from the main venv; skipped without ``.venv-nnsight04`` (requirements-nnsight04.txt).
The originals of every test run first, in one nnsight 0.4 process (starting one costs about
ten seconds); each test then runs the original and the migrated script on nnsight 0.8.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/execution.py

from execution import script  # noqa: E402

from ndif_opt import optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402
from ndif_opt.verify import verify_result  # noqa: E402
from ndif_opt.verify.original_04 import nnsight04_python, reads_saved_value, run_originals_04  # noqa: E402

if nnsight04_python() is None:
    pytest.skip("no nnsight 0.4 venv (.venv-nnsight04, see requirements-nnsight04.txt)", allow_module_level=True)

FAMILIES = ("gpt2", "llama")

# pre-0.5 (`nnsight.list()`, `.value`): `output[0]` is the old tuple's hidden states
TUPLE_ELEMENT = '''
import nnsight
from nnsight import LanguageModel

model = LanguageModel("REPO")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    last = nnsight.list().save()
    for layer in LAYERS[:3]:
        last.append(layer.output[0][:, -1])
    LAYERS[4].output[0][:] = 0
    after = LAYERS[4].output[0].save()
    logits = model.lm_head.output.save()
shapes = [tuple(h.shape) for h in last.value]
top = logits.value[0, -1].argmax().item()
zeroed = bool((after.value == 0).all())
print(shapes, top, zeroed)
'''

# no API marker; one function reads a layer's output through a helper and unpacks it
# (`hidden = hidden[0]`), another line indexes three dimensions: the group is the tuple
RELATED_SITES = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")


def block_output(index):
    return LAYERS[index].output


def last_position(prompt, index):
    with model.trace(prompt, remote=True):
        hidden = block_output(index)
        hidden = hidden[0]
        final = LAYERS[-1].output[0][:, -1, :].save()
        state = hidden[:, -1].save()
    return state, final


state, final = last_position("The Eiffel Tower is in the city of", 2)
print(tuple(state.shape), tuple(final.shape))
'''

# pre-0.5 `.value` reached through a list of lists and a helper's return
SAVES_IN_CONTAINERS = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompts = ["The Eiffel Tower is in", "The cat sat on the"]


def last_token_logits(prompt):
    with model.trace(prompt, remote=True):
        out = model.lm_head.output[0, -1].save()
    return out


grid = []
for prompt in prompts:
    per_layer = []
    with model.trace(prompt, remote=True):
        for layer in LAYERS[:3]:
            per_layer.append(layer.mlp.output[0, -1].norm().save())
    grid.append(per_layer)
norms = [[round(cell.value.item(), 5) for cell in row] for row in grid]
results = {p: last_token_logits(p) for p in prompts}
tops = [v.value.argmax().item() for v in results.values()]
print(norms, tops)
'''

# pre-0.5 `.value` on a name bound to plain values in the trace's loop, then to a save last:
# the read after the trace sees the save (a logit lens's return, as lla_interventions has it)
REBOUND_THEN_SAVED = '''
import torch
from nnsight import LanguageModel

model = LanguageModel("REPO")


def lens(prompt):
    with model.trace(prompt, remote=True):
        rows = []
        for layer in LAYERS[:3]:
            probs = model.lm_head(layer.output[0][:, -1]).softmax(-1)
            rows.append(probs.max(-1)[0])
        probs = torch.stack(rows).save()
    return probs.value


print(lens("The Eiffel Tower is in the city of").tolist())
'''

# pre-0.5 generation stepped with `model.next()`: an intervention on each of the first three
# tokens (a loop ending in `.next()`), reads at steps 0, 2 and 3 of one invoke, and a
# generate block with no `as` name (it gets one)
GENERATION_STEPS = '''
import nnsight
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompt = "The weather today is"

with model.generate(prompt, max_new_tokens=4, remote=True) as generator:
    norms = nnsight.list().save()
    for _ in range(3):
        LAYERS[1].output[0][0, -1, :8] += 50
        norms.append(LAYERS[2].output[0][0, -1].norm())
        model.next()
    fourth_top = model.lm_head.output[0, -1].argmax(dim=-1).save()

with model.generate(max_new_tokens=4, remote=True) as generator:
    with generator.invoke(prompt):
        first = LAYERS[0].output[0][0, -1].norm().save()
        model.next()
        model.next()
        third = LAYERS[0].output[0][0, -1].norm().save()
        model.next()
        last_top = model.lm_head.output[0, -1].argmax(dim=-1).save()

with model.generate(prompt, max_new_tokens=3, remote=True):
    top_first = model.lm_head.output[0, -1].argmax(dim=-1).save()
    model.next()
    top_second = model.lm_head.output[0, -1].argmax(dim=-1).save()

steered = [round(n.item(), 4) for n in norms.value]
print(steered, fourth_top.value, first.value, third.value, last_top.value, top_first.value, top_second.value)
'''

# pre-0.5 `.value` over the values of a dict the trace fills: the check of nnsight-05-failures
# saves the dict where the trace binds it (`nnsight.save({})`) before migration runs
DICT_FILLED_IN_THE_TRACE = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")


def layer_sums(prompt, layers):
    with model.trace(prompt, remote=True):
        sums = {}
        for index in layers:
            sums[index] = LAYERS[index].output[0][0, -1].sum().save()
    return [v.value for v in sums.values()]


totals = layer_sums("The Eiffel Tower is in", [0, 2])
print(totals)
'''

# pre-0.5: a loop over layer indices inside the trace; on nnsight 0.4 its variable stays bound
# on the client after the block (the block's Python ran there), on 0.5+ it does not
INDEX_LOOP_IN_THE_TRACE = '''
import nnsight
from nnsight import LanguageModel

model = LanguageModel("REPO")
with model.trace("The Space Needle is in", remote=True):
    norms = nnsight.list().save()
    for index in range(0, 4, 2):
        norms.append(LAYERS[index].output[0][:, -1].norm(dim=-1))
print([round(n.item(), 4) for n in norms.value])
'''

# pre-0.5 generate blocks that do not say how many new tokens: nnsight 0.4 made one (it passed
# `max_new_tokens=1`, which transformers takes over `max_length=`); 0.8 would make up to 20
GENERATION_LENGTH = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
settings = dict(remote=True)
with model.generate("The weather today is", remote=True, scan=False):
    one = model.generator.output.save()
with model.generate("The cat sat", max_length=12, **settings):
    capped = model.generator.output.save()
with model.generate("The cat sat", max_new_tokens=3, remote=True):
    three = model.generator.output.save()
print(tuple(one.value.shape), tuple(capped.value.shape), tuple(three.value.shape))
'''

# pre-0.5: a client dict filled with saved values in a trace, read through `.items()` by a
# line replayed after the session the trace and the loop after it become: the replay reads
# the dict (a record of `lens.items()`, a dict view, failed to pickle on the server)
DICT_READ_THROUGH_A_VIEW = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
lens = {}
with model.trace("The Eiffel Tower is in", remote=True):
    for layer in range(2):
        lens[layer] = LAYERS[layer].output[0].norm().save()
print({k: round(v.value.item(), 4) for k, v in lens.items()})
norms = []
for layer in range(2):
    with model.trace("The Eiffel Tower is in", remote=True):
        norms.append(LAYERS[layer].output[0].norm().save())
print(len(norms))
'''

# nnsight 0.4 served a forward pass's reads in the model's order, whatever the code's order
READS_OUT_OF_ORDER = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    logits = model.lm_head.output.save()
    top = model.lm_head.output[0, -1].argmax(dim=-1).save()
    late = LAYERS[1].output[0][:, -1].save()
    first = LAYERS[0].output[0].norm().save()
print(logits.value.shape, top.value.item(), late.value.norm().item(), first.value.item())
'''

# pre-0.5: a layer's whole output saved, its `.value[0]` read after the trace (a helper keeps the
# whole output, a tuple on 0.4 and the hidden states on 0.8, out of the results compared)
SAVED_WHOLE = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")


def hidden_at(index):
    with model.trace("The Eiffel Tower is in the city of", remote=True):
        out = LAYERS[index].output.save()
    return out.value[0]


hidden = hidden_at(2)
print(tuple(hidden.shape), round(hidden[0, -1].norm().item(), 4))
'''

TEMPLATES = {"whole": SAVED_WHOLE,
             "order": READS_OUT_OF_ORDER, "view": DICT_READ_THROUGH_A_VIEW, "tuple": TUPLE_ELEMENT,
             "related": RELATED_SITES, "containers": SAVES_IN_CONTAINERS,
             "rebound": REBOUND_THEN_SAVED, "steps": GENERATION_STEPS, "dict": DICT_FILLED_IN_THE_TRACE,
             "index": INDEX_LOOP_IN_THE_TRACE, "length": GENERATION_LENGTH}


@pytest.fixture(scope="module")
def originals() -> dict:
    """(template, family) -> the original's run on nnsight 0.4, all in one process."""
    keys = [(name, family) for name in TEMPLATES for family in FAMILIES]
    jobs = []
    for name, family in keys:
        source = script(TEMPLATES[name], family)
        jobs.append({"source": source, "filename": "script.py", "argv": [], "timeout": 120.0,
                     "extra_files": {}, "frame_injection": not reads_saved_value(source)})
    return dict(zip(keys, run_originals_04(jobs)))


def proven(name: str, family: str, originals: dict):
    source = script(TEMPLATES[name], family)
    original = originals[(name, family)]
    assert original.error is None, original.traceback or original.error
    result = optimize(source, options=Options(migrate=True))
    report = verify_result(source, result, filename="script.py", original_nnsight="0.4", local_run=original)
    assert report.intended_ok, report.to_text() + "\n" + result.code
    assert not report.errors["optimized"] and report.local_nnsight == "0.4"
    return result, report, original


@pytest.mark.parametrize("family", FAMILIES)
def test_output_0_of_a_pre_05_script_is_the_tuple_element(family, originals):
    result, report, original = proven("tuple", family, originals)
    assert ".output[0]" not in result.code
    assert original.namespace["zeroed"] is True and len(original.namespace["shapes"]) == 3
    assert all(len(shape) == 2 and shape[0] == 1 for shape in original.namespace["shapes"])  # [B, D]


@pytest.mark.parametrize("family", FAMILIES)
def test_related_sites_are_migrated_together(family, originals):
    result, report, original = proven("related", family, originals)
    assert "hidden = hidden[0]" not in result.code and ".output[0]" not in result.code
    hidden = original.namespace["final"].shape[-1]
    assert tuple(original.namespace["state"].shape) == (1, hidden)  # last position of the one prompt


@pytest.mark.parametrize("family", FAMILIES)
def test_value_through_containers_is_migrated(family, originals):
    result, report, original = proven("containers", family, originals)
    assert ".value." not in result.code
    assert len(original.namespace["norms"]) == 2 and len(original.namespace["tops"]) == 2


@pytest.mark.parametrize("family", FAMILIES)
def test_value_of_a_name_saved_last_before_the_read_is_migrated(family, originals):
    result, report, original = proven("rebound", family, originals)
    assert ".value" not in result.code and "return probs\n" in result.code


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_stepped_with_next_is_migrated_to_tracer_iter(family, originals):
    result, report, original = proven("steps", family, originals)
    assert ".next()" not in result.code
    assert "for _ in generator.iter[0:3]:" in result.code and "generator.iter[2]" in result.code
    assert ") as tracer:" in result.code and "for _ in tracer.iter[1]:" in result.code
    assert len(original.namespace["steered"]) == 3  # the loop ran at three steps


@pytest.mark.parametrize("family", FAMILIES)
def test_value_over_a_dict_the_trace_fills_is_migrated(family, originals):
    result, report, original = proven("dict", family, originals)
    assert "v.value" not in result.code and "nnsight.save({})" in result.code
    assert len(original.namespace["totals"]) == 2


@pytest.mark.parametrize("family", FAMILIES)
def test_a_loop_variable_of_a_pre_05_trace_is_let_go_as_a_temporary(family, originals):
    result, report, original = proven("index", family, originals)
    assert original.namespace["index"] == 2 and "index" in result.unreturned


@pytest.mark.parametrize("family", FAMILIES)
def test_a_generate_without_max_new_tokens_keeps_its_one_new_token(family, originals):
    result, report, original = proven("length", family, originals)
    assert result.code.count("max_new_tokens=1") == 2 and "max_new_tokens=3" in result.code
    made = {name: original.namespace[name].shape[1] for name in ("one", "capped", "three")}
    assert made["capped"] == made["three"] - 2  # one new token, though `max_length=12` asked for more


@pytest.mark.parametrize("family", FAMILIES)
def test_a_dict_read_through_items_after_the_session_is_recorded_whole(family, originals):
    result, report, original = proven("view", family, originals)
    assert report.after.requests == 1, report.to_text() + result.code


@pytest.mark.parametrize("family", FAMILIES)
def test_reads_out_of_order_are_moved_into_the_models_order(family, originals):
    result, report, original = proven("order", family, originals)
    bound = [line.split(" = ")[0].strip() for line in result.code.splitlines() if " = model." in line]
    assert bound == ["first", "late", "logits", "top"], result.code


@pytest.mark.parametrize("family", FAMILIES)
def test_the_value_of_a_saved_whole_layer_output_is_the_tuple_element(family, originals):
    result, report, original = proven("whole", family, originals)
    assert "return out\n" in result.code, result.code
    assert len(original.namespace["hidden"].shape) == 3  # [B, S, D], the old tuple's hidden states
