"""A Language Server for ndif-opt (``ndif-opt lsp`` or ``python -m ndif_opt.frontends.lsp``).

Speaks LSP over stdio with pygls. For each open Python document it runs
:func:`ndif_opt.optimize` shortly after the text stops changing (debounced) and
publishes one diagnostic per finding:

* Information — a fix ndif-opt would apply (``ndif-opt FILE`` rewrites this);
* Warning — a fix that was not applied, with the reason;
* Hint — an unsafe fix, applied only with ``unsafe-fixes``.

Suppressed findings are not shown. Code actions offer, for each diagnostic of an
applicable fix, the quick fix "ndif-opt: <pass-id>": the edits the pipeline made for that
finding (``Finding.fix``), with those of the findings it needs, which the title names too
("ndif-opt: session-hoisting + reduction-pushdown"; a notebook's cells: that pass run
alone); and the source action "Optimize this file (ndif-opt)" (every pass). Hovering a line that a finding
covers shows the file's per-pass cost estimate. Options come from the
``[tool.ndif-opt]`` table of the nearest ``pyproject.toml`` (see :mod:`ndif_opt.frontends.config`).
Notebooks (LSP 3.17 ``notebookDocument/*``, advertised for the Python cells of any
notebook): the code cells of an open notebook are analysed together, in order, as
``ndif-opt nb.ipynb`` does (:func:`ndif_opt.engine.cells.optimize_cells`), with the
notebook's configuration; each cell gets the diagnostics of the findings in it (a finding
whose client code is in a later cell names that cell, and points there as related
information), and quick fixes edit the cells they touch, never merging cells. A cell opened
as a plain document (``vscode-notebook-cell:`` URI, a client without notebook sync) is
analysed alone, with the notebook's configuration and ``Options.notebook``: the kernel
keeps the values its cells save.

Positions: ndif-opt counts columns in code points; the server converts to the
position encoding it negotiated with the client (UTF-16 unless the client offers
another), and splits lines as LSP does (``\\n``, ``\\r\\n``, ``\\r``).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import concurrent.futures
import dataclasses
import logging
import os
import re
import sys
from dataclasses import dataclass
from urllib.parse import unquote

from lsprotocol import types
from pygls.uris import to_fs_path, uri_scheme

try:  # pygls >= 2
    from pygls.lsp.server import LanguageServer

    PYGLS_2 = True
except ImportError:  # pygls 1.x
    from pygls.server import LanguageServer  # type: ignore[no-redef]

    PYGLS_2 = False

from ndif_opt.engine.cells import CellFinding, CellsResult
from ndif_opt.engine.finding_edits import fix_groups
from ndif_opt.engine.runtime import collect_garbage_rarely
from ndif_opt.frontends.config import ConfigError, load_options
from ndif_opt.options import Options
from ndif_opt.types import Edit, Finding, Result, Status

log = logging.getLogger("ndif_opt.frontends.lsp")

DEBOUNCE = 0.3  # seconds of quiet before a document is analysed
SOURCE = "ndif-opt"
SOURCE_ACTION_KIND = "source.ndif-opt"
SOURCE_ACTION_TITLE = "Optimize this file (ndif-opt)"
NOTEBOOK_SOURCE_ACTION_TITLE = "Optimize this notebook (ndif-opt)"
# the cells of an open notebook the server asks for (notebookDocument/* notifications)
NOTEBOOK_CELL_LANGUAGES = ("python",)
# URIs an editor gives the cells of an open notebook (VS Code's), each cell a document
NOTEBOOK_CELL_SCHEMES = ("vscode-notebook-cell",)

SEVERITY = {
    Status.APPLIED: types.DiagnosticSeverity.Information,
    Status.SKIPPED: types.DiagnosticSeverity.Warning,
    Status.UNSAFE_NOT_APPLIED: types.DiagnosticSeverity.Hint,
}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ndif-opt")
    except Exception:
        return "0"


# --------------------------------------------------------------------------- positions


class TextIndex:
    """Converts between ndif-opt positions (line, code point) or offsets and LSP
    positions in the negotiated encoding, with LSP's line breaks."""

    _BREAK = re.compile(r"\r\n|\n|\r")

    def __init__(self, text: str, encoding: str | None = types.PositionEncodingKind.Utf16):
        self.text = text
        self.encoding = encoding or types.PositionEncodingKind.Utf16
        self.starts = [0] + [m.end() for m in self._BREAK.finditer(text)]
        # Offsets of the lines as str.splitlines() counts them (Result.edits use these).
        self._py_starts: list[int] | None = None

    def line_text(self, line: int) -> str:
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def units(self, chars: str) -> int:
        if self.encoding == types.PositionEncodingKind.Utf8:
            return len(chars.encode("utf-8", "surrogatepass"))
        if self.encoding == types.PositionEncodingKind.Utf32:
            return len(chars)
        return len(chars) + sum(1 for c in chars if ord(c) > 0xFFFF)

    def end(self) -> types.Position:
        last = len(self.starts) - 1
        return types.Position(line=last, character=self.units(self.line_text(last)))

    def position(self, line: int, character: int) -> types.Position:
        """LSP position of (0-based line, code-point column), clamped into the text."""
        if line < 0:
            return types.Position(line=0, character=0)
        if line >= len(self.starts):
            return self.end()
        text = self.line_text(line)
        return types.Position(line=line, character=self.units(text[: max(0, character)]))

    def range(self, start_line: int, start_char: int, end_line: int, end_char: int) -> types.Range:
        return types.Range(
            start=self.position(start_line, start_char), end=self.position(end_line, end_char)
        )

    def at_offset(self, offset: int) -> types.Position:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        column = min(offset - self.starts[line], len(self.line_text(line)))
        return self.position(line, column)

    def py_offset(self, line: int, character: int) -> int:
        """Offset of a position whose lines are those of ``str.splitlines``."""
        if self._py_starts is None:
            starts = [0]
            for piece in self.text.splitlines(keepends=True):
                starts.append(starts[-1] + len(piece))
            self._py_starts = starts
        starts = self._py_starts
        if line >= len(starts) - 1:
            return len(self.text)
        return min(starts[line] + character, starts[line + 1])

    def text_edit(self, edit: Edit) -> types.TextEdit:
        """An LSP TextEdit for one of ``Result.edits`` (lines as str.splitlines counts)."""
        start = self.py_offset(edit.range.start.line, edit.range.start.character)
        end = self.py_offset(edit.range.end.line, edit.range.end.character)
        return types.TextEdit(
            range=types.Range(start=self.at_offset(start), end=self.at_offset(end)),
            new_text=edit.new_text,
        )

    def client_line(self, position: types.Position) -> int:
        return max(0, min(position.line, len(self.starts) - 1))


# --------------------------------------------------------------------------- analysis


@dataclass
class Analysis:
    """One run of optimize on one version of a document."""

    text: str
    version: int | None
    options: Options
    path: str | None
    result: Result | None  # None: the text does not parse (or analysis failed)
    error: str | None = None


def analyze(text: str, options: Options, path: str | None, cache=None) -> tuple[Result | None, str | None]:
    """optimize(), never raising: (result, None) or (None, why). ``cache``: the
    document's :class:`~ndif_opt.engine.pipeline.WindowCache`, so an edit re-runs only its window."""
    from ndif_opt.api import optimize

    return guarded(lambda: optimize(text, filename=path, options=options, cache=cache), path)


def guarded(run, path: str | None):
    """``run()``, never raising: (its result, None) or (None, why)."""
    try:
        return run(), None
    except SyntaxError as error:
        return None, f"cannot parse: {error.msg}"
    except RecursionError:
        return None, "too deeply nested to analyse"
    except Exception as error:  # a bug in a pass must not take the editor down
        log.exception("ndif-opt failed on %s", path)
        return None, f"internal error: {type(error).__name__}: {error}"


def diagnostic_message(finding: Finding) -> str:
    """A finding's words on the file as it is (its fix is not applied until a code action
    applies it): an applied fix's message is a proposal."""
    return finding.worded(written=False) + (f" — {finding.reason}" if finding.reason else "")


def diagnostics_for(analysis: Analysis, index: TextIndex) -> list[types.Diagnostic]:
    if analysis.result is None:
        return []
    out = [d for d in (finding_diagnostic(f, index) for f in analysis.result.findings) if d is not None]
    out.extend(_suppression_diagnostics(analysis.text, index))
    return out


def finding_diagnostic(finding: Finding, index: TextIndex,
                       related: list[types.DiagnosticRelatedInformation] | None = None) -> types.Diagnostic | None:
    """The diagnostic of a finding (None for a suppressed one)."""
    severity = SEVERITY.get(finding.status)
    if severity is None:  # suppressed
        return None
    r = finding.range
    return types.Diagnostic(
        range=index.range(r.start.line, r.start.character, r.end.line, r.end.character),
        severity=severity,
        code=finding.pass_id,
        source=SOURCE,
        message=diagnostic_message(finding),
        data={"pass_id": finding.pass_id, "status": finding.status.value},
        related_information=related or None,
    )


def _suppression_diagnostics(text: str, index: TextIndex) -> list[types.Diagnostic]:
    """Warnings for suppression comments naming unknown passes or not understood."""
    if "ndif-opt" not in text:
        return []
    from ndif_opt.engine.suppression import Suppressions

    try:
        sup = Suppressions.from_source(text)
    except Exception:
        return []
    problems = [(line, f"unknown pass id {pid!r} in suppression comment") for line, pid in sup.unknown_ids]
    problems += list(sup.problems)
    out = []
    for line, message in problems:
        length = len(index.line_text(line)) if line < len(index.starts) else 0
        out.append(
            types.Diagnostic(
                range=index.range(line, 0, line, length),
                severity=types.DiagnosticSeverity.Warning,
                code="suppression",
                source=SOURCE,
                message=message,
            )
        )
    return out


@dataclass
class NotebookAnalysis:
    """One run of optimize_cells on one version of an open notebook's code cells."""

    uris: tuple[str, ...]  # the code cells' URIs, in the notebook's order
    indices: tuple[int, ...]  # each one's index in the notebook
    texts: tuple[str, ...]
    options: Options
    path: str | None
    result: CellsResult | None  # None: a cell does not parse (or analysis failed)
    error: str | None = None

    def position(self, uri: str) -> int | None:
        """The cell's position among the analysed cells, None when it is not one."""
        return self.uris.index(uri) if uri in self.uris else None

    def findings_in(self, position: int) -> list[CellFinding]:
        if self.result is None:
            return []
        index = self.indices[position]
        return [item for item in self.result.findings if item.cell == index]

    def uri_of(self, cell: int) -> str | None:
        return self.uris[self.indices.index(cell)] if cell in self.indices else None


def analyze_cells(texts: tuple[str, ...], indices: tuple[int, ...], options: Options,
                  path: str | None) -> tuple[CellsResult | None, str | None]:
    """optimize_cells(), never raising: (result, None) or (None, why)."""
    from ndif_opt.engine.cells import optimize_cells

    return guarded(lambda: optimize_cells(texts, indices=indices, options=options, filename=path), path)


def cell_diagnostics(analysis: NotebookAnalysis, position: int, index: TextIndex,
                     indexes: dict[str, TextIndex]) -> list[types.Diagnostic]:
    """The diagnostics of one cell; ``indexes``: the TextIndex of each cell's URI, for the
    related information of a finding whose client code is in another cell."""
    out = []
    for item in analysis.findings_in(position):
        related = []
        for cell, use in item.uses:
            uri = analysis.uri_of(cell)
            if uri is None or uri not in indexes:
                continue
            related.append(types.DiagnosticRelatedInformation(
                location=types.Location(uri=uri, range=indexes[uri].range(
                    use.start.line, use.start.character, use.end.line, use.end.character)),
                message=f"`{item.finding.pass_id}`: used here",
            ))
        diagnostic = finding_diagnostic(item.finding, index, related)
        if diagnostic is not None:
            out.append(diagnostic)
    out.extend(_suppression_diagnostics(analysis.texts[position], index))
    return out


def cell_edits(before: tuple[str, ...], after: tuple[str, ...]) -> list[tuple[int, list[Edit]]]:
    """(position, edits of that cell) for each cell whose code ``after`` changes: each cell's
    own text."""
    from ndif_opt.engine.line_diff import text_edits

    return [
        (position, list(text_edits(old, new)))
        for position, (old, new) in enumerate(zip(before, after))
        if old != new
    ]


# --------------------------------------------------------------------------- server


def _notebook_path(uri: str) -> str | None:
    """The notebook file of a cell's URI (``vscode-notebook-cell:/dir/nb.ipynb#cell``), for
    its configuration."""
    scheme, _, rest = uri.partition(":")
    if scheme not in NOTEBOOK_CELL_SCHEMES or not rest.split("#")[0]:
        return None
    return to_fs_path("file:" + rest.split("#")[0])


class NdifOptServer(LanguageServer):
    def __init__(self, debounce: float = DEBOUNCE):
        notebooks = {}
        if PYGLS_2:
            notebooks["notebook_document_sync"] = types.NotebookDocumentSyncOptions(
                notebook_selector=[
                    types.NotebookDocumentFilterWithCells(
                        notebook="*",
                        cells=[types.NotebookCellLanguage(language=lang) for lang in NOTEBOOK_CELL_LANGUAGES],
                    )
                ],
                save=True,
            )
        super().__init__(
            "ndif-opt",
            _version(),
            text_document_sync_kind=types.TextDocumentSyncKind.Full,
            **notebooks,
        )
        self.debounce = debounce
        self.pending: dict[str, asyncio.Task] = {}  # document or notebook URI -> its lint
        self.analyses: dict[str, Analysis] = {}
        self.notebook_analyses: dict[str, NotebookAnalysis] = {}  # notebook URI ->
        self.published_cells: dict[str, set[str]] = {}  # notebook URI -> cells given diagnostics
        self.window_caches: dict[str, object] = {}  # uri -> WindowCache of its windows
        self._shown_config_errors: set[str] = set()
        # One worker: analyses run one at a time, off the event loop, so the server
        # keeps answering while a large file is optimized.
        self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ndif-opt")

    async def run(self, function, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    # -- helpers ---------------------------------------------------------------------

    def publish(self, uri: str, diagnostics: list[types.Diagnostic], version: int | None = None) -> None:
        if PYGLS_2:
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=diagnostics)
            )
        else:
            self.publish_diagnostics(uri, diagnostics, version=version)

    def show_error(self, message: str) -> None:
        if PYGLS_2:
            self.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Error, message=message)
            )
        else:
            self.show_message(message, types.MessageType.Error)

    def index(self, text: str) -> TextIndex:
        return TextIndex(text, self.workspace.position_encoding)

    def path_of(self, uri: str) -> str | None:
        if uri_scheme(uri) in ("file", ""):
            return to_fs_path(uri)
        return None

    def options_for(self, uri: str) -> Options:
        options = self._configured(uri)
        if uri_scheme(uri) in NOTEBOOK_CELL_SCHEMES:
            # a notebook's cell: the kernel keeps its module-level names after it runs
            return dataclasses.replace(options, notebook=True)
        return options

    def _configured(self, uri: str) -> Options:
        path = self.path_of(uri) or _notebook_path(uri)
        if path is None:
            root = getattr(self.workspace, "root_path", None)
            path = os.path.join(root, "untitled.py") if root else None
        try:
            return load_options(path)
        except ConfigError as error:
            message = f"ndif-opt: {error}"
            if message not in self._shown_config_errors:
                self._shown_config_errors.add(message)
                self.show_error(message)
            return Options()
        except Exception:  # an unreadable directory and the like
            log.exception("loading configuration for %s", uri)
            return Options()

    async def analysis(self, uri: str) -> Analysis | None:
        """The analysis of the document's current text, computing it if needed."""
        document = self.workspace.get_text_document(uri)
        try:
            text = document.source
        except OSError:
            return None
        options = self.options_for(uri)
        cached = self.analyses.get(uri)
        if cached is not None and cached.text == text and cached.options == options:
            return cached
        path = self.path_of(uri)
        result, error = await self.run(analyze, text, options, path, self.window_cache(uri))
        fresh = Analysis(text, document.version, options, path, result, error)
        if document.source == text:
            self.analyses[uri] = fresh
        return fresh

    def window_cache(self, uri: str):
        from ndif_opt.engine.pipeline import WindowCache

        return self.window_caches.setdefault(uri, WindowCache())

    def schedule(self, uri: str) -> None:
        self._schedule(uri, self._lint)

    def _schedule(self, key: str, lint) -> None:
        """Run ``lint(key)`` after the debounce, cancelling the one still waiting."""
        task = self.pending.pop(key, None)
        if task is not None:
            task.cancel()
        self.pending[key] = asyncio.get_running_loop().create_task(lint(key))

    async def _lint(self, uri: str) -> None:
        try:
            await asyncio.sleep(self.debounce)
            document = self.workspace.get_text_document(uri)
            version = document.version
            analysis = await self.analysis(uri)
            if analysis is None or document.source != analysis.text:
                return  # changed meanwhile: a newer task is on its way
            self.publish(uri, diagnostics_for(analysis, self.index(analysis.text)), version)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("publishing diagnostics for %s", uri)
        finally:
            if self.pending.get(uri) is asyncio.current_task():
                del self.pending[uri]

    # -- notebooks -------------------------------------------------------------------

    def notebook_of(self, cell_uri: str) -> str | None:
        """The URI of the open notebook (notebookDocument/didOpen) the cell is in."""
        if not PYGLS_2:
            return None
        notebook = self.workspace.get_notebook_document(cell_uri=cell_uri)
        return notebook.uri if notebook is not None else None

    def notebook_cells(self, notebook_uri: str) -> list[tuple[str, int, str, int | None]]:
        """(URI, index in the notebook, text, version) of its Python code cells, in order."""
        notebook = self.workspace.get_notebook_document(notebook_uri=notebook_uri)
        if notebook is None:
            return []
        out = []
        for index, cell in enumerate(notebook.cells):
            if cell.kind != types.NotebookCellKind.Code:
                continue
            document = self.workspace.text_documents.get(unquote(cell.document))
            if document is None or document.language_id not in (None, *NOTEBOOK_CELL_LANGUAGES):
                continue
            try:
                text = document.source
            except OSError:
                continue
            out.append((cell.document, index, text, document.version))
        return out

    def notebook_path(self, notebook_uri: str) -> str | None:
        return self.path_of(notebook_uri) or _notebook_path(notebook_uri)

    async def notebook_analysis(self, notebook_uri: str) -> NotebookAnalysis | None:
        """The analysis of the notebook's current code cells, computing it if needed."""
        cells = self.notebook_cells(notebook_uri)
        if self.workspace.get_notebook_document(notebook_uri=notebook_uri) is None:
            return None
        uris = tuple(c[0] for c in cells)
        indices = tuple(c[1] for c in cells)
        texts = tuple(c[2] for c in cells)
        options = self._configured(notebook_uri)
        cached = self.notebook_analyses.get(notebook_uri)
        if cached is not None and (cached.uris, cached.indices, cached.texts, cached.options) == (
                uris, indices, texts, options):
            return cached
        path = self.notebook_path(notebook_uri)
        result, error = await self.run(analyze_cells, texts, indices, options, path)
        fresh = NotebookAnalysis(uris, indices, texts, options, path, result, error)
        if self.current_texts(notebook_uri) == (uris, texts):
            self.notebook_analyses[notebook_uri] = fresh
        return fresh

    def current_texts(self, notebook_uri: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        cells = self.notebook_cells(notebook_uri)
        return tuple(c[0] for c in cells), tuple(c[2] for c in cells)

    def schedule_notebook(self, notebook_uri: str) -> None:
        self._schedule(notebook_uri, self._lint_notebook)

    async def _lint_notebook(self, notebook_uri: str) -> None:
        try:
            await asyncio.sleep(self.debounce)
            analysis = await self.notebook_analysis(notebook_uri)
            if analysis is None or self.current_texts(notebook_uri) != (analysis.uris, analysis.texts):
                return  # changed meanwhile (or closed): a newer task is on its way
            versions = {c[0]: c[3] for c in self.notebook_cells(notebook_uri)}
            indexes = {uri: self.index(text) for uri, text in zip(analysis.uris, analysis.texts)}
            for position, uri in enumerate(analysis.uris):
                self.publish(uri, cell_diagnostics(analysis, position, indexes[uri], indexes), versions.get(uri))
            # cells that left the notebook (or are no longer Python code): their old diagnostics go
            for uri in self.published_cells.get(notebook_uri, set()) - set(analysis.uris):
                self.publish(uri, [])
            self.published_cells[notebook_uri] = set(analysis.uris)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("publishing diagnostics for %s", notebook_uri)
        finally:
            if self.pending.get(notebook_uri) is asyncio.current_task():
                del self.pending[notebook_uri]

    def close_notebook(self, notebook_uri: str, cell_uris: list[str]) -> None:
        task = self.pending.pop(notebook_uri, None)
        if task is not None:
            task.cancel()
        self.notebook_analyses.pop(notebook_uri, None)
        for uri in sorted(set(cell_uris) | self.published_cells.pop(notebook_uri, set())):
            self.publish(uri, [])

    async def notebook_code_actions(self, notebook_uri: str, params: types.CodeActionParams) -> list[types.CodeAction]:
        """Quick fixes for a cell of an open notebook: each edits the cells it touches."""
        uri = params.text_document.uri
        analysis = await self.notebook_analysis(notebook_uri)
        position = analysis.position(uri) if analysis is not None else None
        if analysis is None or analysis.result is None or position is None:
            return []
        versions = {c[0]: c[3] for c in self.notebook_cells(notebook_uri)}
        index = self.index(analysis.texts[position])
        indexes = {u: self.index(t) for u, t in zip(analysis.uris, analysis.texts)}
        only = params.context.only if params.context else None
        actions: list[types.CodeAction] = []

        def edit_of(new_sources: tuple[str, ...]) -> types.WorkspaceEdit:
            return self.documents_edit([
                (analysis.uris[p], versions.get(analysis.uris[p]), analysis.texts[p], edits)
                for p, edits in cell_edits(analysis.texts, new_sources)
            ])

        if _wants(only, types.CodeActionKind.QuickFix):
            first = index.client_line(params.range.start)
            last = index.client_line(params.range.end)
            mine = [item.finding for item in analysis.findings_in(position)]
            groups: dict[tuple[Edit, ...], list[Finding]] = {}
            for item in analysis.result.findings:  # (a group may hold findings of other cells)
                if item.finding.fix:
                    groups.setdefault(item.finding.fix, []).append(item.finding)
            diagnostics = cell_diagnostics(analysis, position, index, indexes)
            for group in groups.values():
                here = [f for f in group if any(f is g for g in mine)]
                if not any(_overlaps(finding, first, last) for finding in here):
                    continue
                fixed = analysis.result.fixed(group[0])
                if fixed is None:
                    continue  # (cannot be cut into cells alone)
                ranges = [(f.pass_id, index.range(f.range.start.line, f.range.start.character, f.range.end.line,
                                                  f.range.end.character)) for f in here]
                related = [d for d in diagnostics if (d.code, d.range) in ranges]
                actions.append(
                    types.CodeAction(
                        title=quick_fix_title(group),
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=related or None,
                        is_preferred=True,
                        edit=edit_of(fixed),
                    )
                )
        if analysis.result.changed_cells and _wants(only, SOURCE_ACTION_KIND):
            actions.append(
                types.CodeAction(
                    title=NOTEBOOK_SOURCE_ACTION_TITLE, kind=SOURCE_ACTION_KIND,
                    edit=edit_of(analysis.result.new_sources)
                )
            )
        if self.current_texts(notebook_uri) != (analysis.uris, analysis.texts):
            return []  # the cells changed while we worked: offer nothing stale
        return actions

    # -- edits -----------------------------------------------------------------------

    def workspace_edit(self, uri: str, version: int | None, text: str, edits) -> types.WorkspaceEdit:
        return self.documents_edit([(uri, version, text, edits)])

    def documents_edit(self, documents: list[tuple[str, int | None, str, list[Edit]]]) -> types.WorkspaceEdit:
        """One WorkspaceEdit of ``Result.edits``-style edits to documents: (URI, version, the
        text the edits are of, edits)."""
        changes = [(uri, version, [self.index(text).text_edit(edit) for edit in edits])
                   for uri, version, text, edits in documents]
        capabilities = self.client_capabilities
        workspace = capabilities.workspace if capabilities else None
        supports = bool(
            workspace
            and workspace.workspace_edit
            and workspace.workspace_edit.document_changes
        )
        if supports:
            return types.WorkspaceEdit(
                document_changes=[
                    types.TextDocumentEdit(
                        text_document=types.OptionalVersionedTextDocumentIdentifier(
                            uri=uri, version=version
                        ),
                        edits=text_edits,
                    )
                    for uri, version, text_edits in changes
                ]
            )
        return types.WorkspaceEdit(changes={uri: text_edits for uri, _, text_edits in changes})


def quick_fix_title(group: list[Finding]) -> str:
    """"ndif-opt: session-hoisting", or, for a fix several findings need, their passes:
    "ndif-opt: session-hoisting + reduction-pushdown"."""
    return "ndif-opt: " + " + ".join(dict.fromkeys(finding.pass_id for finding in group))


def _wants(only: list[str] | None, kind: str) -> bool:
    if not only:
        return True
    return any(kind == want or kind.startswith(want + ".") for want in only)


def _overlaps(finding: Finding, start_line: int, end_line: int) -> bool:
    return finding.range.start.line <= end_line and finding.range.end.line >= start_line


def _hover_text(result: Result, findings: list[Finding]) -> str:
    from ndif_opt.output.text import cost_table, status_word

    lines = ["**ndif-opt** — estimated cost of this file on NDIF, per pass (before → after)", ""]
    lines += ["```text", cost_table(result).rstrip("\n"), "```"]
    if result.assumptions:
        lines += ["", "Assumptions: " + "; ".join(result.assumptions) + "."]
    if findings:
        lines += [""] + [f"- `{f.pass_id}` ({status_word(f, written=False)}): {diagnostic_message(f)}"
                         for f in findings]
    return "\n".join(lines)


def create_server(debounce: float = DEBOUNCE) -> NdifOptServer:
    server = NdifOptServer(debounce)
    _serve_documents(server)
    if PYGLS_2:
        _serve_notebooks(server)
    _serve_requests(server)
    return server


def _serve_documents(server: NdifOptServer) -> None:
    """A text document opened, changed, saved or closed."""

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: NdifOptServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: NdifOptServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: NdifOptServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    async def did_close(ls: NdifOptServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        task = ls.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        ls.analyses.pop(uri, None)
        ls.window_caches.pop(uri, None)
        ls.publish(uri, [])


def _serve_notebooks(server: NdifOptServer) -> None:
    """A notebook opened, changed, saved or closed (pygls 2)."""

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    async def notebook_did_open(ls: NdifOptServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.schedule_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    async def notebook_did_change(ls: NdifOptServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.schedule_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    async def notebook_did_save(ls: NdifOptServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.schedule_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    async def notebook_did_close(ls: NdifOptServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.close_notebook(params.notebook_document.uri, [c.uri for c in params.cell_text_documents])


def _serve_requests(server: NdifOptServer) -> None:
    """Shutdown, code actions and hovers."""

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: NdifOptServer, *args) -> None:
        for task in list(ls.pending.values()):
            task.cancel()
        ls.pending.clear()
        ls.executor.shutdown(wait=False, cancel_futures=True)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix, SOURCE_ACTION_KIND],
            resolve_provider=False,
        ),
    )
    async def code_action(ls: NdifOptServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return await _code_actions(ls, params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: NdifOptServer, params: types.HoverParams) -> types.Hover | None:
        return await _hover(ls, params)


async def _code_actions(ls: NdifOptServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    try:
        notebook = ls.notebook_of(uri)
        if notebook is not None:
            return await ls.notebook_code_actions(notebook, params)
        document = ls.workspace.get_text_document(uri)
        version = document.version
        analysis = await ls.analysis(uri)
        if analysis is None or analysis.result is None:
            return []
        result = analysis.result
        text = analysis.text
        index = ls.index(text)
        only = params.context.only if params.context else None
        actions: list[types.CodeAction] = []
        if _wants(only, types.CodeActionKind.QuickFix):
            first = index.client_line(params.range.start)
            last = index.client_line(params.range.end)
            diagnostics = diagnostics_for(analysis, index)
            for group in fix_groups(result):
                if not any(_overlaps(finding, first, last) for finding in group):
                    continue
                # the diagnostics of the group's findings: one fix resolves them all
                ranges = [(f.pass_id, index.range(f.range.start.line, f.range.start.character, f.range.end.line,
                                                  f.range.end.character)) for f in group]
                related = [d for d in diagnostics if (d.code, d.range) in ranges]
                actions.append(
                    types.CodeAction(
                        title=quick_fix_title(group),
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=related or None,
                        is_preferred=True,
                        edit=ls.workspace_edit(uri, version, text, group[0].fix),
                    )
                )
        if result.edits and _wants(only, SOURCE_ACTION_KIND):
            actions.append(
                types.CodeAction(
                    title=SOURCE_ACTION_TITLE,
                    kind=SOURCE_ACTION_KIND,
                    edit=ls.workspace_edit(uri, version, text, result.edits),
                )
            )
        if document.source != text:
            return []  # the text changed while we worked: offer nothing stale
        return actions
    except Exception:
        log.exception("code actions for %s", uri)
        return []


async def _hover(ls: NdifOptServer, params: types.HoverParams) -> types.Hover | None:
    uri = params.text_document.uri
    try:
        notebook = ls.notebook_of(uri)
        if notebook is not None:
            cells = await ls.notebook_analysis(notebook)
            position = cells.position(uri) if cells is not None else None
            if cells is None or cells.result is None or position is None:
                return None
            result, findings = cells.result.result, [item.finding for item in cells.findings_in(position)]
        else:
            analysis = await ls.analysis(uri)
            if analysis is None or analysis.result is None:
                return None
            result, findings = analysis.result, list(analysis.result.findings)
        if not result.costs:
            return None
        line = params.position.line
        here = [
            f
            for f in findings
            if f.status is not Status.SUPPRESSED and f.range.start.line <= line <= f.range.end.line
        ]
        if not here:
            return None
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=_hover_text(result, here))
        )
    except Exception:
        log.exception("hover for %s", uri)
        return None


def _overlaps_diag(diagnostic: types.Diagnostic, first: int, last: int) -> bool:
    return diagnostic.range.start.line <= last and diagnostic.range.end.line >= first


def serve(debounce: float | None = None) -> None:
    """Run the server on stdin/stdout until the client says exit."""
    if debounce is None:
        env = os.environ.get("NDIF_OPT_LSP_DEBOUNCE")
        try:
            debounce = float(env) if env else DEBOUNCE
        except ValueError:
            debounce = DEBOUNCE
    collect_garbage_rarely()  # the server's process is ours: ndif_opt/engine/runtime.py
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol stream
    create_server(debounce).start_io(stdin, stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ndif-opt lsp", description="ndif-opt language server (stdio)")
    parser.add_argument("--debounce", type=float, default=None, help="seconds to wait after an edit")
    parser.add_argument("--log-level", default="WARNING", help="logging level on stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    serve(args.debounce)


if __name__ == "__main__":
    main()
