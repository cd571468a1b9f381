"""A fast first look: does this source use nnsight at all?

Most files in a repository have nothing to do with nnsight. A substring test rules out
almost all of them; for the rest, ast-grep (a tree-sitter parse, ~20x faster than
libcst's) checks for a real import or a `.trace/.session/.generate` with-block, so a
mention in a comment or a string does not trigger the full analysis.
"""

from __future__ import annotations

import re

_MARKERS = ("nnsight", "nnterp", "remote")
# a line holding a marker; \r ends a line for Python too
_MARKER_LINE = re.compile(r"(?:^|(?<=[\r\n]))[^\r\n]*(?:nnsight|nnterp|remote)[^\r\n]*")


def uses_nnsight(source: str) -> bool:
    if not any(marker in source for marker in _MARKERS):
        return False
    if all(line.lstrip().startswith("#") for line in _MARKER_LINE.findall(source)):
        return False  # mentioned in comments only (a whole-line comment is never code)
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
