"""An added argument or parameter keeps the layout of its list (syntax/commas.py)."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt.syntax.commas import appended

CALLS = [
    ("f()", "f(new=1)"),
    ("f(a, b)", "f(a, b, new=1)"),
    ("f(a, b,)", "f(a, b, new=1,)"),
    ("f(\n    a,\n    b,\n)", "f(\n    a,\n    b,\n    new=1,\n)"),
    ("f(\n    a,\n)", "f(\n    a,\n    new=1,\n)"),
    ("f(\n    a, b\n)", "f(\n    a, b, new=1\n)"),
    ("f(\n    a\n)", "f(\n    a, new=1\n)"),
]


@pytest.mark.parametrize("before, after", CALLS)
def test_an_argument_is_added_in_the_calls_layout(before, after):
    call = cst.parse_expression(before)
    new = cst.Arg(value=cst.Integer("1"), keyword=cst.Name("new"),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    added = call.with_changes(args=appended(call.args, new, call.whitespace_before_args))
    assert cst.Module([]).code_for_node(added) == after


DEFS = [
    ("def f(\n    a, b: int = -1\n) -> int:\n    pass\n", "def f(\n    a, b: int = -1, new=True\n) -> int:\n    pass\n"),
    ("def f(\n    a,\n    b=1,\n):\n    pass\n", "def f(\n    a,\n    b=1,\n    new=True,\n):\n    pass\n"),
    ("def f(a):\n    pass\n", "def f(a, new=True):\n    pass\n"),
]


@pytest.mark.parametrize("before, after", DEFS)
def test_a_parameter_is_added_in_the_definitions_layout(before, after):
    func = cst.parse_statement(before)
    new = cst.Param(name=cst.Name("new"), default=cst.Name("True"),
                    equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                          whitespace_after=cst.SimpleWhitespace("")))
    params = func.params.with_changes(params=appended(func.params.params, new, func.whitespace_before_params))
    assert cst.Module([func.with_changes(params=params)]).code == after
