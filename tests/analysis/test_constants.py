"""``Facts.constant``: a module name's one value, only when nothing else binds the name —
a `for` target, `a = b = v`, an import, a `def`, a parameter... (the def-use rule every int_value,
model alias and generate length reads), and each name of `a, b = x, y` its element."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt.analysis.facts import analyze

SCRIPT = '''
import sys
N = 2
for N in [5, 6]:
    pass
a = b = 7
a = 1
prompt, steps = "Once there was", 3
head, *rest = 1, 2, 3
K = 9
W = 4
with open(sys.argv[0]) as W:
    pass
S = 0
if (S := len(sys.argv)) > 1:
    pass
D = 8
del D
T = 2
def T():
    pass
L = 12
def run(L):
    return range(L)
M = 3
match sys.argv:
    case [_, M]:
        pass
'''

EXPECTED = {"N": None, "a": None, "b": None, "prompt": '"Once there was"', "steps": "3", "head": None,
            "rest": None, "K": "9", "W": None, "S": None, "D": None, "T": None,
            "L": None, "M": None}


def test_no_name_is_a_constant_where_the_module_binds_names_through_its_namespace():
    for rebind in ('globals()["K"] = 1', 'exec("K = 1")', 'vars()["K"] = 1', 'setattr(sys.modules[__name__], "K", 1)'):
        facts = analyze(cst.parse_module("import sys\nK = 9\n" + rebind + "\n"))
        assert facts.constant("K") is None, rebind


@pytest.mark.parametrize("name", EXPECTED)
def test_a_constant_is_a_names_only_binding(name):
    facts = analyze(cst.parse_module(SCRIPT))
    value = facts.constant(name)
    assert (None if value is None else cst.Module([]).code_for_node(value)) == EXPECTED[name]
