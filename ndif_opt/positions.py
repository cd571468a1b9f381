"""Code and node positions from one code generation.

libcst's ``PositionProvider`` costs about twice a parse: it creates a ``CodeRange`` for
every node and splits every token on newlines. The pipeline generates the code of every
new version of the tree anyway, so it records character offsets there (two integers per
node) and turns only the offsets of nodes it asks about into lines and columns. The
positions are the same as ``PositionProvider``'s (syntactic, 1-based lines).
"""

from __future__ import annotations

import bisect
import re
from contextlib import contextmanager
from typing import Iterator, Optional

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._position import CodePosition, CodeRange

_NEWLINE = re.compile(r"\r\n?|\n")  # libcst's own definition of a line break


class _OffsetCodegenState(CodegenState):
    """Code generation that remembers where each node starts and ends, in characters."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
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

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: Optional[cst.CSTNode] = None,
        end_node: Optional[cst.CSTNode] = None,
    ) -> Iterator[None]:
        start = self.offset
        try:
            yield
        finally:
            end = self.offset
            if start_node is not None:
                start = self.spans[start_node][0]
            if end_node is not None:
                end = self.spans[end_node][1]
            self.spans[node] = (start, end)


class Positions:
    """Node -> ``CodeRange`` of one version of a tree, computed on demand from offsets."""

    def __init__(self, text: str, spans: dict[cst.CSTNode, tuple[int, int]]) -> None:
        self._text = text
        self._spans = spans
        self._line_ends: list[int] | None = None

    def get(self, node: cst.CSTNode) -> CodeRange | None:
        span = self._spans.get(node)
        if span is None:
            return None
        return CodeRange(self._position(span[0]), self._position(span[1]))

    def _position(self, offset: int) -> CodePosition:
        if self._line_ends is None:
            self._line_ends = [match.end() for match in _NEWLINE.finditer(self._text)]
        line = bisect.bisect_right(self._line_ends, offset)
        line_start = self._line_ends[line - 1] if line else 0
        return CodePosition(line + 1, offset - line_start)


def code_and_positions(module: cst.Module) -> tuple[str, Positions]:
    """The module's code (equal to ``module.code``) and the positions of its nodes."""
    state = _OffsetCodegenState(module)
    module._codegen(state)
    code = "".join(state.tokens)
    return code, Positions(code + state.popped, state.spans)


__all__ = ["Positions", "code_and_positions"]
