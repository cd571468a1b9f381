"""Execution checks for rewrites that must not happen: a session opened before a loop
stands for every trace in it, so the model and the `remote=` flag its header reads must
be the same in every iteration.

Each script runs on tiny models (the original locally, original and optimized through
the NDIF emulation): results must match, and the declined rewrite must say why.
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("nnsight")

from execution import FAMILIES, both, optimized_and_verified, script, verified  # noqa: E402

from ndif_opt import Status, optimize  # noqa: E402

#: two families, each loaded by a script that names both (``FIRST``, ``SECOND``)
pairs = pytest.mark.parametrize("first, second", [("gpt2", "llama"), ("llama", "gpt2")])


def run_both(template: str, first: str, second: str):
    source = textwrap.dedent(template).replace("FIRST", FAMILIES[first][0]).replace("SECOND", FAMILIES[second][0])
    result = optimize(source)
    report = verified(source, result, filename="script.py")
    assert report.intended_ok, report.to_text() + "\n" + result.code
    assert not report.errors["optimized"], report.errors
    return result


def declined(result, words: str) -> bool:
    return any(f.pass_id == "session-hoisting" and f.status is not Status.APPLIED and words in (f.reason or "")
               for f in result.findings)


@pairs
def test_a_helper_given_a_model_loaded_in_each_iteration_is_not_hoisted(first, second):
    result = run_both(
        '''
        from nnsight import LanguageModel

        def top_token(model, prompt, remote):
            with model.trace(prompt, remote=remote):
                top = model.lm_head.output[0, -1].argmax().save()
            return int(top)

        REPOS = {"first": "FIRST", "second": "SECOND"}
        tops = []
        for name, repo in REPOS.items():
            model = LanguageModel(repo)  # a different model each time
            tops.append(top_token(model, "The capital of France is", True))
        print(tops)
        ''', first, second)
    assert declined(result, "`model` is assigned inside it")


@pairs
def test_a_loop_over_models_with_its_own_traces_is_not_hoisted(first, second):
    result = run_both(
        '''
        from nnsight import LanguageModel

        lm = LanguageModel("FIRST")
        shapes = []
        for repo in ["SECOND", "FIRST"]:
            with lm.trace("The capital of France is", remote=True):
                logits = lm.lm_head.output.save()
            shapes.append(tuple(logits.shape))
            lm = LanguageModel(repo)  # the next iteration traces another model
        print(shapes)
        ''', first, second)
    assert declined(result, "`lm` is assigned inside it")


@pairs
def test_a_flag_that_changes_inside_the_loop_is_not_hoisted(first, second):
    result = run_both(
        '''
        from nnsight import LanguageModel

        lm = LanguageModel("FIRST")
        remote = True
        tops = []
        for prompt in ["The capital of France is", "One, two, three,"]:
            with lm.trace(prompt, remote=remote):
                top = lm.lm_head.output[0, -1].argmax().save()
            tops.append(int(top))
            remote = False  # only the first prompt goes to NDIF
        print(tops)
        ''', first, second)
    # the cost model follows the flag: one request (the first prompt), nothing to bundle; a
    # loop of several remote requests whose flag changes is declined with the reason below
    assert ".session(" not in result.code
    assert not any(f.pass_id == "session-hoisting" and f.applied for f in result.findings)


@both
def test_a_list_filled_after_the_invokes_is_not_claimed_fixed(family):
    """Code in a trace's body after its invokes runs before them (nnsight 0.5+): a list
    filled there would not come back filled if it were created in the trace, so the
    relocation is not made and no correctness fix is claimed. Code after the invokes that
    reads their values is the pre-0.5 idiom (a loop of invokes counts as invokes), so the
    default mode says so and leaves the script as it is."""
    from ndif_opt.verify import run_script

    source = script('''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        tops = []
        with model.trace(remote=True) as tracer:
            for prompt in ["The Eiffel Tower is in", "The capital of Japan is"]:
                with tracer.invoke(prompt):
                    top = model.lm_head.output[0, -1].argmax().save()
            tops.extend([top])  # after the invokes: runs before them
        print(tops)
        ''', family)
    result = optimize(source)
    assert result.code == source
    assert not any(f.status is Status.APPLIED for f in result.findings)
    assert any(f.pass_id == "migrate-api" and "code after `tracer.invoke` blocks" in f.message
               for f in result.findings), [f.message for f in result.findings]
    run = run_script(source, filename="late_fill.py", mode="local")
    assert run.error is not None and "NameError" in run.error  # `top` did not exist yet


@both
def test_a_flag_the_helper_computes_itself_is_not_moved_to_module_level(family):
    """`remote = config.remote` inside the helper: a session at the call site cannot take
    that name (it raised NameError there), so the loop is declined."""
    result, report = optimized_and_verified('''
        from nnsight import LanguageModel


        class Config:
            remote = True


        config = Config()
        model = LanguageModel("REPO")


        def top_token(prompt):
            remote = config.remote
            with model.trace(prompt, remote=remote):
                top = model.lm_head.output[0, -1].argmax().save()
            return int(top)


        tops = []
        for prompt in ["The Eiffel Tower is in", "The capital of Japan is"]:
            tops.append(top_token(prompt))
        print(tops)
        ''', family)
    assert any("computed inside it" in (f.reason or "") for f in result.findings)


@both
def test_a_module_flag_set_again_later_is_read_when_the_helper_runs(family):
    """A later cell turns NDIF on: a new default `remote=REMOTE` would keep the first
    value (False) for calls outside the session, so the helper reads the flag when it
    runs (`remote and REMOTE`)."""
    result, report = optimized_and_verified('''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        REMOTE = False


        def top_token(prompt):
            with model.trace(prompt, remote=REMOTE):
                top = model.lm_head.output[0, -1].argmax().save()
            return int(top)


        REMOTE = True  # a later cell
        tops = []
        for prompt in ["The Eiffel Tower is in", "The capital of Japan is"]:
            tops.append(top_token(prompt))
        print(tops)



        def shout(text):  # a definition: it moves before the session, the call joins it
            return text.upper()


        print(shout("last"), top_token("One, two, three,"))
        ''', family)
    # one session: the loop and the last call (the definition between them ran before it)
    assert report.after.requests == 1, report.to_text() + "\n" + result.code


@both
def test_a_value_fallback_under_hasattr_is_not_pre_05_and_is_optimized(family):
    """`x.value if hasattr(x, "value") else x` runs on every nnsight: the script is not
    taken for pre-0.5 code, and its loop becomes one session with equal results."""
    result, report = optimized_and_verified('''
        from nnsight import LanguageModel

        model = LanguageModel("REPO")
        norms = []
        for prompt in ["The Eiffel Tower is in", "The capital of Japan is"]:
            with model.trace(prompt, remote=True):
                hidden = LAYERS[1].output.save()
            hidden = hidden.value if hasattr(hidden, "value") else hidden  # nnsight < 0.5 too
            norms.append(round(float(hidden[0, -1].norm()), 4))
        print(norms)
        ''', family)
    assert not any("pre-0.5" in f.message for f in result.findings)
    assert report.before.requests == 2 and report.after.requests == 1, report.to_text()
