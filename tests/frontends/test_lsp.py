"""The language server, driven as an editor drives it: a real subprocess speaking
JSON-RPC with Content-Length framing over stdio. Every wait has a timeout, so a hung
server fails the test instead of hanging the run."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest.importorskip("lsprotocol")

from ndif_opt import optimize  # noqa: E402
from ndif_opt.types import Edit, Position, Range  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPT_LOOP = (ROOT / "examples" / "prompt_loop.py").read_text(encoding="utf-8")
TIMEOUT = 10.0  # seconds for any single answer


class Client:
    """A minimal LSP client: framing, ids, a reader thread, and waits with timeouts."""

    def __init__(self, cwd: Path, debounce: float = 0.05):
        env = dict(os.environ, NDIF_OPT_LSP_DEBOUNCE=str(debounce), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ndif_opt.frontends.lsp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        self.messages: queue.Queue = queue.Queue()
        self.notifications: list[dict] = []
        self.next_id = 0
        self.stderr: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def _read(self) -> None:
        stream = self.proc.stdout
        try:
            while True:
                headers = {}
                while True:
                    line = stream.readline()
                    if not line:
                        self.messages.put(None)
                        return
                    line = line.strip()
                    if not line:
                        break
                    name, _, value = line.decode("ascii").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = stream.read(int(headers["content-length"]))
                self.messages.put(json.loads(body.decode("utf-8")))
        except Exception as error:  # surface framing errors in the test
            self.messages.put({"framing-error": repr(error)})

    def send(self, payload: dict) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def _next(self, deadline: float) -> dict:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out waiting for the server; stderr:\n{self._err()}")
        try:
            message = self.messages.get(timeout=remaining)
        except queue.Empty:
            raise AssertionError(f"timed out waiting for the server; stderr:\n{self._err()}") from None
        if message is None:
            raise AssertionError(f"server closed its output; stderr:\n{self._err()}")
        assert "framing-error" not in message, message
        if "method" in message and "id" in message:  # a request from the server
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
        elif "method" in message:
            self.notifications.append(message)
        return message

    def _err(self) -> str:
        return b"".join(self.stderr).decode("utf-8", "replace")[-3000:]

    def request(self, method: str, params, timeout: float = TIMEOUT):
        self.next_id += 1
        ident = self.next_id
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            message = self._next(deadline)
            if message.get("id") == ident and "method" not in message:
                assert "error" not in message, message["error"]
                return message["result"]

    def wait_notification(self, method: str, predicate=lambda params: True, timeout: float = TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for index, message in enumerate(self.notifications):
                if message["method"] == method and predicate(message["params"]):
                    del self.notifications[: index + 1]
                    return message["params"]
            self._next(deadline)

    def initialize(self, root: Path) -> dict:
        result = self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": root.as_uri(),
                "capabilities": {
                    "workspace": {"workspaceEdit": {"documentChanges": True}},
                    "textDocument": {
                        "publishDiagnostics": {"versionSupport": True},
                        "codeAction": {
                            "codeActionLiteralSupport": {
                                "codeActionKind": {"valueSet": ["quickfix", "source"]}
                            }
                        },
                        "hover": {"contentFormat": ["markdown", "plaintext"]},
                    },
                },
            },
        )
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}},
        )

    def diagnostics(self, uri: str, version: int | None = None, timeout: float = TIMEOUT) -> dict:
        return self.wait_notification(
            "textDocument/publishDiagnostics",
            lambda p: p["uri"] == uri and (version is None or p.get("version") == version),
            timeout,
        )

    def close(self) -> int:
        try:
            if self.proc.poll() is None:
                assert self.request("shutdown", None) is None
                self.notify("exit", None)
                return self.proc.wait(timeout=TIMEOUT)
            return self.proc.returncode
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=TIMEOUT)


# ----------------------------------------------------------------- applying TextEdits


def _offset(text: str, position: dict) -> int:
    """Offset of an LSP position (UTF-16 units; lines split at \\n, \\r\\n, \\r)."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\n|\r", text)]
    line = position["line"]
    if line >= len(starts):
        return len(text)
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    content = text[starts[line] : end].rstrip("\r\n")
    units = 0
    for count, char in enumerate(content):
        if units >= position["character"]:
            return starts[line] + count
        units += 2 if ord(char) > 0xFFFF else 1
    return starts[line] + len(content)


def apply_text_edits(text: str, edits: list[dict]) -> str:
    spans = sorted(
        ((_offset(text, e["range"]["start"]), _offset(text, e["range"]["end"]), i, e["newText"]) for i, e in enumerate(edits)),
    )
    out, cursor = [], 0
    for start, end, _, new_text in spans:
        assert start >= cursor, "overlapping edits"
        assert end >= start
        out.append(text[cursor:start])
        out.append(new_text)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def apply_workspace_edit(text: str, uri: str, edit: dict, version: int) -> str:
    if edit.get("documentChanges"):
        (change,) = edit["documentChanges"]
        assert change["textDocument"]["uri"] == uri
        assert change["textDocument"]["version"] == version  # made for this version
        return apply_text_edits(text, change["edits"])
    return apply_text_edits(text, edit["changes"][uri])


def test_applier_handles_inserts_and_replacements():
    text = "a\nbé😀c\nd"
    edits = [
        {"range": {"start": {"line": 1, "character": 2}, "end": {"line": 1, "character": 4}}, "newText": "X"},
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "newText": ">"},
        {"range": {"start": {"line": 2, "character": 0}, "end": {"line": 3, "character": 0}}, "newText": "D\n"},
    ]
    assert apply_text_edits(text, edits) == ">a\nbéXc\nD\n"


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lsp")
    (root / ".git").mkdir()  # stop the pyproject search here
    (root / "ignored").mkdir()
    (root / "ignored" / "pyproject.toml").write_text(
        '[tool.ndif-opt]\nignore = ["session-hoisting"]\n', encoding="utf-8"
    )
    (root / "broken").mkdir()
    (root / "broken" / "pyproject.toml").write_text(
        "[tool.ndif-opt]\nselct = []\n", encoding="utf-8"
    )
    return root


@pytest.fixture(scope="module")
def client(workspace):
    client = Client(workspace, debounce=0.25)  # a burst of edits: one analysis
    try:
        result = client.initialize(workspace)
        capabilities = result["capabilities"]
        assert capabilities["codeActionProvider"]
        assert capabilities["hoverProvider"]
        yield client
        assert client.close() == 0
    finally:
        if client.proc.poll() is None:
            client.proc.kill()


# -------------------------------------------------------------------------------- tests


def _for_line(text: str) -> int:
    return text.splitlines().index("for prompt in PROMPTS:")


def test_diagnostics_code_actions_and_edits(client, workspace):
    uri = (workspace / "prompt_loop.py").as_uri()
    client.open(uri, PROMPT_LOOP, version=1)
    published = client.diagnostics(uri)
    assert published.get("version") in (None, 1)
    hoist = [d for d in published["diagnostics"] if d.get("code") == "session-hoisting"]
    assert len(hoist) == 1, published
    diagnostic = hoist[0]
    assert diagnostic["range"]["start"] == {"line": _for_line(PROMPT_LOOP), "character": 0}
    assert diagnostic["source"] == "ndif-opt"
    assert diagnostic["severity"] == 3  # Information: a fix ndif-opt applies
    assert "8 requests → 1" in diagnostic["message"]

    actions = client.request(
        "textDocument/codeAction",
        {
            "textDocument": {"uri": uri},
            "range": diagnostic["range"],
            "context": {"diagnostics": [diagnostic]},
        },
    )
    by_title = {action["title"]: action for action in actions}
    assert "Optimize this file (ndif-opt)" in by_title, list(by_title)
    assert "ndif-opt: session-hoisting + reduction-pushdown" in by_title, list(by_title)

    full = by_title["Optimize this file (ndif-opt)"]
    assert full["kind"].startswith("source")
    assert apply_workspace_edit(PROMPT_LOOP, uri, full["edit"], 1) == optimize(PROMPT_LOOP).code

    # the edits the pipeline made for the session, with the reduction-pushdown's inside it (which
    # needs the session): the quick fix resolves both diagnostics, and here it is the whole rewrite
    quick = by_title["ndif-opt: session-hoisting + reduction-pushdown"]
    assert quick["kind"] == "quickfix"
    assert [d["code"] for d in quick["diagnostics"]] == ["session-hoisting", "reduction-pushdown"]
    assert apply_workspace_edit(PROMPT_LOOP, uri, quick["edit"], 1) == optimize(PROMPT_LOOP).code

    only_source = client.request(
        "textDocument/codeAction",
        {
            "textDocument": {"uri": uri},
            "range": diagnostic["range"],
            "context": {"diagnostics": [], "only": ["source"]},
        },
    )
    assert [a["title"] for a in only_source] == ["Optimize this file (ndif-opt)"]

    hover = client.request(
        "textDocument/hover",
        {"textDocument": {"uri": uri}, "position": {"line": _for_line(PROMPT_LOOP) + 2, "character": 8}},
    )
    assert hover is not None
    assert "session-hoisting" in hover["contents"]["value"]
    assert "8 → 1" in hover["contents"]["value"]
    nothing = client.request(
        "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 0}}
    )
    assert nothing is None


def test_changes_are_debounced_and_versioned(client, workspace):
    uri = (workspace / "edited.py").as_uri()
    client.open(uri, PROMPT_LOOP, version=1)
    client.diagnostics(uri, version=1)
    # A burst of edits: only the last version's diagnostics need to arrive.
    text = PROMPT_LOOP
    for version in range(2, 7):
        text = "\n" + text  # push everything one line down each time
        client.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]},
        )
    published = client.diagnostics(uri)
    assert published["version"] == 6
    (hoist,) = [d for d in published["diagnostics"] if d.get("code") == "session-hoisting"]
    assert hoist["range"]["start"]["line"] == _for_line(PROMPT_LOOP) + 5

    # The code action on the changed text applies to version 6.
    actions = client.request(
        "textDocument/codeAction",
        {"textDocument": {"uri": uri}, "range": hoist["range"], "context": {"diagnostics": [hoist]}},
    )
    full = [a for a in actions if a["title"] == "Optimize this file (ndif-opt)"][0]
    assert apply_workspace_edit(text, uri, full["edit"], 6) == optimize(text).code

    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert client.diagnostics(uri)["diagnostics"] == []


def test_unparsable_text_gives_empty_diagnostics_and_no_crash(client, workspace):
    uri = (workspace / "broken_syntax.py").as_uri()
    client.open(uri, "from nnsight import LanguageModel\ndef f(:\n    pass\n", version=1)
    assert client.diagnostics(uri)["diagnostics"] == []
    actions = client.request(
        "textDocument/codeAction",
        {
            "textDocument": {"uri": uri},
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}},
            "context": {"diagnostics": []},
        },
    )
    assert actions in ([], None)
    # ... and it still serves other documents.
    fixed = PROMPT_LOOP
    client.notify(
        "textDocument/didChange",
        {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": fixed}]},
    )
    assert any(d["code"] == "session-hoisting" for d in client.diagnostics(uri, version=2)["diagnostics"])


def test_configuration_comes_from_pyproject(client, workspace):
    uri = (workspace / "ignored" / "script.py").as_uri()
    client.open(uri, PROMPT_LOOP, version=1)
    codes = {d["code"] for d in client.diagnostics(uri)["diagnostics"]}
    assert "session-hoisting" not in codes


def test_bad_configuration_is_reported_not_fatal(client, workspace):
    uri = (workspace / "broken" / "script.py").as_uri()
    client.open(uri, PROMPT_LOOP, version=1)
    message = client.wait_notification("window/showMessage")
    assert "selct" in message["message"] and "pyproject.toml" in message["message"]
    codes = {d["code"] for d in client.diagnostics(uri)["diagnostics"]}
    assert "session-hoisting" in codes  # falls back to the defaults


NOTEBOOK_SWEEP = (
    'from nnsight import LanguageModel\n\nmodel = LanguageModel("openai-community/gpt2")\n'
    "for layer in range(3):\n"
    '    with model.trace("The Eiffel Tower is in", remote=True):\n'
    "        hidden = model.transformer.h[layer].output.save()\n"
)


def test_a_notebook_cell_keeps_its_saved_values_and_its_notebooks_configuration(client, workspace):
    # a saved value no later code reads: a script need not download it, a notebook's
    # kernel keeps it (dropping it is an unsafe fix there, a hint)
    script = (workspace / "sweep.py").as_uri()
    cell = "vscode-notebook-cell:" + (workspace / "sweep.ipynb").as_uri()[len("file:"):] + "#W0sZmlsZQ%3D%3D"
    ignored_cell = "vscode-notebook-cell:" + (workspace / "ignored" / "nb.ipynb").as_uri()[len("file:"):] + "#W1"
    for uri in (script, cell, ignored_cell):
        client.open(uri, NOTEBOOK_SWEEP, version=1)

    def pushdown(uri):
        found = [d for d in client.diagnostics(uri)["diagnostics"] if d["code"] == "reduction-pushdown"]
        return [(d["severity"], "need not be downloaded" in d["message"]) for d in found]

    assert pushdown(script) == [(3, False)]  # Information: applied
    assert pushdown(cell) == [(4, True)]  # Hint: an unsafe fix
    codes = {d["code"] for d in client.diagnostics(ignored_cell)["diagnostics"]}
    assert "session-hoisting" not in codes  # the pyproject.toml beside the notebook


def test_text_index_converts_positions_and_edits():
    from ndif_opt.frontends.lsp import TextIndex

    text = "x = '😀'; y = 1\n\x0cz = 2\r\nw = 3"
    index = TextIndex(text)  # UTF-16
    assert index.position(0, 7).character == 8  # the emoji is two UTF-16 units
    assert index.position(0, 99).character == index.units(index.line_text(0))
    assert index.position(9, 0) == index.end()
    # Result.edits count lines as str.splitlines does (\x0c breaks a line there, not in
    # LSP): the TextEdit must still land on the same characters.
    py_lines = text.splitlines(keepends=True)
    assert len(py_lines) == 4
    edit = Edit(Range(Position(2, 0), Position(3, 0)), "Z = 2\n")
    lsp = index.text_edit(edit)
    applied = apply_text_edits(text, [{"range": _jsonable(lsp.range), "newText": lsp.new_text}])
    assert applied == "".join(py_lines[:2]) + "Z = 2\n" + py_lines[3]
    utf8 = TextIndex(text, "utf-8")
    assert utf8.position(0, 7).character == 10  # the emoji is four UTF-8 bytes


def _jsonable(rng) -> dict:
    return {
        "start": {"line": rng.start.line, "character": rng.start.character},
        "end": {"line": rng.end.line, "character": rng.end.character},
    }
