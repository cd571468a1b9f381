"""Notebooks: code cells optimized together, written back cell by cell.

The JSON of unchanged cells must stay byte-identical, IPython syntax must survive
verbatim, rewrites that would wrap two cells in one block are kept within cells, bad
input is refused with a reason — and the optimized notebook's code, run through the
NDIF emulation, computes what the original computes with fewer requests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import libcst as cst
import pytest

from ndif_opt.engine.cells import NOTEBOOK_ID
from ndif_opt.frontends.notebook import notebook_script, optimize_notebook
from ndif_opt.options import Options
from ndif_opt.types import Status

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "notebook_sweep.ipynb"
OPTIMIZED = ROOT / "examples" / "optimized" / "notebook_sweep.ipynb"
UPDATE = os.environ.get("NDIF_OPT_UPDATE") == "1"


def notebook(*cells, indent=1, string_sources=False, metadata=None) -> str:
    """A notebook as nbformat writes it (sorted keys, indent 1, UTF-8, final newline)."""
    out = []
    for cell in cells:
        kind, source = ("code", cell) if isinstance(cell, str) else cell
        lines = source if string_sources else source.splitlines(keepends=True)
        entry = {"cell_type": kind, "metadata": {}, "source": lines}
        if kind == "code":
            entry.update(execution_count=None, outputs=[])
        out.append(entry)
    data = {"cells": out, "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(data, indent=indent, sort_keys=True, ensure_ascii=False) + "\n"


SETUP = 'from nnsight import LanguageModel\n\nmodel = LanguageModel("openai-community/gpt2")'
LOOP = (
    "preds = []\n"
    'for prompt in ["a b", "c d e", "f g"]:\n'
    "    with model.trace(prompt, remote=True):\n"
    "        top = model.lm_head.output[0, -1].argmax().save()\n"
    "    preds.append(top)"
)


def sources(text: str) -> list[str]:
    cells = json.loads(text)["cells"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]


def cells_parse(text: str) -> None:
    """Every code cell of the notebook parses on its own (magics masked)."""
    script_cells = json.loads(text)["cells"]
    for cell in script_cells:
        if cell["cell_type"] == "code":
            one = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
            cst.parse_module(notebook_script(one))


# ---------------------------------------------------------------------------------------
# The example notebook
# ---------------------------------------------------------------------------------------


def test_example_notebook_in_sync_and_stable():
    result = optimize_notebook(EXAMPLE.read_text(), options=Options(), filename=EXAMPLE.name)
    assert result.changed
    if UPDATE:
        OPTIMIZED.write_text(result.text)
    assert OPTIMIZED.read_text() == result.text
    again = optimize_notebook(result.text, options=Options())
    assert not again.changed and again.text == result.text
    before, after = result.result.costs[0].before, result.result.costs[-1].after
    assert (before.requests, after.requests) == (6, 1)


def test_example_notebook_changes_only_the_loop_cell_byte_for_byte():
    original = EXAMPLE.read_text()
    result = optimize_notebook(original, options=Options(), filename=EXAMPLE.name)
    old, new = json.loads(original), json.loads(result.text)
    assert result.changed_cells == (5,)
    assert len(old["cells"]) == len(new["cells"])
    for index, (a, b) in enumerate(zip(old["cells"], new["cells"])):
        if index in result.changed_cells:
            assert a["source"] != b["source"] and isinstance(b["source"], list)
            assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
            assert b["source"][0] == "%%time\n"  # the cell magic stays the first line
        else:
            assert a == b
    # the output is exactly what nbformat writes for the new notebook: nothing else moved
    assert result.text == json.dumps(new, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert original == json.dumps(old, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    # magics and shell lines are kept verbatim
    assert sources(result.text)[1] == "!pip install -q nnsight"
    assert sources(result.text)[3] == "LanguageModel?"


def test_example_notebook_findings_and_diffs_are_located_in_cells():
    result = optimize_notebook(EXAMPLE.read_text(), options=Options(), filename="sweep.ipynb")
    hoisted = [f for f in result.findings if f.finding.pass_id == "session-hoisting" and f.finding.applied]
    assert len(hoisted) == 1 and hoisted[0].cell == 5
    assert hoisted[0].finding.range.start.line == 2  # `for prompt in PROMPTS:` under `%%time`
    assert len(result.cell_diffs) == 1
    assert result.cell_diffs[0].startswith("--- sweep.ipynb:cell 6 (original)\n+++ sweep.ipynb:cell 6 (optimized)\n")
    assert "+with model.session(remote=True):" in result.cell_diffs[0]


@pytest.fixture(scope="module")
def verify_pkg():
    return pytest.importorskip("ndif_opt.verify", exc_type=ImportError)


def test_example_notebook_code_runs_equivalently_with_fewer_requests(verify_pkg):
    original = EXAMPLE.read_text()
    result = optimize_notebook(original, options=Options())
    before, after = notebook_script(original), notebook_script(result.text)
    assert "!pip" not in before and "%%time" not in before and "?" not in before.splitlines()[-1]
    report = verify_pkg.verify_sources(
        before, after, filename="notebook_sweep.py",
        ignore_missing=result.result.unreturned, ignore=result.result.introduced,
    )
    assert report.intended_ok, report.to_text()
    assert not any(report.errors.values()), report.errors
    assert (report.before.requests, report.after.requests) == (6, 1)
    assert report.after.download_raw_bytes <= report.before.download_raw_bytes
    assert result.result.costs[-1].after.requests == report.after.requests


# ---------------------------------------------------------------------------------------
# Cells and their boundaries
# ---------------------------------------------------------------------------------------


def test_a_trace_and_its_consumer_in_different_cells_are_analysed_together():
    text = notebook(SETUP, LOOP, "print(preds)")
    result = optimize_notebook(text)
    assert result.changed_cells == (1,)
    new = sources(result.text)
    assert new[0] == SETUP and new[2] == "print(preds)"
    assert "with model.session(remote=True):" in new[1]
    cells_parse(result.text)


def test_nothing_to_do_returns_the_text_unchanged():
    text = notebook(("markdown", "# hi"), SETUP, "x = 1\n")
    result = optimize_notebook(text)
    assert not result.changed and result.text == text and result.cell_diffs == ()


def test_a_session_around_two_cells_is_kept_within_cells():
    first = 'with model.trace("a b", remote=True):\n    a = model.lm_head.output[0, -1].argmax().item().save()'
    second = 'with model.trace("c d", remote=True):\n    b = model.lm_head.output[0, -1].argmax().item().save()'
    text = notebook(SETUP, first, second, "print(a, b)")
    result = optimize_notebook(text)
    assert result.barriers == (2,)
    assert len(json.loads(result.text)["cells"]) == 4  # no cell merged or removed
    new = sources(result.text)
    assert new[0] == SETUP and new[3] == "print(a, b)"
    cells_parse(result.text)
    notes = [f for f in result.findings if f.finding.pass_id == NOTEBOOK_ID]
    assert [n.cell for n in notes] == [2] and "optimized apart" in notes[0].finding.message
    # the joined script of the result is still the original's code in the same order
    assert notebook_script(result.text).count("model.trace(") == 2


def test_reading_between_cells_keeps_values_a_later_cell_needs():
    loop = LOOP.replace("top = model.lm_head.output[0, -1].argmax().save()", "logits = model.lm_head.output.save()")
    loop = loop.replace("preds.append(top)", "preds.append(logits)")
    text = notebook(SETUP, loop, "tops = [int(l[0, -1].argmax()) for l in preds]\nprint(tops)")
    result = optimize_notebook(text)
    new = sources(result.text)
    assert "preds" in new[2] and new[2] == "tops = [int(l[0, -1].argmax()) for l in preds]\nprint(tops)"
    assert "preds = list().save()" in new[1]  # still brought back: the next cell reads it


# ---------------------------------------------------------------------------------------
# IPython syntax
# ---------------------------------------------------------------------------------------

MAGICS = [
    "%pip install nnsight",
    "!pip install nnsight \\\n    transformers",
    "files = !ls\nprint(files)",
    "LanguageModel?",
    "?model",
    "model.trace??",
    "%load_ext autoreload\n%autoreload 2",
    "%%bash\necho hello\nls -la",
    "%%writefile helper.py\ndef f(x):\n    return x",
    "if True:\n    !echo indented\n    x = 1",
    'text = """\n!not a magic\nwhat?\n%neither\n"""',
    "value = (1 +\n    2)\nresult = get_ipython()",
]


@pytest.mark.parametrize("magic", MAGICS)
def test_ipython_syntax_round_trips(magic):
    text = notebook(SETUP, magic, LOOP)
    result = optimize_notebook(text)
    assert result.changed_cells == (2,)
    assert sources(result.text)[1] == magic


def test_strings_that_look_like_magics_stay_python():
    script = notebook_script(notebook('text = """\n!not a magic\nwhat?\n"""'))
    assert "!not a magic" in script and "pass" not in script


def test_magics_in_the_optimized_cell_are_restored_in_place():
    cell = "%%time\n!echo start\n" + LOOP + "\n%time x = len(preds)\nprint(preds)  # done"
    result = optimize_notebook(notebook(SETUP, cell))
    new = sources(result.text)[1]
    lines = new.splitlines()
    assert lines[0] == "%%time" and lines[1] == "!echo start"
    assert "%time x = len(preds)" in lines and lines[-1] == "print(preds)  # done"
    assert "with model.session(remote=True):" in new


def test_a_magic_reading_a_saved_value_keeps_it_downloaded():
    loop = LOOP.replace("top = model.lm_head.output[0, -1].argmax().save()", "logits = model.lm_head.output.save()")
    loop = loop.replace("preds.append(top)", "preds.append(logits[0, -1].argmax())")
    unsafe = Options(unsafe_fixes=True)  # a value saved at module level may go only then
    with_magic = sources(optimize_notebook(notebook(SETUP, loop + "\n!echo {logits.shape}"), options=unsafe).text)[1]
    without = sources(optimize_notebook(notebook(SETUP, loop), options=unsafe).text)[1]
    # the shell line reads `logits` on the client: it stays saved (without it, it is not downloaded)
    assert "logits = model.lm_head.output.detach().cpu().save()" in with_magic
    assert with_magic.endswith("\n!echo {logits.shape}")
    assert "logits = model.lm_head.output\n" in without


def test_notebook_script_drops_ipython_syntax():
    text = notebook("!pip install x", "%%bash\necho hi", "%%time\nx = 1", "if x:\n    %time y = 2", "x?")
    # `%time y = 2` runs `y = 2` in the notebook's namespace: the script keeps the statement
    assert notebook_script(text) == "pass\nx = 1\nif x:\n    y = 2\npass\n"
    timed = notebook("%timeit y = 2", "%prun -s cumulative z = 3", "%time q = (1 +")
    assert notebook_script(timed) == "pass\npass\npass\n"  # timeit's names do not persist


def test_a_capture_cell_binds_its_name_and_keeps_its_output_off_the_stdout(capsys):
    # `%%capture cap` then `print(cap.stdout)`: the cells run as a script must define `cap`
    # and show the cell's output where the notebook shows it (verify FAILED on `cap` before)
    text = notebook("%%capture cap\nprint('inside')\nx = 1", "print('after', x)\nprint(cap.stdout, end='')")
    script = notebook_script(text)
    exec(compile(script, "<cells>", "exec"), {})
    assert capsys.readouterr().out == "after 1\ninside\n"
    silent = notebook("%%capture --no-display\nprint('hidden')", "print('shown')")
    exec(compile(notebook_script(silent), "<cells>", "exec"), {})
    assert capsys.readouterr().out == "shown\n"


# ---------------------------------------------------------------------------------------
# JSON forms
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("indent", [None, 1, 2, 4])
def test_json_layout_is_kept(indent):
    text = notebook(SETUP, LOOP, "print(preds)", indent=indent)
    result = optimize_notebook(text)
    assert result.changed_cells == (1,)
    new = json.loads(result.text)
    assert result.text == json.dumps(new, indent=indent, sort_keys=True, ensure_ascii=False) + "\n"


def test_string_sources_stay_strings():
    text = notebook(SETUP, LOOP, "print(preds)", string_sources=True)
    result = optimize_notebook(text)
    new = json.loads(result.text)
    assert all(isinstance(c["source"], str) for c in new["cells"])
    assert result.text == json.dumps(new, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def test_non_ascii_escapes_and_trailing_newline_and_bom():
    text = notebook(SETUP + '\nNAME = "café ✓"', LOOP)
    escaped = json.dumps(json.loads(text), indent=1, sort_keys=True, ensure_ascii=True)  # no final newline
    result = optimize_notebook(escaped)
    assert result.changed and not result.text.endswith("\n")
    assert result.text == json.dumps(json.loads(result.text), indent=1, sort_keys=True, ensure_ascii=True)
    bom = optimize_notebook("\ufeff" + text)
    assert bom.text.startswith("\ufeff") and bom.text[1:] == optimize_notebook(text).text


def test_unusual_key_order_and_extra_fields_are_kept():
    text = notebook(SETUP, LOOP)
    data = json.loads(text)
    data["cells"][1] = {"source": data["cells"][1]["source"], "outputs": [{"output_type": "stream", "name": "stdout",
                        "text": ["x\n"]}], "metadata": {"tags": ["slow"]}, "execution_count": 7, "cell_type": "code",
                        "id": "abc"}
    odd = json.dumps(data, indent=1, ensure_ascii=False)  # keys not sorted
    result = optimize_notebook(odd)
    new = json.loads(result.text)
    assert list(new["cells"][1]) == list(data["cells"][1])
    assert new["cells"][1]["outputs"] == data["cells"][1]["outputs"]  # kept; a re-run replaces them
    assert result.text == json.dumps(new, indent=1, ensure_ascii=False)


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"metadata": {}}', "no `cells` list"),
        ('{"worksheets": [], "nbformat": 3}', "nbformat 3"),
        ('{"cells": [{"source": "x"}]}', "no `cell_type`"),
        ('{"cells": [{"cell_type": "code", "source": 3}]}', "neither a string nor a list"),
        ("", "invalid JSON"),
    ],
)
def test_malformed_notebooks_raise_value_error_with_the_reason(text, reason):
    with pytest.raises(ValueError, match=reason):
        optimize_notebook(text)
    with pytest.raises(ValueError, match=reason):
        notebook_script(text)


def test_a_cell_that_does_not_parse_is_named():
    with pytest.raises(SyntaxError, match="cell 3"):
        optimize_notebook(notebook(SETUP, ("markdown", "hi"), "def broken(:\n    pass"))


def test_other_kernel_languages_are_left_alone():
    text = notebook("x <- 1", metadata={"kernelspec": {"language": "R", "name": "ir"}})
    result = optimize_notebook(text)
    assert not result.changed
    assert result.findings and result.findings[0].finding.status is Status.SKIPPED
    assert "not a Python notebook" in result.findings[0].finding.message


def test_a_rewrite_that_cannot_be_cut_back_leaves_the_notebook_unchanged(monkeypatch):
    import dataclasses
    import re

    import ndif_opt.engine.pipeline as pipeline

    real = pipeline.run_pipeline

    def drops_the_magic(source, options, filename=None):
        result = real(source, options, filename=filename)
        code = re.sub(r"(?m)^get_ipython\(\)\.run_line_magic\(\"ndif_opt_\w+\", \"0\".*\n", "", result.code)
        return dataclasses.replace(result, code=code)

    monkeypatch.setattr(pipeline, "run_pipeline", drops_the_magic)
    text = notebook(SETUP, "!echo hi\n" + LOOP)
    result = optimize_notebook(text)
    assert not result.changed and result.text == text and result.cell_diffs == ()
    notes = [f.finding for f in result.findings if f.finding.pass_id == NOTEBOOK_ID]
    assert notes and "left unchanged" in notes[0].message and "removed an IPython magic" in notes[0].message
    assert not any(f.finding.applied for f in result.findings)
    assert all(pc.before == pc.after for pc in result.result.costs)
    assert not result.result.changed


def test_findings_count_lines_of_the_cell_as_written():
    cell = "!pip install a \\\n    b\n" + LOOP  # a magic on two lines, masked as one
    result = optimize_notebook(notebook(SETUP, cell))
    hoisted = [f for f in result.findings if f.finding.pass_id == "session-hoisting"]
    assert hoisted[0].cell == 1
    assert cell.splitlines()[hoisted[0].finding.range.start.line].startswith("for prompt in")


def test_as_result_points_into_the_notebook_file():
    text = EXAMPLE.read_text()
    as_result = optimize_notebook(text, filename="nb.ipynb").as_result()
    assert as_result.source == text and as_result.code != text and as_result.changed
    assert as_result.notebook is not None and as_result.edits
    lines = text.splitlines()
    hoisted = next(f for f in as_result.findings if f.pass_id == "session-hoisting")
    assert hoisted.message.startswith("[cell 6, line 3] ")
    line = lines[hoisted.range.start.line]
    assert line[hoisted.range.start.character:].startswith("for prompt in PROMPTS:")


# ---------------------------------------------------------------------------------------
# The kernel keeps module-level names after the last cell
# ---------------------------------------------------------------------------------------

SWEEP = (
    "for layer in range(3):\n"
    '    with model.trace("The Eiffel Tower is in", remote=True):\n'
    "        hidden = model.transformer.h[layer].output.save()"
)


def test_a_value_saved_at_module_level_stays_downloaded_without_unsafe_fixes(verify_pkg):
    # no cell reads `hidden`, but the user will, in a cell not yet written
    original = notebook(SETUP, SWEEP)
    result = optimize_notebook(original)
    new = sources(result.text)[1]
    assert "with model.session(remote=True):" in new and "output.detach().cpu().save()" in new
    offered = [f.finding for f in result.findings if f.finding.status is Status.UNSAFE_NOT_APPLIED]
    assert [f.pass_id for f in offered] == ["reduction-pushdown"] and "`hidden`" in offered[0].message
    assert "hidden" not in result.result.unreturned
    report = verify_pkg.verify_sources(
        notebook_script(original), notebook_script(result.text), filename="sweep.py",
        ignore_missing=result.result.unreturned, ignore=result.result.introduced,
    )
    assert report.intended_ok, report.to_text()  # `hidden` compared: the last layer's value
    assert (report.before.requests, report.after.requests) == (3, 1)


def test_with_unsafe_fixes_a_notebook_value_no_cell_reads_is_not_downloaded(verify_pkg):
    original = notebook(SETUP, SWEEP)
    result = optimize_notebook(original, options=Options(unsafe_fixes=True))
    assert "hidden = model.transformer.h[layer].output\n" in sources(result.text)[1] + "\n"
    dropped = [f.finding for f in result.findings if f.finding.pass_id == "reduction-pushdown"]
    assert [(f.status, f.safety.value) for f in dropped] == [(Status.APPLIED, "unsafe")]
    assert "hidden" in result.result.unreturned
    report = verify_pkg.verify_sources(
        notebook_script(original), notebook_script(result.text), filename="sweep.py",
        ignore_missing=result.result.unreturned, ignore=result.result.introduced,
    )
    assert report.intended_ok, report.to_text()
    assert report.after.download_raw_bytes < report.before.download_raw_bytes


TRACE = 'with model.trace("The Eiffel Tower is in", remote=True):\n    logits = model.lm_head.output.save()\n'
CONSUMER = "top = logits[0, -1].argmax()\nprint(top)\n"


def test_a_finding_whose_reduction_is_in_a_later_cell_names_that_cell():
    text = notebook(SETUP, ("markdown", "## the request"), TRACE, CONSUMER)
    for options in (Options(), Options(unsafe_fixes=True)):
        located = [f for f in optimize_notebook(text, options=options).findings
                   if f.finding.pass_id == "reduction-pushdown"]
        assert len(located) == 1
        assert located[0].cell == 2  # the save's cell, where the fix applies
        assert located[0].finding.message.endswith("(used in cell 4)")  # 1-based, markdown counted
        assert [cell for cell, _ in located[0].uses] == [3]
        assert located[0].uses[0][1].start.line == 0  # `logits[0, -1].argmax()`, in its own cell
        assert located[0].finding.uses == ()  # (cell ranges are on the CellFinding)
    # the reduction in the same cell: no cell to name
    same = optimize_notebook(notebook(SETUP, TRACE + CONSUMER)).findings
    assert next(f.finding.message for f in same if f.finding.pass_id == "reduction-pushdown").endswith(
        "could be computed in the block")


def test_cells_given_as_texts_are_optimized_as_the_notebook_is():
    from ndif_opt.engine.cells import optimize_cells

    text = notebook(SETUP, ("markdown", "## the request"), TRACE, "!nvidia-smi\n" + CONSUMER)
    options = Options(unsafe_fixes=True)
    whole = optimize_notebook(text, options=options)
    code = [s for s, c in zip(sources(text), json.loads(text)["cells"]) if c["cell_type"] == "code"]
    cells = optimize_cells(code, indices=[0, 2, 3], options=options)
    assert cells.findings == whole.findings
    assert cells.changed_cells == whole.changed_cells == (2, 3)
    new = [s for s, c in zip(sources(whole.text), json.loads(whole.text)["cells"]) if c["cell_type"] == "code"]
    assert list(cells.new_sources) == new
    assert cells.new_sources[2].startswith("!nvidia-smi\n")
