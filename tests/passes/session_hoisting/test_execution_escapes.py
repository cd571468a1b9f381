"""A client object reached through something other than the name a session takes over.

A session runs on NDIF: an object of your machine that code in it changes is a copy there,
and a container the session takes over (`results = nnsight.save(results)`, or made in it)
is a new object when it comes back. Either is right only when every way to the object is
the name the analysis follows. These scripts reach it another way — stored in an object,
a parameter's default value, a bound method, `functools.partial`, a closure, a helper that
fills what it is given or a module's list — and must keep their results: the change stays
on your machine (the session records what it needs), or the loop is left as it is with the
reason. And what a session brings back must be data: a list filled with functions is not.
"""

from __future__ import annotations

import pytest

from execution import both, optimized_and_verified

STORED_IN_AN_OBJECT = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    class RunLog:
        def __init__(self, store):
            self.store = store

        def summary(self):
            return {k: round(v, 3) for k, v in self.store.items()}


    results = {}
    log = RunLog(results)
    for layer in range(2):
        with model.trace("The key to the cabinet", remote=True):
            n = LAYERS[layer].output[0].norm().save()
        results[layer] = n.item()
    summary = log.summary()
'''

HELD_BY_ANOTHER_CONTAINER = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    results = []
    collector = {"vals": results}
    for layer in range(2):
        with model.trace("The key to the cabinet", remote=True):
            n = LAYERS[layer].output[0].norm().save()
        collector["vals"].append(round(n.item(), 4))
'''

DEFAULT_ARGUMENT = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    history = []


    def record(value, store=history):
        store.append(value)


    for p in ["red", "green"]:
        with model.trace(f"My favourite colour is {p} and", remote=True):
            top = model.lm_head.output[0, -1].argmax().save()
        record(top.item())
'''

BOUND_METHOD = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    history = []
    add = history.append
    for p in ["red", "green"]:
        with model.trace(f"My favourite colour is {p} and", remote=True):
            top = model.lm_head.output[0, -1].argmax().save()
        add(top.item())
'''

PARTIAL = '''
    import functools
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    results = []
    push = functools.partial(list.append, results)
    for layer in range(2):
        with model.trace("The key to the cabinet", remote=True):
            n = LAYERS[layer].output[0].norm().save()
        push(round(n.item(), 4))
'''

CLOSURE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    def main(prompts):
        out = []

        def rec(x):
            out.append(x)

        for p in prompts:
            with model.trace(p, remote=True):
                v = model.lm_head.output[0, -1].max().save()
            rec(round(v.item(), 4))
        return out


    res = main(["alpha", "beta gamma"])
'''

HELPER_FILLS_ITS_ARGUMENT = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    history = []
    other = []


    def record(value):
        history.append(value)


    def record_into(value, store):
        store.append(value)


    for p in ["red", "green"]:
        with model.trace(f"My favourite colour is {p} and", remote=True):
            top = model.lm_head.output[0, -1].argmax().save()
        record(top.item())
        record_into(top.item(), other)
'''

SHAPES = {
    "stored-in-an-object": STORED_IN_AN_OBJECT,
    "held-by-another-container": HELD_BY_ANOTHER_CONTAINER,
    "default-argument": DEFAULT_ARGUMENT,
    "bound-method": BOUND_METHOD,
    "partial": PARTIAL,
    "closure": CLOSURE,
    "helper-fills-its-argument": HELPER_FILLS_ITS_ARGUMENT,
}


@both
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_object_reached_another_way_keeps_what_the_loop_put_in_it(shape, family):
    result, report = optimized_and_verified(SHAPES[shape], family, let_go=frozenset(
        {"n", "top", "layer", "p"}))
    # the change stays on your machine; the loop still sends one request
    assert report.after.requests == 1, report.to_text() + result.code


FUNCTIONS_IN_A_LIST = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    formatters = []
    for layer in range(2):
        with model.trace("Mind the gap", remote=True):
            n = model.lm_head.output[0, -1].norm().save()
        val = n.item()

        def fmt(v=val, l=layer):
            return f"L{l}: {v:.3f}"

        formatters.append(fmt)
    texts = [f() for f in formatters]
'''


@both
def test_a_list_of_functions_does_not_come_back_from_a_session(family):
    result, report = optimized_and_verified(FUNCTIONS_IN_A_LIST, family, let_go=frozenset({"n"}))
    assert "formatters = list().save()" not in result.code
    assert any("`fmt` is a function the script defines" in (f.reason or "") for f in result.findings), \
        [f.reason for f in result.findings]


NOTEBOOK_CELL_PRINTS_A_SAVED_VALUE = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    for p in ["a b", "c d e"]:
        with model.trace(p, remote=True):
            h = model.lm_head.output.save()
        print(p, round(h.norm().item(), 3))
'''


@both
def test_in_a_notebook_a_saved_value_a_print_reads_stays_downloaded(family):
    """The print stays on your machine (replayed after the session); the kernel keeps `h`
    for cells to come, so it still comes back (docs/decisions.md, Notebooks)."""
    from ndif_opt.options import Options

    result, report = optimized_and_verified(NOTEBOOK_CELL_PRINTS_A_SAVED_VALUE, family,
                                            options=Options(notebook=True), let_go=frozenset())
    assert report.after.requests == 1, report.to_text() + result.code
    assert "h" not in result.unreturned
