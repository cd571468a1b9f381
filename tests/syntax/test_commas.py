"""An added argument or parameter keeps the layout of its list (syntax/commas.py)."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt.syntax.commas import appended

TIGHT = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))

CASES = [
    ("f()", "f(new=1)"),
    ("f(a, b)", "f(a, b, new=1)"),
    ("f(a, b,)", "f(a, b, new=1,)"),
    ("f(\n    a,\n    b,\n)", "f(\n    a,\n    b,\n    new=1,\n)"),
    ("f(\n    a,\n)", "f(\n    a,\n    new=1,\n)"),
    ("f(\n    a, b\n)", "f(\n    a, b, new=1\n)"),
    ("f(\n    a\n)", "f(\n    a, new=1\n)"),
    ("def f(\n    a, b: int = -1\n) -> int:\n    pass\n", "def f(\n    a, b: int = -1, new=1\n) -> int:\n    pass\n"),
    ("def f(\n    a,\n    b=1,\n):\n    pass\n", "def f(\n    a,\n    b=1,\n    new=1,\n):\n    pass\n"),
    ("def f(a):\n    pass\n", "def f(a, new=1):\n    pass\n"),
]


def added(before: str) -> str:
    """``before`` (a call, or a function) with `new=1` added to its arguments or parameters."""
    if before.startswith("def "):
        func = cst.parse_statement(before)
        new = cst.Param(name=cst.Name("new"), default=cst.Integer("1"), equal=TIGHT)
        params = func.params.with_changes(params=appended(func.params.params, new, func.whitespace_before_params))
        return cst.Module([func.with_changes(params=params)]).code
    call = cst.parse_expression(before)
    new = cst.Arg(value=cst.Integer("1"), keyword=cst.Name("new"), equal=TIGHT)
    return cst.Module([]).code_for_node(call.with_changes(args=appended(call.args, new, call.whitespace_before_args)))


@pytest.mark.parametrize("before, after", CASES)
def test_an_item_is_added_in_the_lists_layout(before, after):
    assert added(before) == after
