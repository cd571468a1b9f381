"""codegen.generate gives libcst's own code generation: the same tokens and the same spans
recorded (RecordingState driven by libcst's ``_codegen`` is the reference), for every node
of a corpus, with parsed trees and with trees whose optional tokens are left to libcst's
defaults (as the passes build them)."""

from __future__ import annotations

import itertools
import sys
import sysconfig
from pathlib import Path

import libcst as cst
import pytest
from libcst._nodes.base import CSTCodegenError

from generators import dense_nnsight_script, plain_python
from ndif_opt import codegen, positions
from ndif_opt.codegen import RecordingState, generate
from ndif_opt.passes import PASSES

ROOT = Path(__file__).resolve().parent.parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _libcst_generation(node: cst.CSTNode, indent: str = "    ", newline: str = "\n") -> RecordingState:
    state = RecordingState(indent, newline)
    node._codegen(state)
    return state


def _fast_generation(node: cst.CSTNode, indent: str = "    ", newline: str = "\n") -> RecordingState:
    state = RecordingState(indent, newline)
    generate(node, state)
    return state


def _assert_same_generation(node: cst.CSTNode, indent: str = "    ", newline: str = "\n") -> None:
    try:
        expected = _libcst_generation(node, indent, newline)
    except CSTCodegenError:  # e.g. an Annotation alone: its indicator is its parent's
        with pytest.raises(CSTCodegenError):
            _fast_generation(node, indent, newline)
        return
    found = _fast_generation(node, indent, newline)
    assert found.tokens == expected.tokens, type(node).__name__
    assert found.spans == expected.spans, type(node).__name__
    assert not found.indent_tokens and not found.syntactic


def _golden_sources() -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import golden
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return list(dict.fromkeys(source for _, source, _ in golden.corpus()))


def _corpus() -> dict[str, str]:
    texts = {f"example:{p.name}": p.read_text() for p in sorted((ROOT / "examples").glob("*.py"))}
    for cls in PASSES:
        for i, case in enumerate(cls.cases):
            texts[f"case:{cls.id}:{i}:before"] = case.before
            if case.after is not None:
                texts[f"case:{cls.id}:{i}:after"] = case.after
    texts["dense-150"] = dense_nnsight_script(150)
    texts["plain-150"] = plain_python(150)
    for name in ("ast.py", "dataclasses.py", "contextlib.py", "textwrap.py", "functools.py"):
        texts[f"stdlib:{name}"] = (STDLIB / name).read_text()
    texts["crlf-tabs"] = "if x:\r\n\ty = [1,\r\n  2]  # c\r\n\telse_ = {'a': -x, **d}\r\nelse:\r\n\tpass\r\n# end"
    texts["odd-spacing"] = (
        "x = ( ( a ) . b [ 1 : 2 : 3 , :: 4 ] )\nf ( * a , ** k , c = 1 , )\n"
        "with ( open ( p ) as f , g ( ) ) :\n    pass\n"
        "y = lambda a , * , b = 1 : ( a , )\nz = a if b else c ; w = not a and b or c\n"
        "del a , b\nassert a , 'm'\nv : int = 3\nq = a is not b not in c <= d\n"
        "for i , j in z :\n    continue\nelse :\n    break\nwhile x : pass\n"
        "if a : b\nelif c :\n    d\nelif e :  # c\n    f\nelse :\n    g\n"
        "@ deco ( 1 )\n\nasync def f ( a , / , b : int = 2 , * c , d , ** e ) -> 'x' :\n"
        "    return\n    return ( 1 )\n    global g\n    s = { 1 , * a }\n"
        "    t = [ x for x in y if x for z in x ]\n    u = ( x for x in y )\n    await a\n"
        "    r = f'{a!r:>{w}}' 'b' \"c\"\n    ...\n"
    )
    return texts


CORPUS = _corpus()


def _nodes(module: cst.Module) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            found.append(node)
            return True

    module.visit(Collect())
    return found


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_node_generates_as_libcst(name):
    module = cst.parse_module(CORPUS[name])
    _assert_same_generation(module, module.default_indent, module.default_newline)
    assert "".join(_fast_generation(module, module.default_indent, module.default_newline).tokens) == module.code
    for node in _nodes(module):
        _assert_same_generation(node)


class _Defaulted(cst.CSTTransformer):
    """Leaves every optional token that libcst can fill in to its default (MaybeSentinel.DEFAULT),
    as nodes built by the passes have them; keeps a field whose default is invalid there."""

    FIELDS = ("comma", "equal", "semicolon", "whitespace_after_return", "second_colon", "star",
              "whitespace_before_indicator", "whitespace_after_lambda", "star_arg", "lpar", "rpar")

    def on_leave(self, original, updated):
        for field in self.FIELDS:
            if isinstance(getattr(updated, field, None), cst.CSTNode) or (
                field in ("lpar", "rpar") and isinstance(updated, cst.With)
            ) or (field == "star" and isinstance(updated, cst.Param)):
                try:
                    updated = updated.with_changes(**{field: cst.MaybeSentinel.DEFAULT})
                except Exception:  # noqa: BLE001 - the default is not allowed there
                    pass
        return updated


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_defaulted_tokens_generate_as_libcst(name):
    module = cst.parse_module(CORPUS[name]).visit(_Defaulted())
    _assert_same_generation(module)
    for node in _nodes(module):
        _assert_same_generation(node)


def test_shared_nodes_keep_libcsts_spans():
    # the same node object at two places: a whole-node span is the first place's, a
    # syntactic position the last place's (setdefault vs assignment), as with libcst's path
    name = cst.Name("x")
    comma = cst.Comma()
    module = cst.Module([cst.SimpleStatementLine([cst.Expr(cst.Tuple([cst.Element(name, comma), cst.Element(name, comma)]))])] * 2)
    _assert_same_generation(module)


def test_empty_blocks_and_statements():
    module = cst.Module([
        cst.If(test=cst.Name("a"), body=cst.IndentedBlock([])),
        cst.SimpleStatementLine([]),
        cst.For(target=cst.Name("i"), iter=cst.Name("r"), body=cst.SimpleStatementSuite([]), orelse=cst.Else(cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])]))),
    ], has_trailing_newline=False)
    _assert_same_generation(module)
    _assert_same_generation(cst.Module([]))
    _assert_same_generation(cst.Module([], has_trailing_newline=False))


def test_the_pipeline_generates_as_libcst(monkeypatch):
    """Every generation the pipeline asks for, on the golden corpus (nodes built by the passes)."""
    from ndif_opt import optimize

    asked = []

    def checked_generate(node, state):
        asked.append(node)
        expected = _libcst_generation(node, state.default_indent, state.default_newline)
        before, recorded_before = len(state.tokens), set(state.spans)
        generate(node, state)
        if state.nested:  # statement lines reused (an indentation one token): the same text,
            # and each node's span where positions looks, in characters
            assert "".join(state.tokens[before:]) == "".join(expected.tokens), type(node).__name__
            found_offsets = [0, *itertools.accumulate(map(len, state.tokens))]
            expected_offsets = [0, *itertools.accumulate(map(len, expected.tokens))]
            for inner in _nodes(node):
                found = codegen.spans_of(inner, state)
                if len(found) == 1:  # (at more than one place, positions generates in one piece)
                    start, end = expected.spans[id(inner)]
                    assert (found_offsets[found[0][0]] - found_offsets[before], found_offsets[found[0][1]] - found_offsets[before]) == (
                        expected_offsets[start], expected_offsets[end]), type(inner).__name__
            return
        assert state.tokens[before:] == expected.tokens, type(node).__name__
        found = {key: (start - before, end - before) for key, (start, end) in state.spans.items()
                 if key not in recorded_before}
        assert found == expected.spans, type(node).__name__

    monkeypatch.setattr(positions, "generate", checked_generate)
    for source in _golden_sources()[::3]:
        positions._statement_code.cache_clear()
        codegen._nested_code.cache_clear()
        positions.code_of.cache_clear()
        optimize(source)
    assert asked
    assert codegen.generate is generate


def test_the_fast_path_is_checked_against_the_installed_libcst():
    # the tests above compare the fast path with libcst's: with another release it is off
    # (every node takes libcst's path), and they would prove nothing about it
    assert codegen.FAST, (
        f"libcst {codegen._installed_libcst()} is installed; ndif_opt/codegen.py transcribes "
        f"{codegen.TRANSCRIBED_FROM}: compare its handlers with the new _codegen_impl, then update TRANSCRIBED_FROM"
    )


def test_with_another_libcst_every_node_takes_libcsts_path(monkeypatch):
    module = cst.parse_module(dense_nnsight_script(60))
    fast_code, fast_positions = positions.code_and_positions(module)
    monkeypatch.setattr(codegen, "FAST", False)
    positions._statement_code.cache_clear()
    slow_code, slow_positions = positions.code_and_positions(module)
    assert slow_code == fast_code == module.code
    assert all(slow_positions.get(n) == fast_positions.get(n) for n in module.body)
    positions._statement_code.cache_clear()
