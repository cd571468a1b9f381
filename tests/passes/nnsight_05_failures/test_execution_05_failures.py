"""Execution checks for nnsight-05-failures: every failure it reports happens on nnsight 0.8.

Each script runs on a tiny model of each family (GPT-2 and Llama), locally and through
verify's emulation of NDIF: the original raises the error the finding quotes (locally, and
remotely inside a RemoteError), or — a name read after its block that held a value before
— goes on with the old value. Where the check fixes the script (a name read after its
block is saved), the fixed script runs and verifies: locally and emulated it computes the
same. And a script whose reads are all in the model's order, in invokes and a session,
runs and is left without a finding.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, executed, optimized_and_verified, script, verified, verified_sources  # noqa: E402

from ndif_opt import Status, optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

ID = "nnsight-05-failures"
MODES = ("local", "emulated")


def mine(result):
    return [f for f in result.findings if f.pass_id == ID]


def errors(source: str) -> dict[str, str | None]:
    """The error of the script, run locally and through the emulated NDIF."""
    return {mode: executed(source, mode=mode, timeout=600).error for mode in MODES}


def quoted(message: str, start: str) -> str:
    """The error a finding quotes: from ``start`` to the end of the message."""
    assert start in message, message
    return message[message.index(start):]


def reported_error(template: str, family: str, start: str) -> None:
    """The check reports the script, quoting an error that both runs of it raise."""
    source = script(template, family)
    found = [f for f in mine(optimize(source)) if start in f.message]
    assert len(found) == 1, [f.message for f in mine(optimize(source))]
    error = quoted(found[0].message, start)
    for mode, raised in errors(source).items():
        assert raised is not None and error in raised, (mode, raised, error)


RETURN = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def top_token(prompt):
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output[0, -1].save()
            return logits.argmax()


    print(top_token("The Eiffel Tower is in"))
'''

LEADING_TRY = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        try:
            hidden = LAYERS[0].output[0, -1].save()
        except AttributeError:
            hidden = None
    print(hidden.shape)
'''

LEADING_TRY_INVOKE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace(remote=True) as tracer:
        with tracer.invoke("The Eiffel Tower is in"):
            try:
                logits = model.lm_head.output[0, -1].save()
            except IndexError:
                logits = model.lm_head.output[-1].save()
    print(logits.shape)
'''


@both
def test_a_return_in_a_block_is_a_syntax_error(family):
    reported_error(RETURN, family, "SyntaxError: 'return' outside function")



STOPPED = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace(remote=True) as tracer:
        #before
        with tracer.invoke("The Eiffel Tower is in"):
            first = LAYERS[1].output[0, -1].norm().save()
        #between
        with tracer.invoke("Big Ben is in London"):
            second = LAYERS[2].output[0, -1].norm().save()
            #last-invoke
        #after
    print(first.item(), second.item())
'''


def _stop(where: str) -> str:
    """A trace with two invokes and `tracer.stop()` at ``where``: in the trace's own code
    (before, between or after the invokes), or at the end of the last invoke (fine)."""
    return STOPPED.replace(f"#{where}", "tracer.stop()")


@both
@pytest.mark.parametrize("where", ["before", "between", "after"])
def test_a_stop_outside_the_invokes_stops_the_trace_before_they_run(family, where):
    reported_error(_stop(where), family, "EarlyStopException")


@both
def test_a_stop_in_the_last_invoke_runs_and_is_not_reported(family):
    source = script(_stop("last-invoke"), family)
    assert mine(optimize(source)) == []
    for mode, raised in errors(source).items():
        assert raised is None, (mode, raised)

@both
@pytest.mark.parametrize("template", [LEADING_TRY, LEADING_TRY_INVOKE], ids=["trace", "invoke"])
def test_a_body_that_starts_with_try_is_refused(family, template):
    reported_error(template, family, "ValueError: A traced `with` block cannot start with `try:`")


LM_HEAD_FIRST = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        logits = model.lm_head.output[0, -1].save()
        hidden = LAYERS[3].output[0, -1].save()
    print(logits.argmax(), hidden.norm())
'''

AGAIN_AFTER_THE_LOOP = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        norms = list().save()
        for i in range(len(LAYERS)):
            norms.append(LAYERS[i].output.norm())
        n_tokens = LAYERS[0].output.shape[1]
        per_token = [norm / n_tokens for norm in norms]
    print(len(norms))
'''

OUTPUT_THEN_INPUT = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        updates = list().save()
        for layer in LAYERS:
            updates.append((layer.output - layer.input).norm())
    print(len(updates))
'''

BACKWARDS = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        top = [layer.output[0, -1].argmax().save() for layer in reversed(LAYERS)]
    print(top)
'''

IN_ONE_INVOKE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace(remote=True) as tracer:
        with tracer.invoke("The Eiffel Tower is in"):
            hidden = LAYERS[5].output[0, -1].save()
        with tracer.invoke("The Colosseum is in"):
            final = model.output.logits[0, -1].save()
            mlp = LAYERS[1].mlp.output[0, -1].save()
    print(hidden.norm(), final.argmax(), mlp.norm())
'''


@both
@pytest.mark.parametrize("template", [LM_HEAD_FIRST, AGAIN_AFTER_THE_LOOP, OUTPUT_THEN_INPUT, BACKWARDS,
                                      IN_ONE_INVOKE],
                         ids=["lm-head-first", "again-after-the-loop", "output-then-input", "backwards",
                              "in-one-invoke"])
def test_reads_out_of_the_models_order_raise(family, template):
    reported_error(template, family, "OutOfOrderError: '")


UNBOUND = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        tops = [layer.output[0, -1].argmax().save() for layer in LAYERS]
        hidden = LAYERS[-1].output[0, -1] * 2
        logits = model.lm_head.output[0, -1].save()
        n_tokens = model.lm_head.output.shape[1]
    print(logits.argmax().item(), n_tokens, hidden.norm().item(), [top.item() for top in tops])
'''

UNBOUND_IN_A_FUNCTION = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def answer(prompt):
        with model.session(remote=True):
            with model.trace(prompt):
                logits = model.lm_head.output[0, -1]
            top = logits.argmax().item()
        return top


    print(answer("The Eiffel Tower is in"))
'''


READ_BY_THE_NEXT_BLOCK = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def patched(source, target):
        with model.trace(source, remote=True):
            hidden = LAYERS[2].output[:, -1]
        with model.trace(target, remote=True):
            LAYERS[2].output[:, -1] = hidden  # the block's code looks the name up as a global
            logits = model.lm_head.output[0, -1].save()
        return logits.argmax().item()


    print(patched("The Eiffel Tower is in", "The Colosseum is in"))
'''


FILLED_ACROSS_INVOKES = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace(remote=True) as tracer:
        scores = {}  # filled with items of saved tensors: the dict itself is never saved
        for prompt in ["The Eiffel Tower is in", "The Colosseum is in"]:
            with tracer.invoke(prompt):
                logits = model.lm_head.output[:, -1]
                scores[prompt] = logits.log_softmax(dim=-1)[0, :3].save()
    print({prompt: score.tolist() for prompt, score in scores.items()})
'''

# a list of what a tensor method gives (`.max()`: a new tensor, never the list itself)
APPENDED_ACROSS_INVOKES = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace(remote=True) as tracer:
        outs = []
        for subject in ["Paris", "Lyon"]:
            with tracer.invoke(f"{subject} is a city in"):
                outs.append(model.lm_head.output[0, -1].max().save())
    print([round(float(o), 4) for o in outs])
'''


# the negation of a saved value is a new tensor, never the saved one
NEGATED_SAVE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        probs = model.lm_head.output[0, -1].softmax(-1)
        entropy = -(probs * (probs + 1e-9).log()).sum().save()
    print(round(entropy.item(), 4))
'''

# the name is bound twice, in turn: the block ends with the negation, a new tensor (the save
# inside it is of another object)
REBOUND_TO_A_NEGATED_SAVE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        entropy = model.lm_head.output[0, -1].softmax(-1)
        entropy = -(entropy * (entropy + 1e-9).log()).sum().save()
    print(round(entropy.item(), 4))
'''

# a list made in the block, filled with saved values: the saves are of other objects (the
# list is reached only through its name, whose uses only append to it)
FILLED_WITH_SAVES = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        per_layer = []
        for i in range(2):
            per_layer.append(model.lm_head(LAYERS[i].output)[0, -1].argmax().save())
    print([t.item() for t in per_layer])
'''


@both
@pytest.mark.parametrize("template, start", [(UNBOUND, "NameError: name 'n_tokens' is not defined"),
                                             (UNBOUND_IN_A_FUNCTION, "UnboundLocalError: cannot access local "
                                                                     "variable 'top'"),
                                             (READ_BY_THE_NEXT_BLOCK, "NameError: name 'hidden' is not defined"),
                                             (FILLED_ACROSS_INVOKES, "NameError: name 'scores' is not defined"),
                                             (APPENDED_ACROSS_INVOKES, "NameError: name 'outs' is not defined"),
                                             (NEGATED_SAVE, "NameError: name 'entropy' is not defined"),
                                             (REBOUND_TO_A_NEGATED_SAVE, "NameError: name 'entropy' is not defined"),
                                             (FILLED_WITH_SAVES, "NameError: name 'per_layer' is not defined")],
                         ids=["module", "function", "next-block", "filled-across-invokes", "appended-across-invokes",
                              "negated-save", "rebound-to-a-negated-save", "filled-with-saves"])
def test_a_name_read_after_its_block_is_unbound_and_saving_it_fixes_the_script(family, template, start):
    source = script(template, family)
    result = optimize(source)
    found = [f for f in mine(result) if start in f.message]
    assert found and all(f.status is Status.APPLIED for f in found), [f.message for f in mine(result)]
    error = quoted(found[0].message, start)
    for mode, raised in errors(source).items():
        assert raised is not None and error in raised, (mode, raised, error)
    fixed = optimize(source, options=Options(select=frozenset({ID}))).code  # the check's fix alone
    assert fixed != source
    again = optimize(fixed)
    assert not mine(again)  # nothing left to report
    report = verified(fixed, again, filename="script.py")
    assert report.intended_ok, report.to_text() + "\n" + fixed
    assert not any(report.errors.values()), report.errors


STALE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    pattern = "unknown"
    with model.trace("The Eiffel Tower is in", remote=True):
        hidden = LAYERS[0].output.save()
        pattern = "LAYERS"
    print(pattern, tuple(hidden.shape))
'''


@both
def test_a_name_that_held_a_value_keeps_it_and_the_unsafe_fix_gives_the_blocks(family):
    source = script(STALE, family)
    default = optimize(source)
    found = mine(default)
    assert [f.status for f in found] == [Status.UNSAFE_NOT_APPLIED], [f.message for f in found]
    assert "still holds the value it had before the block" in found[0].message
    for mode in MODES:
        run = executed(source, mode=mode, timeout=600)
        assert run.error is None and run.stdout.startswith("unknown "), (mode, run.error, run.stdout)
    fixed = optimize(source, options=Options(unsafe_fixes=True, select=frozenset({ID}))).code
    assert fixed != source
    report = verified(fixed, optimize(fixed), filename="script.py")
    assert report.intended_ok, report.to_text() + "\n" + fixed
    layers = script("LAYERS", family).strip()
    for mode in MODES:
        run = executed(fixed, mode=mode, timeout=600)
        assert run.error is None and run.stdout.startswith(f"{layers} "), (mode, run.error, run.stdout)


IN_ORDER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    layers = LAYERS
    with model.session(remote=True):
        with model.trace() as tracer:
            with tracer.invoke("The Eiffel Tower is in"):
                logits = model.lm_head.output[0, -1]
            with tracer.invoke("The Colosseum is in"):
                first = layers[0].input[0, -1]
                for layer in layers:
                    norm = layer.input.norm() + layer.mlp.output.norm() + layer.output.norm()
                last = layers[-1].output[0, -1]
                other = model.lm_head.output[0, -1]
        difference = (logits - other).norm().save()
        steps = [norm.item() for norm in (first.norm(), last.norm())]
    with model.trace("The Eiffel Tower is in", remote=True):
        hidden = list().save()
        for layer in layers:
            hidden.append(layer.output[0, -1])
        top = model.output.logits[0, -1].argmax().save()
    print(round(difference.item(), 3), len(hidden), top.item())
'''


@both
def test_reads_in_the_models_order_run_and_are_not_reported(family):
    source = script(IN_ORDER, family)
    result = optimize(source)
    assert ID in [cost.pass_id for cost in result.costs]  # the check ran
    assert mine(result) == []
    for mode, raised in errors(source).items():
        assert raised is None, (mode, raised)


QUIET_NAMES = '''
    import nnsight
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def grab():
        return model.lm_head.output[0, -1].save()


    with model.trace("The Eiffel Tower is in", remote=True):
        logits = model.lm_head.output.save()
        same = logits  # an alias of a saved value: the same object comes back
        count = nnsight.save(3)
        three = 3  # the same (cached) int object as a saved one: it comes back too
        last = grab()  # saved by a helper
    with model.session(remote=True):
        with model.trace("The Colosseum is in"):
            hidden = LAYERS[0].output[0, -1]
        with model.trace("The Colosseum is in"):
            LAYERS[0].output[0, -1] = hidden  # read in a later trace of the session
            patched = model.lm_head.output[0, -1].argmax().save()
    print(tuple(same.shape), three, tuple(last.shape), patched.item())
'''

QUIET_ORDER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    for mode in ("lens", "layers"):
        with model.trace("The Eiffel Tower is in", remote=True):
            if mode == "lens":
                out = model.lm_head.output[0, -1].argmax().save()
            else:
                out = LAYERS[0].output[0, -1].norm().save()
            if mode != "lens":
                again = LAYERS[1].output[0, -1].norm().save()
        print(mode, out.item())
    with model.trace("The Eiffel Tower is in", remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
        try:
            early = LAYERS[0].output[0, -1].save()
        except Exception:
            pass
    print(top.item())
'''


@both
@pytest.mark.parametrize("template", [QUIET_NAMES, QUIET_ORDER], ids=["names", "order"])
def test_what_runs_on_nnsight_08_is_not_reported(family, template):
    source = script(template, family)
    result = optimize(source)
    assert ID in [cost.pass_id for cost in result.costs]  # the check ran
    assert mine(result) == [], [f.message for f in mine(result)]
    for mode, raised in errors(source).items():
        assert raised is None, (mode, raised)


LOOP_OUT_OF_ORDER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    tops = []
    for prompt in ["The Eiffel Tower is in", "The Colosseum is in", "Big Ben is in"]:
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output[0, -1].save()
            hidden = LAYERS[5].output[0, -1].save()
        tops.append(logits.argmax().item())
    print(tops)
'''

PRE_05 = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        logits = model.lm_head.output.save()
        n_tokens = model.lm_head.output.shape[1]
    print(logits.value.shape, n_tokens)
'''


@pytest.mark.parametrize("options", [Options(), Options(unsafe_fixes=True), Options(migrate=True),
                                     Options(select=frozenset({"session-hoisting"}))],
                         ids=["default", "unsafe", "migrate", "selected-other"])
@pytest.mark.parametrize("template, text", [(LOOP_OUT_OF_ORDER, "hidden = "), (PRE_05, "n_tokens = ")],
                         ids=["rewritten", "pre-0.5"])
def test_each_failure_is_reported_once_where_the_code_as_written_has_it(template, text, options):
    """However the other passes rewrite the script (a session around the loop), and also for
    a script written for the pre-0.5 API (where the other passes do not run unless it is
    migrated), the check reports on the code as written, once."""
    source = script(template, "gpt2")
    line = next(i for i, code in enumerate(source.splitlines()) if text in code)
    found = mine(optimize(source, options=options))
    assert [f.range.start.line for f in found] == [line], [(f.range.start.line, f.message) for f in found]
    # (migrated in the same run, the pre-0.5 script is 0.5+ code: its unsaved name is saved;
    # the loop's reads are moved into the model's order unless the check only reports)
    fixed = options.migrate if template is PRE_05 else options.select is None
    assert [f.applied for f in found] == [fixed]


HELPER_SAVES = '''
    from nnsight import LanguageModel
    from my_helpers import last_logits

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        logits = last_logits(model)  # the helper saves what it returns
        n_tokens = model.lm_head.output.shape[1]
    print(logits.shape)
'''


def test_a_value_a_helper_of_yours_may_save_is_not_reported():
    """`last_logits` (in a module of the user's) may save any value, `logits` or an int
    that is `n_tokens` too: neither is reported."""
    source = script(HELPER_SAVES, "gpt2").replace("print(logits.shape)", "print(logits.shape, n_tokens)")
    result = optimize(source)
    assert ID in [cost.pass_id for cost in result.costs]
    assert mine(result) == [], [f.message for f in mine(result)]


INVOKES_IN_A_LOOP_AFTER_AN_INVOKE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace(remote=True) as tracer:
        with tracer.invoke("The Eiffel Tower is in"):
            logits = model.lm_head.output[0, -1]
            clean = logits.argmax().save()
        offset = 1  # between the invokes: it reads none of their values
        for prompt in ["The Colosseum is in", "Big Ben is in"]:
            with tracer.invoke(prompt):
                logits = model.lm_head.output[0, -1]  # the name the first invoke binds, bound again
                other = (logits.argmax() + offset).save()
    print(clean.item(), other.item())
'''


@both
def test_a_loop_of_invokes_after_an_invoke_is_invokes_not_code_after_them(family):
    # each iteration adds an invoke in every release: the script is 0.5+ code and runs on
    # 0.8 (it was "pre-0.5: code after the `tracer.invoke` blocks", and left unoptimized)
    source = script(INVOKES_IN_A_LOOP_AFTER_AN_INVOKE, family)
    for mode, raised in errors(source).items():
        assert raised is None, (mode, raised)
    result = optimize(source)
    assert not [f for f in result.findings if f.pass_id == "migrate-api"], [f.message for f in result.findings]
    report = verified(source, result, filename="script.py")
    assert report.intended_ok, report.to_text() + "\n" + result.code


# code after a loop over every step of a generation never runs on nnsight 0.5+
AFTER_EVERY_STEP = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.generate("The weather today is", max_new_tokens=3, remote=True) as tracer:
        norms = list().save()
        LOOP
            norms.append(LAYERS[0].output[0, -1].norm())
        tokens = tracer.result.save()
    print(len(norms), tokens.shape)
'''


@both
@pytest.mark.parametrize("loop", ["with tracer.all():", "for step in tracer.iter[:]:", "with tracer.iter[:]:",
                                  "with tracer.iter[1:]:", "for step in tracer.iter[1:]:"])
def test_code_after_a_loop_over_every_step_is_reported_and_never_runs(family, loop):
    # a slice of `tracer.iter` with no end, in a `with` as in a `for`, runs to the last step
    source = script(AFTER_EVERY_STEP.replace("LOOP", loop), family)
    (found,) = [f for f in mine(optimize(source)) if "steps through generation until it ends" in f.message]
    assert found.message.startswith("`tokens = tracer.result.save()` comes after"), found.message
    for mode, raised in errors(source).items():
        assert raised is not None and "name 'tokens' is not defined" in raised, (mode, raised)
    # the same header with an end (`tracer.all()` has none: a bounded `for`)
    bounded = source.replace(loop, loop.replace(":]", ":3]") if ":]" in loop else "for step in tracer.iter[0:3]:")
    assert not [f for f in mine(optimize(bounded)) if "steps through generation" in f.message]
    assert all(raised is None for raised in errors(bounded).values())


# `remote=True` on the traces of a remote session (copied from a lone trace): NDIF refuses
# the inner request; the check drops the inner flag, the session runs them
INNER_REMOTE = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
with model.session(remote=True):
    tops = list().save()
    for prompt in ["The cat sat on the", "The dog ran to the"]:
        with model.trace(prompt, remote=True):
            tops.append(model.lm_head.output[0, -1].argmax())
print([int(t) for t in tops])
'''


@both
def test_remote_on_a_trace_inside_a_remote_session_is_dropped(family):
    from execution import optimized_and_verified

    result, report = optimized_and_verified(INNER_REMOTE, family)
    assert "with model.trace(prompt):" in result.code and report.after.requests == 1
    assert report.original_remote_differs  # the original fails on the (emulated) NDIF


OUT_OF_ORDER_LINES = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        logits = model.lm_head.output[0, -1].save()
        top = logits.argmax(dim=-1).save()
        late = LAYERS[1].output[0][-1].norm().save()
        first = LAYERS[0].output[0][-1].norm().save()
    print(top.item(), late.item(), first.item())
'''

IN_MODEL_ORDER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("The Eiffel Tower is in", remote=True):
        first = LAYERS[0].output[0][-1].norm().save()
        late = LAYERS[1].output[0][-1].norm().save()
        logits = model.lm_head.output[0, -1].save()
        top = logits.argmax(dim=-1).save()
    print(top.item(), late.item(), first.item())
'''


@both
def test_lines_reading_out_of_order_are_moved_into_the_models_order(family):
    """The original raises; the fix moves whole lines (`top` stays after `logits`, which it
    reads) and computes what the lines in the model's order compute."""
    source = script(OUT_OF_ORDER_LINES, family)
    for mode, raised in errors(source).items():
        assert raised is not None and "OutOfOrderError" in raised, (mode, raised)
    result = optimize(source, options=Options(select=frozenset({ID})))
    assert [f.applied for f in mine(result)] == [True]
    reference = script(IN_MODEL_ORDER, family)
    assert result.code == reference
    report = verified_sources(reference, result.code, filename="script.py")
    assert report.intended_ok and not any(report.errors.values()), report.to_text()


CANNOT_MOVE = {
    # a print between: its output would come before or after other code than written
    "print": ("        first = ", "        print(late)\n        first = "),
    # a line that reads what the line it must pass binds
    "reads": ("late = LAYERS[1].output[0][-1].norm()", "late = (LAYERS[1].output[0][-1] + logits[0]).norm()"),
}


@pytest.mark.parametrize("case", sorted(CANNOT_MOVE))
def test_lines_that_cannot_move_are_reported_and_left(case):
    old, new = CANNOT_MOVE[case]
    assert old in OUT_OF_ORDER_LINES
    source = script(OUT_OF_ORDER_LINES.replace(old, new), "gpt2")
    result = optimize(source, options=Options(select=frozenset({ID})))
    assert result.code == source
    assert [f.applied for f in mine(result)] == [False]
    assert "OutOfOrderError" in mine(result)[0].message


# a patch across invokes whose right side reads the first invoke's value before the second
# invoke asks for a module
CROSS_INVOKE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace(remote=True) as tracer:
        with tracer.invoke("Paris is the capital of France"):
            source = LAYERS[1].output[:, -1, :]
        with tracer.invoke("Berlin is the capital of Germany"):
            LAYERS[1].output[:, -1, :] = source
            top = model.lm_head.output[0, -1].argmax().save()
    print(top)
'''

CROSS_INVOKE_WAITING = CROSS_INVOKE.replace(
    "            LAYERS[1].output[:, -1, :] = source\n",
    "            hidden = LAYERS[1].output\n            hidden[:, -1, :] = source\n")


@both
def test_a_name_read_before_an_earlier_invoke_binds_it_raises(family):
    reported_error(CROSS_INVOKE, family, "NameError: name 'source' is not defined")


@both
def test_an_invoke_that_asks_for_its_module_first_waits_and_is_not_reported(family):
    source = script(CROSS_INVOKE_WAITING, family)
    assert "hidden = " in source
    assert mine(optimize(source)) == []
    for mode, raised in errors(source).items():
        assert raised is None, (mode, raised)


# the module comes from a function of the script that returns it
THROUGH_A_HELPER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def layer(i):
        return LAYERS[i]


    with model.trace("Knowledge is power", remote=True):
        whole = layer(1).output.norm().save()
        mlp = LAYERS[1].mlp.output.norm().save()
    print(whole, mlp)
'''


@both
def test_a_module_a_helper_returns_is_ordered_too(family):
    reported_error(THROUGH_A_HELPER, family, "OutOfOrderError")


CACHED_BY_THE_TRACER = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
with model.trace("The Eiffel Tower is in", remote=True) as tracer:
    cache = tracer.cache(modules=[LAYERS[0]])
print(len(cache.keys()))
'''


@pytest.mark.parametrize("family", ["llama"])
def test_the_cache_a_tracer_returns_is_not_reported_unsaved(family):
    """nnsight 0.8 saves the cache `tracer.cache()` returns: reading it after the trace works."""
    result, _report = optimized_and_verified(CACHED_BY_THE_TRACER, family)
    assert not [f for f in result.findings if f.pass_id == "nnsight-05-failures"], result.findings


# gradients gathered into a list inside `with metric.backward():` (trial48 min_07): the list
# is a new object that no save is of, so the read after the trace raises NameError; its
# binding runs whenever the trace does (a `with` body), so the check saves it there
GRADIENTS_IN_A_LIST = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    with model.trace("When Mary and John went to the store", remote=True):
        acts = [LAYERS[i].output for i in range(2)]
        logits = model.lm_head.output
        metric = logits[0, -1, 5] - logits[0, -1, 7]
        with metric.backward():
            grads = [a.grad.save() for a in reversed(acts)][::-1]
    sums = [round(float(g.abs().sum()), 4) for g in grads]
    print(sums)
'''


@both
def test_a_list_of_gradients_bound_in_the_backward_block_is_saved(family):
    source = script(GRADIENTS_IN_A_LIST, family)
    for mode, raised in errors(source).items():
        assert raised is not None and "NameError" in raised and "grads" in raised, (mode, raised)
    result = optimize(source, options=Options(select=frozenset({ID})))
    assert [f.applied for f in mine(result)] == [True], [f.message for f in mine(result)]
    assert "grads = nnsight.save([a.grad.save() for a in reversed(acts)][::-1])" in result.code
    report = verified_sources(result.code, result.code, filename="script.py")
    assert report.intended_ok and not any(report.errors.values()), report.to_text()
    assert len(executed(result.code, mode="local").namespace["sums"]) == 2
