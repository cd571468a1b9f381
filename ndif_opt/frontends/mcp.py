"""`ndif-opt mcp`: the tools of the command line for coding agents, over the Model Context
Protocol (stdio), on the `mcp` SDK (the mcp extra).

Tools: ``check`` (findings and the bill), ``optimize`` (the new code and its diff; writes
the file only when asked), ``verify`` (the execution check on a tiny model) and ``explain``
(a pass's documentation and cases). Each takes a ``path`` (a script or a notebook) or a
``source`` string. Every output is a document of ``docs/json-schema.json``; a failure —
a missing file, code that does not parse, an unknown pass — is a tool error whose
structured content is an ``error`` document of the same schema, and the server serves on.
"""

from __future__ import annotations

import inspect
import json

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent

from ndif_opt.frontends.batch import optimize_source
from ndif_opt.frontends.config import ConfigError, load_options
from ndif_opt.frontends.files import InputError, SourceFile, read_source, write_atomic
from ndif_opt.frontends.verification import verify_optimized
from ndif_opt.options import Options
from ndif_opt.output.text import cost_table, result_dict, summary_line, unified_diff
from ndif_opt.types import Result

SCHEMA_VERSION = 1  # the `version` of docs/json-schema.json every output carries
SOURCE_LABEL = "<source>"  # the path of code given as a string


class ToolFailure(Exception):
    """A failure the caller can act on: ``kind`` says which (read, parse, options, usage,
    unknown-pass, internal), the message names the input and the cause."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def error_result(failure: ToolFailure) -> CallToolResult:
    """A tool error with a structured body: the agent reads the kind, not a traceback."""
    document = {"version": SCHEMA_VERSION, "error": {"kind": failure.kind, "message": str(failure)}}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(document))],
                          structured_content=document, is_error=True)


def success_result(document: dict) -> CallToolResult:
    document = {"version": SCHEMA_VERSION, **document}
    text = json.dumps(document, ensure_ascii=False, default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=json.loads(text))


def input_source(path: str | None, source: str | None) -> SourceFile:
    if (path is None) == (source is None):
        raise ToolFailure("usage", "give exactly one of `path` (a .py or .ipynb file) and `source` (Python code)")
    if source is not None:
        return SourceFile(SOURCE_LABEL, source)
    try:
        return read_source(path)
    except InputError as error:
        raise ToolFailure("read", str(error)) from None


def input_options(path: str | None, unsafe_fixes: bool, migrate: bool, nnsight: str | None) -> Options:
    """The file's `[tool.ndif-opt]` configuration, the tool's arguments on top (as the CLI does)."""
    try:
        return load_options(path, unsafe_fixes=unsafe_fixes, migrate=migrate, nnsight=nnsight)
    except ConfigError as error:
        raise ToolFailure("options", str(error)) from None


def optimized(source: SourceFile, options: Options) -> Result:
    try:
        return optimize_source(source, options)
    except InputError as error:  # code (or a notebook) that does not parse
        raise ToolFailure("parse", str(error)) from None
    except Exception as error:  # noqa: BLE001 - an optimizer bug is one error, never a dead server
        raise ToolFailure("internal", f"ndif-opt could not optimize {source.path}: {type(error).__name__}: {error}")


def diff_of(source: SourceFile, result: Result) -> str:
    notebook = getattr(result, "notebook", None)
    return notebook.diff() if notebook is not None else unified_diff(source.path, result.source, result.code)


def check_document(source: SourceFile, result: Result, written: bool = False) -> dict:
    """The file entry of `--format json`, with the bill as the CLI's --report prints it
    (``written``: the file holds the fixes, which its findings then say were made)."""
    return {**result_dict(source.path, result, written=written), "summary": summary_line(result),
            "cost_table": cost_table(result, source.path)}


def run_check(path: str | None, source: str | None, unsafe_fixes: bool, migrate: bool, nnsight: str | None) -> dict:
    inputs = input_source(path, source)
    result = optimized(inputs, input_options(path, unsafe_fixes, migrate, nnsight))
    return {"tool": "check", **check_document(inputs, result)}


def run_optimize(path: str | None, source: str | None, unsafe_fixes: bool, migrate: bool, nnsight: str | None,
                 write: bool) -> dict:
    inputs = input_source(path, source)
    result = optimized(inputs, input_options(path, unsafe_fixes, migrate, nnsight))
    if write and path is None:
        raise ToolFailure("usage", "`write` needs a `path`: there is no file to write code given as `source`")
    written = write and result.changed
    if written:
        try:
            write_atomic(path, inputs.encode(result.code))
        except InputError as error:
            raise ToolFailure("write", str(error)) from None
    return {"tool": "optimize", **check_document(inputs, result, written), "code": result.code,
            "diff": diff_of(inputs, result), "written": written}


def verify_document(report) -> dict:
    """The verdict first (what an agent acts on), then the whole report `verify --format json` prints."""
    before, after = report.before, report.after
    return {
        "tool": "verify",
        "status": report.status.value,
        "ok": report.intended_ok,
        "reason": report.reason,
        "measured": {
            "requests_before": before.requests, "requests_after": after.requests,
            "download_bytes_before": before.download_bytes, "download_bytes_after": after.download_bytes,
            "forward_passes_before": before.forward_passes, "forward_passes_after": after.forward_passes,
        },
        "mismatches": list(report.mismatches),
        "text": report.to_text(),
        "report": report.to_dict(),
    }


def explain_document(pass_id: str) -> dict:
    from ndif_opt.passes import PASS_IDS, PASSES

    if pass_id not in PASS_IDS:
        raise ToolFailure("unknown-pass", f"unknown pass id {pass_id!r} (known: {', '.join(PASS_IDS)})")
    cls = next(cls for cls in PASSES if cls.id == pass_id)
    cases = [{"name": case.name, "before": case.before, "after": case.after, "reason": case.reason,
              "unsafe_fixes": case.unsafe_fixes, "notebook": case.notebook} for case in cls.cases]
    return {"tool": "explain", "id": cls.id, "summary": cls.summary(), "fix_safety": cls.fix_safety,
            "opt_in": cls.opt_in, "documentation": inspect.cleandoc(cls.__doc__ or ""), "cases": cases}


def answered(build, *args) -> CallToolResult:
    """``build(*args)`` as a tool result; a ToolFailure as a structured tool error."""
    try:
        return success_result(build(*args))
    except ToolFailure as failure:
        return error_result(failure)


def build_server() -> MCPServer:
    server = MCPServer("ndif-opt", instructions=(
        "Optimize nnsight scripts that run remotely on NDIF: fewer requests, smaller downloads, "
        "same results. Workflow: check -> optimize -> verify -> optimize(write=true). "
        "`ndif-opt skill` prints the guide."))

    @server.tool()
    def check(path: str | None = None, source: str | None = None, unsafe_fixes: bool = False,
              migrate: bool = False, nnsight: str | None = None) -> CallToolResult:
        """Analyse an nnsight script or notebook without changing it: each finding (pass id,
        range, message, status applied/skipped/unsafe-not-applied, safety, the reason of a
        refusal) and the estimated bill before/after (requests, upload and download bytes,
        forward passes; a number that depends on a loop of unknown length is an object with
        its `text`, a value of unknown size is listed in download_unknown_*).
        `path`: a .py or .ipynb file; or `source`: Python code. `migrate`: first rewrite
        pre-0.5 nnsight code. `nnsight`: the release the rewrite must run on (default 0.8)."""
        return answered(run_check, path, source, unsafe_fixes, migrate, nnsight)

    @server.tool()
    def optimize(path: str | None = None, source: str | None = None, unsafe_fixes: bool = False,
                 migrate: bool = False, nnsight: str | None = None, write: bool = False) -> CallToolResult:
        """Rewrite an nnsight script or notebook for fewer NDIF requests and smaller downloads:
        the new code, its unified diff, the findings and the bill (as `check`). Writes the
        file (atomically) only when `write` is true and a `path` was given; verify first."""
        return answered(run_optimize, path, source, unsafe_fixes, migrate, nnsight, write)

    @server.tool()
    async def verify(ctx: Context, path: str | None = None, source: str | None = None, unsafe_fixes: bool = False,
                     migrate: bool = False, nnsight: str | None = None, rewritten: str | None = None,
                     atol: float = 0.0, rtol: float = 0.0) -> CallToolResult:
        """Run the original and the optimized script on a tiny local model through an emulation
        of NDIF and compare every result: status OK, MISMATCH (the `mismatches` name the values
        that differ), ORIGINAL-WRONG (they differ only as the original's own run on NDIF does:
        the rewrite adds no difference), FAILED (`reason`: nothing to compare) or NOT-MIGRATED (with `migrate`, the
        script could not be migrated: `reason` says why; nothing ran), and the measured requests,
        download bytes and forward passes before -> after. `rewritten`: check this code
        instead of ndif-opt's own rewrite (your hand edit of the original). Takes seconds."""
        try:
            inputs = input_source(path, source)
            options = input_options(path, unsafe_fixes, migrate, nnsight)
            await ctx.report_progress(0, 2, "optimizing")
            result = await anyio.to_thread.run_sync(optimized, inputs, options)
            if rewritten is not None:
                result = hand_rewrite(inputs, result, rewritten)
            await ctx.report_progress(1, 2, "running both scripts on a tiny model")
            report = await anyio.to_thread.run_sync(checked_run, inputs, result, options, atol, rtol)
            await ctx.report_progress(2, 2, report.status.value)
        except ToolFailure as failure:
            return error_result(failure)
        return success_result(verify_document(report))

    @server.tool()
    def explain(pass_id: str) -> CallToolResult:
        """A pass's documentation (what it does, why, when it refuses, how safe its fix is)
        and its before/after cases. Pass ids: the `pass_id` of a finding."""
        return answered(explain_document, pass_id)

    return server


def hand_rewrite(inputs: SourceFile, result: Result, rewritten: str) -> Result:
    """The caller's rewrite in place of ndif-opt's: every value of the original is compared."""
    if getattr(result, "notebook", None) is not None:
        raise ToolFailure("usage", "`rewritten` takes a script's code; a notebook is checked with its own rewrite")
    return Result(source=result.source, code=rewritten)


def checked_run(inputs: SourceFile, result: Result, options: Options, atol: float, rtol: float):
    try:
        import ndif_opt.verify  # noqa: F401 - needs the verify extra
    except ImportError as error:
        raise ToolFailure("missing-extra", f"verify needs the verify extra: {error}") from None
    try:
        return verify_optimized(inputs, result, inputs.path, options, atol=atol, rtol=rtol)
    except Exception as error:  # noqa: BLE001 - the check itself broke: one error, the server serves on
        raise ToolFailure("internal", f"the check could not run: {type(error).__name__}: {error}") from None


def serve() -> None:
    build_server().run("stdio")
