"""Notebooks in the editor: the language server driven by pygls' own LSP client over stdio
(a real subprocess), with LSP 3.17's notebookDocument/* notifications, as VS Code sends them.

The code cells of an open notebook are analysed together, in order, as ``ndif-opt nb.ipynb``
does; a finding lands on the cell where its fix applies and names the cell whose code uses
the value; quick fixes edit each cell they touch; diagnostics follow cell edits and
structure changes. Every wait has a timeout, so a hung server fails the test."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest.importorskip("lsprotocol")

from lsprotocol import types

try:  # pygls >= 2
    from pygls.lsp.client import LanguageClient
except ImportError:  # pragma: no cover - pygls 1.x has no notebook client API we use
    pytest.skip("pygls 2 is needed for the notebook client", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0  # seconds for any single wait

SETUP = 'from nnsight import LanguageModel\n\nmodel = LanguageModel("openai-community/gpt2")\n'
TRACE = SETUP + 'with model.trace("The Eiffel Tower is in", remote=True):\n    logits = model.lm_head.output.save()\n'
CONSUMER = "top = logits[0, -1].argmax()\nprint(top)\n"
MARKDOWN = "## The next token"
PASS = "reduction-pushdown"


def cell_uri(notebook: Path, n: int) -> str:
    """A cell's URI as VS Code writes it (a quoted base64 fragment)."""
    return "vscode-notebook-cell:" + notebook.as_uri()[len("file:"):] + f"#W{n}sZmlsZQ%3D%3D"


class Session:
    """A pygls LanguageClient connected to ``python -m ndif_opt.frontends.lsp``, recording
    every publishDiagnostics."""

    def __init__(self, workspace: Path):
        self.workspace = workspace
        self.client = LanguageClient("ndif-opt-test", "0")
        self.published: list[types.PublishDiagnosticsParams] = []
        self.versions: dict[str, int] = {}
        self.notebook_version = 0

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            self.published.append(params)

    async def start(self) -> types.InitializeResult:
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, NDIF_OPT_LSP_DEBOUNCE="0.05", PYTHONUNBUFFERED="1",
                   PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""))
        await asyncio.wait_for(
            self.client.start_io(sys.executable, "-m", "ndif_opt.frontends.lsp", env=env, cwd=str(self.workspace)),
            TIMEOUT)
        capabilities = types.ClientCapabilities(
            workspace=types.WorkspaceClientCapabilities(
                workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True)),
            notebook_document=types.NotebookDocumentClientCapabilities(
                synchronization=types.NotebookDocumentSyncClientCapabilities()),
        )
        result = await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            capabilities=capabilities, root_uri=self.workspace.as_uri(), process_id=os.getpid())), TIMEOUT)
        self.client.initialized(types.InitializedParams())
        return result

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), TIMEOUT)
            self.client.exit(None)
        finally:
            await asyncio.wait_for(self.client.stop(), TIMEOUT)

    # -- the notebook ------------------------------------------------------------------

    def open(self, notebook: Path, cells: list[tuple[str, str]]) -> list[str]:
        """Open a notebook of (kind, text) cells; their URIs."""
        uris = [cell_uri(notebook, n) for n in range(len(cells))]
        for uri in uris:
            self.versions[uri] = 1
        self.client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=notebook.as_uri(), notebook_type="jupyter-notebook", version=0,
                cells=[types.NotebookCell(kind=_kind(kind), document=uri) for uri, (kind, _) in zip(uris, cells)]),
            cell_text_documents=[
                types.TextDocumentItem(uri=uri, language_id="python" if kind == "code" else "markdown",
                                       version=1, text=text)
                for uri, (kind, text) in zip(uris, cells)
            ],
        ))
        return uris

    def change(self, notebook: Path, *, texts: dict[str, str] | None = None,
               structure: types.NotebookDocumentCellChangeStructure | None = None) -> None:
        """Replace whole cell texts and/or change the cells, as VS Code sends it."""
        self.notebook_version += 1
        content = []
        for uri, text in (texts or {}).items():
            self.versions[uri] += 1
            content.append(types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            ))
        self.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(
                uri=notebook.as_uri(), version=self.notebook_version),
            change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(
                structure=structure, text_content=content or None)),
        ))

    # -- waiting -----------------------------------------------------------------------

    async def diagnostics(self, uris: list[str], after: int = 0, until=lambda latest: True) -> dict:
        """The latest diagnostics of each of ``uris`` published after the ``after``-th
        publish, once each has one and ``until(latest)`` holds."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            latest = {}
            for params in self.published[after:]:
                latest[params.uri] = params.diagnostics
            if all(uri in latest for uri in uris) and until(latest):
                return latest
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for diagnostics of {uris}; got {latest}")
            await asyncio.sleep(0.02)

    async def request(self, coroutine):
        return await asyncio.wait_for(coroutine, TIMEOUT)


def _kind(kind: str) -> types.NotebookCellKind:
    return types.NotebookCellKind.Code if kind == "code" else types.NotebookCellKind.Markup


def run(workspace: Path, scenario) -> None:
    async def main() -> None:
        session = Session(workspace)
        await session.start()
        try:
            await scenario(session)
        finally:
            await session.stop()

    asyncio.run(asyncio.wait_for(main(), 6 * TIMEOUT))


def ipynb(cells: list[tuple[str, str]]) -> str:
    out = []
    for kind, text in cells:
        entry = {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
        if kind == "code":
            entry.update(execution_count=None, outputs=[])
        out.append(entry)
    data = {"cells": out, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(data, indent=1) + "\n"


def cli_cells(path: Path, cells: list[tuple[str, str]], *args: str) -> list[str]:
    """The cells of ``ndif-opt`` run on the equivalent .ipynb (a real CLI process)."""
    path.write_text(ipynb(cells), encoding="utf-8")
    out = path.with_name("out_" + path.name)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "ndif_opt", str(path), "-o", str(out), *args],
                          cwd=path.parent, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr
    return ["".join(cell["source"]) for cell in json.loads(out.read_text(encoding="utf-8"))["cells"]]


def apply_edit(texts: dict[str, str], edit: types.WorkspaceEdit) -> dict[str, str]:
    """The cell texts after a WorkspaceEdit (document changes, UTF-16 positions of ASCII text)."""
    texts = dict(texts)
    for change in edit.document_changes or ():
        text = texts[change.text_document.uri]
        starts = [0]
        for line in text.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        spans = [(starts[min(e.range.start.line, len(starts) - 1)] + e.range.start.character,
                  starts[min(e.range.end.line, len(starts) - 1)] + e.range.end.character, e.new_text)
                 for e in change.edits]
        for start, end, new_text in sorted(spans, reverse=True):
            text = text[:start] + new_text + text[end:]
        texts[change.text_document.uri] = text
    return texts


def unsafe_workspace(tmp_path: Path) -> Path:
    """A project whose configuration applies unsafe fixes (a notebook's kept downloads)."""
    (tmp_path / "pyproject.toml").write_text("[tool.ndif-opt]\nunsafe-fixes = true\n", encoding="utf-8")
    return tmp_path


CELLS = [("code", TRACE), ("code", CONSUMER), ("markdown", MARKDOWN)]


# ----------------------------------------------------------------------------------------


def test_a_finding_on_the_cell_of_the_save_names_the_cell_that_reduces_it(tmp_path):
    notebook = tmp_path / "sweep.ipynb"

    async def scenario(session: Session) -> None:
        uris = session.open(notebook, CELLS)
        latest = await session.diagnostics(uris[:2])
        ours = [d for d in latest[uris[0]] if d.code == PASS]
        assert len(ours) == 1, latest[uris[0]]
        assert "(used in cell 2)" in ours[0].message
        assert ours[0].severity == types.DiagnosticSeverity.Hint  # a notebook keeps its downloads: unsafe
        assert ours[0].range.start.line == 4  # `logits = model.lm_head.output.save()`, in cell 1
        [related] = ours[0].related_information
        assert related.location.uri == uris[1] and related.location.range.start.line == 0
        assert not [d for d in latest[uris[1]] if d.code == PASS]  # the consumer's cell: nothing of it
        assert uris[2] not in latest  # markdown: not analysed

    run(tmp_path, scenario)


def test_the_server_asks_for_the_python_cells_of_notebooks(tmp_path):
    async def main() -> None:
        session = Session(tmp_path)
        result = await session.start()
        try:
            sync = result.capabilities.notebook_document_sync
            assert sync is not None and sync.save
            [selector] = sync.notebook_selector
            assert selector.notebook == "*" and [c.language for c in selector.cells] == ["python"]
        finally:
            await session.stop()

    asyncio.run(asyncio.wait_for(main(), 3 * TIMEOUT))


def test_the_quick_fix_edits_the_cells_it_touches_as_the_command_line_does(tmp_path):
    workspace = unsafe_workspace(tmp_path)
    notebook = workspace / "sweep.ipynb"

    async def scenario(session: Session) -> None:
        uris = session.open(notebook, CELLS)
        latest = await session.diagnostics(uris[:2])
        [diagnostic] = [d for d in latest[uris[0]] if d.code == PASS]
        assert diagnostic.severity == types.DiagnosticSeverity.Information  # applied (unsafe-fixes)
        assert "(used in cell 2)" in diagnostic.message
        actions = await session.request(session.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uris[0]), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic],
                                            only=[types.CodeActionKind.QuickFix]))))
        # the edits the pipeline made for it, with detach-cpu's on the same save (which the
        # reduction rewrote): one fix for both, here the whole rewrite
        [fix] = [a for a in actions if a.title == f"ndif-opt: detach-cpu + {PASS}"]
        assert sorted(d.code for d in fix.diagnostics) == ["detach-cpu", PASS]
        touched = [change.text_document.uri for change in fix.edit.document_changes]
        assert touched == uris[:2]  # the save's cell and the consumer's, each its own edit
        assert all(change.text_document.version == 1 for change in fix.edit.document_changes)
        texts = {uri: text for uri, (_, text) in zip(uris, CELLS)}
        fixed = apply_edit(texts, fix.edit)
        expected = cli_cells(workspace / "same.ipynb", CELLS)
        assert [fixed[uri] for uri in uris[:2]] == expected[:2]
        assert fixed[uris[0]] != TRACE and fixed[uris[1]] != CONSUMER

        # the source action: every pass, every cell, as `ndif-opt same.ipynb`
        actions = await session.request(session.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uris[1]),
            range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
            context=types.CodeActionContext(diagnostics=[], only=["source.ndif-opt"]))))
        [everything] = actions
        assert everything.title == "Optimize this notebook (ndif-opt)"
        fixed = apply_edit(texts, everything.edit)
        expected = cli_cells(workspace / "all.ipynb", CELLS)
        assert [fixed[uri] for uri in uris[:2]] == expected[:2]

    run(workspace, scenario)


def test_diagnostics_follow_cell_edits_structure_changes_and_close(tmp_path):
    notebook = tmp_path / "sweep.ipynb"

    def pushdown(latest: dict, uri: str) -> list[types.Diagnostic]:
        return [d for d in latest[uri] if d.code == PASS]

    async def scenario(session: Session) -> None:
        uris = session.open(notebook, CELLS)
        latest = await session.diagnostics(uris[:2])
        assert pushdown(latest, uris[0])

        # the consumer no longer reduces `logits`: nothing to push down
        mark = len(session.published)
        session.change(notebook, texts={uris[1]: "print(logits.shape)\n"})
        latest = await session.diagnostics(uris[:2], mark)
        assert not pushdown(latest, uris[0]), latest[uris[0]]
        assert all(p.version == 2 for p in session.published[mark:] if p.uri == uris[1])

        # it reduces again: the finding is back
        mark = len(session.published)
        session.change(notebook, texts={uris[1]: CONSUMER})
        latest = await session.diagnostics(uris[:2], mark)
        assert "(used in cell 2)" in pushdown(latest, uris[0])[0].message

        # a cell inserted before the consumer: the message follows its new number
        mark = len(session.published)
        inserted = cell_uri(notebook, 9)
        session.versions[inserted] = 1
        session.change(notebook, structure=types.NotebookDocumentCellChangeStructure(
            array=types.NotebookCellArrayChange(start=1, delete_count=0, cells=[
                types.NotebookCell(kind=types.NotebookCellKind.Code, document=inserted)]),
            did_open=[types.TextDocumentItem(uri=inserted, language_id="python", version=1, text="n = 1\n")],
        ))
        latest = await session.diagnostics([uris[0], inserted, uris[1]], mark)
        assert "(used in cell 3)" in pushdown(latest, uris[0])[0].message

        # the consumer's cell removed: its diagnostics cleared, the finding gone
        mark = len(session.published)
        session.change(notebook, structure=types.NotebookDocumentCellChangeStructure(
            array=types.NotebookCellArrayChange(start=2, delete_count=1),
            did_close=[types.TextDocumentIdentifier(uri=uris[1])],
        ))
        latest = await session.diagnostics([uris[0], uris[1]], mark)
        assert not latest[uris[1]]
        assert not pushdown(latest, uris[0])

        # closed: every cell's diagnostics cleared
        mark = len(session.published)
        session.client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=notebook.as_uri()),
            cell_text_documents=[types.TextDocumentIdentifier(uri=u) for u in (uris[0], inserted, uris[2])],
        ))
        latest = await session.diagnostics([uris[0], inserted], mark)
        assert not latest[uris[0]] and not latest[inserted]

    run(tmp_path, scenario)
