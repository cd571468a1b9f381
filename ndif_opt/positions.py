"""Code and node positions from one code generation.

libcst's ``PositionProvider`` costs about twice a parse: it creates a ``CodeRange`` for
every node and splits every token on newlines. The pipeline generates the code of every
new version of the tree anyway, so it records character offsets there (two integers per
node) and turns only the offsets of nodes it asks about into lines and columns. The
positions are the same as ``PositionProvider``'s (syntactic, 1-based lines).
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import Optional

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._position import CodePosition, CodeRange

_NEWLINE = re.compile(r"\r\n?|\n")  # libcst's own definition of a line break


class _OffsetCodegenState(CodegenState):
    """Code generation that remembers where each node starts and ends, in characters."""

    def __init__(self, indent: str, newline: str) -> None:
        super().__init__(default_indent=indent, default_newline=newline)
        self.offset = 0
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        self._starts: list[int] = []
        self.popped = ""

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        for token in self.indent_tokens:
            self.offset += len(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def pop_trailing_newline(self) -> None:
        # offsets recorded before the pop still count the newline, as libcst's do
        if self.tokens:
            self.popped = self.tokens.pop()

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append(self.offset)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._starts.pop()
        if node not in self.spans:  # a syntactic position recorded inside wins
            self.spans[node] = (start, self.offset)

    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: Optional[cst.CSTNode] = None,
        end_node: Optional[cst.CSTNode] = None,
    ) -> "_SyntacticSpan":
        return _SyntacticSpan(self, node, start_node, end_node)


class _SyntacticSpan:
    """What libcst's ``record_syntactic_position`` does, as a plain context manager
    (a generator-based one costs more than the code generation around it)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _OffsetCodegenState, node, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = self.state.offset

    def __exit__(self, *exc) -> bool:
        spans = self.state.spans
        start = self.start if self.start_node is None else spans[self.start_node][0]
        end = self.state.offset if self.end_node is None else spans[self.end_node][1]
        spans[self.node] = (start, end)
        return False


class _CodeOnly(CodegenState):
    """Code generation with a no-op ``record_syntactic_position`` (libcst's is a generator)."""

    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> "_NoSpan":
        return _NO_SPAN


class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        return False


_NO_SPAN = _NoSpan()


def code_for_node(node: cst.CSTNode, indent: str = "    ", newline: str = "\n") -> str:
    """``cst.Module([]).code_for_node(node)`` (the node's code, indented from column 0), faster."""
    state = _CodeOnly(default_indent=indent, default_newline=newline)
    node._codegen(state)
    return "".join(state.tokens)


class Positions:
    """Node -> ``CodeRange`` of one version of a tree, computed on demand from offsets.

    The offsets come in parts: (where a part starts in the text, node -> span in it)."""

    def __init__(self, text: str, parts: list[tuple[int, dict[cst.CSTNode, tuple[int, int]]]]) -> None:
        self._text = text
        self._parts = parts
        self._line_ends: list[int] | None = None

    def get(self, node: cst.CSTNode) -> CodeRange | None:
        for base, spans in self._parts:
            span = spans.get(node)
            if span is not None:
                return CodeRange(self._position(base + span[0]), self._position(base + span[1]))
        return None

    def _position(self, offset: int) -> CodePosition:
        if self._line_ends is None:
            self._line_ends = [match.end() for match in _NEWLINE.finditer(self._text)]
        line = bisect.bisect_right(self._line_ends, offset)
        line_start = self._line_ends[line - 1] if line else 0
        return CodePosition(line + 1, offset - line_start)


def code_and_positions(module: cst.Module) -> tuple[str, Positions]:
    """The module's code (equal to ``module.code``) and the positions of its nodes.

    What ``Module._codegen`` does, with the code of each top-level statement taken from
    a cache: a new version of a tree shares most statements with the one before."""
    indent, newline = module.default_indent, module.default_newline
    state = _OffsetCodegenState(indent, newline)
    state.before_codegen(module)
    for line in module.header:
        line._codegen(state)
    parts = [(0, state.spans)]
    last_token = None  # the last token, when a statement's code ends the text so far
    for statement in module.body:
        text, spans, last_token = _statement_code(statement, indent, newline)
        parts.append((state.offset, spans))
        state.tokens.append(text)
        state.offset += len(text)
    for line in module.footer:
        line._codegen(state)
        last_token = None
    if module.has_trailing_newline:
        if not state.tokens:  # nothing in the header, body or footer
            state.add_token(newline)
    elif state.tokens:
        # libcst pops the last token, a newline: it may end a statement's code
        state.popped = last_token if last_token is not None else state.tokens[-1]
        state.tokens[-1] = state.tokens[-1][: len(state.tokens[-1]) - len(state.popped)]
    state.after_codegen(module)
    code = "".join(state.tokens)
    return code, Positions(code + state.popped, parts)


def top_level_code(node: cst.CSTNode, module: cst.Module) -> str | None:
    """``code_of(node)`` for a top-level statement of ``module``, from the code generated
    for the module (:func:`code_and_positions`); None for any other node. Equal only when
    the module's indentation and newline are code_of's own (4 spaces, ``\\n``)."""
    if module.default_indent != "    " or module.default_newline != "\n":
        return None
    if not isinstance(node, cst.BaseStatement) or not any(s is node for s in module.body):
        return None
    return _statement_code(node, "    ", "\n")[0]


@functools.lru_cache(maxsize=4096)
def _statement_code(statement: cst.BaseStatement, indent: str, newline: str):
    """A top-level statement's code, its nodes' spans in it and its last token (a pure
    function of an immutable node, hashed by identity and kept alive while cached)."""
    state = _OffsetCodegenState(indent, newline)
    statement._codegen(state)
    return "".join(state.tokens), state.spans, state.tokens[-1] if state.tokens else None


__all__ = ["Positions", "code_and_positions", "code_for_node", "top_level_code"]
