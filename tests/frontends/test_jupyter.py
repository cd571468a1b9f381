"""The IPython extension (`%load_ext ndif_opt`), in a real in-process IPython shell.

Cells that use nnsight are not run (that would reach the network): the test calls the
extension's `pre_run_cell` callback, as IPython does, with an ExecutionInfo-like object.
Plain Python cells go through `shell.run_cell`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("IPython")


from ndif_opt import optimize  # noqa: E402
from ndif_opt.frontends import jupyter  # noqa: E402
from ndif_opt.options import Options  # noqa: E402
from ndif_opt.output.text import unified_diff  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPT_LOOP = (ROOT / "examples" / "prompt_loop.py").read_text()
HEAD, _, TAIL = PROMPT_LOOP.partition("top_tokens = {}")
LOOP = "top_tokens = {}" + TAIL  # the cell with the loop of traces, after HEAD's cell


@pytest.fixture
def shell(ipython):
    shell = ipython  # reset before and after (tests/conftest.py)
    result = shell.run_cell("%load_ext ndif_opt", store_history=True)
    assert result.success
    yield shell
    jupyter.unload_ipython_extension(shell)
    shell.extension_manager.loaded.discard("ndif_opt")
    shell.magics_manager.magics["line"].pop("ndif_opt", None)


def _extension(shell) -> jupyter.NdifOptExtension:
    return shell._ndif_opt_extension


def _before_run(shell, cell: str) -> None:
    """What IPython does before running `cell`: trigger `pre_run_cell`."""
    shell.events.trigger("pre_run_cell", SimpleNamespace(raw_cell=cell))


def _ran(shell, cell: str) -> None:
    """Put `cell` in the session's history as if it had run (without running it)."""
    shell.history_manager.store_inputs(shell.execution_count, cell, cell)
    shell.execution_count += 1


def test_load_ext_registers_the_hook_and_the_magic(shell):
    extension = _extension(shell)
    assert isinstance(extension, jupyter.NdifOptExtension)
    assert extension.pre_run_cell in shell.events.callbacks["pre_run_cell"]
    assert "ndif_opt" in shell.magics_manager.magics["line"]
    # loading it again does not register a second hook
    assert jupyter.load_ipython_extension(shell) is extension
    shell.run_cell("%reload_ext ndif_opt", store_history=True)
    hooks = [h for h in shell.events.callbacks["pre_run_cell"] if getattr(h, "__self__", None).__class__ is jupyter.NdifOptExtension]
    assert len(hooks) == 1


def test_importing_ndif_opt_does_not_import_ipython():
    code = "import sys, ndif_opt; assert callable(ndif_opt.load_ipython_extension); print('IPython' in sys.modules, 'ndif_opt.frontends.jupyter' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False False"


def test_naive_cell_prints_one_line(shell, capsys):
    _before_run(shell, PROMPT_LOOP)
    out = capsys.readouterr().out
    assert out == (
        "ndif-opt: this cell sends 8 requests and downloads 11.9 MB; optimized: 1 request, 1.6 MB "
        "(%ndif_opt diff to see, %ndif_opt apply to rewrite this cell)\n"
    )


def test_the_history_is_analysed_with_the_cell(shell, capsys):
    _ran(shell, HEAD)  # the model and the prompts are defined in an earlier cell
    _before_run(shell, LOOP)
    out = capsys.readouterr().out
    assert out.startswith("ndif-opt: this cell sends 8 requests") and out.count("\n") == 1
    last = _extension(shell).last
    assert last.requests == (8, 1)
    # the optimized cell is the loop's cell only, not the history with it
    whole = optimize(HEAD + LOOP, options=Options(notebook=True)).code
    assert last.code == whole[len(HEAD):]
    assert "LanguageModel" not in last.code and "model.session(remote=True)" in last.code


def test_apply_puts_the_optimized_cell_in_the_next_input(shell, monkeypatch, capsys):
    received = []
    monkeypatch.setattr(shell, "set_next_input", lambda text, replace=False: received.append((text, replace)))
    _before_run(shell, PROMPT_LOOP)
    number = shell.execution_count
    capsys.readouterr()
    shell.run_cell("%ndif_opt apply")
    expected = optimize(PROMPT_LOOP, options=Options(notebook=True)).code
    assert expected != PROMPT_LOOP
    assert received == [(expected, False)]
    assert capsys.readouterr().out == f"ndif-opt: the next input holds In [{number}] optimized: run it to use it\n"


def test_diff_prints_the_cells_diff(shell, capsys):
    _before_run(shell, PROMPT_LOOP)
    number = shell.execution_count
    capsys.readouterr()
    shell.run_cell("%ndif_opt diff")
    expected = optimize(PROMPT_LOOP, options=Options(notebook=True)).code
    assert capsys.readouterr().out == unified_diff(f"In [{number}]", PROMPT_LOOP, expected)


def test_diff_and_apply_act_on_the_last_cell_with_a_suggestion(shell, monkeypatch, capsys):
    # a suggestion, then cells that need no change (one of them with nnsight, one plain):
    # diff and apply still act on the cell that had the suggestion
    _ran(shell, HEAD)
    _before_run(shell, LOOP)
    suggested = shell.execution_count
    _ran(shell, LOOP)
    for unrelated in ("answers = sorted(top_tokens.values())\n", "x = 1\n"):
        _before_run(shell, unrelated)
        _ran(shell, unrelated)
    assert _extension(shell).last.cell == "x = 1\n"  # analysed, nothing to say
    capsys.readouterr()
    shell.run_cell("%ndif_opt diff")
    optimized = optimize(HEAD + LOOP, options=Options(notebook=True)).code[len(HEAD):]
    assert capsys.readouterr().out == unified_diff(f"In [{suggested}]", LOOP, optimized)
    received = []
    monkeypatch.setattr(shell, "set_next_input", lambda text, replace=False: received.append(text))
    shell.run_cell("%ndif_opt apply")
    assert received == [optimized]


def test_a_later_suggestion_replaces_the_earlier_one(shell, capsys):
    _before_run(shell, PROMPT_LOOP)
    _ran(shell, PROMPT_LOOP)
    other = PROMPT_LOOP.replace("top_tokens", "next_tokens")
    _before_run(shell, other)
    capsys.readouterr()
    shell.run_cell("%ndif_opt diff")
    assert "-next_tokens = {}" in capsys.readouterr().out


def test_running_the_applied_cell_takes_the_suggestion(shell, capsys):
    _before_run(shell, PROMPT_LOOP)
    _ran(shell, PROMPT_LOOP)
    optimized = _extension(shell).suggestion.code
    _before_run(shell, optimized.rstrip("\n"))  # the next input, run as it was put there
    capsys.readouterr()
    shell.run_cell("%ndif_opt diff")
    assert capsys.readouterr().out == jupyter.NO_SUGGESTION + "\n"


def test_diff_without_a_suggestion_says_so(shell, capsys):
    shell.run_cell("y = 2", store_history=True)
    capsys.readouterr()
    shell.run_cell("%ndif_opt diff")
    assert capsys.readouterr().out == jupyter.NO_SUGGESTION + "\n"
    shell.run_cell("%ndif_opt")
    assert capsys.readouterr().out == jupyter.USAGE + "\n"


def test_the_magic_has_help(shell, capsys):
    shell.colors = "NoColor"
    capsys.readouterr()
    shell.run_cell("%ndif_opt?")
    shown = capsys.readouterr().out
    for words in ("%ndif_opt diff", "%ndif_opt apply", "last cell that had a suggestion", "next input",
                  "%load_ext ndif_opt", "%unload_ext ndif_opt"):
        assert words in shown, words


def test_unload_ext_removes_the_hook_and_the_magic(shell):
    extension = _extension(shell)
    assert shell.run_cell("%unload_ext ndif_opt", store_history=True).success
    assert extension.pre_run_cell not in shell.events.callbacks["pre_run_cell"]
    assert shell.find_line_magic("ndif_opt") is None
    assert shell.run_cell("%load_ext ndif_opt", store_history=True).success  # and back
    assert shell.find_line_magic("ndif_opt") is not None


def test_ipython_syntax_in_the_cell(shell, capsys):
    _before_run(shell, "%time x = 1\n!echo hi\n" + PROMPT_LOOP)
    assert capsys.readouterr().out.startswith("ndif-opt: this cell sends 8 requests")


def test_a_cell_that_needs_no_change_prints_nothing(shell, capsys):
    result = shell.run_cell("values = [i * i for i in range(4)]\nprint(sum(values))", store_history=True)
    assert result.success
    assert capsys.readouterr().out == "14\n"
    last = _extension(shell).last  # it was analysed, and found nothing to say
    assert last is not None and last.cell.startswith("values =") and last.code == last.cell
    # an optimized remote cell needs no change either
    _before_run(shell, (ROOT / "examples" / "optimized" / "prompt_loop.py").read_text())
    assert capsys.readouterr().out == ""
    assert _extension(shell).last.requests == (1, 1)


def test_an_analysis_error_prints_nothing(shell, capsys, monkeypatch):
    def broken(history, cell):
        raise RuntimeError("boom")

    monkeypatch.setattr(jupyter, "analyse", broken)
    result = shell.run_cell("z = 40 + 2\nprint(z)", store_history=True)
    assert result.success and shell.user_ns["z"] == 42
    assert capsys.readouterr().out == "42\n"
    monkeypatch.undo()
    # a cell that does not parse: IPython reports it, the extension says nothing
    _before_run(shell, "for x in :\n")
    assert capsys.readouterr().out == ""


def test_a_rewrite_that_would_change_a_cell_that_ran_falls_back_to_the_cell_alone(shell, capsys):
    # the trace ran in an earlier cell; this cell reduces its logits. Together, the reduction
    # would move into the earlier cell's trace: that cell has run, so the cell is analysed
    # alone, where `logits` is unknown and there is nothing to say
    traced = (
        'from nnsight import LanguageModel\nmodel = LanguageModel("openai-community/gpt2")\n'
        'with model.trace("The cat sat on the", remote=True):\n    logits = model.lm_head.output.save()\n'
    )
    reducing = "top = logits[0, -1].argmax().item()\nprint(top)\n"
    together = optimize(traced + reducing, options=Options(notebook=True)).code
    assert not together.startswith(traced)  # the rewrite reaches into the earlier cell
    _ran(shell, traced)
    _before_run(shell, reducing)
    assert capsys.readouterr().out == ""
    last = _extension(shell).last
    assert last.cell == reducing and last.code == reducing and last.requests == (0, 0)
