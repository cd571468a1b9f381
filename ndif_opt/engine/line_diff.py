"""Two versions of a text, line by line: where a line of the rewritten code stood in the original
(a finding's place), and the edits that turn one into the other."""

from __future__ import annotations

import difflib

from ndif_opt.types import Edit, Position, Range


def lines_mapped(current: str, original: str):
    """Map (line, column) of ``current`` to the closest position in ``original``.

    Lines equal up to indentation map exactly, the column shifted by the change in
    indentation (code moved into a session is indented one level deeper); other
    lines map to the nearest line of their diff hunk.
    """
    if current == original:
        return lambda line, col: (line, col)
    cur, org = current.split("\n"), original.split("\n")
    table: dict[int, tuple[int, int | None]] = {}
    for tag, i1, i2, j1, j2 in _opcodes(cur, org):
        if tag == "equal":
            for k in range(i2 - i1):
                table[i1 + k] = (j1 + k, 0)
            continue
        inner = _opcodes([line.strip() for line in cur[i1:i2]], [line.strip() for line in org[j1:j2]])
        for t, a1, a2, b1, b2 in inner:
            for k in range(a2 - a1):
                i = i1 + a1 + k
                if t == "equal":
                    j = j1 + b1 + k
                    shift = _indent(org[j]) - _indent(cur[i])
                    table[i] = (j, shift)
                else:
                    table[i] = (min(j1 + b1 + k, max(j1 + b2 - 1, j1 + b1, j1)), None)
    _by_occurrence(cur, org, table)
    last = max(0, len(org) - 1)

    def map_position(line: int, col: int) -> tuple[int, int]:
        j, shift = table.get(line, (min(line, last), None))
        j = min(j, last)
        if shift is None:
            return j, min(col, len(org[j]))
        return j, max(0, min(col + shift, len(org[j])))

    return map_position


def _by_occurrence(cur: list[str], org: list[str], table: dict) -> None:
    """A line the diff could not pair (a session's rewrite moves lines past each other)
    whose text stands as often in both versions is the same occurrence of it: the k-th
    `logits = model.lm_head.output.save()` of the output is the k-th of the original."""
    unpaired = [i for i in range(len(cur)) if table.get(i, (0, None))[1] is None and cur[i].strip()]
    if not unpaired:
        return
    where_org: dict[str, list[int]] = {}
    for j, line in enumerate(org):
        where_org.setdefault(line.strip(), []).append(j)
    where_cur: dict[str, list[int]] = {}
    for i, line in enumerate(cur):
        where_cur.setdefault(line.strip(), []).append(i)
    for i in unpaired:
        text = cur[i].strip()
        mine, theirs = where_cur[text], where_org.get(text, [])
        if len(mine) == len(theirs):
            j = theirs[mine.index(i)]
            table[i] = (j, _indent(org[j]) - _indent(cur[i]))


def _opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    # no junk: every line counts, however often it repeats (a session's lines do)
    return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def line_opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes of two lists of lines, no line junk (as :func:`_opcodes`), the
    lines both begin and end with set aside first (a window's prelude; what a pass left
    alone after its rewrite): the matcher sees only the middle."""
    head, most = 0, min(len(a), len(b))
    while head < most and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < most - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle = difflib.SequenceMatcher(None, a[head:len(a) - tail], b[head:len(b) - tail], autojunk=False)
    codes = [("equal", 0, head, 0, head)] if head else []
    codes += [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in middle.get_opcodes()]
    if tail:
        codes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return codes


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def text_edits(source: str, code: str) -> list[Edit]:
    """Line-based edits that turn ``source`` into ``code`` (ranges in ``source``)."""
    if source == code:
        return []
    old = source.splitlines(keepends=True)
    new = code.splitlines(keepends=True)
    edits = []
    for tag, i1, i2, j1, j2 in _opcodes(old, new):
        if tag == "equal":
            continue
        edits.append(
            Edit(Range(Position(i1, 0), Position(i2, 0)), "".join(new[j1:j2]))
        )
    return edits
