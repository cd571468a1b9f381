"""Which loops and runs of remote statements does ndif-opt leave as they are, and does a
finding say why? (issue 33.1, "no silent refusal")

A *construct* is

* a loop (``for``/``while``, at any depth, in functions and methods too) that sends more
  than one request each time it runs, or
* a run: two or more statements of one suite (a module, function, ``if``/``with``/``try``
  body) outside any loop, each sending at least one request, that together send more than
  one each time the suite runs (client statements between them do not break the run;
  loops are constructs of their own and are not members of a run).

Requests are counted as the static cost model counts them: the cost model's own walk
(:class:`ndif_opt.cost.walker.Walker`) runs over the script, and each statement is charged
the requests that the walk adds while it walks that statement — a call of a same-file
function is walked at the call, so it carries the requests of the function's body; a
loop of unknown length runs the cost model's assumed number of times; code inside a
remote block sends nothing of its own. A statement walked several times (a function
called twice, the iterations of an unrolled loop) is charged its largest count per run
(the requests it adds divided by how many times the walk counts it).

A construct is *left as it is* when the optimized script's version of it sends as many
requests per run as the original: its statements are found in the output by their lines
(lines compared with their indentation stripped; a changed line is paired with the most
similar line of the changed stretch, so ``with model.trace(p, remote=True):`` finds
``with model.trace(p):`` inside a new session), and the output is walked the same way (a
statement that moved into a session sends nothing of its own). A loop nested in a loop
that is left as it is counts with the outer one, so it is not listed twice; a loop nested
in a loop that was hoisted into a session is inside a request in the output, so it was
reduced with it.

A construct left as it is *has a reason* when a finding that was not applied starts on one
of its lines. Findings are located as the optimizer reports them; a notebook's findings
about the notebook itself (kept cells apart) are located on the first line of their cell.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst

from ndif_opt import Status
from ndif_opt.analysis.facts import LOOP_TYPES, Facts, analyze
from ndif_opt.analysis.retries import retry_guard
from ndif_opt.cost.walker import Walker
from ndif_opt.engine.cells import NOTEBOOK_ID
from ndif_opt.engine.ipython_lines import script_without_magics
from ndif_opt.options import Options
from ndif_opt.syntax.positions import Positions
from ndif_opt.types import Count

__all__ = ["Construct", "Walk", "finding_lines", "left_as_is", "line_map", "measure", "walk_requests", "where"]


# -- the cost model's walk, statement by statement --------------------------------------------


class _CountingWalker(Walker):
    """The cost model's walk, recording what each statement adds to the request count."""

    def __init__(self, facts: Facts, options: Options) -> None:
        super().__init__(facts, options)
        self.charged: dict[int, float] = {}  # id(statement) -> most requests per run

    def statement(self, stmt: cst.BaseStatement, times) -> None:
        if self.request is not None:  # inside a remote block: nothing of its own
            super().statement(stmt, times)
            self.charged.setdefault(id(stmt), 0.0)
            return
        before = self._total()
        super().statement(stmt, times)
        added = self._total() - before
        runs = _number(times)
        per_run = added / runs if runs else 0.0
        self.charged[id(stmt)] = max(self.charged.get(id(stmt), 0.0), per_run)

    def _total(self) -> float:
        return _number(sum(request.count for request in self.requests))


ASSUMED_TRIPS = 8  # a loop of unknown length (N), for the question "more than one request?"


def _number(value) -> float:
    """A count of the bill as a number: a loop of unknown length runs ASSUMED_TRIPS times."""
    return value.at(ASSUMED_TRIPS) if isinstance(value, Count) else value


@dataclass
class Walk:
    """One version of a script, walked: its statements, their lines and their requests."""

    code: str
    facts: Facts | None
    positions: Positions | None
    charged: dict[int, float] = field(default_factory=dict)
    total: int = 0
    error: str | None = None

    def lines(self, node: cst.CSTNode) -> tuple[int, int]:
        """1-based first and last line of ``node``."""
        found = self.positions.get(node)
        return found.start.line, found.end.line

    def requests(self, node: cst.CSTNode) -> float | None:
        """Most requests ``node`` sends per run; None when the walk never reached it."""
        return self.charged.get(id(node))

    def statements_at(self) -> dict[int, cst.BaseStatement]:
        """First line -> the outermost statement starting there."""
        found: dict[int, tuple[int, cst.BaseStatement]] = {}
        for info in self.facts.statements.values():
            line = self.lines(info.node)[0]
            depth = len(info.ancestors)
            if line not in found or depth < found[line][0]:
                found[line] = (depth, info.node)
        return {line: node for line, (_, node) in found.items()}


def _parse(code: str) -> cst.Module:
    try:
        return cst.parse_module(code)
    except cst.ParserSyntaxError:
        return cst.parse_module(script_without_magics(code))  # IPython lines, as `optimize` masks them


def walk_requests(code: str, options: Options) -> Walk:
    """The cost model's walk over ``code``, statement by statement."""
    try:
        module = _parse(code)
    except Exception as error:  # noqa: BLE001 - measured, not fatal
        return Walk(code, None, None, error=f"does not parse: {error}")
    facts = analyze(module, assume_remote=options.assume_remote)
    walker = _CountingWalker(facts, options)
    error = None
    try:
        walker.run()
    except Exception as problem:  # noqa: BLE001 - the cost model's own walk tolerates these too
        error = f"the walk stopped: {type(problem).__name__}: {problem}"
    return Walk(code, facts, Positions(module), walker.charged, walker._total(), error)


# -- the constructs -----------------------------------------------------------------------------


@dataclass
class Construct:
    kind: str  # "loop" | "retry loop" | "run"
    start: int  # 1-based lines
    end: int
    requests: float  # per run, as the cost model counts
    code: str  # its first line
    members: list[cst.BaseStatement]  # a loop: itself; a run: its remote statements
    node: cst.CSTNode | None = None  # a loop's node


def _in_block(info, blocks: set[int]) -> bool:
    return any(id(node) in blocks for node in info.ancestors)


def _in_loop(info) -> bool:
    return any(type(node) in LOOP_TYPES for node in info.ancestors)


def _first_line(walk: Walk, node: cst.CSTNode) -> str:
    start = walk.lines(node)[0]
    lines = walk.code.splitlines()
    return lines[start - 1].strip() if 0 < start <= len(lines) else ""


def constructs(walk: Walk) -> list[Construct]:
    """Every loop and run that sends more than one request per run."""
    if walk.facts is None:
        return []
    facts = walk.facts
    blocks = {id(block.node) for block in facts.blocks}
    found: list[Construct] = []
    suites: dict[int, list] = defaultdict(list)
    for info in facts.statements.values():
        node = info.node
        if _in_block(info, blocks):
            continue
        sent = walk.requests(node)
        if type(node) in LOOP_TYPES:
            if sent is not None and sent > 1:
                start, end = walk.lines(node)
                kind = "retry loop" if retry_guard(node, facts) is not None else "loop"
                found.append(Construct(kind, start, end, sent, _first_line(walk, node), [node], node))
            continue
        if _in_loop(info) or sent is None or sent < 1:
            continue
        if type(node) in (cst.If, cst.Try, cst.TryStar) or (type(node) is cst.With and id(node) not in blocks):
            continue  # transparent: its body's statements are members of their own suite's runs
        if type(node) in (cst.FunctionDef, cst.ClassDef):
            continue
        suites[id(info.suite)].append(info)
    for members in suites.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda info: info.index)
        total = sum(walk.requests(info.node) for info in members)
        if total <= 1:
            continue
        start = walk.lines(members[0].node)[0]
        end = walk.lines(members[-1].node)[1]
        found.append(Construct("run", start, end, total, _first_line(walk, members[0].node),
                               [info.node for info in members]))
    return sorted(found, key=lambda c: (c.start, -c.end))


# -- the original's lines in the output --------------------------------------------------------


def line_map(old: str, new: str) -> dict[int, int]:
    """1-based lines of ``old`` -> their lines in ``new``: equal lines (indentation aside),
    and in a changed stretch each line paired with the most similar line left, in order."""
    a = [line.strip() for line in old.splitlines()]
    b = [line.strip() for line in new.splitlines()]
    mapped: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                mapped[i1 + k + 1] = j1 + k + 1
        elif tag == "replace":
            j = j1
            for i in range(i1, i2):
                best, score = None, 0.6
                for k in range(j, j2):
                    ratio = difflib.SequenceMatcher(None, a[i], b[k], autojunk=False).ratio()
                    if ratio > score:
                        best, score = k, ratio
                if best is not None:
                    mapped[i + 1] = best + 1
                    j = best + 1
    return mapped


def left_as_is(construct: Construct, before: Walk, after: Walk, mapped: dict[int, int],
               at: dict[int, cst.BaseStatement], total_fell: bool) -> tuple[bool, float | None]:
    """Whether the optimized script's version of ``construct`` sends as many requests per
    run, and how many it sends (None when it could not be found: then it counts as reduced
    exactly when the script's requests fell)."""
    if after.facts is None:
        return True, None
    sent_after = 0.0
    for member in construct.members:
        line = mapped.get(before.lines(member)[0])
        node = at.get(line) if line is not None else None
        sent = after.requests(node) if node is not None else None
        if sent is None:
            if construct.kind != "run":
                return not total_fell, None
            sent = 0.0 if total_fell else before.requests(member)
        sent_after += sent
    return sent_after >= construct.requests, sent_after


# -- the findings -------------------------------------------------------------------------------


def finding_lines(result, notebook=None) -> list[tuple[int, dict]]:
    """(1-based line in the walked code, finding) for every finding not applied, once per
    line its range covers (a finding about a run of statements spans them). For a
    notebook, ``result`` is its joined code's result and ``notebook`` the NotebookResult."""
    found = []
    for finding in result.findings:
        if finding.status is Status.APPLIED:
            continue
        described = _finding(finding)  # (one dict per finding: a construct counts it once)
        for line in range(finding.range.start.line, finding.range.end.line + 1):
            found.append((line + 1, described))
    if notebook is not None:
        code = result.source.splitlines()
        for item in notebook.findings:
            if item.finding.pass_id != NOTEBOOK_ID or item.finding.status is Status.APPLIED:
                continue
            marker = re.compile(rf"(ndif_opt_cell_\w+_{item.cell}\b|\"ndif-opt cell \w+ {item.cell}\")")
            line = next((n for n, text in enumerate(code, 1) if marker.search(text)), 0)
            found.append((line + 1 + item.finding.range.start.line, _finding(item.finding)))
    return found


def _finding(finding) -> dict:
    return {"pass_id": finding.pass_id, "status": finding.status.value, "message": finding.message,
            "reason": finding.reason, "line": finding.range.start.line + 1}


# -- all together ---------------------------------------------------------------------------------


def measure(source: str, output: str, findings: list[tuple[int, dict]], options: Options) -> dict:
    """The constructs of ``source`` that send more than one request, those the optimizer
    left as they are in ``output``, and the findings on each one left."""
    before = walk_requests(source, options)
    after = walk_requests(output, options) if output != source else before
    found = constructs(before)
    mapped = line_map(source, output) if output != source else {n: n for n in range(1, source.count("\n") + 2)}
    at = after.statements_at() if after.facts is not None else {}
    total_fell = after.total < before.total
    left: list[dict] = []
    reduced = 0
    covered: list[Construct] = []  # loops left as they are: what they contain counts with them
    partly: list[dict] = []  # reduced, but still sending more than one request per run
    for construct in found:
        kept, sent_after = left_as_is(construct, before, after, mapped, at, total_fell)
        if not kept:
            reduced += 1
            if sent_after is not None and sent_after > 1:
                reasons = list({id(f): f for line, f in findings if construct.start <= line <= construct.end}.values())
                partly.append({"kind": construct.kind, "start": construct.start, "end": construct.end,
                               "requests": round(construct.requests, 2), "requests_after": round(sent_after, 2),
                               "code": construct.code[:100], "findings": reasons})
            continue
        if any(outer.start <= construct.start and construct.end <= outer.end and outer is not construct
               for outer in covered):
            continue
        if construct.kind != "run":
            covered.append(construct)
        reasons = list({id(f): f for line, f in findings if construct.start <= line <= construct.end}.values())
        left.append({
            "kind": construct.kind, "start": construct.start, "end": construct.end,
            "requests": round(construct.requests, 2), "requests_after": None if sent_after is None else round(sent_after, 2),
            "code": construct.code[:100], "findings": reasons,
        })
    return {"constructs": len(found), "reduced": reduced, "left": left, "partly": partly,
            "starts": sorted({c.start for c in found}), "walk_error": before.error or after.error}


def where(source: str, line: int, notebook: bool) -> str:
    """``line 12``, or in a notebook's joined cells ``cell 4, line 3`` (1-based, as the
    notebook's findings name them)."""
    if not notebook:
        return f"line {line}"
    lines = source.splitlines()
    marker = re.compile(r'^(?:global ndif_opt_cell_\w+?_(\d+)|"ndif-opt cell \w+ (\d+)")\s*$')
    for number in range(min(line, len(lines)), 0, -1):
        found = marker.match(lines[number - 1])
        if found:
            cell = int(found.group(1) or found.group(2))
            return f"cell {cell + 1}, line {line - number}"
    return f"line {line}"
