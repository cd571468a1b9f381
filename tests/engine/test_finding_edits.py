"""Findings carry their edits (engine/finding_edits.py): each applied finding's fix is the
edits the pipeline made for it, with those of the findings it needs.

On every example and devset script (../shared/devset, read in place; skipped when absent),
with and without unsafe fixes: every applied finding has a fix; the findings of a group
share one fix and each one's ``needs`` names the others; applying every group's fix once
gives exactly the pipeline's output; each group's fix applied alone parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from ndif_opt import optimize
from ndif_opt.engine.cells import check_script_syntax, optimize_cells
from ndif_opt.engine.finding_edits import apply_edits, fix_groups
from ndif_opt.options import Options
from ndif_opt.types import Status

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
DEVSET = sorted((ROOT.parent / "shared" / "devset").glob("*.py"))


def check_fixes(source: str, unsafe: bool, name: str = "<source>") -> tuple[int, int]:
    """The checks above on one script; (applied findings, groups)."""
    result = optimize(source, filename=name, unsafe_fixes=unsafe)
    applied = [f for f in result.findings if f.status is Status.APPLIED]
    ids = [f.id for f in result.findings]
    assert all(ids) and len(set(ids)) == len(ids)
    if result.code != source:
        assert all(f.fix for f in applied), [f.id for f in applied if not f.fix]
    assert all(not f.fix and not f.needs for f in result.findings if f.status is not Status.APPLIED)
    groups = fix_groups(result)
    assert sum(len(group) for group in groups) == sum(1 for f in applied if f.fix)
    for group in groups:
        members = {f.id for f in group}
        for finding in group:
            assert set(finding.needs) == members - {finding.id}, finding.id
        check_script_syntax(apply_edits(source, group[0].fix), name)  # alone, a whole rewrite
    every = [edit for group in groups for edit in group[0].fix]
    assert len(set(every)) == len(every)  # each edit in one group
    assert apply_edits(source, every) == result.code
    return len(applied), len(groups)


@pytest.mark.parametrize("unsafe", [False, True], ids=["default", "unsafe"])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_fix_of_an_example_is_the_pipelines_edit(path: Path, unsafe: bool):
    check_fixes(path.read_text(encoding="utf-8"), unsafe, path.name)


@pytest.mark.skipif(not DEVSET, reason="../shared/devset is not next to the checkout")
@pytest.mark.parametrize("unsafe", [False, True], ids=["default", "unsafe"])
def test_every_fix_of_the_devset_is_the_pipelines_edit(unsafe: bool):
    applied = groups = 0
    for path in DEVSET:
        try:
            a, g = check_fixes(path.read_text(encoding="utf-8"), unsafe, path.name)
        except SyntaxError:  # (a devset script that does not parse is an error of its own)
            continue
        applied, groups = applied + a, groups + g
    assert applied and groups


PROMPT_LOOP = (ROOT / "examples" / "prompt_loop.py").read_text(encoding="utf-8")

TWO_SAVES = """\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("a", remote=True):
    h = model.transformer.h[0].output[0].save()

x = 1

with model.trace("b", remote=True):
    g = model.transformer.h[1].output[0].save()
print(h.shape, g.shape)
"""


def test_fixes_of_lines_apart_are_apart():
    """Two traces, each its own detach-cpu: two fixes, each with its own edit."""
    result = optimize(TWO_SAVES, select=["detach-cpu"])
    first, second = [f for f in result.findings if f.applied]
    assert first.fix and second.fix and not first.needs and not second.needs
    assert apply_edits(TWO_SAVES, first.fix).count(".detach().cpu()") == 1
    assert apply_edits(TWO_SAVES, first.fix + second.fix) == result.code


def test_a_fix_inside_another_needs_it():
    """The reduction pushed into the session that session-hoisting made: its edit is of the
    session's lines, so each needs the other and they share one fix (not a pass run alone)."""
    result = optimize(PROMPT_LOOP)
    hoisting, = [f for f in result.findings if f.applied and f.pass_id == "session-hoisting"]
    pushdown, = [f for f in result.findings if f.applied and f.pass_id == "reduction-pushdown"]
    assert hoisting.needs == (pushdown.id,) and pushdown.needs == (hoisting.id,)
    assert hoisting.fix == pushdown.fix
    assert apply_edits(PROMPT_LOOP, hoisting.fix) == result.code
    assert apply_edits(PROMPT_LOOP, hoisting.fix) != optimize(PROMPT_LOOP, select=["session-hoisting"]).code


def test_windows_and_ipython_lines_keep_the_fixes_on_the_files_lines():
    """A file cut into windows (two independent experiments), with a shell line: each fix
    is in the file's own lines."""
    source = "!pip install nnsight\n" + TWO_SAVES.replace("x = 1\n", "x = 1\nprint(x)\n")
    check_fixes(source, False)  # (one session for both traces: one group)
    result = optimize(source, select=["detach-cpu"])
    first, second = fix_groups(result)
    assert [f.id for f in first + second] == ["detach-cpu@6:5", "detach-cpu@12:5"]
    assert apply_edits(source, first[0].fix).splitlines()[5].endswith("output[0].detach().cpu().save()")
    assert apply_edits(source, first[0].fix + second[0].fix) == result.code


def test_a_notebooks_fix_is_cut_into_its_cells():
    trace = TWO_SAVES.split("\nx = 1\n")[0] + "\n"
    consumer = "print(h[0, -1].argmax())\n"
    cells = optimize_cells([trace, consumer], options=Options(unsafe_fixes=True))
    applied = [item.finding for item in cells.findings if item.finding.applied]
    assert applied and all(f.fix for f in applied)
    fixed = {cells.fixed(f) for f in applied}
    assert cells.new_sources in fixed  # (one group here: the whole rewrite)
