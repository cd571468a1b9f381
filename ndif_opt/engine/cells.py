"""Code cells optimized together, in order, as one module, and cut back into the same cells:
a notebook's (:mod:`ndif_opt.frontends.notebook`), an editor's open notebook's
(:func:`optimize_cells`), a ``# %%`` script's; and :func:`optimize_script`, which runs any
``.py`` script through the pipeline as its user wrote it.

A trace in one cell and the code that reduces its result in a later cell are seen together,
as a "Run All" runs them. The cells are joined with a unique marker statement between them
(``"ndif-opt cell <nonce> <index>"``) so the optimized module can be cut back into the same
cells; their IPython syntax is masked first (:mod:`ndif_opt.engine.ipython_lines`).

Rewrites that span cells: a rewrite may move code from one cell into another (e.g. a
reduction in a later cell pushed into the trace of an earlier one) as long as every cell
still parses on its own; running the cells in order then does what the module does. A
rewrite that *wraps* code of two cells in one block (a session around the traces of two
cells) cannot be cut back into cells. ndif-opt never merges cells: it runs the optimizer
again with a client-side barrier at that cell boundary, so the rewrite stays within cells
(each cell gets its own session), and reports the boundary. If that still fails, the
notebook is left unchanged with a finding.

A ``.py`` script with ``# %%`` markers is optimized as the notebook it is to its user (each
cell stays a cell); another script's IPython lines (``!pip install ...``, ``%time ...``) are
masked where a statement starts, and its findings keep the script's own line numbers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import libcst as cst

from ndif_opt.engine.finding_edits import apply_edits, with_fixes
from ndif_opt.engine.ipython_lines import (
    PROLOGUE,
    Magic,
    SplitError,
    declined,
    is_cell_magic,
    is_script_magic,
    mask_magics,
    mask_script,
    nonce_for,
    python_lines,
    restore_magics,
    script_syntax_error,
)
from ndif_opt.options import Options
from ndif_opt.types import Finding, Position, Range, Result, Safety, Status

if TYPE_CHECKING:
    from ndif_opt.engine.pipeline import WindowCache

NOTEBOOK_ID = "notebook"  # pass id of the findings about the notebook itself


@dataclass(frozen=True)
class Cell:
    """A code cell: its index in its notebook (what findings and messages name) and its code."""

    index: int
    code: str


@dataclass(frozen=True)
class CellFinding:
    """A finding located in one cell: ``cell`` is the 0-based index in the notebook's
    ``cells`` list; the finding's range is relative to that cell's source. ``uses``: the
    finding's :attr:`~ndif_opt.types.Finding.uses`, each as (cell, range in that cell); the
    message names the cells other than ``cell`` ("(used in cell 3)")."""

    cell: int
    finding: Finding
    uses: tuple[tuple[int, Range], ...] = ()
    touched: tuple[tuple[int, Range], ...] = ()  # the finding's ``touched``, each in its cell

    def to_dict(self) -> dict:
        return {"cell": self.cell, **self.finding.to_dict()}


@dataclass(frozen=True)
class CellsResult:
    """:func:`optimize_cells`: code cells optimized together, as a notebook's are."""

    sources: tuple[str, ...]  # the cells' code as given
    indices: tuple[int, ...]  # each cell's index in its notebook (findings' ``cell``)
    new_sources: tuple[str, ...]  # the optimized code of each cell (== sources when unchanged)
    result: Result  # optimizing the joined cells (markers and placeholders included)
    findings: tuple[CellFinding, ...] = ()
    barriers: tuple[int, ...] = ()  # cells kept apart from the cell before them
    # the joined module's code -> each cell's code (raises SplitError when it cannot be cut)
    cut: Callable[[str], dict[int, str]] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def changed_cells(self) -> tuple[int, ...]:
        """Indices (in the notebook) of the cells whose code changed."""
        return tuple(i for i, old, new in zip(self.indices, self.sources, self.new_sources) if old != new)

    def fixed(self, finding: Finding) -> tuple[str, ...] | None:
        """Each cell's code with ``finding``'s fix (``Finding.fix``, in the joined module's
        lines) applied, and nothing else; None when it has none or cannot be cut into cells."""
        if not finding.fix or self.cut is None:
            return None
        try:
            pieces = self.cut(apply_edits(self.result.source, finding.fix))
        except (SplitError, ValueError):
            return None
        return tuple(pieces[index] for index in self.indices)


def _marker(nonce: str, index: int, barrier: bool) -> str:
    if barrier:
        # a statement no session may take (it declares a global): no rewrite moves code across it
        return f"global ndif_opt_cell_{nonce}_{index}"
    return f'"ndif-opt cell {nonce} {index}"'


@dataclass
class _Joined:
    code: str
    lines: list[tuple[int, int]]  # joined line -> (cell index, line in cell)


def _join(cells: list[Cell], masked: dict[int, str], nonce: str, barriers: set[int], prologue: bool,
          line_maps: dict[int, list[int]]) -> _Joined:
    parts: list[str] = []
    table: list[tuple[int, int]] = []
    first = cells[0].index
    if prologue:
        parts.append(PROLOGUE)
        table.append((first, 0))
    for cell in cells:
        parts.append(_marker(nonce, cell.index, cell.index in barriers) + "\n")
        table.append((cell.index, 0))
        code = masked[cell.index]
        if code and not code.endswith("\n"):
            code += "\n"
        parts.append(code)
        origin = line_maps.get(cell.index, [])
        table.extend((cell.index, origin[k] if k < len(origin) else k) for k in range(code.count("\n")))
    return _Joined("".join(parts), table)


def _split(code: str, cells: list[Cell], nonce: str, magics: list[Magic], prologue: bool) -> dict[int, str]:
    """The optimized module cut back into cells (IPython syntax restored)."""
    pattern = re.compile(
        r'^(?P<indent>[ \t]*)(?:"ndif-opt cell ' + nonce + r' (?P<a>\d+)"|global ndif_opt_cell_'
        + nonce + r'_(?P<b>\d+))[ \t]*\r?\n?$'
    )
    lines = code.splitlines(keepends=True)
    found: dict[int, tuple[int, str]] = {}
    broken: set[int] = set()
    for number, line in enumerate(lines):
        match = pattern.match(line)
        if match is None:
            continue
        index = int(match.group("a") or match.group("b"))
        if index in found:
            broken.add(index)
        found[index] = (number, match.group("indent"))
    order = [c.index for c in cells]
    for index in order:
        if index not in found or found[index][1]:
            broken.add(index)
    if broken:
        raise SplitError("a rewrite spans cells")
    positions = [found[i][0] for i in order]
    if positions != sorted(positions):
        raise SplitError("a rewrite reordered cells")
    pieces: dict[int, str] = {}
    for k, index in enumerate(order):
        end = positions[k + 1] if k + 1 < len(order) else len(lines)
        pieces[index] = "".join(lines[positions[k] + 1 : end])
    head = "".join(lines[: positions[0]])
    if prologue:
        if PROLOGUE not in head:
            raise SplitError("a rewrite changed the notebook's prologue")
        head = head.replace(PROLOGUE, "", 1)
    if head.strip():
        pieces[order[0]] = head + pieces[order[0]]
    return restore_magics(pieces, {c.index: c.code for c in cells}, magics, nonce)


def _parses(code: str) -> bool:
    try:
        cst.parse_module(code)
    except cst.ParserSyntaxError:
        return False
    return True


def optimize_cells(sources: list[str] | tuple[str, ...], *, indices: list[int] | tuple[int, ...] | None = None,
                   options: Options | None = None, filename: str | None = None) -> CellsResult:
    """Optimize code cells together, in order, as
    :func:`ndif_opt.frontends.notebook.optimize_notebook` optimizes a
    notebook's (an editor's open notebook: its cells' texts). ``indices``: each cell's index
    in its notebook, which findings and messages use (default 0, 1, ...). Raises
    ``SyntaxError`` (naming the cell) for a cell that does not parse."""
    options = dataclasses.replace(options or Options(), notebook=True)
    sources = tuple(sources)
    indices = tuple(range(len(sources)) if indices is None else indices)
    if len(indices) != len(sources):
        raise ValueError("optimize_cells: one index per cell")
    if not sources:
        return CellsResult((), (), (), Result(source="", code=""))
    cells = [Cell(index, code) for index, code in zip(indices, sources)]
    run = run_cells(cells, nonce_for("\n".join(sources)), options, filename)
    return CellsResult(sources, indices, tuple(run.pieces[i] for i in indices), run.result, run.findings,
                       run.barriers, run.cut)


@dataclass
class CellsRun:
    result: Result
    pieces: dict[int, str]  # each code cell's new code (its code when unchanged)
    findings: tuple[CellFinding, ...]
    barriers: tuple[int, ...]
    cut: Callable[[str], dict[int, str]] | None = None  # the joined module's code -> each cell's code


def run_cells(cells: list[Cell], nonce: str, options: Options, filename: str | None,
              is_magic=is_cell_magic) -> CellsRun:
    """The code cells (in order) optimized as one module and cut back into cells; a
    rewrite that would merge cells is run again with a barrier at that boundary.
    ``is_magic``: which lines are IPython syntax (a `# %%` script's rule is narrower)."""
    from ndif_opt.engine.pipeline import run_pipeline

    name = filename or "<notebook>"
    magics: list[Magic] = []
    line_maps: dict[int, list[int]] = {cell.index: [] for cell in cells}
    masked = {cell.index: mask_magics(cell.code, cell.index, nonce, magics, line_maps[cell.index], is_magic) for cell in cells}
    for cell in cells:
        try:
            cst.parse_module(masked[cell.index])
        except cst.ParserSyntaxError as error:
            raise SyntaxError(
                f"cell {cell.index + 1}: {error.message} (line {error.raw_line}, column {error.raw_column})",
                (name, error.raw_line, error.raw_column + 1, None),
            ) from None

    # every cell boundary is a barrier: no rewrite moves code across it (a session around
    # statements of two cells would merge them); edits inside several cells still happen
    barriers = {cell.index for cell in cells[1:]}
    prologue = bool(magics or barriers)
    joined = _join(cells, masked, nonce, barriers, prologue, line_maps)
    result = _without_runs_across_cells(with_fixes(run_pipeline(joined.code, options, filename=filename)), joined)
    apart = _requests_kept_apart(cells, masked)
    notes = _barrier_notes(apart)
    if not result.changed:
        return _unchanged(cells, result, joined, notes, barriers=apart)
    try:
        pieces = _split(result.code, cells, nonce, magics, prologue)
        new_masked = {i: _mask_only(piece, i, nonce) for i, piece in pieces.items()}
        failing = [i for i, code in new_masked.items() if not _parses(code)]
        if failing:
            raise SplitError(f"a rewrite left cell {failing[0] + 1} unable to parse on its own")
        moved = statements_moved(masked, new_masked)
        if moved:  # (barriers keep sessions apart; this says so for every other rewrite too)
            raise SplitError(f"a rewrite moved `{moved[0][2]}` from cell {moved[0][0] + 1} to cell {moved[0][1] + 1}")
    except SplitError as error:
        notes.append(notebook_finding(
            cells[0].index, f"the notebook was left unchanged: {error}",
            "optimize the exported script (`jupyter nbconvert --to script`) instead",
        ))
        return _unchanged(cells, result, joined, notes, refused=True)
    findings = tuple(notes) + tuple(_locate(result, joined))
    findings = tuple(sorted(findings, key=lambda f: (f.cell, f.finding.range.start, f.finding.pass_id)))
    return CellsRun(result, {c.index: pieces[c.index] for c in cells}, findings, apart,
                    lambda code: _split(code, cells, nonce, magics, prologue))


def statements_moved(before: dict[int, str], after: dict[int, str]) -> list[tuple[int, int, str]]:
    """Top-level statements of a cell of ``before`` (cell index -> code, IPython masked)
    that are in another cell of ``after``, and no longer in their own: (from, to, the
    statement's first line) each. Statements are compared with layout, `.save()`,
    `.detach().cpu()` and `remote=` left out, so a statement a rewrite edited and moved is
    still recognised; one that is in another cell already counts only if that cell now
    holds it more often."""
    old = {i: _statement_keys(code) for i, code in before.items()}
    new = {i: _statement_keys(code) for i, code in after.items()}
    moved = []
    for i, code in before.items():
        for key, line in _top_statements(code):
            if new.get(i, {}).get(key, 0) >= old[i][key]:
                continue
            gained = [j for j in new if j != i and new[j].get(key, 0) > old.get(j, {}).get(key, 0)]
            if gained:
                moved.append((i, gained[0], line))
    return moved


_NEUTRAL_EDITS = re.compile(r"\.save\(\)|\.detach\(\)|\.cpu\(\)|,?remote=[A-Za-z_.]+|\s+")


def _key(stmt: cst.CSTNode) -> str:
    return _NEUTRAL_EDITS.sub("", cst.Module([]).code_for_node(stmt))


def _top_statements(code: str) -> list[tuple[str, str]]:
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError:
        return []
    return [(_key(stmt), cst.Module([]).code_for_node(stmt).strip().splitlines()[0])
            for stmt in module.body if isinstance(stmt, cst.SimpleStatementLine)]


def _statement_keys(code: str) -> dict[str, int]:
    """How often each simple statement occurs anywhere in ``code`` (by :func:`_key`)."""
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError:
        return {}
    counter = _StatementCounter()
    module.visit(counter)
    return counter.counts


class _StatementCounter(cst.CSTVisitor):
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        key = _key(node)
        self.counts[key] = self.counts.get(key, 0) + 1
        return False


def _requests_kept_apart(cells: list[Cell], masked: dict[int, str]) -> tuple[int, ...]:
    """The cells that send a remote request, as the cell before them does: requests one
    session could bundle, which ndif-opt keeps apart because it does not merge cells."""
    from ndif_opt.analysis.facts import Remote, analyze

    def sends(cell: Cell) -> bool:
        facts = analyze(cst.parse_module(masked[cell.index]))
        return any(b.parent is None and b.remote.state is not Remote.NO for b in facts.blocks)

    sending = [sends(cell) for cell in cells]
    return tuple(cells[k].index for k in range(1, len(cells)) if sending[k] and sending[k - 1])


def _mask_only(piece: str, index: int, nonce: str) -> str:
    """A restored cell, masked again for the parse check (restored magics are not Python)."""
    return mask_magics(piece, index, nonce + "x", [])


def _barrier_notes(barriers) -> list[CellFinding]:
    return [
        notebook_finding(
            index,
            "this cell and the one before it each send remote requests, which one session could bundle; "
            "the cells were optimized apart",
            "ndif-opt does not merge cells; merge them yourself to bundle their requests",
        )
        for index in sorted(barriers)
    ]


def _unchanged(cells: list[Cell], result: Result, joined: _Joined, notes: list[CellFinding],
               refused: bool = False, barriers: set[int] = frozenset()) -> CellsRun:
    if refused:
        result = declined(result, "the rewrite could not be cut back into the notebook's cells")
    located = tuple(notes) + tuple(_locate(result, joined))
    located = tuple(sorted(located, key=lambda f: (f.cell, f.finding.range.start, f.finding.pass_id)))
    return CellsRun(result, {c.index: c.code for c in cells}, located, tuple(sorted(barriers)))


def notebook_finding(cell: int, message: str, reason: str, status: Status = Status.SKIPPED) -> CellFinding:
    return CellFinding(cell, Finding(NOTEBOOK_ID, message, Range.of(0, 0, 0, 0), status, Safety.SAFE, reason))


def _locate(result: Result, joined: _Joined) -> list[CellFinding]:
    """The findings of the joined module, each in its cell; a finding whose ``uses`` are in
    other cells says which ("(used in cell 3)")."""
    last = len(joined.lines) - 1

    def in_cell(rng: Range) -> tuple[int, Range]:
        start_cell, start_line = joined.lines[min(rng.start.line, last)]
        end_cell, end_line = joined.lines[min(rng.end.line, last)]
        end = Position(end_line, rng.end.character) if end_cell == start_cell else Position(start_line, 0)
        start = Position(start_line, rng.start.character)
        return start_cell, Range(start, max(start, end))

    located = []
    for finding in result.findings:
        cell, rng = in_cell(finding.range)
        uses = tuple(in_cell(use) for use in finding.uses)
        noted = finding.framed(after=_used_in(sorted({c for c, _ in uses if c != cell})))
        touched = tuple(part for span in finding.touched for part in _span_in_cells(span, joined.lines))
        located.append(CellFinding(cell, replace(noted, range=rng, uses=(), touched=()), uses, touched))
    return located


def _without_runs_across_cells(result: Result, joined: _Joined) -> Result:
    """The result without the findings not applied about runs of statements across cells:
    cells are kept apart (the notebook's own note names requests they keep apart)."""
    kept = tuple(f for f in result.findings
                 if f.status is Status.APPLIED or not _spans_cells(f.range, joined.lines))
    return result if len(kept) == len(result.findings) else replace(result, findings=kept)


def _spans_cells(rng: Range, lines: list[tuple[int, int]]) -> bool:
    last = len(lines) - 1
    return bool(lines) and lines[min(rng.start.line, last)][0] != lines[min(rng.end.line, last)][0]


def _span_in_cells(span: Range, lines: list[tuple[int, int]]) -> list[tuple[int, Range]]:
    """A touched span of the joined module (lines [start, end)) as spans of its cells."""
    if not lines:
        return []
    last = len(lines) - 1
    first, end = span.start.line, max(span.start.line, span.end.line)
    if first == end:  # an insertion
        cell, line = lines[min(first, last)]
        return [(cell, Range.of(line, 0, line, 0))]
    spans: dict[int, tuple[int, int]] = {}
    for k in range(first, min(end, last + 1)):
        cell, line = lines[k]
        low, high = spans.get(cell, (line, line + 1))
        spans[cell] = (min(low, line), max(high, line + 1))
    return [(cell, Range.of(low, 0, high, 0)) for cell, (low, high) in spans.items()]


def _used_in(cells: list[int]) -> str:
    """" (used in cell 3)", " (used in cells 3 and 5)": 0-based indices, named 1-based."""
    if not cells:
        return ""
    names = [str(c + 1) for c in cells]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f" (used in cell{'s' if len(names) > 1 else ''} {listed})"


# ---------------------------------------------------------------------------------------
# Scripts: `# %%` cells, IPython lines
# ---------------------------------------------------------------------------------------


# a `# %%` cell marker (VS Code, PyCharm, Spyder, jupytext's percent format), at the start of a line
_SCRIPT_CELL_MARKER = re.compile(r"#\s*%%")


def script_cells(text: str) -> list[str] | None:
    """A `# %%` script's cells: each from its marker line to the next marker (the lines
    before the first marker are a cell of their own); None for a script without markers.
    Joined, the cells are the script."""
    cells: list[str] = []
    current: list[str] = []
    for line in python_lines(text):
        if _SCRIPT_CELL_MARKER.match(line) and current:
            cells.append("".join(current))
            current = []
        current.append(line)
    if current:
        cells.append("".join(current))
    return cells if len(cells) > 1 or (cells and _SCRIPT_CELL_MARKER.match(cells[0])) else None


def _optimize_cell_script(text: str, cells: list[str], options: Options, filename: str | None) -> Result | None:
    """A `# %%` script optimized as the notebook it is to its user: by a notebook's rules,
    each cell stays a cell (no session crosses a marker), as :func:`optimize_cells`. None
    when a cell does not parse on its own (a marker inside a block: the script is then
    one module)."""
    from ndif_opt.engine.line_diff import text_edits

    code_cells = [Cell(index, code) for index, code in enumerate(cells)]
    try:
        run = run_cells(code_cells, nonce_for(text), dataclasses.replace(options, notebook=True), filename,
                        is_magic=is_script_magic)
    except SyntaxError:
        return None
    firsts = [0]
    for code in cells[:-1]:
        firsts.append(firsts[-1] + len(python_lines(code)))

    def moved(cell: int, rng: Range) -> Range:
        return Range(Position(rng.start.line + firsts[cell], rng.start.character),
                     Position(rng.end.line + firsts[cell], rng.end.character))

    findings = tuple(
        item.finding.with_range(moved(item.cell, item.finding.range),
                                tuple(moved(cell, use) for cell, use in item.uses),
                                tuple(moved(cell, span) for cell, span in item.touched))
        for item in run.findings
    )
    code = "".join(run.pieces[index] for index in range(len(cells)))
    changed = code != text
    return replace(run.result, source=text, code=code, findings=findings, edits=tuple(text_edits(text, code)),
                   unreturned=run.result.unreturned if changed else (),
                   introduced=run.result.introduced if changed else ())


def optimize_script(text: str, options: Options, *, filename: str | None = None,
                    cache: WindowCache | None = None, prefiltered: bool = False) -> Result:
    """:func:`ndif_opt.engine.pipeline.run_pipeline` on a .py script that may hold IPython lines (a
    notebook exported or pasted): ``!pip install ...``, ``%time ...``, a ``%%capture`` first
    line. They are masked as a notebook cell's are, and put back byte for byte; a rewrite
    that would move one leaves the script unchanged (its findings say why). The
    ``SyntaxError`` for a magic that cannot be masked (inside brackets, ``x = !ls``) says so."""
    from ndif_opt.engine.pipeline import run_pipeline

    cells = script_cells(text)
    if cells is not None:
        result = _optimize_cell_script(text, cells, options, filename)
        if result is not None:
            return with_fixes(result)
    masked = mask_script(text)
    try:
        result = run_pipeline(text if masked is None else masked.code, options, filename, cache,
                              prefiltered=prefiltered)
    except SyntaxError as error:
        raise script_syntax_error(error, text, masked) from None
    return with_fixes(result if masked is None else masked.restore(result))


def check_script_syntax(text: str, filename: str | None = None) -> None:
    """SyntaxError (with line and column) when ``text`` is not Python once its IPython
    lines are masked as :func:`optimize_script` masks them."""
    from ndif_opt.engine.pipeline import check_syntax

    masked = mask_script(text)
    try:
        check_syntax(text if masked is None else masked.code, filename)
    except SyntaxError as error:
        raise script_syntax_error(error, text, masked) from None
