"""Jupyter notebooks (`.ipynb`) in, notebooks out.

A notebook's code cells are optimized together, in order, as one module, and cut back
into the same cells (:mod:`ndif_opt.engine.cells`), their IPython syntax masked before the
analysis and restored verbatim afterwards (:mod:`ndif_opt.engine.ipython_lines`). This
module reads and writes the notebook's JSON text around that.

Output: unchanged cells keep their JSON text byte for byte (source, metadata,
outputs, key order, indentation, escapes); the file's trailing newline is kept.
A changed cell gets its new ``source`` in the same form (a list of lines or one
string) and keeps its metadata and outputs — they are stale until the cell is re-run,
which replaces them.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass, field, replace

from ndif_opt.engine.cells import Cell, CellFinding, notebook_finding, run_cells
from ndif_opt.engine.ipython_lines import Magic, mask_magics, nonce_for, with_magics_run
from ndif_opt.options import Options
from ndif_opt.types import Position, Range, Result


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
        from ndif_opt.engine.line_diff import text_edits

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
# Optimizing
# ---------------------------------------------------------------------------------------


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
            findings = (notebook_finding(cells[0].index, f"not a Python notebook (kernel language {language!r})",
                                         "ndif-opt optimizes Python code only"),)
        return NotebookResult(text, text, Result(source="", code=""), findings=findings)
    run = run_cells([Cell(c.index, c.code) for c in cells], nonce_for(body), options, filename)
    changed = [c for c in cells if run.pieces[c.index] != c.code]
    if not changed:
        return NotebookResult(text, text, run.result, (), run.findings, (), run.barriers)
    new_text = _splice(text if not bom else body, all_cells, {c.index: run.pieces[c.index] for c in changed})
    if bom:
        new_text = "\ufeff" + new_text
    diffs = tuple(_cell_diff(name, c, run.pieces[c.index]) for c in changed)
    return NotebookResult(text, new_text, run.result, diffs, run.findings, tuple(c.index for c in changed),
                          run.barriers)


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
        magics: list[Magic] = []
        parts.append(with_magics_run(mask_magics(cell.code, cell.index, "script", magics), magics, "script"))
    return "".join(parts)


def verify_notebook(source: str, result, **kwargs):
    """:func:`ndif_opt.verify.verify_sources` on a notebook and its optimized form (a
    :class:`NotebookResult` or :meth:`NotebookResult.as_result`): the code cells joined,
    IPython syntax dropped, names handled as :func:`ndif_opt.verify.verify_result` does."""
    from ndif_opt.verify import verify_result

    notebook = result if isinstance(result, NotebookResult) else result.notebook
    kwargs.setdefault("filename", "notebook.py")
    if kwargs["filename"].endswith(".ipynb"):
        kwargs["filename"] = kwargs["filename"][: -len(".ipynb")] + ".py"
    kwargs.setdefault("ignore_missing", notebook.result.unreturned)
    kwargs.setdefault("notebook", True)  # (the cells run as a kernel runs them: `display` is there)
    # as a script's: a pre-0.5 original runs on nnsight 0.4 (``original_nnsight``), and a
    # migration --migrate could not make is NOT MIGRATED
    joined = dataclasses.replace(notebook.result, code=notebook_script(notebook.text))
    return verify_result(notebook_script(source), joined, **kwargs)


def is_notebook(path: str) -> bool:
    return path.endswith(".ipynb")


__all__ = [
    "NotebookFileResult",
    "NotebookResult",
    "is_notebook",
    "notebook_script",
    "optimize_notebook",
    "verify_notebook",
]
