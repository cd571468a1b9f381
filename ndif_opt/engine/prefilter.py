"""A fast first look: does this source use nnsight at all?

Most files in a repository have nothing to do with nnsight. A substring test rules out
almost all of them; for the rest, ast-grep (a tree-sitter parse, ~20x faster than
libcst's) checks for a real import or a `.trace/.session/.generate` with-block, so a
mention in a comment or a string does not trigger the full analysis. A script that
starts by importing nnsight, the usual case, is told by Python's parser from its first
lines alone.
"""

from __future__ import annotations

import ast
import re

_MARKERS = ("nnsight", "nnterp", "remote")
# a line holding a marker; \r ends a line for Python too
_MARKER_LINE = re.compile(r"(?:^|(?<=[\r\n]))[^\r\n]*(?:nnsight|nnterp|remote)[^\r\n]*")
# `from nnsight... import ...` / `import nnsight...` at the start of a line
_IMPORT_LINE = re.compile(
    r"^(?:from[ \t]+(?:nnsight|nnterp)(?:\.\w+)*[ \t]+import[ \t]|import[ \t]+(?:nnsight|nnterp)\b)[^\r\n]*",
    re.MULTILINE,
)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Python's
HEAD = 20_000  # characters: how far into the file an import is looked for by Python's parser


def uses_nnsight(source: str) -> bool:
    if not any(marker in source for marker in _MARKERS):
        return False
    if all(match.group().lstrip().startswith("#") for match in _MARKER_LINE.finditer(source)):
        return False  # mentioned in comments only (a whole-line comment is never code)
    if _imports_nnsight_first(source):
        return True
    from ast_grep_py import SgRoot  # imported on first need: start-up stays fast

    root = SgRoot(source, "python").root()
    for node in root.find_all(kind="import_from_statement"):
        module = node.field("module_name")
        if module is not None and module.text().split(".")[0] in ("nnsight", "nnterp"):
            return True
    for node in root.find_all(kind="import_statement"):
        if any(part in node.text() for part in ("nnsight", "nnterp")):
            return True
    # no import (a notebook cell, a fragment): a with-block passing `remote=` still counts
    for node in root.find_all(kind="with_statement"):
        if "remote" in node.text() and any(m in node.text() for m in (".trace(", ".session(", ".generate(")):
            return True
    return False


def _imports_nnsight_first(source: str) -> bool:
    """The first line that looks like an import of nnsight is one: Python parses the file up
    to it, and the line is the last statement, at the start of a line (so not in a string,
    brackets or a continued line: the parse of the head would fail), spelled as the
    patterns say (so ast-grep's import checks would find it too)."""
    match = _IMPORT_LINE.search(source, 0, HEAD)
    if match is None:
        return False
    head = source[: match.end()]
    try:
        body = ast.parse(head).body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    last_line = 1 + sum(1 for _ in _LINE_BREAK.finditer(head))
    return bool(body) and isinstance(body[-1], (ast.Import, ast.ImportFrom)) and body[-1].lineno == last_line \
        and body[-1].col_offset == 0
