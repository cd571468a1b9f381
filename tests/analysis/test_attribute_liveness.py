"""May code read `self.<attr>` after a run of a method's statements? (regions.self_attributes_read_after)"""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt.analysis.facts import analyze
from ndif_opt.analysis.regions import self_attributes_read_after

CLASS = '''\
class Patching:
    def __init__(self, model):
        self.model = model

    def run_clean(self):
        self.cache = self.model.run()

    def patch(self, layer):
        return self.cache[layer]

    def sweep(self):
        self.run_clean()
        out = [self.patch(layer) for layer in range(2)]
        return out


experiment = Patching(model)
print(experiment.sweep())
'''


def _answer(source: str, attr: str = "cache", moved=frozenset({"run_clean", "patch"})) -> str:
    module = cst.parse_module(source)
    facts = analyze(module)
    sweep = next(n for n in module.body[0].body.body if isinstance(n, cst.FunctionDef) and n.name.value == "sweep")
    region = list(sweep.body.body[:2])
    return self_attributes_read_after(facts, region, [attr], moved)[attr]


def test_only_the_sessions_methods_read_it():
    assert _answer(CLASS) == ""


@pytest.mark.parametrize(
    "change, reason",
    [
        ("print(experiment.sweep())\n", "print(experiment.sweep())\nprint(experiment.cache)\n"),
        ("print(experiment.sweep())\n", "print(experiment.sweep())\nprint(experiment.patch(0))\n"),
        ("print(experiment.sweep())\n", "print(experiment.sweep())\nsave(experiment)\n"),
        ("print(experiment.sweep())\n", "print(experiment.sweep())\nx = getattr(experiment, 'ca' + 'che')\n"),
        ("print(experiment.sweep())\n", "print(experiment.sweep())\nf = experiment.patch\n"),
        ("class Patching:\n", "class Patching(Base):\n"),
        ("        return out\n", "        return out, self.cache\n"),
        ("        return out\n", "        return self\n"),
    ],
)
def test_code_that_may_read_it_after(change, reason):
    source = CLASS.replace(change, reason)
    assert source != CLASS
    assert _answer(source) != ""


def test_a_method_the_session_does_not_run_reads_it_on_your_machine():
    # `patch` is called in the region, but not inside the session (a line of the
    # region that stays on your machine would call it after)
    assert "may read it after" in _answer(CLASS, moved=frozenset({"run_clean"}))


def test_the_regions_own_lines_reading_it_keep_it():
    source = CLASS.replace("        out = [self.patch(layer) for layer in range(2)]\n",
                           "        out = [self.cache[layer] for layer in range(2)]\n")
    assert "in the code that moves" in _answer(source)


def test_in_a_notebook_what_methods_store_on_self_comes_back():
    # the kernel keeps the object: a cell added later may read any of its attributes
    from ndif_opt import optimize
    from ndif_opt.options import Options

    source = '''\
import torch
from nnsight import LanguageModel


class Patching:
    def __init__(self, model):
        self.model = model

    def run_clean(self):
        with self.model.trace("a b", remote=True):
            hidden = self.model.transformer.h[0].output.save()
        self.clean_hidden = hidden

    def patch(self, layer):
        with self.model.trace("c d", remote=True):
            self.model.transformer.h[layer].output[0, -1] = self.clean_hidden[0, -1]
            top = self.model.lm_head.output[0, -1].argmax().item().save()
        return top

    def sweep(self):
        self.run_clean()
        tops = []
        for layer in range(2):
            tops.append(self.patch(layer))
        return tops


experiment = Patching(LanguageModel("openai-community/gpt2"))
print(experiment.sweep())
'''
    script = optimize(source, options=Options(select=frozenset({"session-hoisting"})))
    notebook = optimize(source, options=Options(select=frozenset({"session-hoisting"}), notebook=True))
    assert "self.clean_hidden = _ndif" not in script.code, script.code
    assert "self.clean_hidden = _ndif" in notebook.code, notebook.code
