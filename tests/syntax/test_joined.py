"""Modules joined from separately parsed parts (ndif_opt/syntax/joined.py) are the modules libcst
parses from the joint text, node for node — or the join declines.

Checked on every way the pipeline joins (each window after its prelude), on every file
cut into all its top-level chunks, on sources from the standard library, and on layouts
where a separate parse gives other nodes (indented comments after a block, tabs in one
part and spaces in another, a part without a final line break, ``__future__`` imports).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from generators import dense_nnsight_script

from ndif_opt.engine import windows
from ndif_opt.passes import PASSES
from ndif_opt.syntax.joined import joined, parse_part

ROOT = Path(__file__).resolve().parents[2]


def _sources() -> list[tuple[str, str]]:
    found = [(p.name, p.read_text()) for p in sorted((ROOT / "examples").glob("*.py"))]
    found.append(("dense-300", dense_nnsight_script(300)))
    for cls in PASSES:
        for index, case in enumerate(getattr(cls, "cases", ())):
            found.append((f"{cls.id}#{index}", case.before))
    for module in (textwrap, inspect, ast):
        found.append((module.__name__, Path(module.__file__).read_text()))
    return found


SOURCES = _sources()


def _chunk_texts(source: str) -> list[str] | None:
    lines = tuple(windows._LINE.findall(source))
    chunks = windows._chunks(lines, ast.parse(source))
    return None if chunks is None else [chunk.text for chunk in chunks]


def _check(texts: list[str]) -> bool:
    """The join of the texts' parses is their joint parse, or None; True when joined."""
    module = joined([parse_part(text) for text in texts])
    if module is None:
        return False
    expected = cst.parse_module("".join(texts))
    assert module.deep_equals(expected), texts
    assert module.code == "".join(texts)
    return True


@pytest.mark.parametrize("name,source", SOURCES, ids=[name for name, _ in SOURCES])
def test_a_file_joined_from_all_its_chunks_is_its_parse(name, source):
    texts = _chunk_texts(source)
    if texts is None or len(texts) < 2:
        pytest.skip("one chunk")
    _check(texts)


def test_every_window_joined_after_its_prelude_is_the_parse_of_both():
    joins = declined = 0
    for _, source in SOURCES:
        plan = windows.plan(source, ast.parse(source))
        if plan is None:
            continue
        for window in plan.windows:
            texts = [plan.chunks[i].text for i in window.prelude] + [plan.text(window.start, window.end)]
            if _check(texts):
                joins += 1
            else:
                declined += 1
    assert joins > 50 and joins > 10 * declined, (joins, declined)


def test_parts_shared_by_modules_give_the_same_statement_nodes():
    setup, first, second = parse_part("import os\n"), parse_part("x = 1\n"), parse_part("# y\ny = 2\n")
    one, two = joined([setup, first]), joined([setup, second])
    assert one.body[0] is two.body[0]
    assert joined([first, second]).body[1] is joined([setup, second]).body[1]


LAYOUTS = {
    "indented comment after a block": ["def f():\n    return 1\n", "    # still f's\n# x's\nx = 1\n"],
    "blank lines after a block": ["def f():\n    return 1\n", "\n\n# x\nx = 1\n"],
    "blank line with spaces after a block": ["def f():\n    return 1\n", "    \nx = 1\n"],
    "tabs, then spaces": ["if True:\n\tx = 1\n", "if True:\n    y = 2\n"],
    "no block, then tabs": ["x = 1\n", "if x:\n\ty = 2\n"],
    "spaces, then a part without blocks": ["if True:\n  x = 1\n", "y = 2\n"],
    "no final line break": ["x = 1", "y = 2\n"],
    "last part without line break": ["x = 1\n", "y = 2"],
    "CRLF then LF": ["x = 1\r\n", "y = 2\n"],
    "CRLF": ["x = 1\r\n", "# c\r\ny = 2\r\n"],
    "future import": ["from __future__ import annotations\n", "x: int = 1\n"],
    "decorated": ["import functools\n", "\n@functools.cache\ndef f():\n    pass\n"],
    "comment-only trailer": ["x = 1\n", "y = 2\n# the end\n\n"],
    "continuation": ["x = (1,\n     2)\n", "y = \\\n    3\n"],
}


@pytest.mark.parametrize("texts", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_layouts_join_exactly_or_decline(texts):
    _check(texts)


def test_the_joins_that_would_differ_are_declined():
    assert not _check(LAYOUTS["indented comment after a block"])
    assert not _check(LAYOUTS["tabs, then spaces"])
    assert not _check(LAYOUTS["no final line break"])
    assert not _check(LAYOUTS["future import"])
    assert _check(LAYOUTS["blank lines after a block"])
    assert _check(LAYOUTS["CRLF"])
