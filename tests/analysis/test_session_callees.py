"""Which traces of a function run inside a session wherever the script runs them
(``remote_functions.runs_in_session_of``): the rule the sweep passes use for a helper's
loop of traces, each case the smallest script that shows one of its conditions."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from ndif_opt.analysis.facts import analyze
from ndif_opt.analysis.remote_functions import runs_in_session_of

HELPER = '''
from nnsight import LanguageModel
model = LanguageModel("openai-community/gpt2")
other = LanguageModel("openai-community/gpt2")

def lens(prompt, remote=True):
    for layer in range(3):
        with model.trace(prompt{flag}):
            out = model.transformer.h[layer].output.save()
    return out

'''

CASES = {
    # every call in a session of the helper's model, with the flag off
    "keyword False": (", remote=remote", "with model.session(remote=True):\n    a = lens('x', remote=False)\n", True),
    "positional False": (", remote=remote", "with model.session(remote=True):\n    a = lens('x', False)\n", True),
    "in a comprehension": (", remote=remote",
                           "with model.session(remote=True):\n    a = [lens(p, remote=False) for p in 'ab']\n", True),
    "no flag": ("", "with model.session(remote=True):\n    a = lens('x')\n", True),
    # a call that sends requests of its own, or that may run after the session
    "default True": (", remote=remote", "with model.session(remote=True):\n    a = lens('x')\n", False),
    "a call outside": (", remote=remote", "with model.session(remote=True):\n    a = lens('x', remote=False)\n"
                                          "b = lens('y', remote=False)\n", False),
    "in a lambda": (", remote=remote",
                    "with model.session(remote=True):\n    f = lambda p: lens(p, remote=False)\nb = f('y')\n", False),
    "passed as a value": (", remote=remote",
                          "with model.session(remote=True):\n    a = list(map(lens, ['x']))\n", False),
    "another model's session": (", remote=remote",
                                "with other.session(remote=True):\n    a = lens('x', remote=False)\n", False),
    "a flag it computes": (", remote=not remote",
                           "with model.session(remote=True):\n    a = lens('x', remote=False)\n", False),
    "keywords unpacked": (", remote=remote",
                          "with model.session(remote=True):\n    a = lens('x', **{'remote': False})\n", False),
}


@pytest.mark.parametrize("name", CASES)
def test_a_helper_trace_runs_in_a_session_only_when_every_call_is_in_one(name):
    flag, calls, expected = CASES[name]
    facts = analyze(cst.parse_module(textwrap.dedent(HELPER).format(flag=flag) + calls))
    (trace,) = [b for b in facts.blocks if b.method == "trace"]
    assert runs_in_session_of(trace, facts) is expected
