"""IPython syntax masked for the analysis and put back verbatim afterwards.

Line magics (``%pip install``), shell lines (``!pip install``), ``x = !ls``, help lines
(``model?``), cell magics (``%%time``) — in a notebook's cells (:mod:`ndif_opt.engine.cells`)
or in a ``.py`` script (a notebook exported or pasted) — are each replaced by a placeholder
call ``get_ipython().run_line_magic("ndif_opt_<nonce>", "<n>", <names it mentions>)`` on the
same line at the same indentation. With ``from IPython import get_ipython`` in front of the
module (:data:`PROLOGUE`), the passes see each magic as client code that may read the names
it mentions, so none moves it to the server or drops a value it uses. A cell whose magic
does not run Python (``%%bash``, ``%%writefile``...) is masked whole. ``get_ipython()``
calls in your own code are plain Python.

A script is masked by a narrower rule (:func:`is_script_magic`: lines that start with ``!``
or ``%`` where a statement starts); its findings keep the script's own line numbers, and a
``SyntaxError`` for a magic that cannot be masked says so (:func:`script_syntax_error`).
A rewrite that moved or removed a magic cannot be put back (:class:`SplitError`): the
rewrite is then declined (:func:`declined`).
"""

from __future__ import annotations

import hashlib
import keyword
import re
from dataclasses import dataclass, replace

from ndif_opt.types import Finding, PassCost, Position, Range, Result

PROLOGUE = "from IPython import get_ipython\n"
# cell magics whose body is Python that runs in the user's namespace
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_HELP = re.compile(r"^\s*[\w.\[\]()'\"]+\s*\?{1,2}\s*$")
_ASSIGN_MAGIC = re.compile(r"^\s*[A-Za-z_][\w.]*(\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[%!]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass
class Magic:
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


def is_cell_magic(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    if stripped[0] in "%!?":
        return True
    return bool(_HELP.match(stripped) or _ASSIGN_MAGIC.match(stripped))


def mask_magics(code: str, cell: int, nonce: str, magics: list[Magic], line_map: list[int] | None = None,
                is_magic=is_cell_magic) -> str:
    """The code of cell ``cell`` (its index) with IPython syntax replaced by placeholder
    lines, each magic appended to ``magics``. ``line_map``, when given, receives for each
    line of the result the line of the cell it comes from; ``is_magic`` tells a magic line
    (checked only where a statement starts)."""
    lines = python_lines(code)
    out: list[str] = []
    origin: list[int] = [] if line_map is None else line_map
    first = 0
    if lines and lines[0].startswith("%%"):
        name = lines[0][2:].split(None, 1)[0] if lines[0][2:].strip() else ""
        if name not in PYTHON_CELL_MAGICS:
            number = len(magics)
            placeholder = _placeholder(nonce, number, "")
            magics.append(Magic(number, cell, lines, placeholder, "", "opaque"))
            origin.append(0)
            return placeholder + line_end(lines[-1])
        number = len(magics)
        placeholder = _placeholder(nonce, number, lines[0][2:])
        magics.append(Magic(number, cell, [lines[0]], placeholder, "", "cell"))
        out.append(placeholder + line_end(lines[0]))
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
            magics.append(Magic(number, cell, group, placeholder, indent, "line"))
            out.append(indent + placeholder + line_end(group[-1]))
            origin.append(first + i - len(group) + 1)
            i += 1
            continue
        string, depth, continued = _advance(line, string, depth)
        out.append(line)
        origin.append(first + i)
        i += 1
    return "".join(out)


def python_lines(text: str) -> list[str]:
    """The lines of ``text`` with their endings, as Python counts them: CR LF, CR or LF
    ends a line; a form feed (or another break ``str.splitlines`` knows) does not."""
    return _LINE.findall(text)


def line_end(line: str) -> str:
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


def nonce_for(text: str) -> str:
    """A short string ``text`` does not hold: the placeholders and cell markers carry it."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    for offset in range(len(digest) - 10):
        candidate = digest[offset : offset + 10]
        if candidate not in text:
            return candidate
    return digest  # pragma: no cover


class SplitError(Exception):
    """The rewrite cannot be cut back into the cells (or the script) it was run on."""


def restore_magics(pieces: dict[int, str], codes: dict[int, str], magics: list[Magic], nonce: str) -> dict[int, str]:
    """Each cell's piece of the optimized code (cell index -> code) with its magics put back
    verbatim; ``codes``: each cell's code as given. :class:`SplitError` when a rewrite
    moved or removed a magic."""
    pattern = re.compile(r'get_ipython\(\)\.run_line_magic\("ndif_opt_' + nonce + r'", "(\d+)"')
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
                raise SplitError("a rewrite moved an IPython magic or shell line")
            restored = list(magic.lines)
            if not line.endswith("\n") and restored and restored[-1].endswith("\n"):
                restored[-1] = restored[-1][:-1]
            new.extend(restored)
            restored_count += 1
        text = "".join(new)
        if not codes[index].endswith("\n") and text.endswith("\n"):
            text = text[:-1]
        out[index] = text
    if restored_count != len(magics):
        raise SplitError("a rewrite removed an IPython magic or shell line")
    return out


def declined(result: Result, reason: str) -> Result:
    """``result`` with its rewrite undone: the applied fixes become skipped ones that say why."""
    findings = tuple(f.declined(reason) if f.applied else f for f in result.findings)
    first = result.costs[0].before if result.costs else None
    costs = tuple(PassCost(pc.pass_id, first, first) for pc in result.costs) if first else ()
    return replace(result, code=result.source, findings=findings, costs=costs, edits=(), unreturned=(), introduced=())


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


def is_script_magic(line: str) -> bool:
    """A magic or shell line of a script: ``!cmd``, ``%magic``, ``%%magic``. Narrower than a
    cell's: ``x = !ls`` and ``obj?`` stay syntax errors in a .py file (saying so)."""
    return line.lstrip()[:1] in ("!", "%")


@dataclass(frozen=True)
class MaskedScript:
    source: str  # the script as given
    code: str  # the prologue, then the script with a placeholder line for each magic
    prologue: str  # PROLOGUE ending as the script's first line does
    origin: tuple[int, ...]  # for each line of ``code`` after the prologue, its line in ``source``
    nonce: str
    magics: tuple[Magic, ...]

    def source_line(self, line: int) -> int:
        """A line of ``code`` -> its line in ``source`` (0-based; the prologue gets line 0)."""
        if line <= 0 or not self.origin:
            return 0
        return self.origin[min(line - 1, len(self.origin) - 1)]

    def located(self, finding: Finding) -> Finding:
        return finding.with_range(self._moved(finding.range), tuple(self._moved(use) for use in finding.uses),
                                  tuple(self._moved(span) for span in finding.touched))

    def _moved(self, rng: Range) -> Range:
        start = Position(self.source_line(rng.start.line), rng.start.character)
        end = Position(self.source_line(rng.end.line), rng.end.character)
        return Range(start, max(start, end))

    def restore(self, result: Result) -> Result:
        """``result`` (of ``code``) as the script's: magics back, findings on its lines."""
        from ndif_opt.engine.line_diff import text_edits

        try:
            code = self._unmasked(result.code) if result.changed else self.source
        except SplitError as error:
            result, code = declined(result, f"the script was left unchanged: {error}"), self.source
        findings = tuple(self.located(f) for f in result.findings)
        return replace(result, source=self.source, code=code, findings=findings,
                       edits=tuple(text_edits(self.source, code)))

    def _unmasked(self, code: str) -> str:
        lines = python_lines(code)
        if self.prologue not in lines:
            raise SplitError("a rewrite changed the line that imports get_ipython")
        lines.remove(self.prologue)  # the first: ours, or the script's own (the same text)
        return restore_magics({0: "".join(lines)}, {0: self.source}, list(self.magics), self.nonce)[0]


def mask_script(text: str) -> MaskedScript | None:
    """``text`` with its magic and shell lines masked by a notebook cell's rules (only
    where a statement starts); None when it has none."""
    if not _MAYBE_SCRIPT_MAGIC.search(text):
        return None
    # the same nonce on every edit, so that an editor's window cache keeps its windows
    nonce = "py" if "ndif_opt_py" not in text else nonce_for(text)
    magics: list[Magic] = []
    origin: list[int] = []
    masked = mask_magics(text, 0, nonce, magics, origin, is_magic=is_script_magic)
    if not magics:
        return None
    # the file's own newline: libcst takes the first one for the lines the passes write
    prologue = PROLOGUE[:-1] + line_end(python_lines(text)[0])
    return MaskedScript(text, prologue + masked, prologue, tuple(origin), nonce, tuple(magics))


def script_syntax_error(error: SyntaxError, text: str, masked: MaskedScript | None) -> SyntaxError:
    """``error`` (of ``masked.code``, when given) on the script's own line, saying so when
    IPython syntax there is the cause."""
    line = masked.source_line(error.lineno - 1) + 1 if masked is not None and error.lineno else error.lineno
    hint = _magic_hint(python_lines(text), line) if line else ""
    if line == error.lineno and not hint:
        return error
    message = _MESSAGE_LINE.sub(f"(line {line}", error.msg) + hint
    return SyntaxError(message, (error.filename, line, error.offset, None))


def _magic_hint(lines: list[str], line: int) -> str:
    """Why ``line`` (1-based) does not parse when IPython syntax is the cause, else ""."""
    if not 0 < line <= len(lines):
        return ""
    text = lines[line - 1]
    if is_cell_magic(text) and not _OPERATOR_START.match(text.strip()):
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


def script_without_magics(text: str) -> str:
    """A .py script with its IPython lines dropped as
    :func:`ndif_opt.frontends.notebook.notebook_script` drops a cell's (a line magic becomes
    ``pass``): what `verify` can run."""
    masked = mask_script(text)
    if masked is None:
        return text
    return with_magics_run(masked.code[len(masked.prologue):], list(masked.magics), masked.nonce)


def with_magics_run(masked: str, magics: list[Magic], nonce: str) -> str:
    """Masked code with each placeholder replaced by what its magic does that Python can
    see (:func:`_line_magic_as_python`; a cell magic's first line goes), ending in a newline."""
    marker = f'get_ipython().run_line_magic("ndif_opt_{nonce}", "'
    out = []
    ending = ""
    for line in masked.splitlines(keepends=True):
        if marker in line:
            magic = magics[int(line.split(marker, 1)[1].split('"', 1)[0])]
            if magic.kind == "line":
                out.append(magic.indent + _line_magic_as_python(magic) + "\n")
            elif magic.kind == "cell" and _captured_as(magic) is not None:
                start, ending = _capture_as_python(_captured_as(magic))
                out.append(start)
            continue
        out.append(line)
    code = "".join(out)
    code = code if not code or code.endswith("\n") else code + "\n"
    return code + ending


_CAPTURE = re.compile(r"^%%capture\b(?P<arguments>.*)$")


def _captured_as(magic: Magic) -> str | None:
    """The name a ``%%capture`` cell binds (``%%capture cap``; ``""`` when it names none), or
    None for any other cell magic."""
    found = _CAPTURE.match("".join(magic.lines).strip())
    if found is None:
        return None
    names = [word for word in found.group("arguments").split() if not word.startswith("-")]
    return names[0] if names and names[0].isidentifier() else ""


def _capture_as_python(name: str) -> tuple[str, str]:
    """The lines that start and end a ``%%capture`` cell as plain Python: the cell's output
    goes to a buffer, and the name it gives holds it (``cap.stdout``, ``cap.show()``), as
    IPython's ``CapturedIO`` does. Without them the cell's prints reach the run's stdout and a
    later ``print(cap.stdout)`` fails. One line each, so the cell's own lines stay as written."""
    target = name or "_ndif_capture"
    start = (
        f'{target} = __import__("types").SimpleNamespace(stdout="", stderr="", outputs=[], '
        f'_ndif_streams=(__import__("sys").stdout, __import__("sys").stderr)); '
        f'__import__("sys").stdout, __import__("sys").stderr = __import__("io").StringIO(), '
        f'__import__("io").StringIO()\n'
    )
    end = (
        f'{target}.stdout, {target}.stderr = __import__("sys").stdout.getvalue(), '
        f'__import__("sys").stderr.getvalue(); '
        f'__import__("sys").stdout, __import__("sys").stderr = {target}._ndif_streams; '
        f'{target}.show = lambda: print({target}.stdout, end="")\n'
    )
    return start, end


# line magics whose argument is a Python statement run in the user's namespace (%timeit runs
# it in a function of its own: its names do not persist)
_PYTHON_LINE_MAGIC = re.compile(r"^%(?:time|prun)\b(?:\s+-\S+(?:\s+\d+)?)*\s+(?P<code>\S.*)$")


def _line_magic_as_python(magic: Magic) -> str:
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
