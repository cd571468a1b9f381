"""The pipeline: edits, finding positions, robustness, determinism."""

from __future__ import annotations

from pathlib import Path

import pytest

from ndif_opt import Status, optimize
from ndif_opt.passes import PASSES

ROOT = Path(__file__).resolve().parents[2]
# legacy_api.py is pre-0.5 code: tests/passes/migrate_api/test_migrate.py checks it against nnsight 0.8
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.stem != "legacy_api")


def apply_edits(source: str, edits) -> str:
    lines = source.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: e.range.start, reverse=True):
        start, end = edit.range.start.line, edit.range.end.line
        lines[start:end] = [edit.new_text] if edit.new_text else []
    return "".join(lines)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_edits_turn_the_source_into_the_code(path):
    source = path.read_text()
    result = optimize(source)
    assert apply_edits(source, result.edits) == result.code


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_deterministic(path):
    source = path.read_text()
    first, second = optimize(source), optimize(source)
    assert first.code == second.code and first.findings == second.findings and first.costs == second.costs


def test_findings_point_at_the_original_lines():
    source = (ROOT / "examples" / "prompt_loop.py").read_text()
    lines = source.splitlines()
    for finding in optimize(source).findings:
        text = lines[finding.range.start.line][finding.range.start.character :]
        if finding.pass_id == "session-hoisting":
            assert text.startswith("top_tokens = {}") or text.startswith("for prompt in PROMPTS")
        if finding.pass_id == "reduction-pushdown":
            assert text.startswith("logits = model.lm_head.output.save()")


def test_a_failing_pass_leaves_the_code_alone(monkeypatch):
    broken = PASSES[-1]

    def explode(self, module, facts, context):
        raise RuntimeError("boom")

    monkeypatch.setattr(broken, "run", explode)
    source = (ROOT / "examples" / "prompt_loop.py").read_text()
    result = optimize(source)
    errors = [f for f in result.findings if f.pass_id == broken.id and f.status is Status.SKIPPED]
    assert errors and "internal error: RuntimeError: boom" in errors[0].reason
    assert "model.session(remote=True)" in result.code  # the other passes still ran


def test_costs_chain_from_pass_to_pass():
    result = optimize((ROOT / "examples" / "steering_sweep.py").read_text())
    for previous, current in zip(result.costs, result.costs[1:]):
        assert previous.after == current.before


def test_source_without_nnsight_is_untouched_and_fast_path():
    source = "import os\n# nothing to see\nprint(os.getcwd())\n"
    result = optimize(source)
    assert result.code == source and not result.findings and not result.costs


def test_a_finding_moved_keeps_every_other_field():
    import dataclasses

    from ndif_opt.types import Edit, Finding, Range, Safety, Status

    uses = (Range.of(5, 2, 5, 4),)
    finding = Finding("p", "m", Range.of(0, 0, 0, 1), Status.SKIPPED, Safety.UNSAFE, "why", "x.cpu()", uses)
    moved = finding.with_range(Range.of(3, 0, 3, 1))
    assert moved == dataclasses.replace(finding, range=Range.of(3, 0, 3, 1))
    assert moved.evidence == "x.cpu()" and moved.uses == uses  # (not compared by ==)
    assert finding.with_range(Range.of(3, 0, 3, 1), (Range.of(8, 2, 8, 4),)).uses == (Range.of(8, 2, 8, 4),)
    # every field but the range is copied: a field added to Finding must be added there too
    assert {f.name for f in dataclasses.fields(Finding)} == {
        "pass_id", "message", "range", "status", "safety", "reason", "evidence", "uses", "requests", "subject",
        "proposal", "touched", "id", "fix", "needs"}
    claimed = dataclasses.replace(finding, requests=(3, 1), subject="with x:", proposal="would m")
    kept = claimed.with_range(Range.of(3, 0, 3, 1))
    assert (kept.requests, kept.subject, kept.proposal) == ((3, 1), "with x:", "would m")
    fixed = dataclasses.replace(finding, touched=(Range.of(1, 0, 2, 0),), id="p@1:1", needs=("q@2:1",),
                                fix=(Edit(Range.of(1, 0, 2, 0), "y\n"),))
    kept = fixed.with_range(Range.of(3, 0, 3, 1))
    assert (kept.touched, kept.id, kept.fix, kept.needs) == (fixed.touched, fixed.id, fixed.fix, fixed.needs)
    assert fixed.with_range(fixed.range, touched=(Range.of(4, 0, 4, 0),)).touched == (Range.of(4, 0, 4, 0),)


def test_the_report_says_which_way_each_figure_went():
    """A ratio alone reads `0.833×` for an increase: the table says `fewer` or `more`."""
    from ndif_opt.output.text import cost_table

    grows = optimize(
        "from nnsight import LanguageModel\n\n"
        'model = LanguageModel("openai-community/gpt2")\n'
        "results = []\n"
        'with model.trace("hello", remote=True):\n'
        "    results.append(model.lm_head.output[0, -1].argmax())\n"
        "print(results)\n"
    )
    # the client list filled on the server now comes back: a correctness fix that downloads more
    assert "download 1.2× more" in cost_table(grows)
    shrinks = optimize((ROOT / "examples" / "logit_lens.py").read_text())
    assert "requests 32× fewer" in cost_table(shrinks)


def test_a_finding_about_a_name_an_earlier_pass_added_says_which_pass_added_it():
    # session-hoisting records a print's values in a list it adds (`_ndif_rows`); a later
    # pass's finding that quotes that list must not present it as the user's name (the
    # corpus has no such finding since invoke-batching keeps that record before the
    # invoke: the rule is checked on a finding as a later pass would word it)
    from ndif_opt.engine.steps import naming_added
    from ndif_opt.types import Finding, Position, Range

    where = Range(Position(5, 0), Position(5, 10))
    later = Finding("invoke-batching", "this loop runs 3 forward passes", where, Status.SKIPPED,
                    reason="not batched: it fills `_ndif_rows` before its last module read; `rows` too")
    named = naming_added(later, {"_ndif_rows": "session-hoisting"})
    assert named.reason == ("not batched: it fills `_ndif_rows` (which session-hoisting added) before its last "
                            "module read; `rows` too")
    assert naming_added(named.__class__("detach-cpu", "m", where, Status.APPLIED), {"_ndif_rows": "x"}).reason is None


def test_options_hold_only_what_the_caller_sets():
    # what a run decides (the release targeted, reserved names, windows' edges) is its
    # RunContext; Options are the settings configuration and the CLI take, and what the
    # caller says about the code (a notebook's cells, the user's modules beside it)
    import dataclasses

    from ndif_opt.frontends.config import OVERRIDES
    from ndif_opt.options import Options

    said_about_the_code = {"notebook", "local_modules"}
    assert {f.name for f in dataclasses.fields(Options)} - said_about_the_code == set(OVERRIDES)


def test_the_architecture_doc_lists_the_pipeline_steps_in_order():
    # the loop runs the steps of one declared table; the doc's table is that table
    import re

    from ndif_opt.engine.steps import STEPS

    names = [step.name for step in STEPS]
    assert len(set(names)) == len(names)
    text = (ROOT / "docs" / "architecture.md").read_text().split("## The loop and its steps", 1)[1]
    assert re.findall(r"^\| `([a-z-]+)` \|", text, re.M) == names


NEGATED_SAVE = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
scores = []
for text in ["red", "green", "blue"]:
    with model.trace(text, remote=True):
        energy = -model.lm_head.output.logsumexp(-1).mean().save()
    scores.append(energy.item())
print(scores)
'''


def test_an_import_a_later_pass_leaves_unused_goes_with_the_finding_that_added_it():
    # nnsight-05-failures saves `energy` as `nnsight.save(-...)` and imports nnsight;
    # session-hoisting then reads it in the session, and the wrap goes (trial51 min_02):
    # the import and the finding describing the wrap go with it
    result = optimize(NEGATED_SAVE)
    assert "model.session(remote=True)" in result.code
    assert "nnsight.save" not in result.code and "import nnsight\n" not in result.code, result.code
    assert not [f for f in result.findings if "nnsight.save" in f.message], result.findings


def test_an_import_the_script_has_stays_when_nothing_reads_it_any_more():
    source = "import nnsight\n" + NEGATED_SAVE
    assert optimize(source).code.startswith("import nnsight\n")
