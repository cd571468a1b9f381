"""SARIF 2.1.0 output, for code-scanning dashboards (``ndif-opt --format sarif``).

One run, one rule per pass, one result per finding. Regions are 1-based with an
exclusive end column, counted in Unicode code points (``columnKind`` says so). An
applied finding carries a ``fix``: the edits the pipeline made for it (what the editor's
quick fix does), with those of the findings it needs (``properties.needs``, by their
``properties.id``): where its edit is not valid alone, the fixes of a group are one fix,
and applying each group's once gives the pipeline's output.
Suppressed findings carry ``suppressions: [{"kind": "inSource"}]``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping
from pathlib import PurePath
from urllib.parse import quote

from ndif_opt.options import Options
from ndif_opt.types import Edit, Finding, Result, Safety, Status

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
VERSION = "2.1.0"

LEVELS = {
    Status.APPLIED: "note",
    Status.SKIPPED: "warning",
    Status.UNSAFE_NOT_APPLIED: "warning",
    Status.SUPPRESSED: "note",
}


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("ndif-opt")
    except Exception:  # not installed as a distribution
        return None


def _rule(cls) -> dict:
    doc = inspect.cleandoc(cls.__doc__ or cls.id)
    title, _, body = doc.partition("\n")
    short = title.split(":", 1)[-1].strip() if title.startswith(cls.id) else title.strip()
    full = body.strip()
    what = full.split("\n## ", 1)[0].removeprefix("## What it does").strip()
    return {
        "id": cls.id,
        "name": "".join(part.capitalize() for part in cls.id.split("-")),
        "shortDescription": {"text": short or cls.id},
        "fullDescription": {"text": " ".join(what.split()) or short or cls.id},
        "help": {"text": full or short or cls.id, "markdown": full or short or cls.id},
        "defaultConfiguration": {"level": "warning"},
    }


def artifact_uri(path: str) -> str:
    """A relative path stays relative (with ``/``); an absolute one becomes file://."""
    if path in ("-", "<stdin>"):
        return "stdin"
    pure = PurePath(path)
    if pure.is_absolute():
        return pure.as_uri()
    return quote(pure.as_posix(), safe="/")


def _region(start_line: int, start_char: int, end_line: int, end_char: int) -> dict:
    return {
        "startLine": start_line + 1,
        "startColumn": start_char + 1,
        "endLine": end_line + 1,
        "endColumn": end_char + 1,
    }


def _edit_region(source: str, edit: Edit) -> dict:
    """SARIF region of a line-based edit; positions past the last line are clamped to
    the end of the text (which is line n+1, column 1 after a final newline)."""
    lines = source.splitlines(keepends=True)

    def point(line: int, char: int) -> tuple[int, int]:
        if line < len(lines):
            return line, char
        if not lines:
            return 0, 0
        last = lines[-1]
        stripped = last.rstrip("\r\n")
        if stripped != last:  # text ends with a newline: the empty line after it
            return len(lines), 0
        return len(lines) - 1, len(last)

    sl, sc = point(edit.range.start.line, edit.range.start.character)
    el, ec = point(edit.range.end.line, edit.range.end.character)
    return _region(sl, sc, el, ec)


def _options_for(result: Result, options: Options | None, pass_id: str) -> Options:
    if options is None:
        unsafe = any(f.applied and f.safety is Safety.UNSAFE for f in result.findings)
        options = Options(unsafe_fixes=unsafe)
    return dataclasses.replace(options, select=frozenset({pass_id}), ignore=frozenset())


def _fixes(path: str, result: Result, options: Options | None) -> dict[int, list[Edit]]:
    """Edits per applied finding (by index in ``result.findings``): the edits the pipeline
    made for it, with those of the findings it needs (``Finding.fix``). A result whose
    findings do not carry their fixes (a notebook's, in the JSON file's lines) gets each
    pass's own edits, from that pass run alone, split among its findings by position."""
    if any(finding.id for finding in result.findings):
        return {index: list(finding.fix) for index, finding in enumerate(result.findings) if finding.fix}
    return _solo_fixes(path, result, options)


def _solo_fixes(path: str, result: Result, options: Options | None) -> dict[int, list[Edit]]:
    from ndif_opt.engine.cells import optimize_script  # a script's IPython lines masked, as the CLI does

    out: dict[int, list[Edit]] = {}
    by_pass: dict[str, list[int]] = {}
    for index, finding in enumerate(result.findings):
        if finding.status is Status.APPLIED:
            by_pass.setdefault(finding.pass_id, []).append(index)
    for pass_id, indices in by_pass.items():
        try:
            alone = optimize_script(result.source, _options_for(result, options, pass_id), filename=path)
        except (SyntaxError, RecursionError, ValueError):
            continue
        for edit in alone.edits:
            # Give the edit to the applied finding whose range holds its first line,
            # else to the nearest one: every edit of the pass goes to exactly one result.
            def distance(i: int) -> tuple[int, int]:
                rng = result.findings[i].range
                line = edit.range.start.line
                inside = rng.start.line <= line <= rng.end.line
                return (0 if inside else min(abs(line - rng.start.line), abs(line - rng.end.line)), i)

            out.setdefault(min(indices, key=distance), []).append(edit)
    return out


def _result(path: str, uri: str, finding: Finding, rule_index: int, edits: list[Edit] | None, source: str,
            written: bool = False) -> dict:
    r = finding.range
    text = finding.worded(written) + (f" — {finding.reason}" if finding.reason else "")
    entry: dict = {
        "ruleId": finding.pass_id,
        "level": LEVELS[finding.status],
        "message": {"text": text},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": uri},
                    "region": _region(r.start.line, r.start.character, r.end.line, r.end.character),
                }
            }
        ],
        "properties": {"status": finding.status.value, "safety": finding.safety.value},
    }
    if rule_index >= 0:
        entry["ruleIndex"] = rule_index
    if finding.reason:
        entry["properties"]["reason"] = finding.reason
    if finding.id:
        entry["properties"]["id"] = finding.id
    if finding.needs:  # its fix is theirs too: applied together
        entry["properties"]["needs"] = list(finding.needs)
    if finding.status is Status.SUPPRESSED:
        entry["suppressions"] = [{"kind": "inSource"}]
    if edits:
        entry["fixes"] = [
            {
                "description": {"text": f"ndif-opt: {finding.pass_id}"
                                        + (f" (with {', '.join(finding.needs)})" if finding.needs else "")},
                "artifactChanges": [
                    {
                        "artifactLocation": {"uri": uri},
                        "replacements": [
                            {
                                "deletedRegion": _edit_region(source, edit),
                                "insertedContent": {"text": edit.new_text},
                            }
                            for edit in edits
                        ],
                    }
                ],
            }
        ]
    return entry


def to_sarif(
    entries: list[tuple[str, Result]],
    errors: list[dict] | None = None,
    *,
    options: Options | Mapping[str, Options] | None = None,
    written: bool = False,
) -> dict:
    """A SARIF 2.1.0 log (a JSON-ready dict) for ``(path, result)`` pairs.

    ``errors`` are the CLI's ``{"path": ..., "message": ...}`` entries for inputs that
    could not be read or parsed; they become tool execution notifications and make
    the invocation unsuccessful. ``options`` are the options the results were made
    with (one for all files, or a mapping from path to options); they are used only for
    results whose findings do not carry their fixes (a notebook's, in its JSON's lines), to
    compute each pass's own fix (None: defaults, with unsafe fixes on when an unsafe fix was
    applied). ``written``: the files hold the fixes (a result's message
    says what was done; otherwise what its fix would do).
    """
    from ndif_opt.passes import PASSES

    rules = [_rule(cls) for cls in PASSES]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = []
    for path, result in entries:
        uri = artifact_uri(os.fspath(path))
        file_options = options.get(path) if isinstance(options, Mapping) else options
        fixes = _fixes(path, result, file_options) if any(f.applied for f in result.findings) else {}
        for i, finding in enumerate(result.findings):
            results.append(
                _result(path, uri, finding, index.get(finding.pass_id, -1), fixes.get(i), result.source, written)
            )
    driver: dict = {"name": "ndif-opt", "rules": rules}
    version = _version()
    if version:
        driver["version"] = version
    run: dict = {"tool": {"driver": driver}, "columnKind": "unicodeCodePoints", "results": results}
    if errors is not None:
        run["invocations"] = [
            {
                "executionSuccessful": not errors,
                "toolExecutionNotifications": [_notification(error) for error in errors],
            }
        ]
    return {"$schema": SCHEMA, "version": VERSION, "runs": [run]}


def _notification(error: dict) -> dict:
    note: dict = {"level": "error", "message": {"text": str(error.get("message") or "error")}}
    if error.get("path"):
        note["locations"] = [
            {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(str(error["path"]))}}}
        ]
    return note


__all__ = ["to_sarif", "artifact_uri", "SCHEMA", "VERSION"]
