"""Suppression comments: ``# ndif-opt: ignore`` and friends.

    for prompt in prompts:  # ndif-opt: ignore
        ...                 # the whole loop is left alone, by every pass

    with model.trace(p, remote=True):  # ndif-opt: ignore[session-hoisting]
        ...                            # only session-hoisting leaves this block alone

    x = make()  # ndif-opt: ignore[accumulator-relocation, session-hoisting]

    # ndif-opt: ignore-file                      (on a line of its own: the whole file)
    # ndif-opt: ignore-file[session-hoisting]    (the whole file, for these passes)

A line comment suppresses findings whose range *starts* on its line. When that line
is (part of) the header of a compound statement — ``for``, ``while``, ``if``,
``with``, ``def``, ``class``, ``try``, ``match``, or a decorator of a ``def``/``class`` —
it covers every line of that statement instead. Comments are found with
:mod:`tokenize`, so ``"# ndif-opt: ignore"`` inside a string is not a comment. Text
that does not tokenize has no suppressions.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ndif_opt.types import Finding

DIRECTIVE = re.compile(
    r"#\s*ndif-opt\s*:\s*(?P<kind>ignore-file|ignore)\b(?!-)\s*(?:\[(?P<ids>[^\]]*)\])?",
    re.IGNORECASE,
)
#: A file-wide directive anywhere in the text (a cheap test before tokenizing).
IGNORE_FILE = re.compile(r"#\s*ndif-opt\s*:\s*ignore-file", re.IGNORECASE)
#: Statements whose header comment covers the whole statement.
COMPOUND = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.If,
    ast.With,
    ast.AsyncWith,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Try,
    *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),
    *((ast.Match,) if hasattr(ast, "Match") else ()),
)
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


@dataclass(frozen=True)
class Suppression:
    """One comment: the 0-based lines it covers (inclusive) and for which passes."""

    line: int  # where the comment is
    start: int
    end: int
    ids: frozenset[str] | None  # None: every pass
    file_level: bool = False

    def matches(self, pass_id: str) -> bool:
        return self.ids is None or pass_id in self.ids


@dataclass(frozen=True)
class Suppressions:
    items: tuple[Suppression, ...] = ()
    #: (0-based line, message) for directives that were not understood or misplaced.
    problems: tuple[tuple[int, str], ...] = field(default=())

    @staticmethod
    def from_source(text: str) -> "Suppressions":
        if "ndif-opt" not in text.lower():
            return Suppressions()
        comments = _comments(text)
        if not comments:
            return Suppressions()
        headers = _headers(text)
        items: list[Suppression] = []
        problems: list[tuple[int, str]] = []
        for line, trailing, comment in comments:
            match = DIRECTIVE.search(comment)
            if match is None:
                if re.search(r"ndif-opt\s*:", comment, re.IGNORECASE):
                    problems.append((line, "not a suppression: expected `# ndif-opt: ignore[...]`"))
                continue
            ids = _ids(match.group("ids"))
            if match.group("ids") is not None and not ids:
                problems.append((line, "empty id list: write `# ndif-opt: ignore` for all passes"))
                continue
            if match.group("kind").lower() == "ignore-file":
                if trailing:
                    problems.append((line, "`ignore-file` must be on a line of its own"))
                    continue
                items.append(Suppression(line, 0, 1 << 62, ids, file_level=True))
                continue
            start, end = line, line
            for header_start, header_end, stmt_end in headers:
                if trailing and header_start <= line <= header_end:
                    start, end = min(start, header_start), max(end, stmt_end)
            items.append(Suppression(line, start, end, ids))
        return Suppressions(tuple(items), tuple(problems))

    def covers(self, pass_id: str, start_line: int, end_line: int | None = None) -> bool:
        """Whether a finding of ``pass_id`` whose range starts on ``start_line`` is
        suppressed (0-based lines; ``end_line`` is accepted for symmetry and unused:
        a range is covered when a covering line-range contains its start line)."""
        return self.covering(pass_id, start_line) is not None

    def covering(self, pass_id: str, start_line: int) -> Suppression | None:
        """The first suppression that covers a finding of ``pass_id`` starting there."""
        for item in self.items:
            if item.start <= start_line <= item.end and item.matches(pass_id):
                return item
        return None

    def mark(self, finding: "Finding") -> "Finding":
        """``finding`` with status SUPPRESSED when a comment covers it, else unchanged.

        (Marking is all this does: a pipeline must also keep the code of an applied
        finding it marks untouched.)"""
        from ndif_opt.types import Status

        item = self.covering(finding.pass_id, finding.range.start.line)
        if item is None or finding.status is Status.SUPPRESSED:
            return finding
        what = "ignore-file" if item.file_level else "ignore"
        return dataclasses.replace(
            finding,
            status=Status.SUPPRESSED,
            reason=f"suppressed by `# ndif-opt: {what}` on line {item.line + 1}",
        )

    @property
    def unknown_ids(self) -> list[tuple[int, str]]:
        """(0-based line, id) for each pass id in a comment that no pass has."""
        from ndif_opt.passes import PASS_IDS

        out = []
        for item in self.items:
            for pass_id in sorted(item.ids or ()):
                if pass_id not in PASS_IDS:
                    out.append((item.line, pass_id))
        return out

    def __bool__(self) -> bool:
        return bool(self.items)


def _ids(text: str | None) -> frozenset[str] | None:
    if text is None:
        return None
    return frozenset(part.strip() for part in re.split(r"[,\s]+", text) if part.strip())


def _comments(text: str) -> list[tuple[int, bool, str]]:
    """(0-based line, is trailing code, text) of every comment; [] if untokenizable."""
    out = []
    previous = None
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text, newline=None).readline)
        for token in tokens:
            if token.type == tokenize.COMMENT:
                trailing = (
                    previous is not None
                    and previous.type not in _NOT_CODE
                    and previous.end[0] == token.start[0]
                )
                out.append((token.start[0] - 1, trailing, token.string))
            else:
                previous = token
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return out


def _headers(text: str) -> list[tuple[int, int, int]]:
    """(first header line, last header line, last line) of each compound statement,
    0-based; [] when the text does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, COMPOUND):
            continue
        first = node.lineno
        for decorator in getattr(node, "decorator_list", ()):
            first = min(first, decorator.lineno)
        body = getattr(node, "body", None) or getattr(node, "cases", None) or []
        if not body:
            continue
        body_line = body[0].lineno if not hasattr(body[0], "pattern") else body[0].pattern.lineno
        # The header runs to the colon: up to the line before the body, or the header
        # line itself for `for x in y: body` on one line. Lines in between hold only
        # comments, and only trailing comments count, so they cannot match by mistake.
        last_header = max(node.lineno, body_line - 1)
        out.append((first - 1, last_header - 1, (node.end_lineno or node.lineno) - 1))
    return out


__all__ = ["Suppression", "Suppressions", "DIRECTIVE"]
