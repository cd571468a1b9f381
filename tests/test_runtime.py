"""The processes ndif-opt owns collect garbage rarely (ndif_opt/runtime.py); a library
caller's process keeps its own settings."""

from __future__ import annotations

import gc
import subprocess
import sys

from ndif_opt import optimize, runtime

SCRIPT = "import gc\nfrom ndif_opt import cli\n{call}\nprint(gc.get_threshold())\n"


def _thresholds_after(call: str) -> tuple[int, ...]:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(call=call)], capture_output=True, text=True,
                          check=True)
    return tuple(int(x) for x in done.stdout.strip().splitlines()[-1].strip("()").split(","))


def test_the_command_line_collects_garbage_rarely():
    assert _thresholds_after("cli.main(['rules'])") == runtime.THRESHOLDS
    assert _thresholds_after("pass") == gc.get_threshold() != runtime.THRESHOLDS


def test_a_library_call_keeps_the_callers_settings():
    before = gc.get_threshold()
    optimize("from nnsight import LanguageModel\nmodel = LanguageModel('gpt2')\n"
             "for i in range(3):\n    with model.trace('x', remote=True):\n        h = model.lm_head.output.save()\n")
    assert gc.get_threshold() == before
