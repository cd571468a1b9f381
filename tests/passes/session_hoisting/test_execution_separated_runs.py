"""Runs of remote work that barriers keep in several sessions: a finding names the barrier
(issue 33, "no silent refusal"), and what decides the barriers is the code that runs where
it stands.

- a `def` runs none of its body's traces where it stands: an `if` that defines a helper and
  calls it is a statement that calls a helper (it used to "mix remote blocks and calls");
- `str.replace(old, new)` and `DataFrame.rename(columns=...)` are not the Path methods of
  those names: they read no file (a loop that builds its prompt with `.replace` used to be
  refused as "computed by code that must run on your machine");
- two phases that each become a session, kept apart by a helper that prints, get one
  finding on the run that names the helper; a helper that returns before its trace sends
  nothing and keeps nothing apart; in a notebook, cells keep runs apart and the notebook's
  own note says so (no second finding across cells).
"""

from __future__ import annotations

import pytest

from execution import both, optimized_and_verified

from ndif_opt import Status, optimize
from ndif_opt.options import Options

modes = pytest.mark.parametrize("unsafe", [False, True], ids=["default", "unsafe"])

PROMPT_FROM_REPLACE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    names = ["the_cat_sat", "one_two_three"]
    tops = []
    for name in names:
        prompt = name.replace("_", " ")
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].argmax().save()
        tops.append(top.item())
'''


@both
@modes
def test_a_prompt_built_with_str_replace_goes_into_the_session(family, unsafe):
    result, report = optimized_and_verified(PROMPT_FROM_REPLACE, family, unsafe=unsafe,
                                            let_go=frozenset({"top", "prompt", "name"}))
    assert report.after.requests == 1, report.to_text() + result.code


HELPER_DEFINED_IN_A_BRANCH = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    prompts = ["The cat sat on the", "One two three"]
    USE_HELPER = True

    if USE_HELPER:
        def last_top(prompt):
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().save()
            return top.item()

        tops = [last_top(p) for p in prompts]
    else:
        tops = []

    with model.trace("Paris is the capital of", remote=True):
        extra = model.lm_head.output[0, -1].max().save()
'''


@both
def test_a_helper_defined_and_called_in_a_branch_is_hoisted_where_it_is_called(family):
    result, report = optimized_and_verified(HELPER_DEFINED_IN_A_BRANCH, family)
    assert report.after.requests == 2, report.to_text() + result.code
    refused = [f for f in result.findings if f.pass_id == "session-hoisting" and f.status is Status.SKIPPED]
    assert len(refused) == 1 and "`last_top` is a function the script defines" in refused[0].reason


TWO_PHASES = '''
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompts = ["a b", "c d"]
USE_CACHE = False


def extract(prompts):
    acts = []
    for i, prompt in enumerate(prompts):
        print(f"[{i}] {prompt}")
        with model.trace(prompt, remote=True):
            h = model.transformer.h[0].output[:, -1].save()
        acts.append(h)
    return acts


if USE_CACHE:
    acts = []
else:
    acts = extract(prompts)
tops = []
for prompt in prompts:
    with model.trace(prompt, remote=True):
        tops.append(model.lm_head.output[0, -1].argmax().save())
print(len(acts), tops)
'''


def test_two_phases_kept_apart_by_a_printing_helper_get_one_finding_that_names_it():
    result = optimize(TWO_PHASES)
    assert result.code.count("model.session(remote=True)") == 2, result.code
    runs = [f for f in result.findings if f.status is Status.SKIPPED and "this run of remote work" in f.message]
    assert len(runs) == 1, [f.message for f in result.findings]
    assert runs[0].range.start.line == TWO_PHASES.splitlines().index("if USE_CACHE:")
    assert "sends 2 separate remote requests" in runs[0].message
    assert runs[0].reason == "not hoisted: `extract` calls `print`, which would print on the server, not on your machine"


def test_a_helper_that_returns_before_its_trace_keeps_nothing_apart():
    source = TWO_PHASES.replace("    acts = []\n    for i,", "    return []\n    for i,", 1)
    result = optimize(source)
    assert not [f for f in result.findings if "this run of remote work" in f.message], result.findings


def test_cells_keep_runs_apart_with_the_notebooks_note_only():
    from ndif_opt.engine.cells import optimize_script

    cells = TWO_PHASES.replace("\nif USE_CACHE:", "\n# %%\nif USE_CACHE:").replace("\ntops = []", "\n# %%\ntops = []")
    messages = [f.message for f in optimize_script(cells, Options()).findings]
    assert not any("this run of remote work" in m for m in messages), messages


def test_one_statement_that_calls_a_refused_helper_twice_gets_a_finding():
    source = TWO_PHASES[:TWO_PHASES.index("if USE_CACHE:")] + "acts, again = extract(prompts), extract(prompts)\n"
    result = optimize(source)
    runs = [f for f in result.findings if f.message.startswith("this statement sends 2 separate remote requests")]
    assert len(runs) == 1, [f.message for f in result.findings]
    assert "`extract` calls `print`" in runs[0].reason
    once = TWO_PHASES[:TWO_PHASES.index("tops = []")]  # one call: explained inside `extract`
    assert not [f for f in optimize(once).findings if f.message.startswith(("this statement", "this run"))]


SHUFFLED_BETWEEN = '''
    import random
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    PROMPTS = ["The cat sat on the", "One two three", "Paris is the capital of"]

    first = []
    for p in PROMPTS:
        with model.trace(p, remote=True):
            first.append(LAYERS[0].output.mean().item().save())
    random.seed(0)
    random.shuffle(PROMPTS)
    second = []
    for p in PROMPTS:
        with model.trace(p, remote=True):
            second.append(LAYERS[1].output.mean().item().save())
'''


@both
def test_parts_made_sessions_keep_the_reason_the_whole_run_was_refused(family):
    result, report = optimized_and_verified(SHUFFLED_BETWEEN, family, let_go=frozenset({"p"}))
    assert report.after.requests == 2, report.to_text() + result.code
    apart = [f for f in result.findings if "sessions of its parts" in f.message]
    assert len(apart) == 1, [f.message for f in result.findings]
    assert result.source.splitlines()[apart[0].range.start.line] == "random.seed(0)"
    assert apart[0].reason.startswith("`PROMPTS` is computed by code that must run on your machine")
