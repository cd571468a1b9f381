"""Notebooks keep their cells: no pass, in no mode, merges, empties or reorders cells, or
moves a statement from one cell to another (a session around two cells' code used to
take cell 19's code into cell 18 and leave cell 20 empty, while the markers that delimit
cells stayed in order).

A property over every notebook we have: the examples, notebooks written here in the
shapes that used to merge (requests in adjacent cells, a trace and its consumer in two
cells, a loop whose replay would cross cells), and the public notebooks of
``../shared/corpus`` when they are next to the checkout (read only, never copied).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ndif_opt import optimize
from ndif_opt.engine.cells import statements_moved
from ndif_opt.frontends.notebook import optimize_notebook
from ndif_opt.options import Options

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
MODES = {"default": Options(), "unsafe": Options(unsafe_fixes=True), "migrate": Options(migrate=True)}

SETUP = 'from nnsight import LanguageModel\n\nmodel = LanguageModel("openai-community/gpt2")\n'


def notebook(*cells: str) -> str:
    return json.dumps({
        "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                   "source": source.splitlines(keepends=True)} for source in cells],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }, indent=1)


WRITTEN_HERE = {
    "adjacent requests": notebook(
        SETUP + "from IPython.display import clear_output\n",
        'question = "The capital of France is"\nwith model.trace(question, remote=True):\n'
        "    first = model.lm_head.output[0, -1].argmax().save()\nclear_output()\n"
        "print(model.tokenizer.decode(first))\n",
        'import torch\n\nreordered = "France has its capital in"\nwith model.trace(reordered, remote=True):\n'
        "    second = model.lm_head.output[0, -1].argmax().save()\nprint(model.tokenizer.decode(second))\n",
        "ids = model.tokenizer(reordered)['input_ids']\nfor i in range(len(ids)):\n    if ids[i] == second:\n"
        "        start = i\nstart = len(ids) // 2\n",
        "acts = []\nwith model.trace(reordered, remote=True):\n    for layer in model.transformer.h:\n"
        "        acts.append(layer.output.save())\nprint(len(acts), start)\n",
    ),
    "a chat prompt, its reordering and a patch span": notebook(
        SETUP + "clear_output()\n",
        'import torch\n\ntemplate = [{"role": "user", "content": "Two plus two is"}]\n'
        "prompt = template[0]['content']\nwith model.trace(prompt, remote=True):\n    logits = model.output.logits\n"
        "    answer = logits.argmax(dim=-1)[0, -1].save()\n\nclear_output()\n\n"
        'print("answer:", model.tokenizer.decode(answer).strip())\n',
        'import torch\n\nreordered = """Two\nplus two is"""\n\ntemplate = [\n    {"role": "user", "content": reordered},\n]\n\n'
        "prompt = template[0]['content']\n\nwith model.trace(prompt, remote=True):\n    logits = model.output.logits\n"
        "    answer = logits.argmax(dim=-1)[0, -1].save()\n\n"
        'print("answer:", model.tokenizer.decode(answer).strip())\n',
        "# the span of the question's tokens\npremise = \"plus two\"\npremise_ids = model.tokenizer(premise).input_ids\n\n"
        "prompt_ids = model.tokenizer(prompt).input_ids\nfor i in range(len(prompt_ids)):\n"
        "    if prompt_ids[i:i+len(premise_ids)] == premise_ids:\n        start = i\n        end = i + len(premise_ids)\n",
        'noise = " ".join(["!"] * 3)\n\nnoise_acts = []\nwith model.trace(noise, remote=True) as trace:\n'
        "    for layer in model.transformer.h:\n        noise_acts.append(layer.output.save())\n\nnoise_acts[0].shape\n",
    ),
    "a trace and its consumer": notebook(
        SETUP,
        "preds = []\nfor p in ['a b', 'c d']:\n    with model.trace(p, remote=True):\n"
        "        preds.append(model.lm_head.output.save())\n",
        "tops = [int(l[0, -1].argmax()) for l in preds]\nprint(tops)\n",
    ),
}


def _corpus_notebooks() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(CORPUS.glob("*.ipynb"))}


def _notebooks() -> dict[str, str]:
    found = {path.name: path.read_text(encoding="utf-8") for path in sorted((ROOT / "examples").glob("*.ipynb"))}
    found.update(WRITTEN_HERE)
    found.update(_corpus_notebooks())
    return found


def _code_cells(text: str) -> dict[int, str]:
    """Code cell index -> its code, IPython lines (`!pip`, `%time`) blanked."""
    cells = json.loads(text)["cells"]
    found = {}
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        found[index] = "\n".join("" if line.lstrip().startswith(("!", "%")) else line for line in source.splitlines())
    return found


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(_notebooks()))
def test_every_pass_keeps_every_cell_where_it_is(name, mode):
    text = _notebooks()[name]
    result = optimize_notebook(text, options=MODES[mode], filename=name)
    before, after = json.loads(text)["cells"], json.loads(result.text)["cells"]
    assert [c["cell_type"] for c in after] == [c["cell_type"] for c in before]
    old, new = _code_cells(text), _code_cells(result.text)
    assert statements_moved(old, new) == []
    emptied = [i for i in old if old[i].strip() and not new[i].strip()]
    assert emptied == []


def test_the_property_sees_a_statement_moved_into_the_cell_before():
    old = {0: "a = 1\n", 1: "with m.trace('x', remote=True):\n    b = 2\n", 2: "c = a + 1\nprint(c)\n"}
    new = {0: "a = 1\n", 1: "with m.session(remote=True):\n    with m.trace('x'):\n        b = 2\n    c = a + 1\n",
           2: "print(c)\n"}
    assert statements_moved(old, new) == [(2, 1, "c = a + 1")]


def test_adjacent_cells_that_each_send_a_request_are_named_once():
    result = optimize_notebook(WRITTEN_HERE["adjacent requests"])
    notes = [f for f in result.findings if f.finding.pass_id == "notebook"]
    assert [n.cell for n in notes] == [2], [n.finding.message for n in notes]
    assert "merge them yourself" in (notes[0].finding.reason or "")


def test_a_definition_in_a_later_percent_cell_stays_in_its_cell():
    # a `# %%` script is a notebook to its user: a run of remote work may span its cells,
    # but a definition never moves out of its cell to get out of the run's way
    from ndif_opt import optimize

    source = SETUP + (
        "top = []\n"
        "for p in ['a b', 'c d']:\n"
        "    with model.trace(p, remote=True):\n"
        "        top.append(model.lm_head.output[0, -1].argmax().item().save())\n"
        "\n"
        "# %% [cell 2]\n"
        "seen = len(top)\n"
        "def last(values):\n"
        "    return values[-1]\n"
        "\n"
        "\n"
        "for p in ['e f', 'g h']:\n"
        "    with model.trace(p, remote=True):\n"
        "        top.append(model.lm_head.output[0, -1].argmax().item().save())\n"
        "print(last(top))\n"
    )
    code = optimize(source).code
    marker, definition = code.index("# %% [cell 2]"), code.index("def last(values):")
    assert marker < definition, code


def test_an_added_import_goes_after_a_pip_install_that_opens_the_script():
    # `import nnsight` above `!pip install nnsight` fails on a fresh kernel (the negation
    # makes a value the `.save()` does not mark: nnsight-05-failures saves it with
    # `nnsight.save(...)`, which stays: no session reads it)
    source = ("!pip install -q nnsight\nfrom nnsight import LanguageModel\n\n"
              'model = LanguageModel("openai-community/gpt2")\n'
              'with model.trace("a b", remote=True):\n'
              "    energy = -model.lm_head.output.sum().save()\n"
              "print(energy)\n")
    code = optimize(source).code
    assert "nnsight.save(" in code, code
    assert code.startswith("!pip install -q nnsight\nfrom nnsight import LanguageModel\nimport nnsight\n"), code
