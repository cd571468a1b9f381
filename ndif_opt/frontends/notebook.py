"""Jupyter notebooks (`.ipynb`) in, notebooks out.

A notebook's code cells are optimized together, in order, as one module — a trace in
one cell and the code that reduces its result in a later cell are seen together, as a
"Run All" runs them. The cells are joined with a unique marker statement between
them (``"ndif-opt cell <nonce> <index>"``) so the optimized module can be cut back into
the same cells.

IPython syntax — line magics (``%pip install``), shell lines (``!pip install``),
``x = !ls``, help lines (``model?``), cell magics (``%%time``) — is masked before the
analysis by a placeholder call ``get_ipython().run_line_magic("ndif_opt_<nonce>", "<n>",
<names it mentions>)`` on the same line at the same indentation, and restored
verbatim afterwards. With ``from IPython import get_ipython`` in front of the module,
the passes see each magic as client code that may read the names it mentions, so none
moves it to the server or drops a value it uses. A cell whose magic does not run
Python (``%%bash``, ``%%writefile``...) is masked whole. ``get_ipython()`` calls in your
own code are plain Python.

A ``.py`` script with such lines (a notebook exported or pasted) is masked the same way
by :func:`optimize_script`, for lines that start with ``!`` or ``%`` where a statement
starts; the findings keep the script's own line numbers.

Rewrites that span cells: a rewrite may move code from one cell into another (e.g. a
reduction in a later cell pushed into the trace of an earlier one) as long as every
cell still parses on its own; running the cells in order then does what the module
does. A rewrite that *wraps* code of two cells in one block (a session around the
traces of two cells) cannot be cut back into cells. ndif-opt never merges cells:
it runs the optimizer again with a client-side barrier at that cell boundary, so the
rewrite stays within cells (each cell gets its own session), and reports the
boundary. If that still fails, the notebook is left unchanged with a finding.

Output: unchanged cells keep their JSON text byte for byte (source, metadata,
outputs, key order, indentation, escapes); the file's trailing newline is kept.
A changed cell gets its new ``source`` in the same form (a list of lines or one
string) and keeps its metadata and outputs — they are stale until the cell is re-run,
which replaces them.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import keyword
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import libcst as cst

from ndif_opt.options import Options
from ndif_opt.types import Finding, PassCost, Position, Range, Result, Safety, Status

if TYPE_CHECKING:
    from ndif_opt.engine.pipeline import WindowCache

NOTEBOOK_ID = "notebook"  # pass id of the findings about the notebook itself
PROLOGUE = "from IPython import get_ipython\n"
# cell magics whose body is Python that runs in the user's namespace
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_HELP = re.compile(r"^\s*[\w.\[\]()'\"]+\s*\?{1,2}\s*$")
_ASSIGN_MAGIC = re.compile(r"^\s*[A-Za-z_][\w.]*(\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[%!]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass(frozen=True)
class CellFinding:
    """A finding located in one cell: ``cell`` is the 0-based index in the notebook's
    ``cells`` list; the finding's range is relative to that cell's source. ``uses``: the
    finding's :attr:`~ndif_opt.types.Finding.uses`, each as (cell, range in that cell); the
    message names the cells other than ``cell`` ("(used in cell 3)")."""

    cell: int
    finding: Finding
    uses: tuple[tuple[int, Range], ...] = ()

    def to_dict(self) -> dict:
        return {"cell": self.cell, **self.finding.to_dict()}


@dataclass(frozen=True)
class NotebookResult:
    source: str  # the notebook's JSON text as given
    text: str  # the optimized notebook's JSON text (== source when nothing changed)
    result: Result  # optimizing the joined code cells (markers and placeholders included)
    cell_diffs: tuple[str, ...] = ()  # unified diffs of the changed cells, in order
    findings: tuple[CellFinding, ...] = ()  # result's findings, located in cells, + notebook ones
    changed_cells: tuple[int, ...] = ()  # indices of cells whose source changed
    barriers: tuple[int, ...] = field(default=())  # cells kept apart from the cell before them

    @property
    def changed(self) -> bool:
        return self.text != self.source

    def diff(self) -> str:
        return "".join(self.cell_diffs)

    def as_result(self) -> "NotebookFileResult":
        """A :class:`Result` for the notebook file, for code that handles scripts: ``source``
        and ``code`` are the JSON texts, findings carry positions in the original JSON text
        (the line of the cell's source line in the file) and start with ``[cell N, line M]``
        (1-based), costs and names are those of the joined code. ``.notebook`` is this object.
        """
        from ndif_opt.engine.pipeline import text_edits

        locate = _file_positions(self.source)
        findings = []
        for item in self.findings:
            f = item.finding
            start = locate(item.cell, f.range.start)
            end = locate(item.cell, f.range.end) if f.range.end >= f.range.start else start
            if f.range.start == f.range.end and f.range.start.character == 0:
                # a point between lines (where lines were inserted) is the JSON line's start,
                # where the file's edit inserts them, not the cell text's first character
                start = end = Position(start.line, 0)
            framed = f.framed(before=f"[cell {item.cell + 1}, line {f.range.start.line + 1}] ")
            findings.append(replace(framed, range=Range(start, max(start, end))))
        return NotebookFileResult(
            source=self.source,
            code=self.text,
            findings=tuple(findings),
            costs=self.result.costs,
            edits=tuple(text_edits(self.source, self.text)),
            assumptions=self.result.assumptions,
            unreturned=self.result.unreturned if self.changed else (),
            introduced=self.result.introduced if self.changed else (),
            notebook=self,
        )


@dataclass(frozen=True)
class CellsResult:
    """:func:`optimize_cells`: code cells optimized together, as a notebook's are."""

    sources: tuple[str, ...]  # the cells' code as given
    indices: tuple[int, ...]  # each cell's index in its notebook (findings' ``cell``)
    new_sources: tuple[str, ...]  # the optimized code of each cell (== sources when unchanged)
    result: Result  # optimizing the joined cells (markers and placeholders included)
    findings: tuple[CellFinding, ...] = ()
    barriers: tuple[int, ...] = ()  # cells kept apart from the cell before them

    @property
    def changed_cells(self) -> tuple[int, ...]:
        """Indices (in the notebook) of the cells whose code changed."""
        return tuple(i for i, old, new in zip(self.indices, self.sources, self.new_sources) if old != new)


@dataclass(frozen=True)
class NotebookFileResult(Result):
    """:meth:`NotebookResult.as_result`: a notebook file's result in the shape of a script's."""

    notebook: "NotebookResult | None" = None


# ---------------------------------------------------------------------------------------
# Reading the notebook
# ---------------------------------------------------------------------------------------


@dataclass
class _Cell:
    index: int  # in the notebook's cells list
    kind: str  # cell_type
    code: str  # the source joined into one string
    form: str  # "list" | "str"
    span: tuple[int, int] | None  # the source value's span in the JSON text
    key_start: int = 0


def _load(text: str) -> tuple[dict, list[_Cell]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not a valid notebook: invalid JSON: {error.msg} "
                         f"(line {error.lineno}, column {error.colno})") from None
    except RecursionError:
        raise ValueError("not a valid notebook: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a valid notebook: the top level is not a JSON object")
    if "worksheets" in data and "cells" not in data:
        raise ValueError("nbformat 3 notebooks are not supported; upgrade it with "
                         "`jupyter nbconvert --to notebook --nbformat 4`")
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise ValueError("not a valid notebook: no `cells` list")
    spans = _source_spans(text, len(cells))
    found = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise ValueError(f"not a valid notebook: cell {index + 1} has no `cell_type`")
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            code, form = "".join(source), "list"
        elif isinstance(source, str):
            code, form = source, "str"
        else:
            raise ValueError(f"not a valid notebook: cell {index + 1} has a `source` that is "
                             "neither a string nor a list of strings")
        span, key_start = spans[index]
        found.append(_Cell(index, cell["cell_type"], code, form, span, key_start))
    return data, found


_WS = " \t\n\r"


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _members(text: str, i: int, decoder: json.JSONDecoder) -> tuple[dict, int]:
    """The members of the JSON object at ``i``: key -> (key start, value start, value end)."""
    members: dict[str, tuple[int, int, int]] = {}
    i = _skip(text, i + 1)
    if text[i] == "}":
        return members, i + 1
    while True:
        key_start = i
        key, i = json.decoder.scanstring(text, i + 1)
        i = _skip(text, i)
        i = _skip(text, i + 1)  # the colon
        _, end = decoder.raw_decode(text, i)
        members[key] = (key_start, i, end)
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
            continue
        return members, i + 1


def _source_spans(text: str, count: int) -> list[tuple[tuple[int, int] | None, int]]:
    """Where each cell's `source` value is in the text (the text is valid JSON)."""
    decoder = json.JSONDecoder()
    start = _skip(text, 0)
    top, _ = _members(text, start, decoder)
    _, value_start, _ = top["cells"]
    spans: list[tuple[tuple[int, int] | None, int]] = []
    i = _skip(text, value_start + 1)
    while text[i] != "]":
        if text[i] == "{":
            members, end = _members(text, i, decoder)
            source = members.get("source")
            spans.append(((source[1], source[2]), source[0]) if source else (None, i))
        else:
            _, end = decoder.raw_decode(text, i)
            spans.append((None, i))
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
    if len(spans) != count:  # pragma: no cover - json.loads and the scan disagree
        raise ValueError("not a valid notebook: could not locate the cells")
    return spans


def _language(data: dict) -> str | None:
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return None
    for key, field_name in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(field_name), str):
            return table[field_name].lower()
    return None


# ---------------------------------------------------------------------------------------
# Masking IPython syntax
# ---------------------------------------------------------------------------------------


@dataclass
class _Magic:
    number: int
    cell: int  # notebook index
    lines: list[str]  # the original lines, with their line endings
    placeholder: str  # the placeholder line, without indentation or newline
    indent: str
    kind: str  # "line" | "cell" (a Python-body cell magic's first line) | "opaque" (a whole cell)


def _mentioned_names(text: str) -> list[str]:
    names: list[str] = []
    for name in _IDENT.findall(text):
        if keyword.iskeyword(name) or name in names or name.startswith("_ndif"):
            continue
        names.append(name)
    return names


def _placeholder(nonce: str, number: int, text: str) -> str:
    names = _mentioned_names(text)
    extra = "".join(f", {n}" for n in names)
    return f'get_ipython().run_line_magic("ndif_opt_{nonce}", "{number}"{extra})'


def _is_magic(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    if stripped[0] in "%!?":
        return True
    return bool(_HELP.match(stripped) or _ASSIGN_MAGIC.match(stripped))


def _mask_cell(cell: _Cell, nonce: str, magics: list[_Magic], line_map: list[int] | None = None,
               is_magic=_is_magic) -> str:
    """The cell's code with IPython syntax replaced by placeholder lines. ``line_map``, when
    given, receives for each line of the result the line of the cell it comes from;
    ``is_magic`` tells a magic line (checked only where a statement starts)."""
    lines = _python_lines(cell.code)
    out: list[str] = []
    origin: list[int] = [] if line_map is None else line_map
    first = 0
    if lines and lines[0].startswith("%%"):
        name = lines[0][2:].split(None, 1)[0] if lines[0][2:].strip() else ""
        if name not in PYTHON_CELL_MAGICS:
            number = len(magics)
            placeholder = _placeholder(nonce, number, "")
            magics.append(_Magic(number, cell.index, lines, placeholder, "", "opaque"))
            origin.append(0)
            return placeholder + _line_end(lines[-1])
        number = len(magics)
        placeholder = _placeholder(nonce, number, lines[0][2:])
        magics.append(_Magic(number, cell.index, [lines[0]], placeholder, "", "cell"))
        out.append(placeholder + _line_end(lines[0]))
        origin.append(0)
        lines, first = lines[1:], 1
    string: str | None = None  # the open quote of a string spanning lines
    depth = 0  # open brackets
    continued = False  # the previous line ended with a backslash
    i = 0
    while i < len(lines):
        line = lines[i]
        if string is None and depth == 0 and not continued and is_magic(line):
            group = [line]
            while group[-1].rstrip("\r\n").endswith("\\") and i + 1 < len(lines):
                i += 1
                group.append(lines[i])
            indent = line[: len(line) - len(line.lstrip())]
            number = len(magics)
            text = "".join(group)
            stripped = line.strip()
            prefix = stripped[: stripped.index("=") + 1] + " " if _ASSIGN_MAGIC.match(stripped) else ""
            placeholder = prefix + _placeholder(nonce, number, text)
            magics.append(_Magic(number, cell.index, group, placeholder, indent, "line"))
            out.append(indent + placeholder + _line_end(group[-1]))
            origin.append(first + i - len(group) + 1)
            i += 1
            continue
        string, depth, continued = _advance(line, string, depth)
        out.append(line)
        origin.append(first + i)
        i += 1
    return "".join(out)


def _python_lines(text: str) -> list[str]:
    """The lines of ``text`` with their endings, as Python counts them: CR LF, CR or LF
    ends a line; a form feed (or another break ``str.splitlines`` knows) does not."""
    return _LINE.findall(text)


def _line_end(line: str) -> str:
    """The line's own ending, so a placeholder keeps the file's newlines (LF for a last
    line without one: restoring drops it again)."""
    return line[len(line.rstrip("\r\n")):] or "\n"


def _advance(line: str, string: str | None, depth: int) -> tuple[str | None, int, bool]:
    """The lexical state after ``line``: open string, bracket depth, backslash at the end."""
    j, n = 0, len(line)
    while j < n:
        ch = line[j]
        if string is not None:
            if ch == "\\":
                j += 2
                continue
            if line.startswith(string, j):
                j += len(string)
                string = None
                continue
            j += 1
            continue
        if ch == "#":
            return None, depth, False
        if ch in "\"'":
            if line.startswith(ch * 3, j):
                string, j = ch * 3, j + 3
            else:
                string, j = ch, j + 1
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        j += 1
    body = line.rstrip("\r\n")
    continued = body.endswith("\\")
    if string is not None and len(string) == 1 and not continued:
        string = None  # an unterminated one-line string: a syntax error the parser reports
    return string, depth, continued


# ---------------------------------------------------------------------------------------
# Optimizing
# ---------------------------------------------------------------------------------------


def _nonce(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    for offset in range(0, len(digest) - 10):
        candidate = digest[offset : offset + 10]
        if candidate not in text:
            return candidate
    return digest  # pragma: no cover


def _marker(nonce: str, index: int, barrier: bool) -> str:
    if barrier:
        # a statement no session may take (it declares a global): no rewrite moves code across it
        return f"global ndif_opt_cell_{nonce}_{index}"
    return f'"ndif-opt cell {nonce} {index}"'


@dataclass
class _Joined:
    code: str
    lines: list[tuple[int, int]]  # joined line -> (cell index, line in cell)


def _join(cells: list[_Cell], masked: dict[int, str], nonce: str, barriers: set[int], prologue: bool,
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


class _SplitError(Exception):
    """The rewrite cannot be cut back into the notebook's cells."""


def _split(code: str, cells: list[_Cell], nonce: str, magics: list[_Magic], prologue: bool) -> dict[int, str]:
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
        raise _SplitError("a rewrite spans cells")
    positions = [found[i][0] for i in order]
    if positions != sorted(positions):
        raise _SplitError("a rewrite reordered cells")
    pieces: dict[int, str] = {}
    for k, index in enumerate(order):
        end = positions[k + 1] if k + 1 < len(order) else len(lines)
        pieces[index] = "".join(lines[positions[k] + 1 : end])
    head = "".join(lines[: positions[0]])
    if prologue:
        if PROLOGUE not in head:
            raise _SplitError("a rewrite changed the notebook's prologue")
        head = head.replace(PROLOGUE, "", 1)
    if head.strip():
        pieces[order[0]] = head + pieces[order[0]]
    return _restore(pieces, cells, magics, nonce)


def _restore(pieces: dict[int, str], cells: list[_Cell], magics: list[_Magic], nonce: str) -> dict[int, str]:
    pattern = re.compile(r'get_ipython\(\)\.run_line_magic\("ndif_opt_' + nonce + r'", "(\d+)"')
    by_cell = {c.index: c for c in cells}
    restored_count = 0
    out: dict[int, str] = {}
    for index, piece in pieces.items():
        lines = piece.splitlines(keepends=True)
        new: list[str] = []
        for line in lines:
            match = pattern.search(line)
            if match is None:
                new.append(line)
                continue
            magic = magics[int(match.group(1))]
            indent = line[: len(line) - len(line.lstrip())]
            if (
                line.strip() != magic.placeholder
                or indent != magic.indent
                or magic.cell != index
                or (magic.kind != "line" and any(l.strip() for l in new))
            ):
                raise _SplitError("a rewrite moved an IPython magic or shell line")
            restored = list(magic.lines)
            if not line.endswith("\n") and restored and restored[-1].endswith("\n"):
                restored[-1] = restored[-1][:-1]
            new.extend(restored)
            restored_count += 1
        text = "".join(new)
        if not by_cell[index].code.endswith("\n") and text.endswith("\n"):
            text = text[:-1]
        out[index] = text
    if restored_count != len(magics):
        raise _SplitError("a rewrite removed an IPython magic or shell line")
    return out


def _parses(code: str) -> bool:
    try:
        cst.parse_module(code)
    except cst.ParserSyntaxError:
        return False
    return True


def optimize_notebook(text: str, *, options: Options | None = None, filename: str | None = None) -> NotebookResult:
    """Optimize the code cells of a notebook (its JSON text) together.

    Raises ``ValueError`` for text that is not a notebook (the message says why) and
    ``SyntaxError`` (naming the cell) for a code cell that does not parse.
    """
    options = dataclasses.replace(options or Options(), notebook=True)
    name = filename or "<notebook>"
    bom = text.startswith("\ufeff")
    body = text[1:] if bom else text
    data, all_cells = _load(body)
    cells = [c for c in all_cells if c.kind == "code"]
    language = _language(data)
    if not cells or (language is not None and language not in ("python", "python3", "ipython")):
        findings = ()
        if cells:
            findings = (_notebook_finding(cells[0].index, f"not a Python notebook (kernel language {language!r})",
                                          "ndif-opt optimizes Python code only"),)
        return NotebookResult(text, text, Result(source="", code=""), findings=findings)
    run = _optimize_cells(cells, _nonce(body), options, filename)
    changed = [c for c in cells if run.pieces[c.index] != c.code]
    if not changed:
        return NotebookResult(text, text, run.result, (), run.findings, (), run.barriers)
    new_text = _splice(text if not bom else body, all_cells, {c.index: run.pieces[c.index] for c in changed})
    if bom:
        new_text = "\ufeff" + new_text
    diffs = tuple(_cell_diff(name, c, run.pieces[c.index]) for c in changed)
    return NotebookResult(text, new_text, run.result, diffs, run.findings, tuple(c.index for c in changed),
                          run.barriers)


def optimize_cells(sources: list[str] | tuple[str, ...], *, indices: list[int] | tuple[int, ...] | None = None,
                   options: Options | None = None, filename: str | None = None) -> CellsResult:
    """Optimize code cells together, in order, as :func:`optimize_notebook` optimizes a
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
    cells = [_Cell(index, "code", code, "str", None) for index, code in zip(indices, sources)]
    run = _optimize_cells(cells, _nonce("\n".join(sources)), options, filename)
    return CellsResult(sources, indices, tuple(run.pieces[i] for i in indices), run.result, run.findings,
                       run.barriers)


@dataclass
class _CellsRun:
    result: Result
    pieces: dict[int, str]  # each code cell's new code (its code when unchanged)
    findings: tuple[CellFinding, ...]
    barriers: tuple[int, ...]


def _optimize_cells(cells: list[_Cell], nonce: str, options: Options, filename: str | None,
                    is_magic=_is_magic) -> _CellsRun:
    """The code cells (in order) optimized as one module and cut back into cells; a
    rewrite that would merge cells is run again with a barrier at that boundary.
    ``is_magic``: which lines are IPython syntax (a `# %%` script's rule is narrower)."""
    from ndif_opt.engine.pipeline import run_pipeline

    name = filename or "<notebook>"
    magics: list[_Magic] = []
    line_maps: dict[int, list[int]] = {cell.index: [] for cell in cells}
    masked = {cell.index: _mask_cell(cell, nonce, magics, line_maps[cell.index], is_magic) for cell in cells}
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
    result = run_pipeline(joined.code, options, filename=filename)
    apart = _requests_kept_apart(cells, masked)
    notes = _barrier_notes(apart)
    if not result.changed:
        return _unchanged(cells, result, joined, notes, barriers=apart)
    try:
        pieces = _split(result.code, cells, nonce, magics, prologue)
        new_masked = {i: _mask_only(piece, i, cells, masked, magics, nonce) for i, piece in pieces.items()}
        failing = [i for i, code in new_masked.items() if not _parses(code)]
        if failing:
            raise _SplitError(f"a rewrite left cell {failing[0] + 1} unable to parse on its own")
        moved = statements_moved(masked, new_masked)
        if moved:  # (barriers keep sessions apart; this says so for every other rewrite too)
            raise _SplitError(f"a rewrite moved `{moved[0][2]}` from cell {moved[0][0] + 1} to cell {moved[0][1] + 1}")
    except _SplitError as error:
        notes.append(_notebook_finding(
            cells[0].index, f"the notebook was left unchanged: {error}",
            "optimize the exported script (`jupyter nbconvert --to script`) instead",
        ))
        return _unchanged(cells, result, joined, notes, refused=True)
    findings = tuple(notes) + tuple(_locate(result, joined))
    findings = tuple(sorted(findings, key=lambda f: (f.cell, f.finding.range.start, f.finding.pass_id)))
    return _CellsRun(result, {c.index: pieces[c.index] for c in cells}, findings, apart)


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


def _requests_kept_apart(cells: list[_Cell], masked: dict[int, str]) -> tuple[int, ...]:
    """The cells that send a remote request, as the cell before them does: requests one
    session could bundle, which ndif-opt keeps apart because it does not merge cells."""
    from ndif_opt.analysis.facts import Remote, analyze

    def sends(cell: _Cell) -> bool:
        facts = analyze(cst.parse_module(masked[cell.index]))
        return any(b.parent is None and b.remote.state is not Remote.NO for b in facts.blocks)

    sending = [sends(cell) for cell in cells]
    return tuple(cells[k].index for k in range(1, len(cells)) if sending[k] and sending[k - 1])


def _mask_only(piece: str, index: int, cells, masked, magics: list[_Magic], nonce: str) -> str:
    """A restored cell, masked again for the parse check (restored magics are not Python)."""
    cell = next(c for c in cells if c.index == index)
    return _mask_cell(_Cell(index, "code", piece, cell.form, None), nonce + "x", [])


def _barrier_notes(barriers) -> list[CellFinding]:
    return [
        _notebook_finding(
            index,
            "this cell and the one before it each send remote requests, which one session could bundle; "
            "the cells were optimized apart",
            "ndif-opt does not merge cells; merge them yourself to bundle their requests",
        )
        for index in sorted(barriers)
    ]


def _unchanged(cells: list[_Cell], result: Result, joined: _Joined, notes: list[CellFinding],
               refused: bool = False, barriers: set[int] = frozenset()) -> _CellsRun:
    if refused:
        result = _declined(result, "the rewrite could not be cut back into the notebook's cells")
    located = tuple(notes) + tuple(_locate(result, joined))
    located = tuple(sorted(located, key=lambda f: (f.cell, f.finding.range.start, f.finding.pass_id)))
    return _CellsRun(result, {c.index: c.code for c in cells}, located, tuple(sorted(barriers)))


def _declined(result: Result, reason: str) -> Result:
    """``result`` with its rewrite undone: the applied fixes become skipped ones that say why."""
    findings = tuple(f.declined(reason) if f.applied else f for f in result.findings)
    first = result.costs[0].before if result.costs else None
    costs = tuple(PassCost(pc.pass_id, first, first) for pc in result.costs) if first else ()
    return replace(result, code=result.source, findings=findings, costs=costs, edits=(), unreturned=(), introduced=())


def _notebook_finding(cell: int, message: str, reason: str, status: Status = Status.SKIPPED) -> CellFinding:
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
        located.append(CellFinding(cell, replace(noted, range=rng, uses=()), uses))
    return located


def _used_in(cells: list[int]) -> str:
    """" (used in cell 3)", " (used in cells 3 and 5)": 0-based indices, named 1-based."""
    if not cells:
        return ""
    names = [str(c + 1) for c in cells]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f" (used in cell{'s' if len(names) > 1 else ''} {listed})"


def _file_positions(text: str):
    """(cell index, Position in the cell's source) -> Position in the notebook's JSON text."""
    body_offset = 1 if text.startswith("\ufeff") else 0
    body = text[body_offset:]
    try:
        _, cells = _load(body)
    except ValueError:  # pragma: no cover - the text was loaded before
        return lambda cell, position: Position(0, 0)
    ascii_only = _ensure_ascii(body)
    decoder = json.JSONDecoder()
    pieces: dict[int, list[tuple[int, str]]] = {}  # cell -> [(JSON offset of a string, its value)]
    for cell in cells:
        if cell.span is None:
            continue
        start, end = cell.span
        if body[start] == '"':
            pieces[cell.index] = [(start, cell.code)]
            continue
        found, i = [], _skip(body, start + 1)
        while i < end and body[i] != "]":
            value, after = decoder.raw_decode(body, i)
            found.append((i, value))
            i = _skip(body, after)
            if body[i] == ",":
                i = _skip(body, i + 1)
        pieces[cell.index] = found
    line_starts = [0] + [m.end() for m in re.finditer("\n", body)]

    def to_position(offset: int) -> Position:
        import bisect

        line = bisect.bisect_right(line_starts, offset) - 1
        return Position(line, offset - line_starts[line] + (body_offset if line == 0 else 0))

    def locate(cell: int, position: Position) -> Position:
        strings = pieces.get(cell)
        if not strings:
            return Position(0, 0)
        code = "".join(value for _, value in strings)
        lines = code.splitlines(keepends=True) or [""]
        line = min(position.line, len(lines) - 1)
        offset = sum(len(l) for l in lines[:line]) + min(position.character, len(lines[line]))
        for number, (json_start, value) in enumerate(strings):
            if offset < len(value) or number == len(strings) - 1:
                escaped = json.dumps(value[: min(offset, len(value))], ensure_ascii=ascii_only)[1:-1]
                return to_position(json_start + 1 + len(escaped))
            offset -= len(value)
        return Position(0, 0)  # pragma: no cover

    return locate


# ---------------------------------------------------------------------------------------
# Writing the notebook
# ---------------------------------------------------------------------------------------


def _ensure_ascii(text: str) -> bool:
    if any(ord(ch) > 127 for ch in text):
        return False
    return re.search(r"\\u(?:00[89a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]|[1-9a-fA-F][0-9a-fA-F]{2})[0-9a-fA-F]", text) is not None


def _indent_unit(text: str) -> str | None:
    """The indentation step of the JSON text (nbformat writes 1 space), None if compact."""
    start = _skip(text, 0)
    i = start + 1
    newline = text.find("\n", i)
    key = _skip(text, i)
    if newline == -1 or newline > key:
        return None
    return text[newline + 1 : key]


def _splice(text: str, cells: list[_Cell], new: dict[int, str]) -> str:
    ascii_only = _ensure_ascii(text)
    unit = _indent_unit(text)
    edits = []
    for cell in cells:
        if cell.index not in new:
            continue
        code = new[cell.index]
        if cell.span is None:  # pragma: no cover - a code cell always has a source
            continue
        start, end = cell.span
        old = text[start:end]
        edits.append((start, end, _render_source(code, cell.form, old, text, cell.key_start, unit, ascii_only)))
    out = text
    for start, end, value in sorted(edits, reverse=True):
        out = out[:start] + value + out[end:]
    return out


def _render_source(code: str, form: str, old: str, text: str, key_start: int, unit: str | None, ascii_only: bool) -> str:
    dump = lambda s: json.dumps(s, ensure_ascii=ascii_only)  # noqa: E731
    if form == "str":
        return dump(code)
    lines = code.splitlines(keepends=True)
    if not lines:
        return "[]"
    multiline = "\n" in old or (old.strip() == "[]" and unit is not None)
    if not multiline:
        separator = ", " if ", " in old or old.strip() == "[]" else ","
        return "[" + separator.join(dump(line) for line in lines) + "]"
    if "\n" in old:
        first = old.index("\n") + 1
        element_indent = old[first : _skip_spaces(old, first)]
        close_indent = old[old.rindex("\n") + 1 : len(old) - 1]
    else:
        line_start = text.rfind("\n", 0, key_start) + 1
        key_indent = text[line_start:key_start]
        element_indent = key_indent + (unit or "")
        close_indent = key_indent
    return "[\n" + ",\n".join(element_indent + dump(line) for line in lines) + "\n" + close_indent + "]"


def _skip_spaces(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _cell_diff(name: str, cell: _Cell, new: str) -> str:
    lines = difflib.unified_diff(
        cell.code.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"{name}:cell {cell.index + 1} (original)",
        tofile=f"{name}:cell {cell.index + 1} (optimized)",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of cell\n")
    return "".join(out)


# ---------------------------------------------------------------------------------------
# IPython syntax in a .py script
# ---------------------------------------------------------------------------------------

# a line that may start with `!` or `%`: a cheap test before the lexical scan
_MAYBE_SCRIPT_MAGIC = re.compile(r"(?:^|[\r\n])[ \t]*[!%]")
# an operator that starts a continued line, not a magic: `% x`, `!= y`
_OPERATOR_START = re.compile(r"(?:%|!=?)[\s=]")
_CELL_MAGIC_LINE = re.compile(r"%%(\w+)")
# the line number ndif_opt.engine.pipeline writes in a SyntaxError's message
_MESSAGE_LINE = re.compile(r"\(line \d+(?=, column -?\d+\)$)")


def _is_script_magic(line: str) -> bool:
    """A magic or shell line of a script: ``!cmd``, ``%magic``, ``%%magic``. Narrower than a
    cell's: ``x = !ls`` and ``obj?`` stay syntax errors in a .py file (saying so)."""
    return line.lstrip()[:1] in ("!", "%")


@dataclass(frozen=True)
class _MaskedScript:
    source: str  # the script as given
    code: str  # the prologue, then the script with a placeholder line for each magic
    prologue: str  # PROLOGUE ending as the script's first line does
    origin: tuple[int, ...]  # for each line of ``code`` after the prologue, its line in ``source``
    nonce: str
    magics: tuple[_Magic, ...]

    def source_line(self, line: int) -> int:
        """A line of ``code`` -> its line in ``source`` (0-based; the prologue gets line 0)."""
        if line <= 0 or not self.origin:
            return 0
        return self.origin[min(line - 1, len(self.origin) - 1)]

    def located(self, finding: Finding) -> Finding:
        return finding.with_range(self._moved(finding.range), tuple(self._moved(use) for use in finding.uses))

    def _moved(self, rng: Range) -> Range:
        start = Position(self.source_line(rng.start.line), rng.start.character)
        end = Position(self.source_line(rng.end.line), rng.end.character)
        return Range(start, max(start, end))

    def restore(self, result: Result) -> Result:
        """``result`` (of ``code``) as the script's: magics back, findings on its lines."""
        from ndif_opt.engine.pipeline import text_edits

        try:
            code = self._unmasked(result.code) if result.changed else self.source
        except _SplitError as error:
            result, code = _declined(result, f"the script was left unchanged: {error}"), self.source
        findings = tuple(self.located(f) for f in result.findings)
        return replace(result, source=self.source, code=code, findings=findings,
                       edits=tuple(text_edits(self.source, code)))

    def _unmasked(self, code: str) -> str:
        lines = _python_lines(code)
        if self.prologue not in lines:
            raise _SplitError("a rewrite changed the line that imports get_ipython")
        lines.remove(self.prologue)  # the first: ours, or the script's own (the same text)
        script = _Cell(0, "code", self.source, "str", None)
        return _restore({0: "".join(lines)}, [script], list(self.magics), self.nonce)[0]


def _mask_script(text: str) -> _MaskedScript | None:
    """``text`` with its magic and shell lines masked by a notebook cell's rules (only
    where a statement starts); None when it has none."""
    if not _MAYBE_SCRIPT_MAGIC.search(text):
        return None
    # the same nonce on every edit, so that an editor's window cache keeps its windows
    nonce = "py" if "ndif_opt_py" not in text else _nonce(text)
    magics: list[_Magic] = []
    origin: list[int] = []
    masked = _mask_cell(_Cell(0, "code", text, "str", None), nonce, magics, origin, is_magic=_is_script_magic)
    if not magics:
        return None
    # the file's own newline: libcst takes the first one for the lines the passes write
    prologue = PROLOGUE[:-1] + _line_end(_python_lines(text)[0])
    return _MaskedScript(text, prologue + masked, prologue, tuple(origin), nonce, tuple(magics))


def _script_syntax_error(error: SyntaxError, text: str, masked: _MaskedScript | None) -> SyntaxError:
    """``error`` (of ``masked.code``, when given) on the script's own line, saying so when
    IPython syntax there is the cause."""
    line = masked.source_line(error.lineno - 1) + 1 if masked is not None and error.lineno else error.lineno
    hint = _magic_hint(_python_lines(text), line) if line else ""
    if line == error.lineno and not hint:
        return error
    message = _MESSAGE_LINE.sub(f"(line {line}", error.msg) + hint
    return SyntaxError(message, (error.filename, line, error.offset, None))


def _magic_hint(lines: list[str], line: int) -> str:
    """Why ``line`` (1-based) does not parse when IPython syntax is the cause, else ""."""
    if not 0 < line <= len(lines):
        return ""
    text = lines[line - 1]
    if _is_magic(text) and not _OPERATOR_START.match(text.strip()):
        shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:39] + "…"
        return (f"; line {line} is an IPython magic (`{shown}`): ndif-opt sets a magic aside only "
                "when it is a statement of its own that starts with ! or %")
    for number in range(line - 1, 0, -1):
        match = _CELL_MAGIC_LINE.match(lines[number - 1])
        if match is not None:
            if match.group(1) in PYTHON_CELL_MAGICS:
                return ""
            name = match.group(1)
            return f"; line {line} follows the cell magic `%%{name}` (line {number}), whose body is not Python"
    return ""


# a `# %%` cell marker (VS Code, PyCharm, Spyder, jupytext's percent format), at the start of a line
_SCRIPT_CELL_MARKER = re.compile(r"#\s*%%")


def script_cells(text: str) -> list[str] | None:
    """A `# %%` script's cells: each from its marker line to the next marker (the lines
    before the first marker are a cell of their own); None for a script without markers.
    Joined, the cells are the script."""
    cells: list[str] = []
    current: list[str] = []
    for line in _python_lines(text):
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
    from ndif_opt.engine.pipeline import text_edits

    code_cells = [_Cell(index, "code", code, "str", None) for index, code in enumerate(cells)]
    try:
        run = _optimize_cells(code_cells, _nonce(text), dataclasses.replace(options, notebook=True), filename,
                              is_magic=_is_script_magic)
    except SyntaxError:
        return None
    firsts = [0]
    for code in cells[:-1]:
        firsts.append(firsts[-1] + len(_python_lines(code)))

    def moved(cell: int, rng: Range) -> Range:
        return Range(Position(rng.start.line + firsts[cell], rng.start.character),
                     Position(rng.end.line + firsts[cell], rng.end.character))

    findings = tuple(
        item.finding.with_range(moved(item.cell, item.finding.range),
                                tuple(moved(cell, use) for cell, use in item.uses))
        for item in run.findings
    )
    code = "".join(run.pieces[index] for index in range(len(cells)))
    changed = code != text
    return replace(run.result, source=text, code=code, findings=findings, edits=tuple(text_edits(text, code)),
                   unreturned=run.result.unreturned if changed else (),
                   introduced=run.result.introduced if changed else ())


def optimize_script(text: str, options: Options, *, filename: str | None = None,
                    cache: "WindowCache | None" = None, prefiltered: bool = False) -> Result:
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
            return result
    masked = _mask_script(text)
    try:
        result = run_pipeline(text if masked is None else masked.code, options, filename, cache,
                              prefiltered=prefiltered)
    except SyntaxError as error:
        raise _script_syntax_error(error, text, masked) from None
    return result if masked is None else masked.restore(result)


def check_script_syntax(text: str, filename: str | None = None) -> None:
    """SyntaxError (with line and column) when ``text`` is not Python once its IPython
    lines are masked as :func:`optimize_script` masks them."""
    from ndif_opt.engine.pipeline import check_syntax

    masked = _mask_script(text)
    try:
        check_syntax(text if masked is None else masked.code, filename)
    except SyntaxError as error:
        raise _script_syntax_error(error, text, masked) from None


# ---------------------------------------------------------------------------------------
# The notebook as a script
# ---------------------------------------------------------------------------------------


def notebook_script(text: str) -> str:
    """The code cells joined into one script, IPython syntax dropped.

    A magic or shell line becomes ``pass`` at its indentation (so blocks stay valid); a
    cell whose magic does not run Python is left out; a Python-body cell magic's first
    line (``%%time``) is dropped. Raises ``ValueError`` for text that is not a notebook.
    """
    body = text[1:] if text.startswith("\ufeff") else text
    _, cells = _load(body)
    parts = []
    for cell in cells:
        if cell.kind != "code":
            continue
        magics: list[_Magic] = []
        parts.append(_with_magics_run(_mask_cell(cell, "script", magics), magics, "script"))
    return "".join(parts)


def script_without_magics(text: str) -> str:
    """A .py script with its IPython lines dropped as :func:`notebook_script` drops a
    cell's (a line magic becomes ``pass``): what `verify` can run."""
    masked = _mask_script(text)
    if masked is None:
        return text
    return _with_magics_run(masked.code[len(masked.prologue):], list(masked.magics), masked.nonce)


def _with_magics_run(masked: str, magics: list[_Magic], nonce: str) -> str:
    """Masked code with each placeholder replaced by what its magic does that Python can
    see (:func:`_line_magic_as_python`; a cell magic's first line goes), ending in a newline."""
    marker = f'get_ipython().run_line_magic("ndif_opt_{nonce}", "'
    out = []
    for line in masked.splitlines(keepends=True):
        if marker in line:
            magic = magics[int(line.split(marker, 1)[1].split('"', 1)[0])]
            if magic.kind == "line":
                out.append(magic.indent + _line_magic_as_python(magic) + "\n")
            continue
        out.append(line)
    code = "".join(out)
    return code if not code or code.endswith("\n") else code + "\n"


# line magics whose argument is a Python statement run in the user's namespace (%timeit runs
# it in a function of its own: its names do not persist)
_PYTHON_LINE_MAGIC = re.compile(r"^%(?:time|prun)\b(?:\s+-\S+(?:\s+\d+)?)*\s+(?P<code>\S.*)$")


def _line_magic_as_python(magic: _Magic) -> str:
    """What a line magic does to the namespace, as Python: `%time x = f()` runs `x = f()`;
    any other (a shell line, `%pip`) does nothing the script can see: `pass`."""
    text = "".join(magic.lines).strip()
    found = _PYTHON_LINE_MAGIC.match(text) if len(magic.lines) == 1 else None
    if found is not None:
        try:
            compile(found.group("code"), "<magic>", "exec")
        except SyntaxError:
            return "pass"
        return found.group("code")
    return "pass"


def verify_notebook(source: str, result, **kwargs):
    """:func:`ndif_opt.verify.verify_sources` on a notebook and its optimized form (a
    :class:`NotebookResult` or :meth:`NotebookResult.as_result`): the code cells joined,
    IPython syntax dropped, names handled as :func:`ndif_opt.verify.verify_result` does."""
    from ndif_opt.verify import verify_sources

    notebook = result if isinstance(result, NotebookResult) else result.notebook
    kwargs.setdefault("filename", "notebook.py")
    if kwargs["filename"].endswith(".ipynb"):
        kwargs["filename"] = kwargs["filename"][: -len(".ipynb")] + ".py"
    return verify_sources(
        notebook_script(source),
        notebook_script(notebook.text),
        ignore_missing=kwargs.pop("ignore_missing", notebook.result.unreturned),
        ignore=tuple(kwargs.pop("ignore", ())) + tuple(notebook.result.introduced),
        **kwargs,
    )


def is_notebook(path: str) -> bool:
    return path.endswith(".ipynb")


__all__ = [
    "CellFinding",
    "CellsResult",
    "NotebookFileResult",
    "NotebookResult",
    "NOTEBOOK_ID",
    "check_script_syntax",
    "is_notebook",
    "notebook_script",
    "optimize_cells",
    "optimize_notebook",
    "optimize_script",
    "script_without_magics",
    "verify_notebook",
]
