"""The `ndif-opt` command line.

    ndif-opt FILE... [-o OUT] [--diff] [--check] [--report] [--in-place] ...
    ndif-opt verify FILE        run original and optimized script and compare
    ndif-opt rules              list the passes

Output: stdout carries only what was asked for (code, diff, report or --format
document), so it can be piped (`ndif-opt f.py --diff | patch -p0`); findings, errors,
the progress bar and the summary go to stderr.

Exit codes: 0 — success (and, with --check, nothing to change); 1 — with --check,
some file would change; with `verify`, results differ; 2 — usage error, or an input
that cannot be read, decoded or parsed (one line on stderr names the file and why);
with `verify`, the script did not run far enough to compare (it raised, or made no
request from its remote blocks), or, with `verify --migrate`, the migration could not be
made (NOT MIGRATED: nothing ran); 130 — interrupted (Ctrl-C), 143 — terminated
(SIGTERM): nothing more is written.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import List, Optional

import typer
import typer.core

from ndif_opt.engine.runtime import collect_garbage_rarely
from ndif_opt.frontends.files import InputError, SourceFile, python_files, read_source, same_file, write_atomic
from ndif_opt.options import Options
from ndif_opt.output.text import cost_table, finding_line, to_json, totals, unified_diff
from ndif_opt.passes import PASS_IDS
from ndif_opt.types import Result

EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # 128 + SIGTERM
SUBCOMMANDS = ("verify", "rules", "lsp", "mcp", "skill")


class Format(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    markdown = "markdown"
    html = "html"


class VerifyFormat(str, Enum):  # what a verify report is written as (every one offered works)
    text = "text"
    json = "json"


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
COMMANDS_HELP = (
    "Commands (ndif-opt COMMAND -h for theirs): verify FILE — run the original and the optimized "
    "script on a tiny model through an emulation of NDIF and compare every result; rules — list "
    "the passes; lsp — the editor server (the lsp extra); mcp — the tools for coding agents, an MCP "
    "server on stdio (the mcp extra); skill — print the guide for coding agents."
)
# one command: `ndif-opt [OPTIONS] PATHS...` (verify, rules and lsp are dispatched by main)
app = typer.Typer(add_completion=False, rich_markup_mode=None, context_settings=HELP_OPTIONS)


def _fail(message: str) -> None:
    typer.echo(f"ndif-opt: {message}", err=True)
    raise typer.Exit(EXIT_ERROR)


def _interrupted() -> None:
    typer.echo("ndif-opt: interrupted", err=True)
    raise typer.Exit(EXIT_INTERRUPTED)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ndif-opt")
    except PackageNotFoundError:  # run from a checkout that is not installed
        from ndif_opt.version import VERSION

        return VERSION


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"ndif-opt {_version()}")
        raise typer.Exit(EXIT_OK)


def _comma_list(values: list[str] | None) -> list[str] | None:
    """`--select a,b --select c` as ruff takes it: ["a", "b", "c"]."""
    if not values:
        return values
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _options(select, ignore, unsafe_fixes, assume_remote, max_batch, *, path=None, config=None, cost=None,
             migrate=None, nnsight=None) -> Options:
    """Options for one input: its pyproject `[tool.ndif-opt]`, command-line flags on top."""
    from ndif_opt.frontends.config import ConfigError, load_options

    select, ignore = _comma_list(select), _comma_list(ignore)
    for pass_id in list(select or []) + list(ignore or []):
        if pass_id not in PASS_IDS:
            _fail(f"unknown pass id {pass_id!r} (known: {', '.join(PASS_IDS)})")
    try:
        return load_options(
            None if path in (None, "-") else path,
            config=config,
            select=list(select) if select else None,
            ignore=list(ignore) if ignore else None,
            unsafe_fixes=unsafe_fixes,
            assume_remote=assume_remote,
            max_batch=max_batch,
            cost=cost or None,
            migrate=migrate,
            nnsight=nnsight,
        )
    except ConfigError as error:
        _fail(str(error))


def _expand(paths: list[str]) -> list[str]:
    expanded: list[str] = []
    import os

    for path in paths:
        if path != "-" and os.path.isdir(path):
            expanded.extend(python_files(path, suffixes=(".py", ".ipynb")))
        else:
            expanded.append(path)
    return expanded


class _Command(typer.core.TyperCommand):
    """The usage line as ruff and black write theirs."""

    usage = "[OPTIONS] PATHS..."

    def format_usage(self, ctx, formatter) -> None:
        formatter.write_usage(ctx.command_path, self.usage)


class _VerifyCommand(_Command):
    usage = "[OPTIONS] FILE"


@app.command(cls=_Command, epilog=COMMANDS_HELP)
def optimize(
    paths: List[str] = typer.Argument(..., metavar="PATHS", hidden=True),  # described in the docstring
    output: Optional[str] = typer.Option(
        None, "-o", "--output", metavar="FILE", help="Write the result here (one input only; '-': stdout, as without -o)."
    ),
    in_place: bool = typer.Option(False, "--in-place", "-i", help="Rewrite the input files."),
    diff: bool = typer.Option(
        False, "--diff", help="Print a unified diff instead of the code (findings: stderr)."
    ),
    check: bool = typer.Option(False, "--check", help="Exit 1 if any file would change; write nothing."),
    report: bool = typer.Option(
        False, "--report", help="Print the per-pass cost table, then the diff (findings: stderr)."
    ),
    select: Optional[List[str]] = typer.Option(
        None, "--select", metavar="PASS[,PASS...]", help="Run only these passes (ids: ndif-opt rules)."
    ),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", metavar="PASS[,PASS...]", help="Skip these passes."),
    unsafe_fixes: Optional[bool] = typer.Option(
        None, "--unsafe-fixes/--no-unsafe-fixes", help="Also apply unsafe fixes."
    ),
    assume_remote: Optional[bool] = typer.Option(
        None, "--assume-remote/--no-assume-remote", help="Treat `remote=` flags of unknown value as remote."
    ),
    max_batch: Optional[int] = typer.Option(None, "--max-batch", metavar="N", help="Most invokes batched into one trace (32)."),
    fmt: Format = typer.Option(
        Format.text, "--format", metavar="FORMAT", help="text, json, sarif, markdown (a pull-request comment) or html (one page)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print no findings (and no progress bar)."),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", "-j", metavar="N",
        help="Worker processes for several files (default: one per CPU); 1 runs everything in this process.",
    ),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help="A pyproject.toml with [tool.ndif-opt]."),
    migrate: Optional[bool] = typer.Option(
        None, "--migrate/--no-migrate",
        help="First rewrite pre-0.5 nnsight code (`.value`, `nnsight.list()`, layer `output[0]`) for nnsight 0.5+.",
    ),
    nnsight: Optional[str] = typer.Option(
        None, "--nnsight", metavar="RELEASE",
        help="The nnsight release the rewrite must run on, any 0.5+ (default 0.8; 0.6, nnterp's, for a script "
             "that imports nnterp). 0.8.x is held to 0.8's rules; every other release to 0.6's, the stricter.",
    ),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", metavar="TOKENS", help="Cost model: tokens of a non-literal prompt."),
    latency: Optional[float] = typer.Option(None, "--latency", metavar="SECONDS", help="Cost model: seconds per request."),
    bandwidth: Optional[float] = typer.Option(None, "--bandwidth", metavar="BYTES/S", help="Cost model: download bytes/s."),
    throughput: Optional[float] = typer.Option(None, "--throughput", metavar="FLOP/S", help="Cost model: server FLOP/s."),
    session_limit: Optional[float] = typer.Option(
        None, "--session-limit", metavar="SECONDS", help="Cost model: seconds NDIF allows one request (3600)."
    ),
    model_config: Optional[str] = typer.Option(
        None, "--model-config", metavar="FILE", help="Cost model: a Hugging Face config.json for every model (its torch_dtype too)."
    ),
) -> None:
    """Rewrite nnsight scripts for fewer NDIF requests and smaller downloads.

    PATHS: Python files, notebooks (.ipynb) or directories; '-' reads stdin.

    stdout carries only the code, the diff (--diff), the report (--report) or the --format
    document; findings, errors and the summary go to stderr. IPython lines in a .py file
    (`!pip install`, `%time`) are kept as they are."""
    cost = _cost_settings(seq_len, latency, bandwidth, throughput, session_limit, model_config)
    if output == "-":
        output = None  # (as black and ruff read `-`: no file named "-")
    if jobs is not None and jobs < 1:
        _fail(f"--jobs must be at least 1, not {jobs}")
    files = _expand(paths)
    option_sets = {
        path: _options(select, ignore, unsafe_fixes, assume_remote, max_batch, path=path, config=config, cost=cost,
                       migrate=migrate, nnsight=nnsight)
        for path in files
    }
    writes_code = not (diff or check or report or in_place or fmt is not Format.text)
    _check_outputs(files, output, writes_code)
    outcomes = _processed(files, option_sets, jobs, quiet)
    results, errors, options_by_path = _gathered(outcomes, option_sets)
    changed = [entry for entry in results if entry[1].changed]
    _write_results(results, errors, in_place, output)
    # the findings say "fixed" (and what was done) only where the output holds the fixes
    wrote = in_place or output is not None or writes_code
    if fmt is Format.text:
        _print_text(results, diff, report, check, writes_code and output is None, quiet, wrote=wrote)
        if len(files) > 1:
            typer.echo(
                f"{len(files)} file(s): {len(changed)} would change, "
                f"{len(results) - len(changed)} unchanged, {len(errors)} error(s)",
                err=True,
            )
    else:
        _print_document(fmt, results, errors, options_by_path, wrote)
    if errors:
        raise typer.Exit(EXIT_ERROR)
    if check and changed:
        raise typer.Exit(EXIT_CHANGES)


def _cost_settings(seq_len, latency, bandwidth, throughput, session_limit, model_config) -> dict:
    """The cost model's settings given on the command line (a model config read here)."""
    cost = {k: v for k, v in {"seq-len": seq_len, "latency": latency, "bandwidth": bandwidth,
                              "throughput": throughput, "session-limit": session_limit}.items() if v is not None}
    if model_config is not None:
        from ndif_opt.frontends.config import ConfigError, load_model_config

        try:
            cost["model-config"] = load_model_config(model_config)
        except ConfigError as error:
            _fail(str(error))
    return cost


def _check_outputs(files: list[str], output: str | None, writes_code: bool) -> None:
    """Where the code goes must make sense for these inputs (else exit 2)."""
    if output is not None and len(files) != 1:
        _fail("-o/--output takes exactly one input file")
    if output is not None and files[0] != "-" and same_file(files[0], output):
        _fail(f"{output}: the output path is the input file; use --in-place to rewrite it")
    if writes_code and output is None and len(files) > 1:
        _fail("several inputs: use --in-place, --diff, --check or --report")


def _processed(files: list[str], option_sets: dict[str, Options], jobs: int | None, quiet: bool) -> list:
    """The files optimized (in a process pool), with the progress bar; interrupted or
    terminated, the workers are stopped and nothing is written."""
    from ndif_opt.frontends.batch import Terminated, default_jobs, process
    from ndif_opt.frontends.progress import Progress

    try:
        # the bar only on a terminal, for several files, without -q; erased before any output
        with Progress(len(files), sys.stderr, tty=None if not quiet else False) as progress:
            return process(files, option_sets, jobs=jobs or default_jobs(), progress=progress)
    except KeyboardInterrupt:  # the workers are stopped; nothing has been written
        _interrupted()
    except Terminated:  # SIGTERM while workers ran: they are stopped too
        typer.echo("ndif-opt: terminated", err=True)
        raise typer.Exit(EXIT_TERMINATED) from None


def _gathered(outcomes, option_sets: dict[str, Options]):
    """The results, the errors (each said on stderr) and each result's options."""
    results: list[tuple[str, Result, SourceFile]] = []
    errors: list[dict] = []
    options_by_path: dict[str, Options] = {}
    for outcome in outcomes:
        if outcome.error is not None:
            errors.append({"path": outcome.path, "message": outcome.error})
            typer.echo(f"ndif-opt: {outcome.error}", err=True)
        else:
            results.append((outcome.source.path, outcome.result, outcome.source))
            options_by_path[outcome.source.path] = option_sets[outcome.path]
    return results, errors, options_by_path


def _write_results(results: list[tuple[str, Result, SourceFile]], errors: list[dict], in_place: bool,
                   output: str | None) -> None:
    """--in-place and -o: each write atomic (an error writing one file is added to ``errors``)."""
    try:
        for path, result, source in results:
            if in_place and result.changed:
                try:
                    write_atomic(path, source.encode(result.code))
                except InputError as error:
                    errors.append({"path": path, "message": str(error)})
                    typer.echo(f"ndif-opt: {error}", err=True)
        if output is not None and results:
            path, result, source = results[0]
            try:
                write_atomic(output, source.encode(result.code))
            except InputError as error:
                _fail(str(error))
    except KeyboardInterrupt:  # each write is atomic: a file is either old or new
        _interrupted()


def _print_document(fmt: Format, results: list[tuple[str, Result, SourceFile]], errors: list[dict],
                    options_by_path: dict[str, Options], wrote: bool) -> None:
    """The --format document (json, markdown, html, sarif) on stdout."""
    if fmt is Format.json:
        typer.echo(to_json([(p, r) for p, r, _ in results], errors, written=wrote))
    elif fmt is Format.markdown:
        from ndif_opt.output.text import markdown_many

        typer.echo(markdown_many([(p, r) for p, r, _ in results], errors, written=wrote), nl=False)
    elif fmt is Format.html:
        from ndif_opt.output.html import render_html

        typer.echo(render_html([(p, r) for p, r, _ in results], errors=errors, written=wrote), nl=False)
    elif fmt is Format.sarif:
        import json

        from ndif_opt.output.sarif import to_sarif

        log = to_sarif([(p, r) for p, r, _ in results], errors, options=options_by_path, written=wrote)
        typer.echo(json.dumps(log, indent=2, ensure_ascii=False))


def _write_code(source: SourceFile, code: str) -> None:
    """The code on stdout as bytes in the input's own encoding and byte-order mark, so
    `ndif-opt f.py > g.py` gives what `-o g.py` writes (a latin-1 file stays latin-1)."""
    try:
        data = source.encode(code)
    except InputError as error:
        _fail(str(error))
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _print_text(results, diff: bool, report: bool, check: bool, code_to_stdout: bool, quiet: bool,
                wrote: bool = True) -> None:
    """Per file, on stdout only what was asked for (code, report, diff), so that it can be
    piped (`--diff | patch -p0`); findings and notes on stderr."""
    for path, result, source in results:
        if code_to_stdout:
            _write_code(source, result.code)
        if report:
            _print_report(path, result)
        if diff or report:
            notebook = getattr(result, "notebook", None)
            sys.stdout.write(notebook.diff() if notebook is not None else unified_diff(path, result.source, result.code))
        if not quiet:
            _print_findings(path, result, wrote)
        if check and result.changed:
            typer.echo(f"would rewrite {path}", err=True)


def _print_report(path: str, result: Result) -> None:
    typer.echo(f"{path}:")
    if not result.changed and not result.findings and not _sends_requests(result):
        typer.echo("  nothing to optimize: no remote nnsight work found")
        return
    typer.echo(cost_table(result, path))
    for line in result.assumptions:
        typer.echo(f"  assumption: {line}")


def _sends_requests(result: Result) -> bool:
    """Does the code as written send any remote request, by the cost table?"""
    before, _ = totals(result)
    return before.requests != 0 or before.forward_passes != 0


def _print_findings(path: str, result: Result, wrote: bool) -> None:
    sys.stdout.flush()  # on a terminal, a file's findings come after its code or diff
    for finding in result.findings:
        typer.echo(finding_line(path, finding, written=wrote), err=True)


rules_app = typer.Typer(add_completion=False, rich_markup_mode=None, context_settings=HELP_OPTIONS)


@rules_app.command()
def rules() -> None:
    """List the passes in pipeline order."""
    from ndif_opt.passes import PASSES

    for cls in PASSES:
        typer.echo(f"{cls.id}: {cls.summary()}")


verify_app = typer.Typer(add_completion=False, rich_markup_mode=None, context_settings=HELP_OPTIONS)


@verify_app.command(cls=_VerifyCommand)
def verify(
    path: str = typer.Argument(..., metavar="FILE", hidden=True),  # described in the docstring
    unsafe_fixes: bool = typer.Option(False, "--unsafe-fixes"),
    assume_remote: bool = typer.Option(False, "--assume-remote"),
    atol: float = typer.Option(0.0, "--atol", metavar="TOL", help="Absolute tolerance for tensors."),
    rtol: float = typer.Option(0.0, "--rtol", metavar="TOL", help="Relative tolerance for tensors."),
    fmt: VerifyFormat = typer.Option(VerifyFormat.text, "--format", metavar="FORMAT", help="text or json."),
    migrate: Optional[bool] = typer.Option(None, "--migrate/--no-migrate"),
    nnsight: Optional[str] = typer.Option(
        None, "--nnsight", metavar="RELEASE",
        help="The nnsight release the rewrite must run on, any 0.5+ (as for optimizing).",
    ),
    allow_same_error: bool = typer.Option(
        False, "--allow-same-error",
        help="Accept a script that raises locally when the optimized script raises the same "
             "exception, after its remote blocks ran (reported as OK (same error)).",
    ),
    select: Optional[List[str]] = typer.Option(
        None, "--select", metavar="PASS[,PASS...]", help="Run only these passes (ids: ndif-opt rules)."
    ),
    ignore: Optional[List[str]] = typer.Option(
        None, "--ignore", metavar="PASS[,PASS...]", help="Skip these passes."
    ),
) -> None:
    """Run the original and the optimized script on a tiny local model through an
    emulation of NDIF, compare every result, and print measured requests and bytes.

    FILE: the script (or notebook) to check. Requests, forward passes and bytes are
    measured on tiny models built from the real models' configurations: the bytes are
    the tiny models' ("download (raw)" is before NDIF's compression).

    Exit 0: OK. 1: MISMATCH (the results differ), or ORIGINAL WRONG (they differ only as the
    original's own run on NDIF does). 2: FAILED, nothing to compare — the
    original script raised locally (unless --allow-same-error and the optimized script
    raised the same), or a script that opens remote=True blocks made no request; or NOT
    MIGRATED: with --migrate, the script could not be migrated, and nothing ran."""
    from ndif_opt.frontends.batch import optimize_source
    from ndif_opt.frontends.verification import verify_optimized

    options = _options(select, ignore, unsafe_fixes, assume_remote, None, path=path, migrate=migrate, nnsight=nnsight)
    try:
        source = read_source(path)
    except InputError as error:
        _verify_failed(str(error), fmt)
    try:
        result = optimize_source(source, options)
    except InputError as error:  # a script that does not parse
        _verify_failed(str(error), fmt)
    except Exception as error:  # noqa: BLE001 - one FAILED line, never a traceback
        _verify_failed(f"ndif-opt could not optimize {path}: {_one_line(error)}", fmt)
    try:
        import ndif_opt.verify  # noqa: F401 - needs the verify extra
    except ImportError as error:
        _verify_failed(str(error), fmt)
    try:
        report = verify_optimized(source, result, path, options, atol=atol, rtol=rtol,
                                  allow_same_error=allow_same_error)
    except Exception as error:  # noqa: BLE001 - verify itself broke: one FAILED line
        from ndif_opt.verify import VerifyReport

        report = VerifyReport.could_not_run(f"the check could not run: {_one_line(error)}")
    _print_verify_report(report, fmt)
    if report.failed:  # like a script that cannot be parsed: there was nothing to compare
        raise typer.Exit(EXIT_ERROR)
    if not report.intended_ok:
        raise typer.Exit(EXIT_CHANGES)


def _print_verify_report(report, fmt: VerifyFormat) -> None:
    if fmt is VerifyFormat.json:
        import json

        typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        typer.echo(report.to_text())


def _verify_failed(reason: str, fmt: VerifyFormat) -> None:
    """`verify` could not run at all: its FAILED line (or report, in JSON), exit 2."""
    try:
        from ndif_opt.verify import VerifyReport
    except ImportError:  # the verify extra is missing: no report class to fill in
        typer.echo(f"verify: FAILED — {reason}")
    else:
        _print_verify_report(VerifyReport.could_not_run(reason), fmt)
    raise typer.Exit(EXIT_ERROR)


def _one_line(error: BaseException) -> str:
    first = (str(error).splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}"[:300]


def _serve(extra: str, what: str) -> None:
    """Run the server of an optional extra (``ndif_opt.frontends.<extra>.serve``); without
    the extra installed, one line naming it, exit 2."""
    import importlib

    try:
        serve = importlib.import_module(f"ndif_opt.frontends.{extra}").serve
    except ImportError as error:
        typer.echo(f"ndif-opt: {what} needs the {extra} extra ({error.name or error} is missing): "
                   f"pip install 'ndif-opt[{extra}]' (from a checkout: pip install -e '.[{extra}]')", err=True)
        raise SystemExit(EXIT_ERROR) from None
    serve()


def print_skill() -> None:
    """The guide for coding agents, shipped in the package (ndif_opt/skill/SKILL.md)."""
    from importlib.resources import files

    typer.echo(files("ndif_opt").joinpath("skill", "SKILL.md").read_text(encoding="utf-8"), nl=False)


def main(argv: list[str] | None = None) -> None:
    collect_garbage_rarely()  # this process is ours (forked workers inherit it): ndif_opt/engine/runtime.py
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "verify":
        verify_app(args[1:], prog_name="ndif-opt verify")
    elif args and args[0] == "lsp":
        _serve("lsp", "the editor server")
    elif args and args[0] == "mcp":
        _serve("mcp", "the MCP server")
    elif args == ["skill"]:
        print_skill()
    elif args == ["rules"]:
        rules()  # a table: no need to build the command line (typer imports pydantic)
    elif args and args[0] == "rules":
        rules_app(args[1:], prog_name="ndif-opt rules")
    else:
        app(args, prog_name="ndif-opt")


if __name__ == "__main__":
    main()
