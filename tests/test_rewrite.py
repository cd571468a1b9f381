"""Building blocks the passes share (ndif_opt/rewrite.py)."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from ndif_opt.rewrite import method_call

RECEIVERS = [
    "x", "x.y", "f(x)", "x[0]", "[1]", "{1: 2}", "{1}", "[a for a in b]", "(a for a in b)",
    "'s'", "'a' 'b'", "f'{x}'", "1.5", "2j", "...", "(a, b)", "(3)",
    "3", "a, b", "a + b", "-a", "not a", "a and b", "a < b", "a if c else b", "lambda: a",
    "await a", "(yield a)", "(n := a)",
]


def _assigned(source: str) -> tuple[str, ast.expr]:
    module = ast.parse(source)
    return module, module.body[0].body[0].value


@pytest.mark.parametrize("code", RECEIVERS)
def test_a_method_call_applies_to_the_whole_receiver(code):
    """``3.save()`` does not parse and ``a, b.save()`` saves only ``b``: the receiver is
    parenthesized where Python would not read it whole."""
    source = f"async def f():\n    value = {code}\n"
    module = cst.parse_module(source)
    line = module.body[0].body.body[0]
    assign = line.body[0]
    called = method_call(assign.value, "save")
    new = module.deep_replace(assign, assign.with_changes(value=called))
    _, value = _assigned(new.code)
    _, original = _assigned(source)
    assert isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
    assert value.func.attr == "save"
    assert ast.dump(value.func.value) == ast.dump(original)
