"""Building blocks the passes share (ndif_opt/syntax/rewrite.py)."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from ndif_opt.syntax.rewrite import method_call

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


class _BlankLineOracle(cst.CSTVisitor):
    """What a full walk finds: a blank line (no comment) marked as indented."""

    def __init__(self) -> None:
        self.found = False

    def visit_EmptyLine(self, node: cst.EmptyLine) -> None:
        if node.comment is None and node.indent:
            self.found = True


def _statements_and_suites(module: cst.Module) -> list[cst.CSTNode]:
    from ndif_opt.syntax.walk import find_nodes

    return find_nodes(module, lambda n: isinstance(n, (cst.BaseStatement, cst.BaseSuite, cst.Module)))


INDENTED_BLANKS = [
    "if x:\n    a = 1\n    \n    b = 2\n",
    "for i in y:\n    with m.trace(p):\n        a = 1\n        \n        # c\n        b = 2\n",
    "def f():\n    return (1,\n    \n    2)\n",
    "try:\n    pass\n    \nexcept E:\n    \n    pass\nfinally:\n    \n    pass\n",
    "class C:\n    x = 1\n    \n    def g(self):\n        \n        return 1\n",
    "if x:\n    a = 1\n\n    b = 2\n",  # an unindented blank line only
]


def test_the_indented_blank_line_check_finds_what_a_full_walk_finds():
    from pathlib import Path

    from ndif_opt.syntax.rewrite import _holds_indented_blank_line

    root = Path(__file__).resolve().parents[2]
    texts = INDENTED_BLANKS + [p.read_text() for p in sorted(root.glob("examples/*.py"))]
    # real code: a fixed quarter of the package's modules (all of them took 20 s, growing with it)
    texts += [p.read_text() for p in sorted(root.glob("ndif_opt/**/*.py"))[::4]]
    found = checked = 0
    for text in texts:
        for node in _statements_and_suites(cst.parse_module(text)):
            oracle = _BlankLineOracle()
            node.visit(oracle)
            assert _holds_indented_blank_line(node) == oracle.found, cst.Module([]).code_for_node(node)[:300]
            found += oracle.found
            checked += 1
    assert found >= 10 and checked > 1000  # both answers were asked for


def test_a_block_opens_without_the_blank_lines_its_first_statement_had_where_it_stood():
    from ndif_opt.syntax.rewrite import opening

    moved = cst.parse_module("x = 1\n\n\n# why\ny = 2\n").body[1]
    [first] = opening([moved])
    assert cst.Module(body=[first]).code == "# why\ny = 2\n"
    assert opening([]) == [] and opening([cst.parse_statement("z = 3\n")])[0].leading_lines == ()
