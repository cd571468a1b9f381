"""Every pass, applied to its own output, changes nothing.

A rewrite that fires again on what it wrote reads its own output as the old form: the
migration of a decoder layer's `output[0][0]` to `output[0]` was migrated again to
`output`, the batch row lost without a trace. A user who runs the tool twice (or an
editor that re-runs on save) must get the same code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ndif_opt import optimize
from ndif_opt.passes import PASS_IDS

ROOT = Path(__file__).resolve().parents[2]
DEVSET = ROOT.parent / "shared" / "devset"
SCRIPTS = sorted((ROOT / "examples").glob("*.py")) + (sorted(DEVSET.glob("[0-9]*.py")) if DEVSET.is_dir() else [])

# the shapes migration rewrites, written for nnsight < 0.5 and transformers < 5
LEGACY = '''\
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
rows, hidden, last = [], [], []
with model.trace("The Eiffel Tower is in", remote=True):
    first_row = model.transformer.h[0].output[0][0].save()
    states = model.transformer.h[1].output[0].save()
    token = model.transformer.h[2].output[0][-1].save()
    column = model.transformer.h[3].output[0][:, -1].save()
    picked = model.transformer.h[4].output[0][0, -1].save()
    stack = nnsight.list().save()
    for layer in model.transformer.h[:3]:
        stack.append(layer.output[0][0])
print(first_row.value.shape, states.value.shape, token.value.shape)
print(column.value.shape, picked.value.shape, len(stack.value))
'''


def _once_and_twice(source: str, pass_id: str, unsafe: bool) -> tuple[str, str]:
    once = optimize(source, select=[pass_id], unsafe_fixes=unsafe).code
    if once == source:  # the pass changed nothing: the second run is the first again (optimize is pure)
        return once, once
    return once, optimize(once, select=[pass_id], unsafe_fixes=unsafe).code


@pytest.mark.parametrize("pass_id", PASS_IDS)
@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_a_pass_leaves_its_own_output_alone(path, pass_id):
    for unsafe in (False, True):
        once, twice = _once_and_twice(path.read_text(), pass_id, unsafe)
        assert twice == once, f"{pass_id} (unsafe={unsafe}) changed its own output"


@pytest.mark.parametrize("pass_id", PASS_IDS)
def test_a_pass_leaves_its_own_migration_alone(pass_id):
    once, twice = _once_and_twice(LEGACY, pass_id, unsafe=True)
    assert twice == once


def test_a_batch_row_of_the_old_tuple_is_migrated_to_an_unambiguous_row():
    once, _ = _once_and_twice(LEGACY, "migrate-api", unsafe=False)
    assert "h[0].output[0, :]" in once  # the row: not `output[0]`, which reads as the old tuple
    assert "h[1].output.save()" in once
    assert "h[2].output[-1, :]" in once
    assert "h[3].output[:, -1]" in once
    assert "h[4].output[0, -1]" in once
    assert "stack.append(layer.output[0, :])" in once
