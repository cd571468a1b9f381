"""A finding reads true at the moment it is read: "wrapped this loop" where the output holds
the fix, "would wrap this loop" where nothing was written (the editor on the file as it
is, `--diff`, a report, SARIF), and "fixed" only where the output holds the edit.

Each pass writes an applied fix's message once, with its phrases that change with the
moment as ``tense(done, proposed)`` (ndif_opt/wording.py); every finding carries
both wordings and each output picks one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ndif_opt import Status, optimize
from ndif_opt.options import Options
from ndif_opt.passes import PASSES
from ndif_opt.types import Finding, Range
from ndif_opt.wording import split_tenses, tense

ROOT = Path(__file__).resolve().parent.parent
DEVSET = ROOT.parent / "shared" / "devset"
SCRIPTS = sorted((ROOT / "examples").glob("*.py")) + (sorted(DEVSET.glob("[0-9]*.py")) if DEVSET.is_dir() else [])
CASES = [(cls.id, case) for cls in PASSES for case in cls.cases if case.after is not None]
MARKS = ("\ue000", "\ue001", "\ue002")

# words that say a fix was made; a proposal has none of them outside code quotes
DONE_WORDS = (" now ", "wrapped ", "added ", "is no longer", "are no longer", " moved ", "saved `", "split into")


def _applied(result) -> list[Finding]:
    return [f for f in result.findings if f.status is Status.APPLIED]


def _outside_quotes(text: str) -> str:
    return "".join(part for i, part in enumerate(text.split("`")) if i % 2 == 0)


def _check_both_wordings(findings) -> None:
    for finding in findings:
        assert finding.proposal is not None and finding.proposal != finding.message, finding.message
        assert not any(mark in finding.message + finding.proposal for mark in MARKS)
        said = _outside_quotes(finding.proposal)
        assert "would" in said, finding.proposal
        said = re.sub(r"\bwould(?: \w+){1,3}", "", said)  # (`would be split into`)
        assert not any(word in said for word in DONE_WORDS), finding.proposal


def test_the_two_wordings_of_a_message():
    message = f"{tense('wrapped', 'would wrap')} this loop; `x` {tense('now runs', 'would run')} after it"
    assert split_tenses(message) == ("wrapped this loop; `x` now runs after it",
                                     "would wrap this loop; `x` would run after it")
    assert split_tenses("this loop runs 3 forward passes") == ("this loop runs 3 forward passes", None)


@pytest.mark.parametrize("pass_id,case", CASES, ids=[f"{p}:{c.name or i}" for i, (p, c) in enumerate(CASES)])
def test_every_applied_fix_of_the_cases_can_be_read_as_a_proposal(pass_id, case):
    options = Options(unsafe_fixes=case.unsafe_fixes, notebook=case.notebook, migrate=pass_id == "migrate-api")
    _check_both_wordings(_applied(optimize(case.before, options=options)))


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_applied_fix_of_the_scripts_can_be_read_as_a_proposal(path):
    for options in (Options(), Options(unsafe_fixes=True)):
        _check_both_wordings(_applied(optimize(path.read_text(), options=options)))


def test_a_finding_picks_its_wording_by_whether_the_output_was_written():
    finding = Finding("session-hoisting", "wrapped this loop", Range.of(0, 0, 0, 1), Status.APPLIED,
                      proposal="would wrap this loop")
    assert finding.worded(written=True) == "wrapped this loop"
    assert finding.worded(written=False) == "would wrap this loop"
    assert finding.to_dict(written=False)["message"] == "would wrap this loop"
    declined = finding.declined("the notebook's cells could not hold it")
    assert (declined.status, declined.worded(True), declined.reason) == (
        Status.SKIPPED, "would wrap this loop", "the notebook's cells could not hold it")
    framed = finding.framed(before="[cell 2, line 1] ", after=" (used in cell 3)")
    assert framed.worded(False) == "[cell 2, line 1] would wrap this loop (used in cell 3)"
    skipped = Finding("p", "this loop could run as one trace", Range.of(0, 0, 0, 1), Status.SKIPPED)
    assert skipped.worded(True) == skipped.worded(False) == skipped.message


# -- each output ------------------------------------------------------------------------------

EXAMPLE = ROOT / "examples" / "prompt_loop.py"


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ndif_opt.frontends.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_command_line_says_fixed_only_when_it_wrote_the_output(tmp_path):
    diff = _cli(EXAMPLE, "--diff")
    hoisting = next(line for line in diff.stderr.splitlines() if "session-hoisting" in line)
    assert "[fixable] would wrap this loop in one session" in hoisting, hoisting
    out = tmp_path / "out.py"
    written = _cli(EXAMPLE, "-o", out)
    hoisting = next(line for line in written.stderr.splitlines() if "session-hoisting" in line)
    assert "[fixed] wrapped this loop in one session" in hoisting, hoisting


@pytest.mark.parametrize("fmt", ["json", "sarif", "markdown", "html"])
def test_a_report_without_writing_proposes(fmt, tmp_path):
    report = _cli(EXAMPLE, "--report", "--format", fmt).stdout
    assert "would wrap this loop in one session" in report
    assert "wrapped this loop" not in report
    label = {"markdown": "({})", "html": ">{}</span>"}.get(fmt)
    if label:
        assert label.format("fixable") in report and label.format("fixed") not in report
    if fmt == "json":
        messages = [f["message"] for f in json.loads(report)["files"][0]["findings"]]
        assert any(m.startswith("would wrap") for m in messages)
    script = tmp_path / "s.py"
    script.write_text(EXAMPLE.read_text())
    rewritten = _cli(script, "--in-place", "--format", fmt).stdout
    assert "wrapped this loop in one session" in rewritten and "would wrap this loop" not in rewritten
    if label:
        assert label.format("fixed") in rewritten and label.format("fixable") not in rewritten


def test_the_editor_proposes_on_the_file_as_it_is():
    from ndif_opt.frontends.lsp import diagnostic_message

    result = optimize(EXAMPLE.read_text())
    hoisted = next(f for f in result.findings if f.pass_id == "session-hoisting")
    assert diagnostic_message(hoisted).startswith("would wrap this loop in one session")



def test_an_applied_unsafe_fix_says_what_it_gives_up():
    source = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
scores = []
for layer in range(3):
    with model.trace("Hello world", remote=True):
        n = model.transformer.h[layer].output.norm().save()
    scores.append(round(n.item(), 2))
    print(f"layer {layer}: scores so far {scores}")
'''
    result = optimize(source, unsafe_fixes=True)
    hoisted = [f for f in result.findings if f.pass_id == "session-hoisting" and f.applied]
    assert hoisted and "`print` output now goes to the server's log, not your screen" in hoisted[0].message, \
        [f.message for f in result.findings]


def test_a_session_that_also_fixes_a_container_left_empty_on_ndif_says_so():
    # the original's `found` stays empty on NDIF (the trace fills the server's copy); the
    # session fixes it: a new user must learn that the original was wrong, not only slow
    source = (
        "from nnsight import LanguageModel\n\n"
        'model = LanguageModel("openai-community/gpt2")\n'
        "tops = []\n"
        'for prompt in ["a b", "c d"]:\n'
        "    found = {}\n"
        "    with model.trace(prompt, remote=True):\n"
        '        found["top"] = model.lm_head.output[0, -1].argmax().save()\n'
        '    tops.append(int(found["top"]))\n'
        "print(tops)\n"
    )
    hoisted = next(f for f in optimize(source).findings if f.pass_id == "session-hoisting")
    assert "a correctness fix: `found` stayed empty on your machine when run on NDIF" in hoisted.message


def test_a_loop_whose_flag_it_decides_sends_up_to_its_requests():
    """`remote=use_remote` with `use_remote = layer >= 6` set in the loop: the refusal said
    "this loop sends 12 separate remote requests" where 6 ran remotely (a trial measured)."""
    source = (
        "from nnsight import LanguageModel\n"
        "model = LanguageModel('openai-community/gpt2')\n"
        "norms = {}\n"
        "for layer in range(12):\n"
        "    use_remote = layer >= 6\n"
        "    with model.trace('Neural networks are', remote=use_remote):\n"
        "        n = model.transformer.h[layer].output.norm().save()\n"
        "    norms[layer] = n.item()\n"
    )
    refusal = next(f for f in optimize(source).findings if f.pass_id == "session-hoisting")
    assert "this loop sends up to 12 separate remote requests" in refusal.message, refusal.message


def test_a_refusal_of_nested_loops_says_what_each_clause_holds():
    """trial51 min_03: `try: ... finally: count += 1` around each trace of an inner loop whose
    `for ... else:` prints. The refusals said the code "catches exceptions" (a `finally:`
    catches nothing), that the `else:` clause "holds remote work too" (its loop does), and
    "would send 2 sessions" after "one session around it" (one per run of the inner loop)."""
    source = (
        "from nnsight import LanguageModel\n"
        "model = LanguageModel('openai-community/gpt2')\n"
        "count = 0\n"
        "for text in ['Paris is', 'Rome is']:\n"
        "    for layer in [1, 4]:\n"
        "        try:\n"
        "            with model.trace(text, remote=True):\n"
        "                peak = model.transformer.h[layer].output.max().save()\n"
        "        finally:\n"
        "            count += 1\n"
        "        if peak.item() > 100:\n"
        "            break\n"
        "    else:\n"
        "        print('no peak for', text)\n"
    )
    outer, inner = sorted((f for f in optimize(source).findings if f.pass_id == "session-hoisting"),
                          key=lambda f: f.range.start.line)
    for finding in (outer, inner):
        assert "catches exceptions" not in finding.reason and "has a `try` with a `finally:`" in finding.reason
    assert "and remote work are both in a `for` loop with an `else:` clause" in outer.reason, outer.reason
    assert "would send one each time it runs (2 sessions in all)" in inner.message, inner.message


def test_a_scalar_used_whole_is_not_said_to_be_downloaded_whole():
    """trial51 s46: `v = ....norm().save()`, then `v.item()` and `grid[i] = v`: "`v` is
    still downloaded whole" of a 0-d tensor, which no reduction could make smaller."""
    source = (
        "import torch\n"
        "from nnsight import LanguageModel\n"
        "model = LanguageModel('openai-community/gpt2')\n"
        "grid = torch.zeros(2)\n"
        "with model.trace('Hello world', remote=True):\n"
        "    v = model.transformer.h[3].output.norm().save()\n"
        "    w = model.transformer.h[3].output.save()\n"
        "print(round(v.item(), 3), w[0, -1].norm().item())\n"
        "grid[0] = v\n"
        "scaled = w * 2\n"
    )
    said = [f.message for f in optimize(source).findings if f.pass_id == "reduction-pushdown"]
    assert "`w` is still downloaded whole" in said and "`v` is still downloaded whole" not in said, said


def test_a_line_prepared_for_the_session_is_named_with_the_name_it_cannot_bind_early():
    """trial51 s31: a file written after one loop is read back before the next; the
    refusal to make one session said only "`f` is read before the line that must run on
    your machine first binds it", without the line."""
    source = (
        "import json\n"
        "from nnsight import LanguageModel\n"
        "model = LanguageModel('openai-community/gpt2')\n"
        "first = {}\n"
        "for word in ['a', 'b']:\n"
        "    with model.trace(word, remote=True):\n"
        "        first[word] = model.lm_head.output[0, -1].argmax().item().save()\n"
        "with open('first.json', 'w') as f:\n"
        "    json.dump(first, f)\n"
        "with open('first.json') as f:\n"
        "    loaded = json.load(f)\n"
        "second = {}\n"
        "for word in ['a', 'b']:\n"
        "    with model.trace(word + str(loaded[word]), remote=True):\n"
        "        second[word] = model.lm_head.output[0, -1].max().item().save()\n"
    )
    reasons = [f.reason for f in optimize(source).findings if "made 2 sessions" in f.message]
    assert reasons and "`with open('first.json') as f:` must run on your machine before the remote part" \
        in reasons[0], reasons
