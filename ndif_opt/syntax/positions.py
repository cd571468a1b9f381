"""Code and node positions from one code generation.

libcst's ``PositionProvider`` costs about twice a parse: it creates a ``CodeRange`` for
every node and splits every token on newlines. The pipeline generates the code of every
new version of the tree anyway (per top-level statement, cached by statement), so it
records there where each node starts and ends, as counts of tokens (two integers per
node), and turns only the spans of nodes it asks about into lines and columns. The
positions are the same as ``PositionProvider``'s (syntactic, 1-based lines).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from ndif_opt.syntax.codegen import ExtentState, RecordingState, context_free, generate

_NEWLINE = re.compile(r"\r\n?|\n")  # libcst's own definition of a line break


class _Generated:
    """The tokens of a code generation, their text, and where each node is among them
    (by id: whoever holds a ``_Generated`` holds the tree it was generated from)."""

    __slots__ = ("tokens", "spans", "text", "_offsets", "extents", "runs")

    def __init__(self, state: RecordingState) -> None:
        self.tokens, self.spans = state.tokens, state.spans
        self.text = "".join(self.tokens)
        self._offsets: list[int] | None = None
        # with an ExtentState: each node's whole extent and depth, the runs of indentation
        self.extents = getattr(state, "extents", None)
        self.runs = getattr(state, "indent_runs", None)

    def code(self, start: int, end: int, depth: int) -> str:
        """The code of the tokens from ``start`` to ``end`` without the first ``depth``
        tokens of each run of indentation (the blocks around the node they are the code of)."""
        tokens = self.tokens
        if depth == 0:
            return "".join(tokens[start:end])
        parts, at, runs = [], start, self.runs
        i = bisect.bisect_left(runs, start)
        while i < len(runs) and runs[i] < end:
            parts.extend(tokens[at:runs[i]])
            at = runs[i] + depth
            i += 1
        parts.extend(tokens[at:end])
        return "".join(parts)

    def span(self, node: cst.CSTNode) -> tuple[int, int] | None:
        """Where ``node`` is in the text, in characters."""
        span = self.spans.get(id(node))
        return None if span is None else (self.offset(span[0]), self.offset(span[1]))

    def offset(self, token_count: int) -> int:
        """Where the text of the first ``token_count`` tokens ends."""
        if self._offsets is None:
            self._offsets = list(itertools.accumulate(map(len, self.tokens), initial=0))
        return self._offsets[token_count]


@functools.lru_cache(maxsize=8192)
def code_of(node: cst.CSTNode, indent: str = "    ", newline: str = "\n") -> str:
    """``cst.Module([]).code_for_node(node)``: the node's code, indented from column 0.

    A pure function of an immutable node (hashed by identity and kept alive while cached):
    the passes and the cost model ask for the code of the same nodes, in every version of
    the tree that shares them."""
    state = RecordingState(indent, newline)
    generate(node, state)
    return "".join(state.tokens)


class Positions:
    """Node -> ``CodeRange`` of one version of a tree, computed on demand (the module's
    code is generated on first use when :func:`code_and_positions` did not)."""

    def __init__(self, module: cst.Module, layout: "_Layout | None" = None) -> None:
        self._module = module
        self._layout = layout
        self._line_ends: list[int] | None = None
        self._ends: "_Ends | None" = None
        self._prefix: "_Prefix | None" = None

    def get(self, node: cst.CSTNode) -> CodeRange | None:
        if self._layout is None:
            found = self._in_statements_so_far(node)
            if found is not None:
                return found
            self._layout = _Layout(self._module)
        layout = self._layout
        span = layout.generated.span(node)  # the module, its header and footer lines
        if span is not None:
            return self._range(0, span)
        for generated, token in zip(layout.statement_codes, layout.statement_tokens):  # the first holding it wins
            span = generated.span(node)
            if span is not None:
                return self._range(layout.generated.offset(token), span)
        return None

    def _in_statements_so_far(self, node: cst.CSTNode) -> CodeRange | None:
        """Without the module's whole code: the node's range when it is in a top-level
        statement, from the code of the statements up to the one holding it (the first
        version of a tree: its findings are located before any pass generated its code,
        and the statements after the one holding them may never be needed). None when
        the whole code decides: the node in the header or footer lines, or in no
        statement; a statement's code ending in a carriage return (a line break that the
        next statement's newline may complete)."""
        module = self._module
        if self._ends is None:
            self._ends = _Ends(module)
            self._prefix = _Prefix(self._ends.header)
        if node is module or id(node) in self._ends.spans:
            return None
        indent, newline, prefix = module.default_indent, module.default_newline, self._prefix
        for index, statement in enumerate(module.body):  # the first holding it wins
            generated = _statement_code(statement, indent, newline)
            prefix.reach(index, generated.text)
            span = generated.span(node)
            if span is None:
                continue
            if prefix.ends_in_cr[index]:
                return None
            base = prefix.starts[index]
            return CodeRange(_position(prefix.line_ends, base + span[0]), _position(prefix.line_ends, base + span[1]))
        return None

    def _range(self, base: int, span: tuple[int, int]) -> CodeRange:
        return CodeRange(self._position(base + span[0]), self._position(base + span[1]))

    def _position(self, offset: int) -> CodePosition:
        if self._line_ends is None:
            self._line_ends = [match.end() for match in _NEWLINE.finditer(self._layout.generated.text)]
        return _position(self._line_ends, offset)


def _position(line_ends: list[int], offset: int) -> CodePosition:
    """The position of a character offset, from where the text's lines end."""
    line = bisect.bisect_right(line_ends, offset)
    line_start = line_ends[line - 1] if line else 0
    return CodePosition(line + 1, offset - line_start)


class _Prefix:
    """The code of a module's header and of its first statements, as far as they were
    generated: where each statement's code starts, whether the text up to its end ends
    in a carriage return, and where the lines of that text end, as a scan of the joined
    text finds them (a break split between two statements' codes, `\\r` then `\\n`,
    is one). Extended one statement at a time: each statement's code is scanned once,
    not once per node asked about."""

    def __init__(self, header: str) -> None:
        self.length = len(header)
        self.line_ends = [match.end() for match in _NEWLINE.finditer(header)]
        self.starts: list[int] = []
        self.ends_in_cr: list[bool] = []
        self._last_cr = header.endswith("\r")

    def reach(self, index: int, text: str) -> None:
        """Add the code of statement ``index`` when it is the next one (``text``)."""
        if index < len(self.starts):
            return
        base = self.length
        if self._last_cr and text.startswith("\n"):
            self.line_ends.pop()  # (the `\\r` ending the text so far and this `\\n` are one break)
        self.line_ends.extend(base + match.end() for match in _NEWLINE.finditer(text))
        self.starts.append(base)
        self.length = base + len(text)
        if text:
            self._last_cr = text.endswith("\r")
        self.ends_in_cr.append(self._last_cr)


class _Ends:
    """A module's header and footer lines: the code of the header (the text before the
    first statement) and the spans of the nodes of both."""

    def __init__(self, module: cst.Module) -> None:
        state = RecordingState(module.default_indent, module.default_newline)
        for line in module.header:
            generate(line, state)
        self.header = "".join(state.tokens)
        for line in module.footer:
            generate(line, state)
        self.spans = state.spans


class _Layout:
    """A module's code, as ``Module._codegen`` generates it, with the code of each top-level
    statement taken from a cache (a new version of a tree shares most statements with the
    one before) as one token. Offsets count the newline libcst pops off the end of a
    module without a trailing newline, as libcst's do: the generated text keeps it."""

    def __init__(self, module: cst.Module) -> None:
        indent, newline = module.default_indent, module.default_newline
        state = RecordingState(indent, newline)
        state.before_codegen(module)
        for line in module.header:
            generate(line, state)
        self.statement_tokens: list[int] = []  # where each top-level statement is among the tokens
        self.statement_codes: list[_Generated] = []  # and its code generation
        last_token = None  # the last token, when a statement's code ends the text so far
        for statement in module.body:
            generated = _statement_code(statement, indent, newline)
            self.statement_tokens.append(len(state.tokens))
            self.statement_codes.append(generated)
            state.tokens.append(generated.text)
            last_token = generated.tokens[-1] if generated.tokens else None
        for line in module.footer:
            generate(line, state)
            last_token = None
        popped = ""
        if module.has_trailing_newline:
            if not state.tokens:  # nothing in the header, body or footer
                state.add_token(newline)
        elif state.tokens:  # libcst pops the last token, a newline: it may end a statement's code
            popped = last_token if last_token is not None else state.tokens[-1]
        state.after_codegen(module)
        self.generated = _Generated(state)
        self.code = self.generated.text[: len(self.generated.text) - len(popped)]


def short_code(node: cst.CSTNode, limit: int = 60) -> str:
    """``node``'s code on one line (its whitespace runs made single spaces), cut to ``limit``
    characters with an ellipsis: code quoted in a message."""
    text = " ".join(code_of(node).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def code_in(node: cst.CSTNode, statement: cst.CSTNode | None, module: cst.Module) -> str:
    """``code_of(node)`` for a node of ``statement``, a top-level statement of ``module``:
    from one code generation of the statement, cached by statement (versions of a tree
    share most of them), instead of one per node. The code of a node nested in blocks is
    its tokens in the statement's code without the indentation of the blocks around it:
    the same string; a small statement's, without the separator its line had it add. ``code_of``
    gives it where the statement's code cannot: a node whose code depends on where it stands
    otherwise (an argument's default comma, an `if` that is an `elif`), a node not in
    ``statement``, a module not indented with 4 spaces and ``\\n``."""
    if statement is not None and module.default_indent == "    " and module.default_newline == "\n" \
            and isinstance(statement, cst.BaseStatement):
        small = isinstance(node, cst.BaseSmallStatement)
        if small or context_free(type(node)):
            generated = _statement_code(statement, "    ", "\n")
            where = generated.extents.get(id(node))
            if where is not None:
                start, end, depth = where
                if small and type(node.semicolon) is cst.MaybeSentinel and generated.tokens[end - 1] == _SEPARATOR:
                    end -= 1  # (its line told it to add the separator: code_of's line does not)
                return generated.code(start, end, depth)
    return code_of(node)


# the one token a small statement without a semicolon of its own adds when its line has
# another after it (the only context a small statement's code depends on)
_SEPARATOR = "; "


def code_and_positions(module: cst.Module) -> tuple[str, Positions]:
    """The module's code (equal to ``module.code``) and the positions of its nodes."""
    layout = _Layout(module)
    return layout.code, Positions(module, layout)


def statement_code(statement: cst.BaseStatement, module: cst.Module) -> str:
    """The code of ``statement``, a top-level statement of ``module``: the generation
    the module's layout and :func:`code_in` share (the same text as ``code_of``)."""
    return _statement_code(statement, module.default_indent, module.default_newline).text


@functools.lru_cache(maxsize=4096)
def _statement_code(statement: cst.BaseStatement, indent: str, newline: str) -> _Generated:
    """A top-level statement's code generation (a pure function of an immutable node,
    hashed by identity and kept alive while cached)."""
    state = ExtentState(indent, newline)  # (the code of its nodes too: code_in)
    generate(statement, state)
    return _Generated(state)


__all__ = ["code_in", "Positions", "code_and_positions", "code_of", "short_code", "statement_code"]
