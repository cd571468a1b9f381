"""`ndif-opt mcp` driven as an agent drives it: a subprocess spoken to over stdio by the
MCP SDK's own client. Every output is checked against docs/json-schema.json, and so is
the command line's `--format json`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")
jsonschema = pytest.importorskip("jsonschema")

import anyio  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())
EXAMPLE = ROOT / "examples" / "logit_lens.py"
NOTEBOOK = ROOT / "examples" / "notebook_sweep.ipynb"
SERVER = StdioServerParameters(command=sys.executable, args=["-m", "ndif_opt.frontends.cli", "mcp"], cwd=str(ROOT))


def validate(document: dict, definition: str) -> None:
    """``document`` is a ``definition`` of the schema, and a document of the schema as a whole."""
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)
    one = {"$schema": SCHEMA["$schema"], "$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{definition}"}
    jsonschema.validate(document, one, cls=jsonschema.Draft202012Validator)


def with_server(body):
    """Run ``body(session)`` against a fresh `ndif-opt mcp`; its return value."""
    async def main():
        async with stdio_client(SERVER) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)

    return anyio.run(main)


async def call(session: ClientSession, tool: str, arguments: dict, **kwargs) -> tuple[bool, dict]:
    """(is it an error, its structured content), checked against the schema."""
    result = await session.call_tool(tool, arguments, **kwargs)
    document = result.structured_content
    assert json.loads(result.content[0].text) == document  # the text says the same, for clients without structure
    validate(document, "error" if result.is_error else tool)
    return result.is_error, document


def test_lists_the_four_tools_with_their_arguments():
    async def body(session):
        return {tool.name: tool.input_schema for tool in (await session.list_tools()).tools}

    tools = with_server(body)
    assert set(tools) == {"check", "optimize", "verify", "explain"}
    for name in ("check", "optimize", "verify"):
        assert {"path", "source", "unsafe_fixes", "migrate", "nnsight"} <= set(tools[name]["properties"])
    assert "write" in tools["optimize"]["properties"] and "rewritten" in tools["verify"]["properties"]
    assert tools["explain"]["required"] == ["pass_id"]


def test_check_optimize_and_explain_a_script_and_a_notebook(tmp_path):
    copy = tmp_path / "logit_lens.py"
    shutil.copy(EXAMPLE, copy)

    async def body(session):
        proposal = await call(session, "optimize", {"path": str(copy)})
        assert copy.read_text() == EXAMPLE.read_text()  # asked for no write
        return [await call(session, "check", {"path": str(EXAMPLE)}),
                proposal,
                await call(session, "check", {"path": str(NOTEBOOK)}),
                await call(session, "optimize", {"path": str(NOTEBOOK)}),
                await call(session, "optimize", {"path": str(copy), "write": True}),
                await call(session, "explain", {"pass_id": "session-hoisting"})]

    checked, proposed, notebook, notebook_rewrite, written, explained = [doc for _, doc in with_server(body)]
    assert checked["totals"]["requests_before"] == 32 and checked["totals"]["requests_after"] == 1
    assert ("session-hoisting", "applied") in {(f["pass_id"], f["status"]) for f in checked["findings"]}
    assert "requests" in checked["cost_table"]
    assert proposed["written"] is False
    assert "+with model.session(remote=True):" in proposed["diff"] and "model.session" in proposed["code"]
    assert notebook["totals"]["requests_before"] > notebook["totals"]["requests_after"]
    assert notebook_rewrite["diff"].startswith(f"--- {NOTEBOOK}:cell") and json.loads(notebook_rewrite["code"])["cells"]
    assert written["written"] is True and copy.read_text() == proposed["code"]
    assert explained["documentation"].startswith("session-hoisting:") and explained["cases"]


def test_verify_says_ok_and_names_the_value_a_broken_rewrite_changes():
    source = EXAMPLE.read_text()
    progress = []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    async def body(session):
        ok = await call(session, "verify", {"path": str(EXAMPLE)}, progress_callback=on_progress)
        _, optimized = await call(session, "optimize", {"source": source})
        broken = optimized["code"] + "top_tokens = [t + 1 for t in top_tokens]\n"
        return ok, await call(session, "verify", {"source": source, "rewritten": broken})

    (ok_error, ok), (mismatch_error, mismatch) = with_server(body)
    assert not ok_error and ok["status"] == "ok" and ok["ok"] is True
    assert ok["measured"]["requests_before"] == 32 and ok["measured"]["requests_after"] == 1
    assert ok["measured"]["download_bytes_after"] < ok["measured"]["download_bytes_before"]
    assert progress and progress[-1][0] == progress[-1][1]  # progress went to the end
    assert not mismatch_error and mismatch["status"] == "mismatch" and mismatch["ok"] is False
    assert any(line.startswith("top_tokens") for line in mismatch["mismatches"]), mismatch["mismatches"]


def test_bad_inputs_are_tool_errors_and_the_server_serves_on(tmp_path):
    async def body(session):
        return [await call(session, "check", {"path": str(tmp_path / "missing.py")}),
                await call(session, "optimize", {"source": "with model.trace(remote=True)\n    x = 1\n"}),
                await call(session, "explain", {"pass_id": "no-such-pass"}),
                await call(session, "check", {}),
                await call(session, "optimize", {"source": "x = 1\n", "write": True}),
                await call(session, "check", {"path": str(EXAMPLE)})]

    *failures, after = with_server(body)
    kinds = [document["error"]["kind"] for error, document in failures if error]
    assert kinds == ["read", "parse", "unknown-pass", "usage", "usage"]
    assert "missing.py: no such file" in failures[0][1]["error"]["message"]
    assert after[0] is False and after[1]["totals"]["requests_before"] == 32


def test_the_command_line_json_report_fits_the_schema():
    done = subprocess.run([sys.executable, "-m", "ndif_opt.frontends.cli", str(EXAMPLE), str(NOTEBOOK),
                           "--format", "json", "-j", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    validate(report, "report")
    assert len(report["files"]) == 2


def test_the_schema_rejects_a_document_that_breaks_the_contract():
    done = subprocess.run([sys.executable, "-m", "ndif_opt.frontends.cli", str(EXAMPLE), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    del report["files"][0]["findings"][0]["status"]
    with pytest.raises(jsonschema.ValidationError):
        validate(report, "report")


def test_skill_prints_the_shipped_guide():
    done = subprocess.run([sys.executable, "-m", "ndif_opt.frontends.cli", "skill"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout == (ROOT / "ndif_opt" / "skill" / "SKILL.md").read_text()
    assert "check → optimize → verify → apply" in done.stdout


def test_help_names_both_commands():
    done = subprocess.run([sys.executable, "-m", "ndif_opt.frontends.cli", "-h"], capture_output=True, text=True,
                          timeout=60)
    assert "mcp — the tools for coding agents" in " ".join(done.stdout.split())
    assert "skill — print the guide" in " ".join(done.stdout.split())
