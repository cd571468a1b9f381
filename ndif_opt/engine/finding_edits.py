"""Findings carry their edits: each applied finding holds the edits the pipeline made for it.

Ruff's ``Diagnostic`` has its ``Fix``, Fixit's ``LintViolation`` its replacement; here a
finding's ``fix`` is taken from what the pipeline did, never from a pass run again alone.
Two steps:

1. :class:`LineOrigins` — while the pipeline runs, each pass step that changed the code
   gives each of its applied findings the lines of the code as written that the step's
   hunks changed (``Finding.touched``): the step's line diff (before → after), each hunk
   taken back to the original through the spans of original lines each line of the
   version comes from, and given to the findings of the step whose range it meets (the
   nearest one when it meets none). A step that edits lines an earlier step wrote takes
   them for the lines that step changed: the two findings meet.
2. :func:`with_fixes` — on the final result, each of its edits (``Result.edits``, the line
   diff of the code as written and the code) goes to the applied findings whose touched
   lines it meets (else those whose range it meets, else the nearest). Findings that share
   an edit form a group: each one's ``fix`` is the group's edits and ``needs`` names the
   others (two passes on the same lines; one pass's rewrite of several findings at once).
   Every edit is in exactly one group, so applying every group once is the pipeline's
   output, and a group applied alone is a whole rewrite.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence

from ndif_opt.engine.line_diff import line_opcodes
from ndif_opt.types import Edit, Finding, Range, Result, Status

Span = tuple[int, int]  # lines [start, end) of the code as written; start == end: an insertion there


class LineOrigins:
    """Where each line of the current version of a module comes from: the span of lines of
    the code as written it was made of (an unchanged line: its own line). A pass step's line
    diff carries the spans over: a line it only re-indented (code moved into a session)
    keeps its own; a line it wrote gets the span of the lines its hunk replaced (the empty
    span where it only inserted)."""

    def __init__(self, source: str) -> None:
        self.code = source
        self.spans: list[Span] = [(i, i + 1) for i in range(source.count("\n") + 1)]

    def step(self, after: str, findings: Sequence[Finding]) -> list[Finding]:
        """The version becomes ``after``; ``findings`` (the applied ones of the pass step that
        made it) each with the original lines the step changed for it (``Finding.touched``):
        each change goes to the findings whose range it meets, else to the nearest one.

        Lines are paired by their text without indentation, so that code a rewrite moved
        into a block keeps where it came from: such a line is a change of its own line."""
        old, new = self.code.split("\n"), after.split("\n")
        bare_old, bare_new = [line.strip() for line in old], [line.strip() for line in new]
        spans: list[Span] = []
        changed: list[Span] = []
        moved = None
        for tag, i1, i2, j1, j2 in line_opcodes(bare_old, bare_new):
            if tag == "equal":
                spans += self.spans[i1:i2]
                changed += [self.spans[i1 + k] for k in range(i2 - i1) if old[i1 + k] != new[j1 + k]]
                continue
            hunk = self._union(i1, i2)
            changed.append(hunk)
            if moved is None:
                moved = _occurrences(bare_old, bare_new)
            spans += [self.spans[moved[j]] if j in moved else hunk for j in range(j1, j2)]
        self.code, self.spans = after, spans
        if not findings or not changed:
            return list(findings)
        given: dict[int, list[Span]] = {}
        for span in set(changed):
            holders = [k for k, finding in enumerate(findings) if _meet(span, _lines(finding.range))]
            if not holders:
                holders = [min(range(len(findings)), key=lambda k: (_distance(span, _lines(findings[k].range)), k))]
            for k in holders:
                given.setdefault(k, []).append(span)
        return [finding.with_range(finding.range, touched=tuple(map(_range, _merged([*map(_span, finding.touched),
                                                                                 *given[k]]))))
                if k in given else finding for k, finding in enumerate(findings)]

    def _union(self, i1: int, i2: int) -> Span:
        """The original lines of this version's lines [i1, i2); before line i1 when empty."""
        if i2 > i1:
            covered = self.spans[i1:i2]
            return min(a for a, _ in covered), max(b for _, b in covered)
        at = self.spans[i1][0] if i1 < len(self.spans) else (self.spans[-1][1] if self.spans else 0)
        return at, at


def _merged(spans: list[Span]) -> list[Span]:
    """The spans, sorted, those that overlap or follow one another joined (a block's lines
    re-indented one by one: one span)."""
    out: list[Span] = []
    for a, b in sorted(set(spans)):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _occurrences(old: list[str], new: list[str]) -> dict[int, int]:
    """Lines of ``new`` -> the line of ``old`` each is, by occurrence: a line (not blank) whose
    text stands as often in both is the same occurrence of it (a rewrite moved it past
    others, which the diff cannot pair)."""
    where_old: dict[str, list[int]] = {}
    for i, line in enumerate(old):
        if line:
            where_old.setdefault(line, []).append(i)
    where_new: dict[str, list[int]] = {}
    for j, line in enumerate(new):
        if line:
            where_new.setdefault(line, []).append(j)
    return {j: mine[k] for line, theirs in where_new.items()
            if len(mine := where_old.get(line, ())) == len(theirs) for k, j in enumerate(theirs)}


def with_fixes(result: Result) -> Result:
    """``result`` with an id on each finding and, on each applied one, its fix: the edits
    of ``result.edits`` the pipeline made for it, and the others that fix ``needs``."""
    findings = list(result.findings)
    if not findings:
        return result
    ids = _ids(findings)
    applied = [k for k, finding in enumerate(findings) if finding.status is Status.APPLIED]
    source_lines = result.source.splitlines()
    edits = [part for edit in result.edits for part in _line_by_line(edit, source_lines)]
    owners = _owners(edits, [findings[k] for k in applied])
    parent = list(range(len(applied)))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for held in owners:
        for k in held[1:]:
            parent[find(k)] = find(held[0])
    edits_of: dict[int, list[Edit]] = {}
    members: dict[int, list[int]] = {}
    for edit, held in zip(edits, owners):
        if held:
            edits_of.setdefault(find(held[0]), []).append(edit)
    for k in range(len(applied)):
        members.setdefault(find(k), []).append(k)
    for k, index in enumerate(applied):
        root = find(k)
        fix = tuple(sorted(edits_of.get(root, ()), key=lambda e: (e.range.start, e.range.end)))
        needs = tuple(ids[applied[j]] for j in members[root] if j != k) if fix else ()
        findings[index] = dataclasses.replace(findings[index], fix=fix, needs=needs)
    for index, finding in enumerate(findings):
        if finding.id != ids[index]:
            findings[index] = dataclasses.replace(finding, id=ids[index])
    return dataclasses.replace(result, findings=tuple(findings))


def fix_groups(result: Result) -> list[list[Finding]]:
    """The applied findings of ``result`` (see :func:`with_fixes`) that have a fix, grouped:
    the findings of a group share one fix."""
    groups: dict[tuple[Edit, ...], list[Finding]] = {}
    for finding in result.findings:
        if finding.fix:
            groups.setdefault(finding.fix, []).append(finding)
    return list(groups.values())


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with ``edits`` (line-based, ranges in ``text``, none overlapping) applied."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, character: int) -> int:
        if line >= len(lines):
            return len(text)
        return min(starts[line] + character, starts[line + 1])

    out, at = [], 0
    for edit in sorted(edits, key=lambda e: (e.range.start, e.range.end)):
        start = offset(edit.range.start.line, edit.range.start.character)
        end = offset(edit.range.end.line, edit.range.end.character)
        if start < at:
            raise ValueError(f"overlapping edits at line {edit.range.start.line + 1}")
        out += [text[at:start], edit.new_text]
        at = end
    out.append(text[at:])
    return "".join(out)


def _line_by_line(edit: Edit, source_lines: Sequence[str]) -> list[Edit]:
    """An edit that replaces lines by as many lines, each like the one it replaces (a
    parameter added to a `def`, a call to a save), as one edit per line: two fixes that
    changed neighbouring lines each have theirs. Any other edit as it is."""
    start, end = edit.range.start, edit.range.end
    lines = edit.new_text.splitlines(keepends=True)
    if start.character or end.character or end.line - start.line != len(lines) or len(lines) < 2 \
            or not edit.new_text.endswith(("\n", "\r")) or end.line > len(source_lines):
        return [edit]
    for old, new in zip(source_lines[start.line:end.line], lines):
        if difflib.SequenceMatcher(None, old.strip(), new.strip(), autojunk=False).ratio() < _ALIKE:
            return [edit]
    return [Edit(Range.of(start.line + k, 0, start.line + k + 1, 0), line) for k, line in enumerate(lines)]


_ALIKE = 0.6  # how alike two lines must be to be taken for one line edited


def _owners(edits: Sequence[Edit], applied: Sequence[Finding]) -> list[list[int]]:
    """For each edit, the applied findings (by position in ``applied``) it was made for: one
    sweep over the edits and the touched spans, both by their first line."""
    if not applied:
        return [[] for _ in edits]
    spans = sorted((a, b, k) for k, finding in enumerate(applied)
                   for a, b in (_lines(r, inclusive=False) for r in finding.touched))
    ranges = [_lines(finding.range) for finding in applied]
    owners: list[list[int]] = [[] for _ in edits]
    active: list[tuple[int, int, int]] = []
    taken = 0
    for e in sorted(range(len(edits)), key=lambda e: _lines(edits[e].range, inclusive=False)):
        span = _lines(edits[e].range, inclusive=False)
        while taken < len(spans) and spans[taken][0] <= span[1]:
            active.append(spans[taken])
            taken += 1
        active = [item for item in active if item[1] >= span[0]]  # (the edits that follow start later)
        held = sorted({k for a, b, k in active if _meet(span, (a, b))})
        if not held:
            held = [k for k, r in enumerate(ranges) if _meet(span, r)]
        if not held:
            held = [min(range(len(applied)), key=lambda k: (_distance(span, ranges[k]), k))]
        owners[e] = held
    return owners


def _ids(findings: Sequence[Finding]) -> list[str]:
    """``pass-id@line:column`` (1-based) of each finding, ``#2``, ``#3`` after a repeat."""
    seen: dict[str, int] = {}
    ids = []
    for finding in findings:
        base = f"{finding.pass_id}@{finding.range.start.line + 1}:{finding.range.start.character + 1}"
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return ids


def _lines(rng: Range, inclusive: bool = True) -> Span:
    """The lines of ``rng``: every line it is on (``inclusive``), or [start, end) as an
    edit's or a touched span's range reads."""
    if inclusive:
        return rng.start.line, rng.end.line + 1
    return rng.start.line, rng.end.line


def _span(rng: Range) -> Span:
    return rng.start.line, rng.end.line


def _range(span: Span) -> Range:
    return Range.of(span[0], 0, span[1], 0)


def _meet(a: Span, b: Span) -> bool:
    """Do two spans share a line, or does an insertion stand within (or at an edge of) the other?"""
    if a[0] == a[1] or b[0] == b[1]:
        return a[0] <= b[1] and b[0] <= a[1]
    return a[0] < b[1] and b[0] < a[1]


def _distance(a: Span, b: Span) -> int:
    if _meet(a, b):
        return 0
    return b[0] - a[1] if a[1] <= b[0] else a[0] - b[1]


__all__ = ["LineOrigins", "with_fixes", "fix_groups", "apply_edits"]
