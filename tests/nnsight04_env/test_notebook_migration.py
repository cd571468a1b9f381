"""`ndif-opt verify --migrate` on a notebook runs its pre-0.5 original on nnsight 0.4, as it
does a script's (it used to run it on 0.8, where `.value` fails: FAILED every time).

Run from the main venv; skipped without ``.venv-nnsight04`` (requirements-nnsight04.txt).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ndif_opt.verify.original_04 import nnsight04_python

if nnsight04_python() is None:
    pytest.skip("no nnsight 0.4 venv (.venv-nnsight04, see requirements-nnsight04.txt)", allow_module_level=True)

CELLS = [
    'from nnsight import LanguageModel\nmodel = LanguageModel("openai-community/gpt2")',
    'with model.trace("The Eiffel Tower is in", remote=True):\n    logits = model.lm_head.output.save()\n'
    "top = logits.value[0, -1].argmax().item()\nprint(top)",
]


def _notebook(path: Path) -> Path:
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": source.splitlines(keepends=True)} for source in CELLS]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_pre_05_notebook_is_verified_against_its_run_on_nnsight_04(tmp_path):
    notebook = _notebook(tmp_path / "lens.ipynb")
    ran = subprocess.run([sys.executable, "-m", "ndif_opt", "verify", "--migrate", str(notebook), "--format", "json"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    report = json.loads(ran.stdout)
    assert report["status"] == "ok", ran.stdout + ran.stderr
    assert report.get("local_nnsight") == "0.4", ran.stdout
