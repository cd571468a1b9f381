"""ServerCheck: what keeps code on the client, whatever order the questions come in."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt.analysis.effects import ServerCheck
from ndif_opt.analysis.facts import analyze

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
