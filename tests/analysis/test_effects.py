"""ServerCheck: what keeps code on the client, whatever order the questions come in."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt.analysis.effects import ServerCheck
from ndif_opt.analysis.facts import analyze
from ndif_opt.syntax.walk import find_nodes

MUTUAL = '''
def f(n):
    print(n)
    if n > 0:
        g(n - 1)

def g(n):
    if n > 0:
        f(n - 1)

g(1)
'''


@pytest.mark.parametrize("asked_first", [["f", "g"], ["g", "f"], []])
def test_a_function_calling_back_into_a_printing_one_prints(asked_first):
    module = cst.parse_module(MUTUAL)
    check = ServerCheck(analyze(module))
    for name in asked_first:
        check.function_problems(name)
    messages = [p.message for p in check.problems(module.body[-1])]
    assert len(messages) == 1 and "`print`" in messages[0], messages
    assert check.function_problems("f") and check.function_problems("g")


def test_functions_of_top_level_branches_are_the_modules_unless_defined_twice():
    facts = analyze(cst.parse_module(
        "if not cached:\n"
        "    def extract(p):\n        return p\n"
        "try:\n    import fast\nexcept ImportError:\n    def fallback():\n        pass\n"
        "if fast:\n    def f():\n        return 1\nelse:\n    def f():\n        return 2\n"
        "def g():\n    def inner():\n        pass\n"
    ))
    assert sorted(facts.functions) == ["extract", "fallback", "g"]


@pytest.mark.parametrize("line", [
    "noise = torch.randn(768) * 0.5",
    "torch.manual_seed(0)",
    "index = np.random.randint(0, 10)",
    "weights = torch.empty(4).normal_()",
    "draw = F.dropout(x, p=0.1)",
])
def test_a_draw_from_a_process_wide_random_generator_stays_on_the_client(line):
    source = "import torch\nimport numpy as np\nimport torch.nn.functional as F\nx = torch.ones(3)\n" + line + "\n"
    module = cst.parse_module(source)
    problems = ServerCheck(analyze(module)).problems(module.body[-1])
    assert any("random generator" in p.message for p in problems), [p.message for p in problems]


def test_a_tensor_made_without_randomness_may_go_to_the_server():
    module = cst.parse_module("import torch\nzeros = torch.zeros(768) * 0.5\n")
    assert ServerCheck(analyze(module)).problems(module.body[-1]) == []


@pytest.mark.parametrize("code, expected", [
    ("def f(v):\n    global total\n    total = total + v\n\nf(1)  # <-\n", "binds `total` (`global total`)"),
    ("def f(v):\n    global total\n    return total + v\n\nf(1)  # <-\n", None),  # read only: the value travels
    ("def outer():\n    best = 0\n    def up(x):\n        nonlocal best\n        best = x\n    up(1)  # <-\n"
     "    return best\n", "binds `best` (`nonlocal best`)"),
    ("globals()['x'] = 1  # <-\n", "calls `globals()`"),
    ("if 'model' not in dir():  # <-\n    model = 1\n", "calls `dir()`"),
    ("names = dir(obj)  # <-\n", None),  # the attributes of a value: no names of the scope
    ("display(obj)  # <-\n", "calls `display`, which this file never defines"),  # a notebook kernel's
    ("def shown(v):\n    def show(x):\n        return x\n    y = show(v)  # <-\n    return y\n", None),  # its own
])
def test_binding_a_name_of_your_machine_keeps_the_code_on_it(code, expected):
    module = cst.parse_module("total = 0\nobj = 1\n" + code)
    check = ServerCheck(analyze(module))
    # the innermost statement on the marked line
    marked = min((s for s in find_nodes(module, lambda n: isinstance(n, cst.BaseStatement))
                  if "# <-" in module.code_for_node(s)), key=lambda s: len(module.code_for_node(s)))
    messages = [p.message for p in check.problems(marked)]
    assert any(expected in m for m in messages) if expected else not messages, messages
