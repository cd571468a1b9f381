"""A finding stands on its own statement, whatever other statement has the same text.

A pass reports on a node of the version of the tree it saw; the finding is placed where
that node stood in the code as written (ndif_opt/engine/origins.py), not at a line whose
text matches: a script repeats `logits = model.lm_head.output.save()` and
`with model.trace(p, remote=True):` in every experiment.
"""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest

from ndif_opt import Status, optimize
from ndif_opt.engine.origins import Lineage, misplaced
from ndif_opt.options import Options
from ndif_opt.syntax.positions import Positions
from ndif_opt.syntax.rewrite import SuitePlan

ROOT = Path(__file__).resolve().parents[2]
DEVSET = ROOT.parent / "shared" / "devset"
SCRIPTS = sorted((ROOT / "examples").glob("*.py")) + (sorted(DEVSET.glob("[0-9]*.py")) if DEVSET.is_dir() else [])

# three experiments save the same line; one session takes them all (the prints go after
# it), and reduction-pushdown, in the next round, drops each save: one finding per save
SAME_SAVE_THRICE = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompt = "The capital of France is the city of"
REMOTE = True
c_id = model.tokenizer(" Paris")["input_ids"][0]
w_id = model.tokenizer(" Rome")["input_ids"][0]


def logit_diff(logits):
    last = logits[0, -1]
    return (last[c_id] - last[w_id]).item()


with model.trace(prompt, remote=REMOTE):
    logits = model.lm_head.output.save()
clean_diff = logit_diff(logits)
print(f"clean logit diff: {clean_diff:.4f}")

drops = []
for layer in range(4):
    with model.trace(prompt, remote=REMOTE):
        model.transformer.h[layer].mlp.output[:] = 0
        logits = model.lm_head.output.save()
    diff = logit_diff(logits)
    drops.append(clean_diff - diff)
    print(f"MLP {layer} ablated: {diff:+.4f}")

top = sorted(range(len(drops)), key=lambda i: -abs(drops[i]))[:2]
for layer in top:
    with model.trace(prompt, remote=REMOTE):
        model.transformer.h[layer].mlp.output[:] = 0
        logits = model.lm_head.output.save()
    again = clean_diff - logit_diff(logits)
    print(f"again {layer}: {again:+.4f}")
'''

# two loops of the very same text: each one's findings on its own loop
SAME_LOOP_TWICE = '''\
from nnsight import LanguageModel

REMOTE = True
model = LanguageModel("openai-community/gpt2")
prompts = ["The Eiffel Tower is in", "The Colosseum is in"]


def top_token(logits):
    return logits[0, -1].argmax().item()


firsts = []
for p in prompts:
    with model.trace(p, remote=REMOTE):
        logits = model.lm_head.output.save()
    first = top_token(logits)
    firsts.append(first)
    print(p, first)

seconds = []
for p in prompts:
    with model.trace(p, remote=REMOTE):
        logits = model.lm_head.output.save()
    first = top_token(logits)
    seconds.append(first)
    print(p, first)
print(firsts == seconds)
'''


def _lines_holding(source: str, text: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines()) if line.strip() == text]


def _loops(source: str) -> list[tuple[int, int]]:
    """(first, last) 0-based lines of each `for` statement."""
    return sorted((n.lineno - 1, n.end_lineno - 1) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.For))


def test_each_of_three_equal_saves_gets_its_own_finding():
    result = optimize(SAME_SAVE_THRICE)
    saves = _lines_holding(SAME_SAVE_THRICE, "logits = model.lm_head.output.save()")
    assert len(saves) == 3 and "logits = model.lm_head.output.save()" not in result.code
    found = sorted(f.range.start.line for f in result.findings if f.pass_id == "reduction-pushdown")
    assert found == saves  # not two on the second save and none on the first


@pytest.mark.parametrize("unsafe", [False, True], ids=["default", "unsafe"])
def test_a_loops_findings_span_that_loop(unsafe):
    for source in (SAME_SAVE_THRICE, SAME_LOOP_TWICE):
        result = optimize(source, options=Options(unsafe_fixes=unsafe))
        loops = _loops(source)
        batching = [(f.range.start.line, f.range.end.line) for f in result.findings if f.pass_id == "invoke-batching"]
        assert sorted(batching) == loops, (batching, loops)


def test_two_loops_of_the_same_text_keep_their_own_findings():
    result = optimize(SAME_LOOP_TWICE)
    saves = _lines_holding(SAME_LOOP_TWICE, "logits = model.lm_head.output.save()")
    assert sorted(f.range.start.line for f in result.findings if f.pass_id == "reduction-pushdown") == saves
    assert misplaced(result.findings, SAME_LOOP_TWICE) == []


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_finding_is_on_its_own_line(path):
    source = path.read_text()
    for options in (Options(), Options(unsafe_fixes=True)):
        result = optimize(source, options=options)
        assert [(f.range.start.line + 1, f.subject, f.message[:60]) for f in misplaced(result.findings, source)] == []


def test_the_check_of_places_sees_a_wrong_line_and_a_finding_said_twice():
    from ndif_opt.types import Finding, Range, Status

    source = "x = f()\nfor a in b:\n    y = g(a)\n"
    right = Finding("p", "m", Range.of(2, 4, 2, 12), Status.APPLIED, subject="y = g(a)")
    changed = Finding("p", "n", Range.of(2, 4, 2, 12), Status.APPLIED, subject="y = g(a).detach().cpu()")
    wrong = Finding("p", "o", Range.of(0, 0, 0, 7), Status.APPLIED, subject="y = g(a)")
    written = Finding("p", "q", Range.of(0, 0, 0, 7), Status.APPLIED, subject="with model.session():")
    assert misplaced([right, changed, written], source) == []  # (a pass's own code: not judged)
    assert misplaced([right, wrong], source) == [wrong]
    assert misplaced([right, right], source) == [right]


# -- the tracing itself, on hand-made versions of a tree -----------------------------------

MODULE = '''\
x = f()
for a in b:
    with t(a, remote=True):
        y = g()
    print(a)
for a in b:
    with t(a, remote=True):
        y = g()
    print(a)
'''


def _lineage() -> tuple[Lineage, cst.Module]:
    module = cst.parse_module(MODULE)
    return Lineage(module, Positions(module)), module


def _line(lineage: Lineage, node: cst.CSTNode, module: cst.Module) -> int:
    return lineage.where(node, module).start.line - 1


def test_a_node_a_rewrite_kept_is_where_it_was():
    lineage, module = _lineage()
    plan = SuitePlan()
    plan.replace(module, 0, 1, lambda stmts: [cst.parse_statement("z = 0\n"), *stmts])
    new = plan.apply(module)
    lineage.add(new)
    second = new.body[3]
    assert _line(lineage, second, new) == 5
    assert lineage.where(new.body[0], new) is None  # written by the rewrite: no place as written


def test_equal_statements_rebuilt_unchanged_are_told_apart_by_order():
    lineage, module = _lineage()
    # both loops moved into a new block, every node of them a copy: the k-th `y = g()` is the k-th
    loops = "".join("    " + line + "\n" for line in MODULE.splitlines()[1:])
    wrapped = module.with_changes(body=[module.body[0], *cst.parse_module("with s:\n" + loops).body])
    lineage.add(wrapped)
    inner = [n for n in _walk(wrapped) if isinstance(n, cst.SimpleStatementLine) and "y = g()" in _code(n)]
    assert [_line(lineage, n, wrapped) for n in inner] == [3, 7]


def test_a_node_rebuilt_with_a_change_is_placed_by_what_it_holds():
    lineage, module = _lineage()

    class DropRemote(cst.CSTTransformer):
        def leave_Arg(self, original, updated):
            return cst.RemoveFromParent() if updated.keyword and updated.keyword.value == "remote" else updated

    new = module.visit(DropRemote())  # every node rebuilt; the `with` lines changed
    lineage.add(new)
    loops = [n for n in new.body if isinstance(n, cst.For)]
    withs = [loop.body.body[0] for loop in loops]
    assert [_line(lineage, n, new) for n in loops] == [1, 5]
    assert [_line(lineage, n, new) for n in withs] == [2, 6]


def _walk(node: cst.CSTNode):
    from ndif_opt.syntax.walk import all_nodes

    return all_nodes(node)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def test_a_statement_a_pass_wrote_for_one_it_moved_is_placed_on_that_one():
    # accumulator relocation writes `predictions = list().save()` in the session for the
    # `predictions = []` before the loop: reduction-pushdown's finding on it goes there
    source = (ROOT / "examples" / "logit_lens.py").read_text()
    result = optimize(source)
    pushed = next(f for f in result.findings if f.pass_id == "reduction-pushdown")
    assert source.splitlines()[pushed.range.start.line] == "predictions = []"
    assert pushed.status is Status.UNSAFE_NOT_APPLIED
