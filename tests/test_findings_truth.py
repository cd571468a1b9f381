"""Every fixed finding describes the output: its range overlaps an edit of the result.

A finding placed on the wrong line (a session's rewrite moves lines past each other, and
a diff pairs identical lines the wrong way) points a user at code that did not change.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ndif_opt import Status, optimize
from ndif_opt.options import Options

ROOT = Path(__file__).resolve().parent.parent
DEVSET = ROOT.parent / "shared" / "devset"
SCRIPTS = sorted((ROOT / "examples").glob("*.py")) + (sorted(DEVSET.glob("[0-9]*.py")) if DEVSET.is_dir() else [])

# the same save line in two experiments, the first one's prints moved after its
# session: the second experiment's detach-cpu finding must land on the second save
REPEATED = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompt = "The capital of France is"
drops = []
for layer in range(3):
    with model.trace(prompt, remote=True):
        model.transformer.h[layer].mlp.output[:] = 0
        logits = model.lm_head.output.save()
    diff = (logits[0, -1, 5] - logits[0, -1, 7]).item()
    drops.append(diff)
    print(f"layer {layer}: {diff:+.4f}")
print("swept", len(drops))
top = sorted(range(3), key=lambda i: -abs(drops[i]))[:2]
print("top:", top)

for layer in top:
    with model.trace(prompt, remote=True):
        model.transformer.h[layer].attn.output[:] = 0
        logits = model.lm_head.output.save()
    diff = (logits[0, -1, 5] - logits[0, -1, 7]).item()
    print(f"attn {layer}: {diff:+.4f}")
print("last logits", tuple(logits.shape))  # read after the session: both saves stay
'''


def _overlaps(a, b) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line, b.start.character) <= (a.end.line, a.end.character)


def _misplaced(source: str) -> list[str]:
    result = optimize(source)
    return [
        f"{f.pass_id} at line {f.range.start.line + 1}: {f.message[:80]}"
        for f in result.findings
        if f.status is Status.APPLIED and not any(_overlaps(f.range, e.range) for e in result.edits)
    ]


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_fixed_finding_overlaps_an_edit(path):
    assert _misplaced(path.read_text()) == []


def test_identical_lines_moved_past_each_other_keep_their_findings():
    assert _misplaced(REPEATED) == []
    lines = [f.range.start.line for f in optimize(REPEATED).findings if f.pass_id == "detach-cpu"]
    assert 19 in lines  # the second experiment's save (0-based line 19), not a print


def _notebook(*cells: str) -> str:
    import json

    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None,
                                  "outputs": [], "source": cell.splitlines(keepends=True)}
                                 for cell in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


# a line inserted between lines (the slice saved in the trace): its finding is a point
# at the start of a line, which in the notebook's JSON is the start of the JSON line
NOTEBOOK_CELL = '''\
with llm.trace("The Eiffel Tower is in the city of", remote=True):

    # reach inside the model
    hidden_states = llm.model.layers[-1].output.save()
    output = llm.output.save()

# after the trace, the saved values are here
print("hidden:", hidden_states[0])
print("logits:", output["logits"][0])
'''


def test_a_notebooks_fixed_findings_overlap_the_files_edits():
    from ndif_opt.frontends.notebook import optimize_notebook
    from ndif_opt.options import Options

    text = _notebook('from nnsight import LanguageModel\nllm = LanguageModel("meta-llama/Llama-3.1-70B")\n',
                     NOTEBOOK_CELL)
    result = optimize_notebook(text, options=Options(unsafe_fixes=True)).as_result()
    assert any(f.pass_id == "detach-cpu" and f.status is Status.APPLIED for f in result.findings)
    assert [f.message for f in result.findings
            if f.status is Status.APPLIED and not any(_overlaps(f.range, e.range) for e in result.edits)] == []


# a save that detach-cpu moves to the CPU in one round and reduction-pushdown drops in
# the next (it pushes one value per run): the `.detach().cpu()` went with it, and so must its finding
SUPERSEDED = '''\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of", remote=True):
    hidden = model.transformer.h[-1].output.save()
    logits = model.lm_head.output.save()
top = logits[0, -1].argmax().item()
spread = torch.softmax(logits[0, -1], dim=-1).max().item()
norm = hidden[0, -1].norm().item()
print(top, spread, norm)
'''


def test_a_fix_a_later_pass_undid_is_not_reported():
    result = optimize(SUPERSEDED)
    assert "logits[0, -1].argmax().item()" in result.code and ".detach().cpu()" not in result.code
    claimed = [f.message for f in result.findings if f.pass_id == "detach-cpu" and f.status is Status.APPLIED]
    assert claimed == []
    assert all("evidence" not in f.to_dict() for f in result.findings)


def test_a_container_the_client_made_is_not_said_to_stay_on_the_server():
    # a dict the client made and the session fills is the client's object, taken along:
    # it comes back (accumulator-relocation would otherwise take it along anyway, and the
    # hoisting finding would say something the output does not do)
    source = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["a b", "c d"]
acc = {p: [] for p in PROMPTS}
for p in PROMPTS:
    with model.trace(p, remote=True):
        acc[p].append(model.lm_head.output[0, -1].argmax().save())
    print("done", p)
'''
    result = optimize(source)
    assert "acc = nnsight.save(acc)" in result.code, result.code
    assert not any("left there" in f.message for f in result.findings), [f.message for f in result.findings]


# -- a finding's counts are the table's ------------------------------------------------------

SWEEP_TWICE = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def sweep(prompt):
    found = []
    for layer in range(6):
        with model.trace(prompt, remote=True):
            found.append(model.transformer.h[layer].output[0, -1].norm().save())
    return found


a = sweep("The Eiffel Tower is in")
b = sweep("The Colosseum is in")
print(a, b)
'''

FILE_ROWS = '''\
import sys
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
rows = open(sys.argv[1]).read().splitlines()
norms = []
for row in rows:
    with model.trace(row, remote=True):
        h = model.transformer.h[0].output[0, -1].save()
    norms.append(h.norm().item())
print(norms)
'''


def _claims_equal_the_table(result) -> list:
    """The applied findings' claims of each row (the falls they add up to)."""
    claims = []
    for row in result.costs:
        mine = [f.requests for f in result.findings
                if f.pass_id == row.pass_id and f.status is Status.APPLIED and f.requests is not None]
        claimed = sum((before - after for before, after in mine), 0)
        if mine or row.pass_id == "session-hoisting":
            assert claimed == row.before.requests - row.after.requests, (row.pass_id, mine, row)
        claims += mine
    return claims


def test_a_finding_quotes_every_call_of_its_function_as_the_table_counts_them():
    result = optimize(SWEEP_TWICE)
    (outer,) = [f for f in result.findings if f.pass_id == "session-hoisting" and f.applied]
    assert "12 requests → 1" in outer.message  # two calls of six traces each, in one session
    assert outer.requests == (12, 1)
    # `sweep` is rewritten whole for the session that calls it (a flag parameter): no session
    # is written around its own loop, and no finding says one is (one did: "wrapped this
    # loop in one session, for a call of `sweep` outside a session")
    assert result.code.count("model.session(") == 1
    assert _claims_equal_the_table(result) == [(12, 1)]


def test_a_finding_over_a_loop_of_unknown_length_quotes_n():
    from ndif_opt.types import Count, UnknownLoop

    result = optimize(FILE_ROWS)
    hoisted = next(f for f in result.findings if f.pass_id == "session-hoisting" and f.applied)
    assert "N requests → 1 (N: the iterations of `for row in rows`)" in hoisted.message
    assert "or more" not in hoisted.message
    assert hoisted.requests == (Count.trips(UnknownLoop("for row in rows")), 1)
    _claims_equal_the_table(result)


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_fixed_findings_request_counts_are_its_rows(path):
    _claims_equal_the_table(optimize(path.read_text()))
    for options in (Options(), Options(unsafe_fixes=True)):
        _quotes_equal_the_table(optimize(path.read_text(), options=options))


# a sweep in a loop: the sweep runs once per word, and the table counts every run
SWEEP_PER_WORD = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
WORDS = ["cat", "dog"]

for word in WORDS:
    found = []
    for layer in range(5):
        with model.trace(f"{word} is a", remote=True):
            model.transformer.h[layer].mlp.output[:] = 0
            found.append(model.lm_head.output[0, -1].argmax().save())
    print(word, found)
'''

LENS_PER_PROMPT = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The Colosseum is in", "Big Ben is in"]

for prompt in PROMPTS:
    tops = []
    for layer in range(6):
        with model.trace(prompt, remote=True):
            hidden = model.transformer.h[layer].output
            tops.append(model.lm_head(model.transformer.ln_f(hidden))[0, -1].argmax().save())
    print(prompt, tops)
'''

QUOTED = {
    "forward_passes": re.compile(r"(\d+) forward pass(?:es)? → (\d+)\b(?![·\w])|forward passes (\d+) → (\d+)\b(?![·\w])"),
    "layer_evaluations": re.compile(r"layer evaluations (\d+) → (\d+)\b(?![·\w])"),
}


def _quotes_equal_the_table(result) -> dict[str, list[tuple[int, int]]]:
    """The changes the fixed findings of each pass quote, by column, add up to the fall of
    the pass's row in that column (a count is the table's: over the script's run)."""
    quoted: dict[str, list[tuple[int, int]]] = {}
    for row in result.costs:
        fixed = [f.message for f in result.findings if f.pass_id == row.pass_id and f.status is Status.APPLIED]
        for column, pattern in QUOTED.items():
            pairs = [tuple(int(n) for n in match.groups() if n is not None)
                     for message in fixed for match in pattern.finditer(message)]
            if pairs:
                fall = getattr(row.before, column) - getattr(row.after, column)
                assert sum(b - a for b, a in pairs) == fall, (row.pass_id, column, pairs, row)
                quoted.setdefault(row.pass_id, []).extend(pairs)
    return quoted


def test_a_sweep_run_once_per_word_quotes_every_run():
    default = optimize(SWEEP_PER_WORD)
    assert _quotes_equal_the_table(default) == {"skip-insertion": [(10, 12), (120, 110)]}
    batching = next(f for f in default.findings if f.pass_id == "invoke-batching")
    assert batching.message.startswith("this loop runs 10 forward passes, one per iteration; "
                                       "as invokes of one trace it would run 2")
    unsafe = optimize(SWEEP_PER_WORD, options=Options(unsafe_fixes=True))
    assert _quotes_equal_the_table(unsafe) == {"invoke-batching": [(10, 2)]}


def test_a_lens_run_once_per_prompt_quotes_every_run():
    result = optimize(LENS_PER_PROMPT)
    assert _quotes_equal_the_table(result) == {"trace-fusion": [(18, 3)]}


# a layer sweep that reads its loop variable after the loop: batching cannot keep `layer`,
# and skip-insertion caches the loop's prefix in the first round; the next round's batching
# must still see that reason, not offer an unsafe fix that --unsafe-fixes would not apply
SWEEP_READ_AFTER = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompt = "The Eiffel Tower is in"
effects = []
for layer in range(model.config.n_layer):
    with model.trace(prompt, remote=True):
        model.transformer.h[layer].mlp.output[:] = 0
        logits = model.lm_head.output.save()
    effects.append(logits[0, -1].max().item())
print("layers swept:", layer + 1, effects)
'''


def _promises_broken(source: str) -> list[str]:
    """Unsafe fixes offered without --unsafe-fixes that --unsafe-fixes does not apply."""
    offered = {(f.pass_id, f.range.start.line) for f in optimize(source).findings
               if f.status is Status.UNSAFE_NOT_APPLIED}
    applied = {(f.pass_id, f.range.start.line) for f in optimize(source, unsafe_fixes=True).findings
               if f.status is Status.APPLIED}
    return [f"{pass_id} at line {line + 1}" for pass_id, line in sorted(offered - applied)]


def test_an_offered_unsafe_fix_is_applied_by_unsafe_fixes_in_a_sweep_read_after():
    assert _promises_broken(SWEEP_READ_AFTER) == []
    reasons = [f.reason for f in optimize(SWEEP_READ_AFTER).findings if f.pass_id == "invoke-batching"]
    assert any("`layer` is read after the loop" in (r or "") for r in reasons), reasons


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_an_offered_unsafe_fix_is_applied_by_unsafe_fixes(path):
    assert _promises_broken(path.read_text()) == []


def test_batching_generates_quotes_a_forward_pass_per_token_as_the_table_does():
    # it quoted one forward pass per iteration ("2 forward passes → 1") where the table
    # counts a pass per generated token (10 → 5). (The generated tokens only: a whole row
    # of a batch is left-padded to the longest prompt, which batching refuses.)
    from ndif_opt.options import Options

    source = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
texts = []
with model.session(remote=True):
    for prompt in ["I think that", "My favourite food is"]:
        with model.generate(prompt, max_new_tokens=5, min_new_tokens=5):
            out = model.generator.output[:, -5:].save()
        texts.append(out)
'''
    only_batching = Options(unsafe_fixes=True, select=frozenset({"invoke-batching"}))
    # the length as a literal, and as a constant of the script (which the table reads too)
    for variant in (source, source.replace("max_new_tokens=5", "max_new_tokens=NEW_TOKENS").replace(
            "texts = []", "NEW_TOKENS = 5\ntexts = []")):
        result = optimize(variant, options=only_batching)
        (found,) = [f for f in result.findings if f.pass_id == "invoke-batching"]
        (row,) = result.costs
        assert (row.before.forward_passes, row.after.forward_passes) == (10, 5)
        assert "10 forward passes → 5" in found.message, found.message


# a loop refused as part of the `with` around it (the `torch.save` in it runs on the client),
# then hoisted on its own: the `with` sends one request after the rewrite
INSIDE_NO_GRAD = '''\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with torch.no_grad():
    for layer in range(4):
        with model.trace("Interpretability research is", remote=True):
            hidden = model.transformer.h[layer].output.save()
        torch.save(hidden[0, -1].clone(), f"layer{layer}.pt")
'''

# the same, with a loop around the `with`: each of its iterations still sends a request
INSIDE_NO_GRAD_IN_A_LOOP = '''\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["Interpretability research is", "The weather is"]:
    with torch.no_grad():
        torch.save(prompt, "prompt.pt")
        for layer in range(4):
            with model.trace(prompt, remote=True):
                hidden = model.transformer.h[layer].output.save()
            torch.save(hidden[0, -1].clone(), f"layer{layer}.pt")
'''


def test_a_refusal_a_hoisted_inner_loop_answers_is_not_reported():
    findings = optimize(INSIDE_NO_GRAD).findings
    hoisting = [f for f in findings if f.pass_id == "session-hoisting"]
    assert [f.status for f in hoisting] == [Status.APPLIED], [f.message for f in hoisting]
    # the outer loop still sends one request per prompt: its refusal stands
    outer = [f for f in optimize(INSIDE_NO_GRAD_IN_A_LOOP).findings
             if f.pass_id == "session-hoisting" and f.status is Status.SKIPPED]
    assert [f.range.start.line for f in outer] == [4], [f.message for f in outer]  # (0-based)


# a `map` of a function that traces, in a run of statements one session takes whole: its
# requests go into the session, so no finding may say the `map` is not hoisted
MAP_IN_A_HOISTED_RUN = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def norm_at(prompt, layer):
    with model.trace(prompt, remote=True):
        n = model.transformer.h[layer].output[0, -1].norm().save()
    return round(n.item(), 3)


norms = [norm_at("The cat sat on", layer) for layer in [2, 5]]
tops = list(map(lambda p: norm_at(p, 2), ["Paris is the capital of", "Snow is"]))
print(norms, tops)
'''


def test_a_map_a_session_takes_is_not_said_to_stay():
    result = optimize(MAP_IN_A_HOISTED_RUN)
    hoisting = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert [f.status for f in hoisting] == [Status.APPLIED], [f.message for f in hoisting]
    assert result.costs[-1].after.requests == 1
    assert not any("`map(...)`" in f.message for f in result.findings)
