"""SARIF 2.1.0 output: the properties the standard requires, checked one by one
(sarifLog, run, tool, toolComponent, reportingDescriptor, result, message, location,
region, fix, artifactChange, replacement), and concrete values for the examples."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ndif_opt import optimize
from ndif_opt.output.sarif import artifact_uri, to_sarif
from ndif_opt.passes import PASS_IDS
from ndif_opt.types import Finding, Range, Result, Status

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PROMPT_LOOP = (ROOT / "examples" / "prompt_loop.py").read_text(encoding="utf-8")


def check_message(message: dict) -> None:
    assert isinstance(message, dict)
    assert isinstance(message.get("text"), str) and message["text"], message


def check_region(region: dict) -> None:
    for key in ("startLine", "startColumn", "endLine", "endColumn"):
        assert isinstance(region[key], int) and region[key] >= 1, region  # 1-based
    assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])


def check_log(log: dict) -> None:
    """The required properties of SARIF 2.1.0 (§3.13 sarifLog onwards)."""
    json.dumps(log)  # JSON-serializable
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-schema-2.1.0.json")
    assert isinstance(log["runs"], list) and log["runs"]
    for run in log["runs"]:
        driver = run["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        rule_ids = []
        for rule in driver.get("rules", []):
            assert isinstance(rule["id"], str) and rule["id"]
            rule_ids.append(rule["id"])
            for key in ("shortDescription", "fullDescription", "help"):
                if key in rule:
                    check_message(rule[key])
        assert len(rule_ids) == len(set(rule_ids))
        assert run.get("columnKind") in (None, "utf16CodeUnits", "unicodeCodePoints")
        for invocation in run.get("invocations", []):
            assert isinstance(invocation["executionSuccessful"], bool)  # required
            for note in invocation.get("toolExecutionNotifications", []):
                check_message(note["message"])
        for result in run["results"]:
            check_message(result["message"])
            assert result["ruleId"] in rule_ids
            if "ruleIndex" in result:
                assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
            assert result["level"] in ("none", "note", "warning", "error")
            assert result["locations"]
            for location in result["locations"]:
                physical = location["physicalLocation"]
                assert isinstance(physical["artifactLocation"]["uri"], str)
                check_region(physical["region"])
            for suppression in result.get("suppressions", []):
                assert suppression["kind"] in ("inSource", "external")
            for fix in result.get("fixes", []):
                assert fix["artifactChanges"]
                for change in fix["artifactChanges"]:
                    assert isinstance(change["artifactLocation"]["uri"], str)
                    assert change["replacements"]
                    for replacement in change["replacements"]:
                        check_region(replacement["deletedRegion"])
                        assert isinstance(replacement["insertedContent"]["text"], str)


def test_prompt_loop_concrete_values():
    result = optimize(PROMPT_LOOP)
    log = to_sarif([("examples/prompt_loop.py", result)])
    check_log(log)
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ndif-opt"
    assert [rule["id"] for rule in driver["rules"]] == list(PASS_IDS)
    hoisting = driver["rules"][PASS_IDS.index("session-hoisting")]
    assert hoisting["shortDescription"]["text"] == "one remote request for a loop (or run) of remote traces."
    assert hoisting["fullDescription"]["text"].startswith("Wraps a loop whose body runs remote traces")
    assert "## Why is this bad?" in hoisting["help"]["text"]
    assert run["columnKind"] == "unicodeCodePoints"

    (entry,) = [r for r in run["results"] if r["ruleId"] == "session-hoisting"]
    for_line = PROMPT_LOOP.splitlines().index("for prompt in PROMPTS:") + 1  # 1-based
    last = PROMPT_LOOP.splitlines()[for_line - 1 + 4]
    assert last.strip().startswith("top_tokens[prompt] =")
    assert entry["level"] == "note"
    # nothing was written: the fix is a proposal
    assert entry["message"]["text"].startswith("would wrap this loop in one session: 8 requests → 1")
    location = entry["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "examples/prompt_loop.py"
    assert location["region"] == {
        "startLine": for_line,
        "startColumn": 1,
        "endLine": for_line + 4,
        "endColumn": len(last) + 1,  # exclusive end, 1-based
    }
    assert entry["properties"]["status"] == "applied"

    # The fix is the edit the pipeline made for it, with the reduction-pushdown's inside the
    # session it makes (which needs it): here they are all the pipeline's edits.
    assert entry["properties"]["id"] == f"session-hoisting@{for_line}:1"
    (pushdown,) = [r for r in run["results"] if r["ruleId"] == "reduction-pushdown"]
    assert entry["properties"]["needs"] == [pushdown["properties"]["id"]]
    assert pushdown["properties"]["needs"] == [entry["properties"]["id"]]
    (fix,) = entry["fixes"]
    assert fix["description"]["text"] == f"ndif-opt: session-hoisting (with {pushdown['properties']['id']})"
    assert pushdown["fixes"][0]["artifactChanges"] == fix["artifactChanges"]
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "examples/prompt_loop.py"
    applied = apply_replacements(PROMPT_LOOP, change["replacements"])
    assert applied == optimize(PROMPT_LOOP).code


def apply_replacements(text: str, replacements: list[dict]) -> str:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1 if line - 1 < len(lines) else len(text)

    spans = sorted(
        (offset(r["deletedRegion"]["startLine"], r["deletedRegion"]["startColumn"]),
         offset(r["deletedRegion"]["endLine"], r["deletedRegion"]["endColumn"]),
         r["insertedContent"]["text"])
        for r in replacements
    )
    out, cursor = [], 0
    for start, end, new in spans:
        assert start >= cursor
        out += [text[cursor:start], new]
        cursor = end
    return "".join(out) + text[cursor:]


def test_every_example_gives_a_valid_log():
    entries = [(f"examples/{path.name}", optimize(path.read_text(encoding="utf-8"))) for path in EXAMPLES]
    log = to_sarif(entries)
    check_log(log)
    results = log["runs"][0]["results"]
    assert len(results) == sum(len(r.findings) for _, r in entries)
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} <= {
        p for p, _ in entries
    }
    # Every applied finding has a fix; the fixes of a group are one; each group's applied once
    # gives the pipeline's output.
    for path, result in entries:
        mine = [r for r in results if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == path]
        groups = {}
        for r in mine:
            assert ("fixes" in r) == (r["properties"]["status"] == "applied"), r
            for fix in r.get("fixes", []):
                (change,) = fix["artifactChanges"]
                groups[json.dumps(change["replacements"])] = change["replacements"]
        assert apply_replacements(result.source, [rep for reps in groups.values() for rep in reps]) == result.code


def test_levels_suppressions_and_reasons():
    def finding(status, reason=None):
        return Finding("session-hoisting", "msg", Range.of(2, 4, 3, 0), status, reason=reason)

    result = Result(
        source="x\n" * 5,
        code="x\n" * 5,
        findings=(
            finding(Status.SKIPPED, "the loop prints"),
            finding(Status.UNSAFE_NOT_APPLIED, "drops a progress bar"),
            finding(Status.SUPPRESSED),
        ),
    )
    log = to_sarif([("/abs/dir/my script.py", result)])
    check_log(log)
    skipped, unsafe, suppressed = log["runs"][0]["results"]
    assert skipped["level"] == "warning" and unsafe["level"] == "warning"
    assert skipped["message"]["text"] == "msg — the loop prints"
    assert skipped["properties"]["reason"] == "the loop prints"
    assert suppressed["suppressions"] == [{"kind": "inSource"}]
    assert "fixes" not in skipped
    region = skipped["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 3, "startColumn": 5, "endLine": 4, "endColumn": 1}
    uri = skipped["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "file:///abs/dir/my%20script.py"


def test_artifact_uris():
    assert artifact_uri("examples/a b.py") == "examples/a%20b.py"
    assert artifact_uri("-") == "stdin"
    assert re.match(r"^file:///", artifact_uri("/tmp/x.py"))


def test_empty_log():
    log = to_sarif([])
    check_log(log)
    assert log["runs"][0]["results"] == []


def test_errors_become_notifications():
    log = to_sarif([], [{"path": "bad.py", "message": "bad.py: cannot parse: invalid syntax"}])
    check_log(log)
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error"
    assert note["message"]["text"] == "bad.py: cannot parse: invalid syntax"
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "bad.py"
    ok = to_sarif([], [])
    assert ok["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_a_script_with_ipython_lines_gets_its_fixes():
    source = "!pip install nnsight\n" + PROMPT_LOOP
    result = optimize(source)
    assert result.changed
    run = to_sarif([("sweep.py", result)])["runs"][0]
    (entry,) = [r for r in run["results"] if r["ruleId"] == "session-hoisting"]
    assert entry.get("fixes"), "the fix of a script with a magic line was left out"
