"""migrate-api: pre-0.5 nnsight code rewritten for nnsight 0.8 — its cases, its detection,
and, by running them on tiny models, that migrated scripts compute what a hand-written
nnsight 0.8 version of the same experiment computes.

Until the pipeline registers the pass (see the integration notes in the pass), the
tests put it in front of the pipeline's passes themselves; tests of the integration
(`Options.migrate`, the pre-0.5 gate) run once it is there.
"""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst
import pytest

import ndif_opt.engine.pipeline as pipeline
from ndif_opt import Status, optimize
from ndif_opt.analysis.effects import ServerCheck
from ndif_opt.analysis.facts import analyze
from ndif_opt.analysis.legacy_api import MODERN, PRE_05, UNKNOWN, api_generation
from ndif_opt.options import Options
from ndif_opt.passes import Context
from ndif_opt.passes.migrate_api import MigrateApi

ROOT = Path(__file__).resolve().parents[3]
LEGACY = ROOT / "examples" / "legacy_api.py"
MODERN_EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.name != "legacy_api.py")
UPDATE = os.environ.get("NDIF_OPT_UPDATE") == "1"


def migrate(source: str, **options) -> "pipeline.Result":
    """The pipeline with migrate-api on, first."""
    return pipeline.run_pipeline(source, Options(migrate=True, **options))


def migrate_only(source: str):
    return migrate(source, select=frozenset({"migrate-api"}))


def detect(source: str) -> list:
    module = cst.parse_module(source)
    facts = analyze(module)
    context = Context(Options(), ServerCheck(facts))
    assert MigrateApi(report_only=True).run(module, facts, context) is module
    return context.findings


# ---------------------------------------------------------------------------------------
# Cases, docs
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", MigrateApi.cases, ids=[c.name for c in MigrateApi.cases])
def test_case(case):
    result = migrate_only(case.before)
    cst.parse_module(result.code)
    if case.after is None:
        assert result.code == case.before
        if case.reason:
            texts = [f"{f.message} {f.reason or ''}" for f in result.findings if not f.applied]
            assert any(case.reason in t for t in texts), texts
    else:
        assert result.code == case.after
        assert any(f.applied and f.pass_id == "migrate-api" for f in result.findings)
        assert migrate_only(result.code).code == result.code, "a second run must change nothing"


def test_docs_and_cases():
    doc = MigrateApi.__doc__ or ""
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
        assert heading in doc
    assert MigrateApi.id == "migrate-api"
    assert any(c.after is not None for c in MigrateApi.cases)
    assert any(c.after is None for c in MigrateApi.cases)


def test_docstring_example_migrates_to_its_use_instead():
    doc = MigrateApi.__doc__
    example = doc.split("## Example\n```python\n")[1].split("```")[0]
    instead = doc.split("## Use instead\n```python\n")[1].split("```")[0]
    assert migrate_only(example).code == instead


# ---------------------------------------------------------------------------------------
# Which API does a script target?
# ---------------------------------------------------------------------------------------


def _generation(source: str) -> str:
    return api_generation(analyze(cst.parse_module(source)))


def test_generation_of_the_legacy_example():
    assert _generation(LEGACY.read_text()) == PRE_05


@pytest.mark.parametrize("path", MODERN_EXAMPLES, ids=[p.stem for p in MODERN_EXAMPLES])
def test_modern_examples_are_not_taken_for_pre_05(path):
    source = path.read_text()
    assert _generation(source) != PRE_05
    assert detect(source) == []
    assert migrate(source).code == optimize(source).code, "migration is a no-op on 0.5+ code"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.trace('a'):\n    x = m.lm_head.output.save()\nprint(x.value)\n", PRE_05),
        ("import nnsight\nfrom nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.session():\n    xs = nnsight.list()\n", PRE_05),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.session():\n    xs = list().save()\n", MODERN),
        ("from nnsight import TransformersModel\nm = TransformersModel('gpt2')\n", MODERN),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.trace('a') as t:\n    y = t.result.save()\n", MODERN),
        # a transformers < 5 idiom says nothing about the nnsight version
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.trace('a'):\n    h = m.transformer.h[0].output[0].save()\n", UNKNOWN),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n", UNKNOWN),
        # a `.value` fallback guarded by `hasattr` runs on every nnsight
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.trace('a'):\n    x = m.lm_head.output.save()\n"
         "y = x.value if hasattr(x, 'value') else x\n", UNKNOWN),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.trace('a'):\n    x = m.lm_head.output.save()\n"
         "if hasattr(x, 'value'):\n    x = x.value\nprint(x.value)\n", PRE_05),
        # nnsight 0.8 hands a trace's `scan=` (and its invokes') to the model's forward, which
        # ignores it; a session takes none, and transformers' generate raises on it
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.trace('a', scan=False, validate=False):\n    x = m.lm_head.output.save()\n", UNKNOWN),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.trace() as t:\n    with t.invoke('a', scan=False):\n        x = m.lm_head.output.save()\n", UNKNOWN),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.generate('a', max_new_tokens=2, scan=False):\n    x = m.lm_head.output.save()\n", PRE_05),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.generate(max_new_tokens=2) as t:\n    with t.invoke('a', scan=False):\n"
         "        x = m.lm_head.output.save()\n", PRE_05),
        ("from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
         "with m.session(scan=False):\n    xs = list().save()\n", PRE_05),
    ],
)
def test_generation(source, expected):
    assert _generation(source) == expected


def test_detect_only_explains_why_nothing_else_runs():
    findings = detect(LEGACY.read_text())
    summary = findings[0]
    assert summary.status is Status.SKIPPED
    assert "pre-0.5 nnsight API" in summary.message
    # kinds, not lines: in a notebook the lines would be the joined cells'
    assert "`.value` (5 uses)" in summary.message
    assert "`nnsight.list()`" in summary.message and " on line " not in summary.message
    assert "--migrate" in summary.reason
    layer_findings = [f for f in findings if "first batch row" in f.message]
    # one finding for the file, naming the other uses
    assert len(layer_findings) == 1 and "--migrate" in layer_findings[0].reason
    assert "(and 2 more like it)" in layer_findings[0].message


def test_detect_only_on_modern_code_flags_only_tuple_layer_outputs():
    source = (
        "from nnsight import LanguageModel\nm = LanguageModel('gpt2')\n"
        "with m.trace('a', remote=True):\n    h = m.transformer.h[0].output[0][:, -1].save()\n"
    )
    findings = detect(source)
    assert len(findings) == 1 and "first batch row" in findings[0].message


# ---------------------------------------------------------------------------------------
# The example: in sync, and its migration runs
# ---------------------------------------------------------------------------------------


def test_legacy_example_in_sync_and_stable():
    result = migrate(LEGACY.read_text())
    expected = ROOT / "examples" / "optimized" / LEGACY.name
    if UPDATE:
        expected.write_text(result.code)
    assert expected.read_text() == result.code
    assert migrate(result.code).code == result.code
    assert _generation(result.code) != PRE_05
    migrated = migrate_only(LEGACY.read_text()).code
    assert _generation(migrated) != PRE_05
    code = migrated.split('"""', 2)[2]  # the docstring describes the old idioms
    assert ".value" not in code and "nnsight.list" not in code and "output[0]" not in code
    assert "scan=" not in code and "validate=" not in code
    before, after = result.costs[0].before, result.costs[-1].after
    assert (before.requests, after.requests) == (6, 2)


def test_without_migrate_the_pipeline_leaves_pre_05_code_alone():
    source = LEGACY.read_text()
    result = optimize(source)
    assert result.code == source
    assert any(f.pass_id == "migrate-api" and "--migrate" in (f.reason or "") for f in result.findings)
    migrated = optimize(source, options=Options(migrate=True))
    assert migrated.code == (ROOT / "examples" / "optimized" / LEGACY.name).read_text()


# A hand-written nnsight 0.8 version of examples/legacy_api.py: what its author meant.
HAND_WRITTEN_08 = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2", device_map="auto")
PROMPTS = ["The Eiffel Tower is in the city of", "The capital of Japan is", "Hello, my name is"]
LAYERS = [0, 4, 8, 11]

norms = []
for prompt in PROMPTS:
    with model.trace(prompt):
        h0 = model.transformer.h[0].output.save()
        h4 = model.transformer.h[4].output.save()
        h8 = model.transformer.h[8].output.save()
        h11 = model.transformer.h[11].output.save()
    norms.append([h[:, -1].norm() for h in (h0, h4, h8, h11)])

with model.trace(PROMPTS[0]):
    logits = model.lm_head.output.save()
clean = logits[0, -1].argmax(dim=-1)
with model.trace(PROMPTS[0]):
    model.transformer.h[6].output[:, -1, :] = 0
    ablated_hidden = model.transformer.h[6].output.save()
    ablated_logits = model.lm_head.output.save()
ablated = ablated_logits[0, -1].argmax(dim=-1)

with model.trace() as tracer:
    with tracer.invoke("The Eiffel Tower is in the city of"):
        paris = model.lm_head.output[0, -1].save()
    with tracer.invoke("The Colosseum is in the city of"):
        rome = model.lm_head.output[0, -1].save()
gap = (paris - rome).abs().max()

print([[round(float(n), 3) for n in row] for row in norms])
print(clean.item(), ablated.item(), tuple(ablated_hidden.shape))
print(round(float(gap), 4))
del h0, h4, h8, h11, logits, ablated_logits, paris, rome, prompt
'''
# names only the scripts' own bookkeeping binds (loop variables, the per-prompt list)
BOOKKEEPING = ("per_layer", "layer", "prompt")


@pytest.fixture(scope="module")
def verify_pkg():
    return pytest.importorskip("ndif_opt.verify", exc_type=ImportError)


def test_the_legacy_script_does_not_run_on_nnsight_08(verify_pkg):
    run = verify_pkg.run_script(LEGACY.read_text(), filename="legacy_api.py", mode="local")
    assert run.error is not None and "nnsight" in run.error and "list" in run.error


def test_migrated_script_computes_what_the_hand_written_08_script_does(verify_pkg):
    migrated = migrate_only(LEGACY.read_text())
    report = verify_pkg.verify_sources(
        HAND_WRITTEN_08, migrated.code, filename="legacy_api.py", ignore=BOOKKEEPING
    )
    assert report.intended_ok, report.to_text()
    assert not report.errors["optimized"]
    assert report.after.requests == 6  # migration alone: one request per trace, as written


def test_migrated_and_optimized_script_computes_the_same_with_fewer_requests(verify_pkg):
    result = migrate(LEGACY.read_text())
    report = verify_pkg.verify_sources(
        HAND_WRITTEN_08, result.code, filename="legacy_api.py",
        ignore_missing=result.unreturned, ignore=BOOKKEEPING + result.introduced,
    )
    assert report.intended_ok, report.to_text()
    assert report.after.requests == 2  # 6 requests before
    assert result.costs[-1].after.requests == report.after.requests


def test_migrated_values_have_the_shapes_of_the_intended_experiment(verify_pkg):
    """Independent of any hand-written version: shapes and values computed here."""
    import torch

    migrated = migrate_only(LEGACY.read_text()).code
    run = verify_pkg.run_script(migrated, filename="legacy_api.py", mode="emulated")
    assert run.error is None, run.error
    ns = run.namespace
    assert len(ns["norms"]) == 3 and all(len(row) == 4 for row in ns["norms"])
    assert all(torch.as_tensor(n).dim() == 0 and float(n) > 0 for row in ns["norms"] for n in row)
    hidden = ns["ablated_hidden"]
    assert hidden.shape[0] == 1 and hidden.dim() == 3  # [batch, seq, hidden], not [seq, hidden]
    assert bool((hidden[:, -1] == 0).all()) and bool((hidden[:, 0] != 0).any())
    assert ns["gap"].dim() == 0 and float(ns["gap"]) > 0


LAYER_INDEXING = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in the city of"):
    last = model.transformer.h[3].output[0][:, -1].save()
    model.transformer.h[4].output[0][:] = 0
    after = model.transformer.h[4].output[0].save()
'''
# the same, with one use that only the old tuple's hidden states [B, S, D] allow
LAYER_INDEXING_3D = LAYER_INDEXING + "batch, seq, hidden = after.shape\n"


def test_output_0_of_a_layer_indexes_the_batch_on_08_and_migration_fixes_it(verify_pkg):
    # nothing in its uses says which `[0]` means: the row it is on 0.8, left as it is
    assert migrate_only(LAYER_INDEXING).code == LAYER_INDEXING
    row = verify_pkg.run_script(LAYER_INDEXING, filename="layers.py", mode="local")
    assert row.error is None and row.namespace["after"].dim() == 2  # the first batch row [seq, hidden]
    # `batch, seq, hidden = after.shape` shows the author's [B, S, D]: on 0.8 unmigrated it fails
    wrong = verify_pkg.run_script(LAYER_INDEXING_3D, filename="layers.py", mode="local")
    fixed = verify_pkg.run_script(migrate_only(LAYER_INDEXING_3D).code, filename="layers.py", mode="local")
    assert wrong.error is not None and "ValueError" in wrong.error
    assert fixed.error is None, fixed.error
    ns = fixed.namespace
    assert (ns["batch"], ns["seq"]) == (1, ns["after"].shape[1])
    # migrated: the last position's hidden state of the (single) batch row
    assert tuple(ns["last"].shape) == (1, ns["hidden"])
    assert bool((ns["after"] == 0).all())


def test_migration_runs_once_and_never_on_its_own_output():
    """`h[3].output[0][0]` is the pre-0.5 tuple's first element, then the batch row: migrated,
    `h[3].output[0, :]`. Migrating that output again must not take the batch row for the tuple."""
    source = (
        "from nnsight import LanguageModel\nmodel = LanguageModel('openai-community/gpt2')\n"
        "with model.trace('hello', remote=True):\n    h = model.transformer.h[3].output[0][0].save()\n"
        "seq, hidden = h.shape\n"
    )
    result = optimize(source, options=Options(migrate=True))
    assert "model.transformer.h[3].output[0, :]." in result.code
    assert optimize(result.code, options=Options(migrate=True)).code == result.code
    assert len([f for f in result.findings if f.pass_id == "migrate-api"]) == 1


# shaped like a causal-tracing script: every layer's first batch row stacked in a
# comprehension, one row read by index, and a full layer output whose three dimensions
# show that `[0]` took it out of the old tuple
ROW_STACK = '''\
import torch
from nnsight import LanguageModel

model = LanguageModel("{model}")
with model.trace("The Eiffel Tower is in the city of"):
    full = {layers}[0].output[0].save()
    last_position = {layers}[0].output[0][:, -1, :].save()
    last_row = {layers}[0].output[0][-1].save()
    stack = torch.stack([layer.output[0][0] for layer in {layers}]).save()
'''


@pytest.mark.parametrize("model, layers", [
    ("openai-community/gpt2", "model.transformer.h"),
    ("meta-llama/Llama-3.1-8B", "model.model.layers"),
])
def test_a_migrated_batch_row_stays_the_row_when_migrated_again(verify_pkg, model, layers):
    source = ROW_STACK.format(model=model, layers=layers)
    once = migrate_only(source).code
    twice = migrate_only(once).code
    assert twice == once
    run = verify_pkg.run_script(twice, filename="rows.py", mode="local")
    assert run.error is None, run.error
    ns = run.namespace
    full = ns["full"]
    assert full.dim() == 3 and full.shape[0] == 1  # [batch, seq, hidden]
    assert ns["stack"].shape[1:] == full.shape[1:]  # [layers, seq, hidden]: rows, not batches
    assert torch_equal(ns["stack"][0], full[0]) and torch_equal(ns["last_row"], full[-1])


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


# shaped like a patching utility written for nnsight 0.4: a type check against the old
# graph's Proxy, in a loop of remote traces
OLD_PROXY_IMPORT = '''\
from nnsight import LanguageModel
from nnsight.tracing.graph import Proxy  # the graph's value type

model = LanguageModel("openai-community/gpt2")


def describe(value):
    return "proxy" if isinstance(value, Proxy) else type(value).__name__


for prompt in ["The Eiffel Tower is in", "The capital of Japan is"]:
    with model.trace(prompt, remote=True):
        hidden = model.transformer.h[0].output.save()
    print(describe(hidden))
'''


def test_an_import_of_a_removed_module_marks_the_script_pre_05():
    assert _generation(OLD_PROXY_IMPORT) == PRE_05
    inside = OLD_PROXY_IMPORT.replace("from nnsight.tracing.graph import Proxy  # the graph's value type\n", "")
    inside = inside.replace("def describe(value):\n", "def describe(value):\n    from nnsight.tracing.graph import Proxy\n")
    assert _generation(inside) == PRE_05
    assert _generation("import nnsight.intervention.graph\n") == PRE_05
    # 0.5+ modules are no evidence
    assert _generation("from nnsight.intervention.envoy import Envoy\nimport nnsight.modeling.language\n") == UNKNOWN
    result = optimize(OLD_PROXY_IMPORT)
    assert result.code == OLD_PROXY_IMPORT
    (finding,) = [f for f in result.findings if f.pass_id == "migrate-api"]
    assert "an import of a module removed in nnsight 0.5" in finding.message


def test_a_migration_that_cannot_be_finished_says_the_other_passes_did_not_run():
    result = migrate(OLD_PROXY_IMPORT)
    messages = [f.message for f in result.findings if f.pass_id == "migrate-api"]
    assert any("not migrated" in m for m in messages)
    assert any(m.startswith("migration not done") and "no other pass ran" in m for m in messages)
    assert result.code == OLD_PROXY_IMPORT


def test_every_removed_module_is_gone_from_the_installed_nnsight(verify_pkg):
    """The table is true of the nnsight the tests run: each module fails to import, and
    the script that imports one fails before any trace."""
    import importlib

    from ndif_opt.analysis.legacy_api import REMOVED_MODULES

    for module in REMOVED_MODULES:
        with pytest.raises(ImportError):
            importlib.import_module(module)
    run = verify_pkg.run_script(OLD_PROXY_IMPORT, filename="proxy.py", mode="local")
    assert run.error is not None and "nnsight.tracing.graph" in run.error


# ---------------------------------------------------------------------------------------
# Migration right or not at all (issue 32): `output[0]` by its uses, groups, whole files
# ---------------------------------------------------------------------------------------

# written for nnsight 0.8 on transformers 5: `output[0]` is the only prompt's row [S, D]; the
# code walks its positions and compares the two prompts' lengths
BATCH_ROW = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompts = ["The Eiffel Tower is in the city of", "The cat sat on the"]
rows = []
for prompt in prompts:
    with model.trace(prompt, remote=True):
        row = LAYERS[2].output[0].save()
    rows.append(row)
shorter = min(rows[0].shape[0], rows[1].shape[0])
drift = [round((rows[0][p] - rows[1][p]).norm().item(), 4) for p in range(shorter)]
print(len(drift), rows[0].shape[0] > rows[1].shape[0])
'''


# nnsight 0.8 code that passes `scan=False` to its traces (0.8 takes and ignores it)
SCAN_FALSE_ON_08 = '''\
from nnsight import LanguageModel

model = LanguageModel("REPO")
norms = []
for prompt in ["The Eiffel Tower is in", "The capital of France is"]:
    with model.trace(prompt, remote=True, scan=False):
        hidden = LAYERS[1].output.save()
    norms.append(round(hidden.norm().item(), 4))
print(norms)
'''


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_scan_false_on_a_trace_does_not_hold_an_08_script_back(verify_pkg, family):
    from execution import optimized_and_verified

    result, report = optimized_and_verified(SCAN_FALSE_ON_08, family, let_go=frozenset({"hidden", "prompt"}))
    assert (report.before.requests, report.after.requests) == (2, 1), report.to_text() + result.code
    assert not any("pre-0.5" in f"{f.message} {f.reason}" for f in result.findings)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_an_output_0_meaning_the_batch_row_is_not_migrated(verify_pkg, family):
    from execution import optimized_and_verified, script

    result, report = optimized_and_verified(BATCH_ROW, family, options=Options(migrate=True))
    assert ".output[0]" in result.code
    assert not any(f.applied for f in result.findings if f.pass_id == "migrate-api")
    assert "nothing in its uses shows" in " ".join(f.reason or "" for f in result.findings)
    assert report.after.requests >= 1 and len(report.before.records) == 2
    assert optimize(script(BATCH_ROW, family), options=Options(migrate=True)).code == result.code


# pre-0.5 (`scan=`, `.value`), with one idiom that has no 0.5+ rewrite (`.next()` of one module)
UNFINISHED = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("The Eiffel Tower is in", remote=True, scan=False):
    hidden = model.transformer.h[3].output[0].save()
    logits = model.lm_head.output.save()
top = logits.value[0, -1].argmax()
with model.generate("The Eiffel Tower is in", max_new_tokens=3, remote=True):
    first = model.lm_head.output.save()
    model.lm_head.next()
    second = model.lm_head.output.save()
'''


def test_a_migration_that_cannot_be_completed_leaves_the_file_as_it_was():
    result = migrate(UNFINISHED)
    assert result.code == UNFINISHED
    findings = [f for f in result.findings if f.pass_id == "migrate-api"]
    assert not any(f.applied for f in findings)
    blocked = [f for f in findings if "not migrated" in f.message]
    assert [f.message for f in blocked] == ["`model.lm_head.next()`: not migrated"]
    assert "tracer.iter" in blocked[0].reason
    (summary,) = [f for f in findings if f.message.startswith("migration not done")]
    assert "`.value`" in summary.message and "left the whole script as it was" in summary.message


# pre-0.5 `.value` reached only through containers and a helper's return
SAVES_IN_CONTAINERS = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompts = ["The Eiffel Tower is in", "The cat sat on the"]


def last_token_logits(prompt):
    with model.trace(prompt, remote=True):
        out = model.lm_head.output[0, -1].save()
    return out


grid = []
for prompt in prompts:
    per_layer = []
    with model.trace(prompt, remote=True):
        for layer in LAYERS[:3]:
            per_layer.append(layer.mlp.output[0, -1].norm().save())
    grid.append(per_layer)
norms = [[round(cell.value.item(), 5) for cell in row] for row in grid]
results = {p: last_token_logits(p) for p in prompts}
tops = [v.value.argmax().item() for v in results.values()]
print(norms, tops)
'''


def test_value_through_containers_and_returns_marks_the_script_pre_05():
    from execution import script

    source = script(SAVES_IN_CONTAINERS, "gpt2")
    assert _generation(source) == PRE_05
    assert optimize(source).code == source  # the default mode leaves pre-0.5 code alone
    # (the lists the traces fill stay empty remotely on 0.5+: accumulator-relocation runs too)
    migrated = migrate(source, select=frozenset({"migrate-api", "accumulator-relocation"})).code
    assert ".value." not in migrated
    assert "[[round(cell.item(), 5) for cell in row] for row in grid]" in migrated
    assert "[v.argmax().item() for v in results.values()]" in migrated


def test_verify_of_a_pre_05_original_without_the_nnsight_04_venv_says_so(verify_pkg, monkeypatch):
    monkeypatch.setenv("NDIF_OPT_NNSIGHT04_PYTHON", "/nonexistent/python")
    source = UNFINISHED.replace("    model.lm_head.next()\n", "")
    report = verify_pkg.verify_sources(source, migrate_only(source).code, filename="old.py", original_nnsight="0.4")
    assert report.failed and ".venv-nnsight04" in report.reason and "requirements-nnsight04.txt" in report.reason
    assert report.mismatches == [] and report.local_nnsight is None


UNMIGRATABLE_WITH_AN_UNSAVED_DICT = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.generate("The Eiffel Tower is in", max_new_tokens=3, remote=True) as generator:
    for step in range(2):
        if step:
            model.next()
    tokens = model.generator.output.save()
with model.trace(remote=True) as tracer:
    scores = {}
    for prompt in ["a b", "c d"]:
        with tracer.invoke(prompt):
            scores[prompt] = model.lm_head.output[0, -1].softmax(-1)[:3].save()
print(tokens.value, {p: s.value for p, s in scores.items()})
'''


def test_a_script_migrate_cannot_migrate_gets_no_0_5_save_either():
    # `model.next()` under a condition has no safe rewrite, so --migrate leaves the script as written; the
    # 0.5+ failure of `scores` is reported, not fixed: `nnsight.save({})` in 0.4 code
    # would make a half-migrated script (it did, on arena_fv_solutions_old)
    result = optimize(UNMIGRATABLE_WITH_AN_UNSAVED_DICT, options=Options(migrate=True))
    assert result.code == UNMIGRATABLE_WITH_AN_UNSAVED_DICT
    unsaved = [f for f in result.findings if f.pass_id == "nnsight-05-failures" and "`scores`" in f.message]
    assert unsaved and unsaved[0].status is Status.SKIPPED and "cannot migrate it" in unsaved[0].reason


# pre-0.5: a client dict filled inside a remote trace (0.4 filled it with the saved values)
CLIENT_DICT_FILLED_REMOTELY = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def resid_norms(prompt, layers):
    saved = {}
    with model.trace(prompt, remote=True):
        for layer in layers:
            saved[layer] = model.transformer.h[layer].output[0][0, -1].norm().save()
    return {layer: value.value.item() for layer, value in saved.items()}


print(resid_norms("The Eiffel Tower is in", [0, 2]))
'''


def test_a_migration_without_accumulator_relocation_leaves_a_client_container_script_alone():
    # migrated alone, `saved` stayed empty on the client when run remotely (verify: MISMATCH)
    alone = Options(migrate=True, select=frozenset({"migrate-api", "nnsight-05-failures"}))
    result = optimize(CLIENT_DICT_FILLED_REMOTELY, options=alone)
    assert result.code == CLIENT_DICT_FILLED_REMOTELY
    (refused,) = [f for f in result.findings if f.pass_id == "migrate-api" and "`saved`" in f.message]
    assert "accumulator-relocation" in refused.reason
    whole = optimize(CLIENT_DICT_FILLED_REMOTELY, options=Options(migrate=True))
    assert ".value" not in whole.code and "saved = dict().save()" in whole.code, whole.code


# pre-0.5, in a class: the trace changes `self` only through its model (an intervention)
INTERVENTION_THROUGH_SELF_MODEL = '''\
from nnsight import LanguageModel


class Ablation:
    def __init__(self):
        self.model = LanguageModel("openai-community/gpt2")

    def run(self, prompt):
        with self.model.trace(prompt, remote=True):
            self.model.transformer.h[0].output[0][:] = 0
            logits = self.model.lm_head.output.save()
        return logits.value[0, -1].argmax().item()


print(Ablation().run("The Eiffel Tower is in"))
'''


def test_a_migration_alone_takes_an_intervention_through_self_model_for_no_filled_container():
    # the refusal above reads the client objects a block fills as accumulator-relocation
    # does: `self`, changed only through `self.model`, is not one
    alone = Options(migrate=True, select=frozenset({"migrate-api", "nnsight-05-failures"}))
    result = optimize(INTERVENTION_THROUGH_SELF_MODEL, options=alone)
    assert "logits[0, -1]" in result.code and ".value" not in result.code, result.code
    assert not [f for f in result.findings if "a container of your machine" in f.message]


ALIASED_CONTAINER = """\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
results = {}
alias = results
with model.trace("The weather is", remote=True, scan=False):
    results["top"] = model.lm_head.output.save()
print(alias["top"].value.shape)
"""


def test_a_container_the_migrated_script_would_leave_empty_is_not_migrated():
    # nnsight 0.4 filled `results` with the saved value; after migration the trace runs on
    # NDIF, and accumulator-relocation cannot move `results` (`alias` would not see it)
    result = optimize(ALIASED_CONTAINER, options=Options(migrate=True))
    assert result.code == ALIASED_CONTAINER
    refusal = next(f for f in result.findings if f.pass_id == "migrate-api" and "`results`" in f.message)
    assert "not migrated" in refusal.message and "reachable through another name" in refusal.reason
    assert any("migration not done" in f.message for f in result.findings)
