"""ndif_opt.parsing: libcst's parse without re-checking the parser's own nodes."""

from __future__ import annotations

import threading
from pathlib import Path

import libcst as cst
import pytest

from ndif_opt import parsing

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "ndif_opt").glob("*.py"))[:10]


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_the_tree_is_libcsts(path):
    text = path.read_text()
    tree = parsing.parse_module(text)
    assert tree.deep_equals(cst.parse_module(text))
    assert tree.code == text


def test_syntax_errors_are_libcsts():
    with pytest.raises(cst.ParserSyntaxError):
        parsing.parse_module("def f(:\n")
    cst.parse_module("x = 1\n")  # and the thread is no longer parsing after an error
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_nodes_built_elsewhere_are_still_checked():
    parsing.parse_module("x = 1\n")  # installs the replacement
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    with pytest.raises(cst.CSTValidationError):
        cst.Integer("x")


def test_only_the_parsing_thread_skips_the_check(monkeypatch):
    parsing.parse_module("x = 1\n")
    monkeypatch.setattr(parsing._parsing, "active", True, raising=False)  # this thread "parses"
    cst.Name("not a name")  # not checked here
    errors = []

    def build() -> None:
        try:
            cst.Name("not a name")
        except cst.CSTValidationError as error:
            errors.append(error)

    other = threading.Thread(target=build)
    other.start()
    other.join()
    assert len(errors) == 1
