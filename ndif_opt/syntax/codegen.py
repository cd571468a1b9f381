"""libcst's code generation with the span of each node recorded: the one module of
ndif_opt that uses libcst's private API.

The pipeline generates the code of every new version of a tree anyway;
:mod:`ndif_opt.syntax.positions` turns the spans recorded here into node positions, equal to
libcst's ``PositionProvider`` ones, which would cost as much again per version (the
pipeline took 2.2 times as long with it on a 500-line script). libcst has no public hook into
its code generation: this module subclasses its ``CodegenState``
(``libcst._nodes.internal``) and drives ``CSTNode._codegen``. Both may change in any
release, so the release they were checked against is pinned in pyproject.toml
(``libcst==1.9.*``) and importing this module with another one raises.

Spans: a node's span is ``(count of tokens before it, count of tokens up to its end)``,
keyed by ``id(node)``. As with libcst's position provider, a syntactic position (the
node without its parentheses, a statement without its leading lines, ...) replaces the
whole node's span: it is stored with ``spans[id] = ...`` when its code is done, and the
whole node's span only with ``setdefault`` when the node is done.
"""

from __future__ import annotations

import functools
import inspect

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._version import __version__ as _installed_libcst

#: The libcst release (major.minor) this module was checked against; pyproject.toml pins it.
LIBCST_RELEASE = "1.9"

if _installed_libcst.split(".")[:2] != LIBCST_RELEASE.split("."):
    raise ImportError(
        f"ndif-opt needs libcst {LIBCST_RELEASE}.x (pyproject.toml pins libcst=={LIBCST_RELEASE}.*), "
        f"but libcst {_installed_libcst} is installed. ndif_opt/syntax/codegen.py records node positions "
        f"through libcst's private code generation API, which another release may change: "
        f"install libcst=={LIBCST_RELEASE}.*, or check ndif_opt/syntax/codegen.py against libcst "
        f"{_installed_libcst} (tests/syntax/test_positions.py) and move the pin."
    )


class RecordingState(CodegenState):
    """A libcst code generation state that records the span of each node generated.

    The state is also the context manager ``record_syntactic_position`` returns: it
    records the innermost syntactic position being generated when its code is done (what
    libcst's context manager does; an object per position costs more than the code
    generation around it, and a helper object kept here would make a reference cycle,
    left to the garbage collector)."""

    def __init__(self, indent: str, newline: str) -> None:
        super().__init__(default_indent=indent, default_newline=newline)
        self.spans: dict[int, tuple[int, int]] = {}
        self._starts: list[int] = []
        self.syntactic: list[tuple] = []  # the syntactic positions being generated

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        # a syntactic position recorded inside wins
        self.spans.setdefault(id(node), (self._starts.pop(), len(self.tokens)))

    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> "RecordingState":
        self.syntactic.append((node, start_node, end_node, len(self.tokens)))
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        node, start_node, end_node, start = self.syntactic.pop()
        spans = self.spans
        if start_node is not None:
            start = spans[id(start_node)][0]
        end = len(self.tokens) if end_node is None else spans[id(end_node)][1]
        spans[id(node)] = (start, end)
        return False


class ExtentState(RecordingState):
    """A :class:`RecordingState` that also records, for each node, where its whole code
    starts and ends among the tokens and how deep the indentation was when it started, and
    where runs of indentation tokens were added: what gives the code of every node of a
    statement from this one generation (``ndif_opt.syntax.positions.code_in``)."""

    def __init__(self, indent: str, newline: str) -> None:
        super().__init__(indent, newline)
        self.extents: dict[int, tuple[int, int, int]] = {}  # id -> (first token, end token, depth)
        self.indent_runs: list[int] = []  # the first token of each run of indentation tokens
        self._depths: list[int] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append(len(self.tokens))
        self._depths.append(len(self.indent_tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start, end = self._starts.pop(), len(self.tokens)
        key = id(node)
        self.spans.setdefault(key, (start, end))  # a syntactic position recorded inside wins
        self.extents.setdefault(key, (start, end, self._depths.pop()))

    def add_indent_tokens(self) -> None:
        if self.indent_tokens:
            self.indent_runs.append(len(self.tokens))
            self.tokens.extend(self.indent_tokens)


@functools.cache
def context_free(kind: type) -> bool:
    """Is the code of a node of ``kind`` the same wherever it stands (given the indentation
    around it)? Not when its parent tells its code generation more than the state: an
    argument's default comma, a small statement's default semicolon, an `if` that is an `elif`."""
    return len(inspect.signature(kind._codegen_impl).parameters) == 2  # (self, state)


def generate(node: cst.CSTNode, state: RecordingState) -> None:
    """Append the code of ``node`` to ``state``'s tokens, recording the spans of its nodes."""
    node._codegen(state)


__all__ = ["LIBCST_RELEASE", "ExtentState", "RecordingState", "context_free", "generate"]
