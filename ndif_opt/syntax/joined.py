"""One libcst module from the parses of its parts, as if their texts had been parsed together.

A window of a long file is optimized as a module of its own: its prelude (context chunks
of the file) and then its text. The same context chunks open many windows; parsed once
and shared, their statements are the same node objects in every window, so what is
cached by node (code, names, calls) is worked out once per file instead of once per
window, and each window parses only its own text.

Joining is exact only where libcst's parse of the whole text would give the same nodes.
Where that is not obviously so, :func:`joined` says None and the caller parses the text:

* the leading comments and blank lines of a part are the module's header when the part
  is parsed alone, and the first statement's leading lines after another part; moved
  there only when none of them is indented (an indented comment after an indented block
  belongs to that block's footer in a joint parse);
* a part that is not last must end with a line break and have no footer;
* the parts must agree on the line break and indentation libcst detects (the first of
  each in the text: joint detection then finds the same), and on ``__future__`` imports
  (none may have any).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import libcst as cst


@dataclass(frozen=True, eq=False)
class Part:
    """A piece of text parsed alone: used first in a module as parsed, later with its
    header moved onto its first statement (computed once, so every module that uses the
    part later shares the same statement nodes)."""

    text: str
    module: cst.Module

    @cached_property
    def later_body(self) -> tuple[cst.BaseStatement, ...] | None:
        body = self.module.body
        if not body or any(_is_indented(line) for line in self.module.header):
            return None
        if not self.module.header:
            return tuple(body)
        head = body[0].with_changes(leading_lines=(*self.module.header, *body[0].leading_lines))
        return (head, *body[1:])


def parse_part(text: str) -> Part:
    return Part(text, cst.parse_module(text))


def joined(parts: Sequence[Part]) -> cst.Module | None:
    """The module libcst parses from the parts' texts one after another; None when the
    parts cannot be shown to give it."""
    if not parts or not all(_joinable(part, last=index == len(parts) - 1) for index, part in enumerate(parts)):
        return None
    first, last = parts[0].module, parts[-1].module
    if any((p.module.default_newline, p.module.default_indent) != (first.default_newline, first.default_indent)
           for p in parts):
        return None
    body = list(first.body)
    for part in parts[1:]:
        later = part.later_body
        if later is None:
            return None
        body.extend(later)
    return first.with_changes(body=body, footer=last.footer, has_trailing_newline=last.has_trailing_newline)


def _joinable(part: Part, last: bool) -> bool:
    if "__future__" in part.text:
        return False
    if last:
        return True
    return not part.module.footer and part.module.has_trailing_newline and part.text.endswith("\n")


def _is_indented(line: cst.EmptyLine) -> bool:
    return bool(line.whitespace.value) or not line.indent
