"""The pass pipeline: parse once, analyse, run the passes in order until stable.

Facts are recomputed only after a pass changed the tree. Findings of a pass are
located in the tree that pass saw and mapped back to lines of the original source,
so editors can show them on the text the user has.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ndif_opt.analysis import Facts, analyze
from ndif_opt.cost_model import assumptions, estimate
from ndif_opt.effects import ServerCheck
from ndif_opt.options import Options
from ndif_opt.passes import PASSES, Context, RawFinding
from ndif_opt.prefilter import uses_nnsight
from ndif_opt.types import Cost, Edit, Finding, PassCost, Position, Range, Result, Status

MAX_ROUNDS = 4  # a pass may enable another; a few rounds reach the fixed point


def parse(source: str, filename: str | None = None) -> cst.Module:
    """Parse with libcst, turning its parser error into a plain SyntaxError."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise SyntaxError(
            f"{error.message} (line {error.raw_line}, column {error.raw_column})",
            (filename or "<source>", error.raw_line, error.raw_column + 1, None),
        ) from None


@dataclass
class _State:
    module: cst.Module
    facts: Facts
    code: str


def run_pipeline(source: str, options: Options, filename: str | None = None) -> Result:
    if not uses_nnsight(source):
        return Result(source=source, code=source)
    module = parse(source, filename)
    state = _State(module, analyze(module, assume_remote=options.assume_remote), source)
    passes = [cls() for cls in PASSES if options.wants(cls.id)]
    costs: dict[str, list[Cost]] = {}
    applied: list[Finding] = []
    last_round: list[Finding] = []
    unreturned: set[str] = set()
    for _round in range(MAX_ROUNDS):
        changed = False
        last_round = []
        for pass_ in passes:
            before = estimate(state.facts, options)
            context = Context(options, ServerCheck(state.facts))
            new_module = pass_.run(state.module, state.facts, context)
            unreturned |= context.unreturned
            located = _locate(context.findings, state, source, pass_.id)
            applied.extend(f for f in located if f.status is Status.APPLIED)
            last_round.extend(f for f in located if f.status is not Status.APPLIED)
            if new_module is not state.module and not new_module.deep_equals(state.module):
                changed = True
                code = new_module.code
                state = _State(new_module, analyze(new_module, assume_remote=options.assume_remote), code)
            after = estimate(state.facts, options)
            entry = costs.setdefault(pass_.id, [before, after])
            entry[1] = after
        if not changed:
            break
    code = state.code
    findings = tuple(sorted(applied + last_round, key=lambda f: (f.range.start, f.pass_id)))
    return Result(
        source=source,
        code=code,
        findings=findings,
        costs=tuple(PassCost(pid, b, a) for pid, (b, a) in costs.items()),
        edits=tuple(text_edits(source, code)),
        assumptions=tuple(assumptions(options)),
        unreturned=tuple(sorted(unreturned)) if code != source else (),
    )


def _locate(raw: list[RawFinding], state: _State, original: str, pass_id: str) -> list[Finding]:
    if not raw:
        return []
    wrapper = MetadataWrapper(state.module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    line_map = _line_map(state.code, original)
    found = []
    for item in raw:
        pos = positions.get(item.node)
        if pos is None:
            rng = Range.of(0, 0, 0, 0)
        else:
            start = line_map(pos.start.line - 1)
            end = max(start, line_map(pos.end.line - 1))
            rng = Range(Position(start, pos.start.column), Position(end, pos.end.column))
        found.append(
            Finding(pass_id, item.message, rng, item.status, item.safety, item.reason)
        )
    return found


def _line_map(current: str, original: str):
    """Map 0-based lines of ``current`` to the closest line of ``original``."""
    if current == original:
        return lambda line: line
    matcher = difflib.SequenceMatcher(
        None, current.splitlines(), original.splitlines(), autojunk=False
    )
    table: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for offset in range(i2 - i1):
            table[i1 + offset] = min(j1 + offset, max(j2 - 1, j1)) if tag != "equal" else j1 + offset
    return lambda line: table.get(line, max(0, min(line, len(original.splitlines()) - 1)))


def text_edits(source: str, code: str) -> list[Edit]:
    """Line-based edits that turn ``source`` into ``code`` (ranges in ``source``)."""
    if source == code:
        return []
    old = source.splitlines(keepends=True)
    new = code.splitlines(keepends=True)
    edits = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(
            Edit(Range(Position(i1, 0), Position(i2, 0)), "".join(new[j1:j2]))
        )
    return edits


__all__ = ["run_pipeline", "parse", "text_edits"]
