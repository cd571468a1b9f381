"""The processes ndif-opt owns collect garbage rarely (ndif_opt/engine/runtime.py); a library
caller's process keeps its own settings."""

from __future__ import annotations

import gc
import subprocess
import sys

from ndif_opt import optimize
from ndif_opt.engine import runtime

DENSE_HEAD = ("from nnsight import LanguageModel\nmodel = LanguageModel('gpt2')\n"
              "for i in range(3):\n    with model.trace('x', remote=True):\n        h = model.lm_head.output.save()\n")
SCRIPT = "import gc\nfrom ndif_opt.frontends import cli\n{call}\nprint(gc.get_threshold())\n"


def _thresholds_after(call: str) -> tuple[int, ...]:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(call=call)], capture_output=True, text=True,
                          check=True)
    return tuple(int(x) for x in done.stdout.strip().splitlines()[-1].strip("()").split(","))


def test_the_command_line_collects_garbage_rarely():
    assert _thresholds_after("cli.main(['rules'])") == runtime.THRESHOLDS
    assert _thresholds_after("pass") == gc.get_threshold() != runtime.THRESHOLDS


def test_a_worker_collects_rarely_and_leaves_ctrl_c_to_its_parent():
    script = ("import gc, os, signal\nfrom ndif_opt.engine import runtime\nruntime.init_worker(os.getppid())\n"
              "print(gc.get_threshold() == runtime.THRESHOLDS, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"]


def test_a_library_call_keeps_the_callers_settings():
    before = gc.get_threshold()
    optimize(DENSE_HEAD)
    assert gc.get_threshold() == before


def test_a_file_is_optimized_with_the_collector_paused(monkeypatch):
    from ndif_opt.engine import pipeline
    from ndif_opt.frontends import batch
    from ndif_opt.frontends.files import SourceFile
    from ndif_opt.options import Options

    seen = []
    real = pipeline.run_pipeline

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run_pipeline", recording)
    assert gc.isenabled()
    result, error = batch.work(SourceFile("a.py", DENSE_HEAD), Options())
    assert error is None and result.changed
    assert seen == [False] and gc.isenabled()  # paused during the file only


def test_a_library_call_leaves_the_collector_running(monkeypatch):
    from ndif_opt.engine import pipeline

    seen = []
    real = pipeline.run_pipeline
    monkeypatch.setattr(pipeline, "run_pipeline", lambda *a, **k: seen.append(gc.isenabled()) or real(*a, **k))
    optimize(DENSE_HEAD)
    assert seen == [True]


def _cyclic_garbage_of(run) -> list:
    """The objects ``run()`` leaves that only the collector can free."""
    gc.collect()
    gc.disable()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()
        gc.enable()


def test_the_pipeline_leaves_almost_no_cyclic_garbage():
    """What makes the pause safe: the memory a run frees is freed by reference counting.
    (A reference cycle per tree version, like blocks linked both ways, left ~12,000
    objects per 300 dense lines; what is left is ``ast.literal_eval``'s own closures.)"""
    from pathlib import Path

    from generators import dense_nnsight_script

    examples = sorted((Path(__file__).parents[2] / "examples").glob("*.py"))
    texts = [dense_nnsight_script(300)] + [path.read_text() for path in examples]
    garbage = _cyclic_garbage_of(lambda: [optimize(text, unsafe_fixes=True) for text in texts])
    assert len(garbage) < 20 * len(texts), sorted({type(o).__name__ for o in garbage})
