"""`# %%` scripts are notebooks (issue "A researcher's first hour", item 4): VS Code,
PyCharm and jupytext run them cell by cell, so each cell stays a cell. A session never
crosses a cell marker, a marker is never indented into a block, every cell compiles on
its own, and the requests two cells could share are named in a finding instead.
"""

from __future__ import annotations

import ast

import pytest

from ndif_opt import optimize
from ndif_opt.engine.cells import script_cells

CELLS = '''\
# %% [markdown]
# # Norms by layer

# %%
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompt = "The quick brown fox"

# %%
# the residual at each layer, one trace per layer
norms = []
for i in range(2):
    with model.trace(prompt, remote=True):
        out = LAYERS[i].output.save()
    norms.append(out[0, -1].norm().item())
print(norms)

# %%
# the same for a second prompt
prompt = "One, two, three"
norms_2 = []
for i in range(2):
    with model.trace(prompt, remote=True):
        out = LAYERS[i].output.save()
    norms_2.append(out[0, -1].norm().item())
print(norms_2)
'''


def _gpt2(template: str) -> str:
    return template.replace("REPO", "openai-community/gpt2").replace("LAYERS", "model.transformer.h")


def test_script_cells_split_at_markers_and_join_back():
    source = _gpt2(CELLS)
    cells = script_cells(source)
    assert cells is not None and len(cells) == 4
    assert "".join(cells) == source
    assert all(cell.startswith("# %%") for cell in cells)
    assert script_cells("x = 1\n# a comment, no marker\n") is None
    # lines before the first marker are a cell of their own
    assert script_cells("import os\n# %%\nx = 1\n") == ["import os\n", "# %%\nx = 1\n"]


def test_each_cell_gets_its_own_session_and_compiles_alone():
    source = _gpt2(CELLS)
    result = optimize(source)
    assert result.changed
    cells = script_cells(result.code)
    assert cells is not None and len(cells) == 4, result.code
    for cell in cells:
        ast.parse(cell)  # every cell compiles on its own
        assert cell.startswith("# %%"), cell  # the marker stays at the cell's top, not indented
    assert cells[2].count("model.session(") == 1 and cells[3].count("model.session(") == 1, result.code
    # the comment under the marker stays the cell's header, above the session
    assert cells[2].splitlines()[1] == "# the residual at each layer, one trace per layer", cells[2]
    kept_apart = [f for f in result.findings if f.pass_id == "notebook"]
    assert [f.range.start.line for f in kept_apart] == [source.splitlines().index("# %%", 12)], kept_apart
    assert all("does not merge cells" in (f.reason or "") for f in kept_apart)


def test_findings_are_on_the_scripts_own_lines():
    source = _gpt2(CELLS)
    lines = source.splitlines()
    for finding in optimize(source).findings:
        if finding.pass_id == "session-hoisting":
            assert lines[finding.range.start.line].startswith("for i in range(2):"), finding


def test_a_marker_inside_a_block_leaves_the_script_one_module():
    # a `# %%` comment inside a function: the cells would not parse alone
    source = _gpt2('''\
from nnsight import LanguageModel

model = LanguageModel("REPO")

def norms(prompt):
# %%
    found = []
    for i in range(2):
        with model.trace(prompt, remote=True):
            out = LAYERS[i].output.save()
        found.append(out[0, -1].norm().item())
    return found
''')
    result = optimize(source)
    ast.parse(result.code)
    assert not any(f.pass_id == "notebook" for f in result.findings)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_cells_give_what_the_original_gives(family):
    pytest.importorskip("nnsight")
    from execution import optimized_and_verified

    result, report = optimized_and_verified(CELLS, family)
    assert report.before.requests == 4 and report.after.requests == 2, report.to_text() + result.code


HEADER_CELL = '''\
# My experiment: the number of tokens
# (notes about it)

# %%
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")

# %%
with model.trace("The Eiffel Tower is in", remote=True):
    logits = model.lm_head.output.save()
    n_tokens = model.lm_head.output.shape[1]
print(n_tokens)
'''


def test_an_added_import_goes_among_the_first_imports_not_above_a_header_cell():
    # `n_tokens` is saved with `nnsight.save(...)`: the import it needs went above the
    # header's comments (the cells' markers ended the file's opening imports)
    result = optimize(HEADER_CELL)
    lines = result.code.splitlines()
    assert lines[:2] == HEADER_CELL.splitlines()[:2], result.code
    assert lines.index("import nnsight") == lines.index("from nnsight import LanguageModel") + 1, result.code
    assert "nnsight.save(" in result.code
