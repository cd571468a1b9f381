"""positions.code_and_positions gives libcst's PositionProvider ranges, from one code generation."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from generators import dense_nnsight_script
from libcst.metadata import MetadataWrapper, PositionProvider

from ndif_opt.syntax.positions import Positions, code_and_positions, code_in, code_of
from ndif_opt.syntax.walk import all_nodes

ROOT = Path(__file__).resolve().parents[2]

TEXTS = {
    "dense": dense_nnsight_script(120),
    "crlf": "x = 1\r\nif x:\r\n    y = (1,\r\n   2)\r\n",
    "tabs-no-final-newline": "def f():\n\tpass\n# end",
    "empty": "",
    "statement-without-final-newline": "import os\nx = 1",
    "block-without-final-newline": "# head\nif x:\n    y = (1,\n         2)",
    "only-a-comment": "# nothing else",
    "only-newlines": "\n\n",
    "strings-with-newlines": 's = """a\nb"""\nt = f"{s!r}\\n"  # c\n',
    "pipeline-source": (ROOT / "ndif_opt" / "engine" / "pipeline.py").read_text(),
    "nested-blocks": (
        "class C:\n    @d(1,\n        2)\n    def f(self, a, b=1):\n        if a:  # c\n\n            # lead\n"
        "            s = '''x\n  y'''\n            t = (1,\n       2); u = 3\n        elif b:\n          pass\n"
        "        else:\n            try:\n                x = [i for i in a]\n            except E as e:\n"
        "                raise\n        return f(a, *b, c=1, **d)\n"
        "with a as b, c:\n    for i in x:\n        while y: z = \\\n            1\n"
    ),
}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_same_ranges_as_position_provider(name):
    module = cst.parse_module(TEXTS[name])
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    code, positions = code_and_positions(module)
    assert code == module.code
    for node, where in expected.items():
        assert positions.get(node) == where, type(node).__name__
    assert positions.get(cst.Name("not_in_the_tree")) is None


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_same_ranges_before_the_whole_code(name):
    # the code as written: its nodes are placed from the code of the statements up to the
    # one holding them, scanned once however many nodes are asked about, in any order
    module = cst.parse_module(TEXTS[name])
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = Positions(module)
    for node, where in reversed(list(expected.items())):
        assert positions.get(node) == where, type(node).__name__
    for node, where in expected.items():
        assert positions.get(node) == where, type(node).__name__


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_code_for_node_is_libcsts(name):
    module = cst.parse_module(TEXTS[name])
    nodes = [module, *module.body] + [s.body for s in module.body if isinstance(s, (cst.FunctionDef, cst.If, cst.For))]
    for node in nodes:
        assert code_of(node) == cst.Module([]).code_for_node(node)


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_code_in_is_code_of(name):
    # every node's code from its statement's one generation: without the indentation of the
    # blocks around it; what its parent tells its generation (a default comma) left to code_of
    module = cst.parse_module(TEXTS[name])
    for statement in module.body:
        for node in all_nodes(statement):
            try:
                expected = code_of.__wrapped__(node)
            except SyntaxError:  # (libcst cannot generate this node alone: CSTCodegenError)
                continue
            assert code_in(node, statement, module) == expected, type(node).__name__


def test_code_in_of_small_statements_a_rewrite_joined():
    # a line a pass built: its statements have no semicolons of their own, so the line adds
    # "; " after each but the last; a statement's code alone has none
    first, second = cst.parse_statement("a = f(x)").body[0], cst.parse_statement("print('; ')").body[0]
    loop = cst.parse_statement("for x in y:\n    pass\n")
    line = cst.SimpleStatementLine([first, second, cst.Pass(semicolon=cst.Semicolon())])
    statement = loop.with_changes(body=loop.body.with_changes(body=[line]))
    module = cst.Module([statement])
    assert cst.Module([]).code_for_node(line) == "a = f(x); print('; '); pass;\n"
    for node in all_nodes(statement):
        assert code_in(node, statement, module) == code_of.__wrapped__(node), type(node).__name__


def test_shared_statements_keep_the_positions():
    # a new version re-indents a block whose statement lines it shares with the one before,
    # and a node at two places takes the span libcst gives it
    before = cst.parse_module("for i in r:\n    x = f(i)  # c\n    y = [\n        x]\n")
    loop = before.body[0]
    shared = loop.body.body[0].body[0].value.args[0].value  # the i in f(i)
    after = cst.Module([
        cst.With([cst.WithItem(cst.Call(cst.Name("s")))], cst.IndentedBlock([loop.with_changes(target=shared)])),
    ])
    for module in (before, after, before):
        expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        code, positions = code_and_positions(module)
        assert code == module.code
        for node, where in expected.items():
            assert positions.get(node) == where, type(node).__name__
