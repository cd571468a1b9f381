"""Names a notebook kernel gives every cell (`display`) exist only on your machine.

A notebook showed each answer of a loop of remote traces with `display(...)`. The file never
defines `display` (IPython makes it a builtin of the kernel), so nothing marked it as the
client's: session-hoisting moved the call into the session, where NDIF has no `display`.
A call of a name the file never binds and Python does not provide now runs on your machine,
replayed after the session as a `print` is; `verify` runs a notebook's cells with the
kernel's `display` (before, the original itself failed there: `NameError`).

Real nnsight 0.8 on tiny GPT-2 and Llama models through verify's emulation of NDIF.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified, script  # noqa: E402

from ndif_opt import Status  # noqa: E402
from ndif_opt.frontends.batch import optimize_source  # noqa: E402
from ndif_opt.frontends.notebook import optimize_notebook, verify_notebook  # noqa: E402
from ndif_opt.options import Options  # noqa: E402

CELLS = (
    '''
    from nnsight import LanguageModel
    model = LanguageModel("REPO")
    prompts = ["The cat sat on the", "Paris is the capital of", "One two three"]
    ''',
    '''
    tops = {}
    for p in prompts:
        with model.trace(p, remote=True):
            logits = model.lm_head.output.save()
        tops[p] = logits[0, -1].argmax().item()
        display(tops[p])
    ''',
    '''
    display(tops)
    ''',
)


def notebook(cells) -> str:
    entries = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                "source": cell.splitlines(keepends=True)} for cell in cells]
    return json.dumps({"cells": entries, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


@both
def test_a_kernels_display_in_a_hoisted_loop_runs_on_your_machine(family):
    text = notebook([script(cell, family) for cell in CELLS])
    result = optimize_notebook(text, options=Options())
    assert "model.session(" in result.text
    (hoisted,) = [f for f in result.result.findings if f.pass_id == "session-hoisting"]
    assert hoisted.status is Status.APPLIED and "1 statement that must run on your machine" in hoisted.message
    assert "display(" not in _session_body(result.result.code), result.result.code
    report = verify_notebook(text, result, filename="cells.ipynb")
    assert report.intended_ok, report.to_text() + "\n" + result.text
    assert (report.before.requests, report.after.requests) == (3, 1)


@both
def test_a_percent_cell_script_is_verified_with_the_kernels_display(family):
    # the same cells as a `# %%` script (VS Code, PyCharm, jupytext): optimized by a
    # notebook's rules, and verified as its cells run, in a kernel (before, the original
    # failed there: NameError: name 'display' is not defined)
    import textwrap

    from ndif_opt.frontends.files import SourceFile
    from ndif_opt.frontends.verification import verify_optimized

    text = "".join("# %%\n" + textwrap.dedent(script(cell, family)).lstrip("\n") for cell in CELLS)
    options, source = Options(), SourceFile(path="cells.py", text=text)
    result = optimize_source(source, options)
    assert "model.session(" in result.code, result.code
    report = verify_optimized(source, result, "cells.py", options)
    assert report.intended_ok, report.to_text() + "\n" + result.code
    assert (report.before.requests, report.after.requests) == (3, 1)


def _session_body(code: str) -> str:
    """The lines of the first `with model.session(...)` block, its header included."""
    lines = code.splitlines()
    start = next(i for i, line in enumerate(lines) if "model.session(" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[start:end])


@both
def test_a_name_the_script_never_defines_is_not_called_on_the_server(family):
    # the same rule in a script whose `show` is set up before its code runs (as an exec'd
    # startup file would): the call is replayed on your machine after the session
    cells = script(CELLS[0] + CELLS[1], family).replace("display(", "show(")
    source = "import builtins\nbuiltins.show = print\n" + cells
    result, report = optimized_and_verified(source, family)
    assert "show(" not in _session_body(result.code) and "show(" in result.code, result.code
    assert (report.before.requests, report.after.requests) == (3, 1)
