"""Windows: independent parts of a module optimized one at a time (ndif_opt/engine/windows.py).

The plan is checked on small scripts whose def-use is known; the pipeline is checked to
give the whole-module result where the parts are independent, to map findings and
edits back to the file, to keep fresh names unique across the file, and, by running
original and optimized script on the tiny models, to give equal results on a long
script made of many experiments.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from generators import HEADER, dense_nnsight_script
from hypothesis import given, settings
from test_pipeline import apply_edits

from ndif_opt import optimize
from ndif_opt.engine import pipeline, windows
from ndif_opt.options import Options
from ndif_opt.passes import PASSES

ROOT = Path(__file__).resolve().parents[2]

SETUP = textwrap.dedent('''\
    from nnsight import LanguageModel

    model = LanguageModel("openai-community/gpt2")
    PROMPT = "The Eiffel Tower is in the city of"
    LAYERS = [0, 3, 7, 11]
    FLAGS = [True, True, True, True]  # one `remote=` per sweep: no session holds two


    def top(logits):
        return logits[0, -1].argmax().item()

''')

# each sweep has its own `remote=`: experiments in a row with the same flag are one window
# (they may become one session), see test_independent_experiments_in_a_row_...
SWEEP = textwrap.dedent('''\
    acts_{i} = []
    for layer in LAYERS:
        with model.trace(PROMPT, remote=FLAGS[{i}]):
            acts_{i}.append(model.transformer.h[layer].output.save())
    print("sweep", {i}, len(acts_{i}))
''')


def plan_of(source: str) -> windows.Plan | None:
    return windows.plan(source, ast.parse(source))


def window_texts(source: str) -> list[str]:
    """The active windows' texts; the whole source when it is one window."""
    plan = plan_of(source)
    if plan is None:
        return [source]
    return [plan.text(w.start, w.end) for w in plan.windows if w.active]


def test_independent_experiments_are_separate_windows():
    source = SETUP + SWEEP.format(i=0) + SWEEP.format(i=1) + SWEEP.format(i=2)
    texts = window_texts(source)
    assert len(texts) == 3
    assert all("acts_" in t and t.count("model.trace") == 1 for t in texts)


def test_a_later_read_joins_the_binding_window():
    source = SETUP + SWEEP.format(i=0) + SWEEP.format(i=1) + "print(len(acts_0))\n"
    texts = window_texts(source)
    assert len(texts) == 1 and "acts_1" in texts[0] and "print(len(acts_0))" in texts[0]


def test_a_reused_loop_variable_does_not_join_windows():
    # both loops bind `layer` before reading it: no value flows from one to the other
    source = SETUP + SWEEP.format(i=0) + SWEEP.format(i=1)
    assert len(window_texts(source)) == 2


def test_a_read_that_may_see_an_earlier_binding_joins():
    # `hidden` is bound inside a loop that may not run: the later read may see the first
    source = SETUP + SWEEP.format(i=0) + textwrap.dedent('''\
        with model.trace(PROMPT, remote=True):
            hidden = model.transformer.h[0].output.save()
        for layer in []:
            hidden = layer
        print(hidden)
    ''')
    texts = window_texts(source)
    assert len(texts) == 2 and texts[1].count("hidden") == 3 and "acts_0" not in texts[1]


def test_a_name_a_block_binds_without_saving_it_may_keep_its_value_from_before():
    # nnsight 0.5+ sends back only saved values: after the block `pattern` is "unknown",
    # which nnsight-05-failures must see to judge its fix (it changes what the script prints)
    source = SETUP + SWEEP.format(i=0) + textwrap.dedent('''\
        pattern = "unknown"
        with model.trace(PROMPT, remote=True):
            hidden = model.transformer.h[0].output.save()
            pattern = "transformer.h"
        print(pattern, hidden.shape)
    ''')
    texts = window_texts(source)
    assert len(texts) == 2 and 'pattern = "unknown"' in texts[1]
    saved = source.replace('pattern = "transformer.h"', 'pattern = nnsight.save("transformer.h")')
    texts = window_texts(saved)  # saved: the block binds it for sure
    assert len(texts) == 2 and 'pattern = "unknown"' not in texts[1]
    invoked = saved.replace('"unknown"\nwith model.trace(PROMPT, remote=True):\n',
                            '"unknown"\nwith model.trace(remote=True) as tracer:\n  with tracer.invoke(PROMPT):\n')
    texts = window_texts(invoked)  # (in an invoke of the block too)
    assert len(texts) == 2 and 'pattern = "unknown"' not in texts[1] and "tracer.invoke" in texts[1]


def test_a_function_reading_a_global_joins_every_binding_once_it_escapes():
    source = SETUP + textwrap.dedent('''\
        results = []

        def record(value):
            results.append(value)

    ''') + SWEEP.format(i=0) + "record(1)\n" + SWEEP.format(i=1) + "results = None\n"
    texts = window_texts(source)
    # called by name only: it reads `results` where it is called
    assert "results = []" in texts[0] and "record(1)" in texts[0] and "acts_1" not in texts[0]
    escaped = source.replace("record(1)", "callbacks = [record]")
    texts = window_texts(escaped)  # it may run anywhere: every binding of `results` joins
    assert len(texts) == 1 and "results = []" in texts[0] and "results = None" in texts[0]


def test_a_global_declaration_joins_everything_touching_the_name():
    source = SETUP + textwrap.dedent('''\
        def reset():
            global counter
            counter = 0

    ''') + SWEEP.format(i=0) + "counter = 5\n" + SWEEP.format(i=1) + "reset()\n"
    texts = window_texts(source)
    assert len(texts) == 1 and "def reset" in texts[0] and "reset()" in texts[0]


def test_a_mutated_constant_is_not_shared_context():
    source = SETUP + SWEEP.format(i=0) + "LAYERS.append(5)\n" + SWEEP.format(i=1)
    # LAYERS is no longer context: its binding and every reader form one window
    texts = window_texts(source)
    assert len(texts) == 1 and "LAYERS = [0, 3, 7, 11]" in texts[0]


def test_interventions_on_the_model_keep_it_shared_context():
    steer = textwrap.dedent('''\
        with model.trace(PROMPT, remote=FLAGS[{i}]):
            model.transformer.h[{i}].output[:] = 0
            out_{i} = model.lm_head.output.save()
        print(out_{i}.shape)
    ''')
    source = SETUP + steer.format(i=0) + steer.format(i=1)
    assert len(window_texts(source)) == 2


def test_model_setup_goes_into_the_preludes_after_it():
    source = SETUP + SWEEP.format(i=0) + 'model.tokenizer.padding_side = "left"\n' + SWEEP.format(i=1)
    plan = plan_of(source)
    first, second = [w for w in plan.windows if w.active]
    assert "padding_side" not in plan.prelude_text(first)
    assert "padding_side" in plan.prelude_text(second)
    assert "def top" not in plan.prelude_text(first)  # not read by the window


def test_future_imports_open_every_prelude():
    source = "from __future__ import annotations\n" + SETUP + SWEEP.format(i=0) + SWEEP.format(i=1)
    plan = plan_of(source)
    for window in plan.windows:
        if window.active:
            assert plan.prelude_text(window).startswith("from __future__ import annotations\n")


@pytest.mark.parametrize("source", [
    "from torch import *\n" + SETUP + SWEEP.format(i=0) + SWEEP.format(i=1),  # star import
    (SETUP + SWEEP.format(i=0) + SWEEP.format(i=1)).replace("\n", "\r"),  # old Mac line ends
    SETUP + SWEEP.format(i=0),  # one window only
    SETUP + SWEEP.format(i=0) + 'globals()["acts_1"] = acts_0\n' + SWEEP.format(i=1),  # names from strings
    SETUP + SWEEP.format(i=0) + 'exec("acts_1 = []")\n' + SWEEP.format(i=1),
])
def test_no_plan_when_in_doubt(source):
    assert plan_of(source) is None


# -- the pipeline over windows --------------------------------------------------------------


def examples():
    return sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "benchmarks" / "cost_scripts").glob("*.py"))


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.stem)
def test_windows_give_the_whole_module_result_on_the_examples(path):
    source = path.read_text()
    windowed = pipeline.run_pipeline(source, Options())
    whole = pipeline._run_module(source, Options())
    assert windowed.code == whole.code
    assert [(f.pass_id, f.range, f.status) for f in windowed.findings] == [
        (f.pass_id, f.range, f.status) for f in whole.findings
    ]


def test_findings_and_edits_point_into_the_file():
    source = SETUP + SWEEP.format(i=0) + "\n# the second experiment\n" + SWEEP.format(i=1)
    result = optimize(source)
    assert result.changed
    lines = source.split("\n")
    hoisted = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert len(hoisted) == 2
    for finding in hoisted:
        assert lines[finding.range.start.line].startswith("for layer in LAYERS:")
    assert apply_edits(source, result.edits) == result.code


def test_costs_add_up_over_windows():
    one = optimize(SETUP + SWEEP.format(i=0))
    two = optimize(SETUP + SWEEP.format(i=0) + SWEEP.format(i=1))
    assert two.costs[0].before.requests == 2 * one.costs[0].before.requests == 8
    assert two.costs[-1].after.requests == 2 * one.costs[-1].after.requests == 2


def test_a_window_without_nnsight_after_one_with_it_keeps_the_costs():
    # `np.save(...)` looks like a save to the plan, but its window has nothing to optimize
    source = "import numpy as np\n" + SETUP + SWEEP.format(i=0) + 'np.save("x.npy", np.ones(2))\n'
    assert len(window_texts(source)) == 2
    windowed = pipeline.run_pipeline(source, Options())
    whole = pipeline._run_module(source, Options())
    assert windowed.code == whole.code
    assert windowed.costs == whole.costs and len(windowed.costs) == len([p for p in PASSES if not p.opt_in])


def test_fresh_names_avoid_names_of_other_windows():
    # the first window's push-down would introduce `hidden_norm`; a later window calls a
    # function of that name, which the first window does not see
    source = SETUP + textwrap.dedent('''\
        with model.trace(PROMPT, remote=True):
            hidden = model.transformer.h[5].output.save()
        print(hidden.norm().item())

    ''') + SWEEP.format(i=1) + "print(hidden_norm(acts_1))\n"
    source = source.replace("def top(logits):", "def hidden_norm(values):\n    return len(values)\n\n\ndef top(logits):")
    plan = plan_of(source)
    assert len([w for w in plan.windows if w.active]) == 2
    result = optimize(source)
    assert "hidden.norm().item().save()" in result.code
    assert "hidden_norm = " not in result.code and "hidden_norm(acts_1)" in result.code


def test_a_changed_prelude_falls_back_to_the_whole_module(monkeypatch):
    source = SETUP + SWEEP.format(i=0) + SWEEP.format(i=1)
    real = pipeline._run_module
    calls = []

    def edits_the_prelude(text, options, filename=None, module=None, **keywords):
        calls.append(text)
        result = real(text, options, filename, module, **keywords)
        if text != source:  # a window: pretend a pass rewrote shared context
            return dataclasses.replace(result, code="# changed\n" + result.code)
        return result

    monkeypatch.setattr(pipeline, "_run_module", edits_the_prelude)
    result = pipeline.run_pipeline(source, Options())
    assert calls[-1] == source  # the whole module ran at the end
    assert not result.code.startswith("# changed")


def test_pre_05_code_in_one_window_stops_the_whole_file():
    source = SETUP + SWEEP.format(i=0) + textwrap.dedent('''\
        with model.trace(PROMPT, remote=True):
            old = model.lm_head.output.save()
        print(old.value)
    ''')
    result = optimize(source)
    assert not result.changed
    assert any("pre-0.5" in f.message for f in result.findings)


# -- by execution -----------------------------------------------------------------------------


def test_a_long_script_of_many_experiments_gives_equal_results():
    """Eleven independent experiments (each pattern of the generator), on the tiny GPT-2;
    those in a row with no client code between them share a window (one session)."""
    from ndif_opt.verify import verify_result

    source = dense_nnsight_script(80)
    assert source.startswith(HEADER)
    result = optimize(source)
    assert len([w for w in plan_of(source).windows if w.active]) >= 4
    report = verify_result(source, result)
    assert report.intended_ok, report.to_text()
    assert report.after.requests < report.before.requests


def test_an_import_repeated_in_a_later_cell_stays_shared_context():
    source = SETUP + "import torch\n" + SWEEP.format(i=0) + "import torch\n" + SWEEP.format(i=1)
    source = source.replace(".output.save())", ".output.save().to(torch.float32))")
    texts = window_texts(source)
    assert len(texts) == 2
    assert not any("import torch" in t for t in texts)  # in the preludes
    source = source.replace("import torch\n", "import numpy as torch\n", 1)  # not the same thing
    first, second = window_texts(source)  # each sweep with the import it reads
    assert "import numpy as torch" in first and "acts_0" in first
    assert "import torch" in second and "acts_1" in second


def test_a_function_called_only_by_name_reads_globals_where_it_is_called():
    helper = textwrap.dedent('''\
        def last_hidden(prompt):
            with model.trace(prompt, remote=True):
                return model.transformer.h[-1].output.save()

    ''')
    other_model = 'model = LanguageModel("openai-community/gpt2")\n'
    source = SETUP + helper + "first = last_hidden(PROMPT)\n" + SWEEP.format(i=0) + other_model + SWEEP.format(i=1)
    texts = window_texts(source)
    # `model` is bound twice: the helper's call reads the first binding only
    assert len(texts) == 2 and "last_hidden(PROMPT)" in texts[0] and "acts_1" in texts[1]
    escaping = source.replace("first = last_hidden(PROMPT)", "first = list(map(last_hidden, [PROMPT]))")
    assert len(window_texts(escaping)) == 1  # passed as a value: it could run anywhere
    lazy = source.replace("first = last_hidden(PROMPT)", "first = (last_hidden(p) for p in [PROMPT])")
    assert len(window_texts(lazy)) == 1  # a generator runs when it is consumed


HELPER = textwrap.dedent('''\
    def last_norm(prompt, layer, remote=True):
        with model.trace(prompt, remote=remote):
            hidden = model.transformer.h[layer].output[0].save()
        return hidden[0, -1].norm().item()

''')

CALLS = textwrap.dedent('''\
    norms_{i} = []
    for layer in LAYERS:
        norms_{i}.append(last_norm(PROMPT, layer))
    print("norms", {i}, norms_{i})
''')


def test_a_shared_helper_does_not_tie_its_callers_into_one_window():
    source = SETUP + HELPER + CALLS.format(i=0) + SWEEP.format(i=1) + CALLS.format(i=2)
    plan = plan_of(source)
    active = [w for w in plan.windows if w.active]
    assert [plan.text(w.start, w.end).count("model.trace") for w in active] == [0, 1, 0]
    assert ["def last_norm" in plan.prelude_text(w) for w in active] == [True, False, True]
    windowed, whole = pipeline.run_pipeline(source, Options()), pipeline.whole_module(source, Options())
    assert windowed.code == whole.code and windowed.code.count("model.session(") == 3
    assert windowed.findings == whole.findings
    # what the passes say about the helper, each window that calls it says: once, where it stands
    helper_line = source.split("\n").index("        hidden = model.transformer.h[layer].output[0].save()")
    assert [f.pass_id for f in windowed.findings if f.range.start.line == helper_line] == ["migrate-api"]
    assert windowed.costs == optimize(source).costs and windowed.costs[0].before.requests == 12


def test_a_helper_reading_what_experiments_change_is_not_shared():
    changing = HELPER.replace("output[0].save()", "output[0].save()\n    CALLS_MADE.append(layer)")
    source = SETUP + "CALLS_MADE = []\n" + changing + CALLS.format(i=0) + SWEEP.format(i=1) + CALLS.format(i=2)
    assert len(window_texts(source)) == 1  # each call changes `CALLS_MADE`: one window, as before
    rebinding = SETUP + HELPER + "def swap():\n    global last_norm\n    last_norm = len\n\n" + \
        CALLS.format(i=0) + SWEEP.format(i=1) + CALLS.format(i=2)
    assert len(window_texts(rebinding)) == 1  # `swap()` could make it another function


def test_after_an_edit_in_a_shared_helper_its_callers_run_again(monkeypatch):
    source = SETUP + HELPER + CALLS.format(i=0) + SWEEP.format(i=1) + CALLS.format(i=2)
    cache = pipeline.WindowCache()
    optimize(source, cache=cache)
    real, runs = pipeline._run_module, []
    monkeypatch.setattr(pipeline, "_run_module", lambda text, *a, **k: runs.append(text) or real(text, *a, **k))
    optimize(source.replace("norms_2 = []", "norms_2 = []  # an edit"), cache=cache)
    assert len(runs) == 1  # the edited caller's window only
    edited = source.replace("return hidden[0, -1]", "return hidden[0, 0]")
    again = optimize(edited, cache=cache)
    assert len(runs) == 3 and all("hidden[0, 0]" in text and "norms_" in text for text in runs[1:])
    assert again.code == optimize(edited).code


def test_a_shared_helper_every_caller_rewrites_alike_is_rewritten_once(monkeypatch):
    # the sessions call it with remote=False: each window gives it a `remote` parameter
    fixed = HELPER.replace("prompt, layer, remote=True", "prompt, layer").replace("remote=remote", "remote=True")
    source = SETUP + fixed + CALLS.format(i=0) + SWEEP.format(i=1) + CALLS.format(i=2)
    real, runs = pipeline._run_module, []
    monkeypatch.setattr(pipeline, "_run_module", lambda text, *a, **k: runs.append(text) or real(text, *a, **k))
    windowed = pipeline.run_pipeline(source, Options())
    assert len(runs) == 3 and source not in runs
    whole = pipeline.whole_module(source, Options())
    assert windowed.code == whole.code and windowed.findings == whole.findings
    assert windowed.code.count("def last_norm(prompt, layer, remote=True):") == 1
    assert windowed.code.count("last_norm(PROMPT, layer, remote=False)") == 2
    assert apply_edits(source, windowed.edits) == windowed.code
    # a caller that leaves it as it is (one call: no session): the whole module decides
    once = source.replace(CALLS.format(i=2), "single = last_norm(PROMPT, 0)\nprint(single)\n")
    runs.clear()
    result = pipeline.run_pipeline(once, Options())
    assert runs[-1] == once and result.code == real(once, Options()).code


STATS = textwrap.dedent('''\
    stats_{i} = defaultdict(list)
    for layer in LAYERS:
        with model.trace(PROMPT, remote=True):
            stats_{i}[layer].append(model.transformer.h[layer].output.mean().save())
    print("stats", {i}, len(stats_{i}))
''')


def test_an_import_a_window_needs_goes_where_the_whole_file_run_puts_it(monkeypatch):
    # the session takes `stats_0` along with `nnsight.save`: `import nnsight` after the imports
    source = "from collections import defaultdict\n" + SETUP + STATS.format(i=0) + SWEEP.format(i=1) + \
        STATS.format(i=2)
    real, runs = pipeline._run_module, []
    monkeypatch.setattr(pipeline, "_run_module", lambda text, *a, **k: runs.append(text) or real(text, *a, **k))
    windowed = pipeline.run_pipeline(source, Options())
    assert len(runs) == 3 and source not in runs  # the windows only, not the whole module after them
    whole = pipeline.whole_module(source, Options())
    assert windowed.code == whole.code and windowed.findings == whole.findings
    assert windowed.code.startswith("from collections import defaultdict\nfrom nnsight import LanguageModel\n"
                                    "import nnsight\n\n")
    assert windowed.code.count("import nnsight\n") == 1 and windowed.code.count("nnsight.save(stats_") == 2
    assert apply_edits(source, windowed.edits) == windowed.code
    imported = source.replace("from collections", "import nnsight\nfrom collections")
    assert pipeline.run_pipeline(imported, Options()).code.count("import nnsight\n") == 1


@pytest.mark.parametrize(("source", "line"), [
    ("import os\nfrom x import (a,\n    b)\nprint(1)\n", 3),
    ('"""doc"""\nimport os\n\n# a comment\nx = 1\n', 2),
    ("import os; y = 2\nx = 1\n", 1),
    ("x = 1\nimport os\n", 0),
    ("import os, nnsight\nx = 1\n", windows.IMPORTED),
    ("import os\nif x:\n    import nnsight\n", 1),
    ("# a comment first\nx = 1\n", None),
    ('f"doc {1}"\nimport os\n', None),
    # a masked `!pip install nnsight` (engine/ipython_lines.py) installs what the imports need
    ('from IPython import get_ipython\nget_ipython().run_line_magic("n", "0", pip)\nfrom nnsight import A\nx = 1\n', 3),
])
def test_import_line_is_where_the_passes_put_an_import(source, line):
    from ndif_opt.syntax.rewrite import with_module_import

    assert windows.import_line(ast.parse(source), "nnsight") == line
    if line not in (None, windows.IMPORTED):
        expected = with_module_import(cst.parse_module(source), "nnsight").code
        lines = source.splitlines(keepends=True)
        assert "".join(lines[:line]) + "import nnsight\n" + "".join(lines[line:]) == expected


CONCATENATED = ("logit_lens", "steering_sweep", "activation_patching", "prompt_loop",
                "layer_statistics", "client_effects", "helper_function", "logit_reductions")


def test_examples_one_after_another_like_notebook_cells_give_equal_results():
    """Eight examples in one file, each rebinding `model`: one window each, equal results."""
    from ndif_opt.verify import verify_result

    source = "\n\n".join((ROOT / "examples" / f"{name}.py").read_text() for name in CONCATENATED)
    assert len([w for w in plan_of(source).windows if w.active]) == len(CONCATENATED)
    result = optimize(source)
    assert result.costs[-1].after.requests == len(CONCATENATED)
    report = verify_result(source, result)
    assert report.intended_ok, report.to_text()
    assert report.after.requests == len(CONCATENATED) < report.before.requests


def test_after_an_edit_a_window_cache_reruns_only_the_changed_window(monkeypatch):
    source = SETUP + SWEEP.format(i=0) + SWEEP.format(i=1) + SWEEP.format(i=2)
    cache = pipeline.WindowCache()
    first = optimize(source, cache=cache)
    real, runs = pipeline._run_module, []
    monkeypatch.setattr(pipeline, "_run_module", lambda text, *a, **k: runs.append(text) or real(text, *a, **k))
    edited = source.replace("acts_1 = []", "acts_1 = []  # an edit")
    again = optimize(edited, cache=cache)
    assert len(runs) == 1 and "# an edit" in runs[0]
    assert cache.hits == 2
    uncached = optimize(edited)
    assert again.code == uncached.code and again.findings == uncached.findings
    assert again.costs == uncached.costs and first.code != again.code
    before = len(runs)
    optimize(edited, cache=cache, unsafe_fixes=True)  # other options: nothing reused
    assert len(runs) == before + 3


def test_a_name_imported_with_a_rebound_one_is_read_from_its_window():
    """``count`` is bound again later, so the import chunk is not shared context; ``islice``,
    bound only there, must not be either (windows.plan raised KeyError: 'islice' on
    networkx's shortest_paths/weighted.py). The sweep reading it joins the import's window."""
    imports = "from itertools import count, islice\n\n"
    source = (SETUP + imports + SWEEP.format(i=0).replace("in LAYERS", "in islice(LAYERS, 2)")
              + "count = 3\n" + SWEEP.format(i=1))
    texts = window_texts(source)
    reader = next(t for t in texts if "islice(LAYERS" in t)
    assert "from itertools import count, islice" in reader
    from ndif_opt.verify import verify_result

    for result in (optimize(source), pipeline._run_module(source, Options())):  # windows, whole module
        report = verify_result(source, result)
        assert report.intended_ok, report.to_text()


# -- windows never change what is optimized ------------------------------------------------

_DEVSET = Path(__file__).resolve().parents[3] / "shared" / "devset"


def _same_up_to_fresh_numbers(code: str) -> str:
    """Fresh names are numbered per run (`_ndif_cache_1` where the whole file already
    has a `_ndif_cache`; a window does not see the other windows' fresh names)."""
    return re.sub(r"\b(_ndif_[A-Za-z]+(?:_[A-Za-z]+)*?)_\d+\b", r"\1", code)


def _windowed_equals_whole(source: str, options: Options = Options()) -> None:
    windowed = pipeline.run_pipeline(source, options)
    whole = pipeline.whole_module(source, options)
    assert _same_up_to_fresh_numbers(windowed.code) == _same_up_to_fresh_numbers(whole.code)


@pytest.mark.skipif(not _DEVSET.is_dir(), reason="the development set (../shared/devset) is not here")
@pytest.mark.parametrize("name", sorted(p.name for p in _DEVSET.glob("[0-9]*.py")) if _DEVSET.is_dir() else [])
def test_windowed_and_whole_module_runs_agree_on_the_devset(name):
    _windowed_equals_whole((_DEVSET / name).read_text())


@pytest.mark.parametrize("lines", [200, 600])
def test_windowed_and_whole_module_runs_agree_on_dense_scripts(lines):
    _windowed_equals_whole(dense_nnsight_script(lines))


def test_windowed_and_whole_module_runs_agree_on_generated_scripts():
    from strategies import scripts

    @settings(max_examples=25, deadline=None, derandomize=True, database=None)
    @given(scripts())
    def check(script):
        _windowed_equals_whole(script.source)

    check()


def test_independent_experiments_in_a_row_become_one_session():
    source = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("a b", remote=True):
    first = model.lm_head.output[0, -1].argmax().save()
with model.trace("c d", remote=True):
    second = model.lm_head.output[0, -1].argmax().save()
'''
    assert pipeline.run_pipeline(source, Options()).code.count(".session(") == 1
    _windowed_equals_whole(source)


def test_two_sweeps_with_a_print_between_them_are_optimized_alike_windowed_and_whole():
    # the session replays the first sweep's print after itself: a print ends no row
    same_flag = SWEEP.replace("remote=FLAGS[{i}]", "remote=True")
    source = SETUP + same_flag.format(i=0) + "\n# the second experiment\n" + same_flag.format(i=1)
    assert len(window_texts(source)) == 1
    windowed = pipeline.run_pipeline(source, Options())
    whole = pipeline._run_module(source, Options())
    assert windowed.code == whole.code and windowed.code.count("model.session(") == 1


def test_every_way_of_running_a_realistic_script_gives_one_output():
    """The file runs windowed, or whole where it must (`--migrate`, a file-wide
    suppression): the windows' edges hold in every run, so each gives the same sessions.
    (Before, `--migrate` made realistic-300 one session, the default run six.)"""
    from generators import realistic_script

    source = realistic_script(300)
    windowed = pipeline.run_pipeline(source, Options())
    assert windowed.code.count("model.session(") >= 2
    migrated = pipeline.run_pipeline(source, Options(migrate=True))
    ignoring = "# ndif-opt: ignore-file[session-chunking]\n"  # (a pass that changes nothing here)
    suppressed = pipeline.run_pipeline(ignoring + source, Options())
    expected = _same_up_to_fresh_numbers(windowed.code)
    assert _same_up_to_fresh_numbers(migrated.code) == expected
    assert _same_up_to_fresh_numbers(suppressed.code) == ignoring + expected


def test_an_added_import_after_statements_that_do_nothing_is_placed_alike_windowed_and_whole():
    # a module-level string and `global` do not end the opening imports (as a notebook's
    # joined cells start): the windows' import line and the whole module's must agree
    source = ('"first cell"\nglobal marker\n' + SETUP
              + "with model.trace(PROMPT, remote=True):\n    n = model.lm_head.output.shape[1]\nprint(n)\n"
              + 'other = LanguageModel("meta-llama/Llama-3.1-8B")\n'
              + "with other.trace(PROMPT, remote=True):\n    m = other.lm_head.output.shape[1]\nprint(m)\n")
    assert len(window_texts(source)) >= 2
    windowed = pipeline.run_pipeline(source, Options())
    whole = pipeline._run_module(source, Options())
    assert whole.code.splitlines()[2:4] == ["from nnsight import LanguageModel", "import nnsight"], whole.code
    assert windowed.code == whole.code


def test_a_definition_inside_a_window_is_not_its_prelude_too():
    # `def main` is context (a plain helper) standing between the experiments a window
    # joins: it is the window's own text, not also a prelude statement (analysed twice,
    # a finding of it came out a second time, on the blank line where the window starts)
    source = textwrap.dedent('''\
        """A probe over layers."""
        from tqdm import tqdm
        ROWS = [("good", 1), ("bad", 0)]

        def collect(model, rows, layer, remote=True):
            feats = []
            for text, label in tqdm(rows, desc=f"layer {layer}"):
                with model.trace(text, remote=remote):
                    feats.append(model.transformer.h[layer].output[0, -1].save())
            return feats
        def main(model):
            for layer in [0, 1]:
                collect(model, ROWS, layer)
        if __name__ == "__main__":
            main(None)
        ''')
    plan = plan_of(source)
    assert plan is not None
    for window in plan.windows:
        assert not any(plan.chunks[i].start >= window.start and plan.chunks[i].end <= window.end
                       for i in window.prelude), window
    windowed = pipeline.run_pipeline(source, Options())
    whole = pipeline.whole_module(source, Options())
    assert [(f.pass_id, f.range) for f in windowed.findings] == [(f.pass_id, f.range) for f in whole.findings]
    _windowed_equals_whole(source)


def test_a_function_nothing_calls_is_optimized_with_what_it_reads_as_in_the_whole_file():
    # its reads linked nowhere: its window lacked `_cache = {}`, and the refusal there said
    # `_cache` was not created by a plain assignment (the whole file's run: created at
    # module level, outside `hidden`); the script is accumulator-relocation's case
    from ndif_opt.passes.accumulator_relocation import AccumulatorRelocation

    (case,) = [c for c in AccumulatorRelocation.cases if c.name.startswith("a module's container filled by a function's block")]
    source = case.before
    windowed = pipeline.run_pipeline(source, Options())
    whole = pipeline._run_module(source, Options())
    assert windowed.code == whole.code
    assert [f.reason for f in windowed.findings] == [f.reason for f in whole.findings]
    assert any("created at module level, outside `hidden`" in (f.reason or "") for f in windowed.findings)
