"""Where a node of a rewritten tree stood in the code as written.

A pass reports on nodes of the version of the tree it saw; an editor shows the finding on
the text the user has. Matching lines of text cannot tell two equal statements apart
(the same `logits = model.lm_head.output.save()` in two experiments), so a finding is
placed by its node instead, traced back one version at a time (one pass's rewrite):

* a node the rewrite kept is the same object in the version before (libcst trees are
  immutable: a rewrite shares what it does not change);
* a node it rebuilt unchanged (a statement moved into a session) is the k-th node of its
  kind and code in its version, and the k-th of the version before, when both hold as many;
* a node it rebuilt with a change inside (a loop whose trace lost its `remote=`) is the
  nearest node of its kind around a statement inside it that traces back;
* a node it changed itself (a save given `.detach().cpu()`) or moved under a new one (a
  trace put in a session) is, next to where its nearest neighbours were, the node of its
  kind that reads most like it.

A node a pass wrote (a session it opened) has no place in the code as written: the
caller falls back to matching lines. :func:`misplaced` checks the outcome on the text.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections import deque
from collections.abc import Iterable, Iterator

import libcst as cst
from libcst.metadata import CodeRange

from ndif_opt.analysis.scopes import statement_index
from ndif_opt.syntax.positions import Positions, code_in, code_of
from ndif_opt.syntax.walk import all_nodes, content_children
from ndif_opt.types import Finding

# the nodes inside a rebuilt node that may stand in for it: statements (an expression's
# code repeats too often to be traced by its order)
_STATEMENTS = (cst.BaseStatement, cst.BaseSmallStatement)
_SIMPLE_STATEMENTS = (cst.SimpleStatementLine, cst.BaseSmallStatement)
_WORD = re.compile(r"\w+")


class _Version:
    """One version of the tree, with what tracing asks of it, computed on first use."""

    __slots__ = ("module", "_codes", "_nodes", "_order", "_parents", "_alike", "_statements")

    def __init__(self, module: cst.Module, codes: dict[int, str]) -> None:
        self.module = module
        # id of a node -> its code, shared by the versions of a lineage (a node's code is
        # the same in every version holding it; the lineage keeps every version's nodes alive)
        self._codes = codes
        self._nodes: list[cst.CSTNode] | None = None  # every node, in the order of the code
        self._order: dict[int, int] | None = None  # id of a node -> its place in that order
        self._parents: dict[int, cst.CSTNode] | None = None
        # kind -> code -> the nodes of that kind and code, in the order of the code
        self._alike: dict[type, dict[str, list[cst.CSTNode]]] = {}
        self._statements: list[int] | None = None  # where each top-level statement is in the order

    @property
    def nodes(self) -> list[cst.CSTNode]:
        if self._nodes is None:
            self._nodes = all_nodes(self.module)
        return self._nodes

    @property
    def order(self) -> dict[int, int]:
        if self._order is None:
            self._order = {id(n): i for i, n in enumerate(self.nodes)}
        return self._order

    def holds(self, node: cst.CSTNode) -> bool:
        return id(node) in self.order

    def of_kind(self, kind: type) -> dict[str, list[cst.CSTNode]]:
        """Code -> the nodes of ``kind`` with that code, in the order of the code."""
        by_code = self._alike.get(kind)
        if by_code is None:
            by_code = self._alike[kind] = {}
            for found in self.nodes:
                if type(found) is kind:
                    by_code.setdefault(self.code(found), []).append(found)
        return by_code

    def code(self, node: cst.CSTNode) -> str:
        """``code_of(node)``, from the code of its top-level statement (one generation of
        each, not one per node asked about)."""
        at = self.order.get(id(node))
        if at is None:
            return code_of(node)
        code = self._codes.get(id(node))
        if code is None:
            if self._statements is None:
                self._statements = [self.order[id(statement)] for statement in self.module.body]
            i = bisect.bisect_right(self._statements, at) - 1
            code = self._codes[id(node)] = code_in(node, self.module.body[i] if i >= 0 else None, self.module)
        return code

    def subject(self, node: cst.CSTNode) -> str:
        """:func:`subject` of ``node``, from the code of its statement here."""
        return subject(node, self.code(node))

    def alike(self, node: cst.CSTNode, code: str) -> list[cst.CSTNode]:
        """The nodes of ``node``'s kind whose code is ``code`` (its code), in the order of the code."""
        return self.of_kind(type(node)).get(code, [])

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        if self._parents is None:
            # each node in a content field of its parent (content_children), the last
            # parent in the order of the code winning: the module's statements, then what
            # each statement's index recorded (analysis/scopes.py: one walk per statement,
            # shared by the versions that keep it and by the scope analysis of each)
            module = self.module
            self._parents = parents = {id(statement): module for statement in module.body}
            for statement in module.body:
                parents.update(statement_index(statement).parents)
        return self._parents.get(id(node))

    def enclosing(self, node: cst.CSTNode, kind: type) -> cst.CSTNode | None:
        """The nearest node of ``kind`` around ``node`` (not ``node`` itself)."""
        above = self.parent(node)
        while above is not None and type(above) is not kind:
            above = self.parent(above)
        return above


class Lineage:
    """The versions one module's tree went through in the pipeline, the code as written
    first; :meth:`where` places a node of any of them in the code as written."""

    def __init__(self, original: cst.Module, positions: Positions) -> None:
        self._codes: dict[int, str] = {}  # (see _Version)
        self._versions = [_Version(original, self._codes)]
        self._positions = positions
        # (version, id of a node of it) -> the node of the version before it came from
        self._steps: dict[tuple[int, int], cst.CSTNode | None] = {}

    def add(self, module: cst.Module) -> None:
        """A new version, made by a pass from the last one."""
        self._versions.append(_Version(module, self._codes))

    def where(self, node: cst.CSTNode, module: cst.Module) -> CodeRange | None:
        """Where ``node`` of ``module`` (a version of this lineage) stood in the code as
        written; None when no node there is its origin."""
        index = next((i for i in range(len(self._versions) - 1, -1, -1) if self._versions[i].module is module), None)
        if index is None:
            return None
        original = self._versions[0]
        while index > 0 and node is not None and not original.holds(node):
            node = self._step(node, index)
            index -= 1
        return None if node is None else self._positions.get(node)

    def subject(self, node: cst.CSTNode, module: cst.Module) -> str:
        """:func:`subject` of ``node`` of ``module``, a version of this lineage."""
        version = next((v for v in reversed(self._versions) if v.module is module), None)
        return subject(node) if version is None else version.subject(node)

    def _step(self, node: cst.CSTNode, index: int) -> cst.CSTNode | None:
        """The node of version ``index - 1`` that ``node`` of version ``index`` was made from."""
        key = (index, id(node))
        if key not in self._steps:
            self._steps[key] = self._kept(node, index) or self._around_inner(node, index) \
                or self._among_neighbours(node, index) or self._read_alike(node, index)
        return self._steps[key]

    def _kept(self, node: cst.CSTNode, index: int) -> cst.CSTNode | None:
        """``node`` itself when the rewrite kept it; its k-th twin when rebuilt unchanged."""
        before = self._versions[index - 1]
        if before.holds(node):
            return node
        version = self._versions[index]
        code = version.code(node)  # (from the code of its statement there)
        mine, theirs = version.alike(node, code), before.alike(node, code)
        if len(mine) != len(theirs):
            return None
        return next((twin for n, twin in zip(mine, theirs) if n is node), None)

    def _around_inner(self, node: cst.CSTNode, index: int) -> cst.CSTNode | None:
        """For a node rebuilt with a change inside: the nearest node of its kind around
        where a statement inside it was (one whose nearest such node is ``node`` itself: a
        loop a pass put inside it does not stand in for it)."""
        before, kind = self._versions[index - 1], type(node)
        for inner in _statements_inside(node, kind):
            kept = self._kept(inner, index)
            around = None if kept is None else before.enclosing(kept, kind)
            if around is not None:
                return around
        return None

    def _among_neighbours(self, node: cst.CSTNode, index: int) -> cst.CSTNode | None:
        """For a node changed itself or moved under a new one: of the nodes of its kind
        between where its nearest kept neighbours were (or in what the node around it was
        made from, when none was kept) that read like it, the one that reads most like it,
        the nearest of equals."""
        parent = self._versions[index].parent(node)
        if parent is None:
            return None
        mine = content_children(parent)
        at = _place_in(mine, node)
        if at is None:
            return None
        before = next(filter(None, (self._kept(s, index) for s in reversed(mine[:at]))), None)
        after = next(filter(None, (self._kept(s, index) for s in mine[at + 1:])), None)
        anchor = before or after
        container = self._versions[index - 1].parent(anchor) if anchor is not None else self._step(parent, index)
        if container is None:
            return None
        theirs = content_children(container)
        low = _place_in(theirs, before)
        low = 0 if low is None else low + 1
        high = _place_in(theirs, after)
        high = len(theirs) if high is None or high < low else high
        earlier = self._versions[index - 1]
        kind, code = type(node), self._versions[index].subject(node)
        between = [(i, child) for i, child in enumerate(theirs[low:high], low)
                   if type(child) is kind and _reads_like(code, earlier.subject(child))]
        near = low if before is not None else high  # the side a neighbour ties it to
        best = max(between, key=lambda pair: (_likeness(code, earlier.subject(pair[1])), -abs(pair[0] - near)),
                   default=None)
        return None if best is None else best[1]

    def _read_alike(self, node: cst.CSTNode, index: int) -> cst.CSTNode | None:
        """For a statement a pass wrote in place of one it moved (`acc = list().save()`
        in the block, for `acc = []` before it): the node of its kind that reads most like
        it anywhere (same first word, most words alike), the nearest to where the node
        around it was of equals. None when none does: code a pass wrote anew. Only simple
        statements: a block a pass opened (a session) reads like any other block."""
        if not isinstance(node, _SIMPLE_STATEMENTS):
            return None
        before, code = self._versions[index - 1], self._versions[index].subject(node)
        alike = [n for nodes in before.of_kind(type(node)).values() for n in nodes
                 if _reads_like(code, before.subject(n))]
        if not alike:
            return None
        parent = self._versions[index].parent(node)
        around = None if parent is None else self._step(parent, index)
        near = before.order.get(id(around), 0) if around is not None else 0
        return max(alike, key=lambda n: (_likeness(code, before.subject(n)), -abs(before.order[id(n)] - near)))


def _statements_inside(node: cst.CSTNode, kind: type) -> Iterator[cst.CSTNode]:
    """The statements inside ``node`` and not inside another node of ``kind``, the
    nearest first (the first that traces back usually ends the search)."""
    queue = deque(content_children(node))
    while queue:
        inner = queue.popleft()
        if isinstance(inner, _STATEMENTS):
            yield inner
        if type(inner) is not kind:
            queue.extend(content_children(inner))


def _place_in(nodes: list[cst.CSTNode], node: cst.CSTNode | None) -> int | None:
    return None if node is None else next((i for i, n in enumerate(nodes) if n is node), None)


def subject(node: cst.CSTNode, code: str | None = None) -> str:
    """What a finding about ``node`` is about, in one line (:attr:`Finding.subject`): the
    first line of its code (``code``, when the caller has it) that is not a comment."""
    for line in (code_of(node) if code is None else code).splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    return ""


def _likeness(code: str, other: str) -> float:
    """How alike two lines of code read, by their words in order (0 to 1)."""
    return difflib.SequenceMatcher(None, _WORD.findall(code), _WORD.findall(other), autojunk=False).ratio()


def misplaced(findings: Iterable[Finding], source: str) -> list[Finding]:
    """The findings not on their own statement, judged on the text alone (a check of the
    placing above, for tests and benchmarks): a line that does not read like the code the
    finding is about (:attr:`Finding.subject`, as the pass saw it: a rewrite may have
    dropped a `remote=` from it or added a `.detach().cpu()`), or a second finding of a pass
    saying the same at the same place (one of two equal statements left without it). A
    finding about code a pass wrote, which no line reads like, is placed near it: not judged."""
    lines = source.splitlines()
    seen: set[tuple] = set()
    found = []
    for finding in findings:
        place = (finding.pass_id, finding.range.start, finding.message)
        line = lines[finding.range.start.line] if finding.range.start.line < len(lines) else ""
        if place in seen or (finding.subject and not _reads_like(finding.subject, line)
                             and any(_reads_like(finding.subject, other) for other in lines)):
            found.append(finding)
        seen.add(place)
    return found


def _reads_like(code: str, line: str) -> bool:
    """Does ``line`` hold ``code``, give or take a few words a rewrite adds or drops?"""
    if "".join(code.split()) in "".join(line.split()):  # (an expression inside it, too)
        return True
    mine, theirs = _WORD.findall(code), _WORD.findall(line)
    return bool(mine and theirs) and theirs[0] == mine[0] and _likeness(code, line) >= 0.5


__all__ = ["Lineage", "misplaced", "subject"]
