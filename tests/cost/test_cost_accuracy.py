"""The static cost model against measurement.

Every example and every script of ``benchmarks/cost_scripts/`` is run — original,
optimized, and optimized with ``--unsafe-fixes`` when that differs — and so is every
script the execution tests (``tests/**/test_execution*.py``) run on the emulated server
without the shared harness, with the file name and helper files they run it with
(``accuracy.execution_scripts`` collects them without running them; the runs of the
harness, ``tests/execution.py``, are checked where the harness makes them, with
``accuracy.execution_problem`` as here). Each runs once through the NDIF emulation on the
tiny models; the cost model, evaluated at the tiny models' dimensions (hidden 64,
vocabulary 512, fp32, the real layer count, the tiny tokenizer's token counts, views
shipping their storage as on a CPU server), must predict the number of requests, forward
passes and decoder-layer evaluations exactly and the uncompressed download within ±25%
(±4 KB for small results). Runs that fail on the server are not checked; each is listed,
with the reason, in ``accuracy.EXCLUDED`` — any other failing run is an error.
``pytest -s`` prints the table (also ``python benchmarks/cost_accuracy.py``).
"""

from __future__ import annotations

import fnmatch
import functools
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nnsight")
pytest.importorskip("ndif_opt.verify", exc_type=ImportError)

from execution import cost_accuracy  # noqa: E402  (tests/ is on sys.path: pyproject's pythonpath)

ROOT = Path(__file__).resolve().parents[2]
accuracy = cost_accuracy()

SCRIPTS = accuracy.scripts()
ROWS: dict[str, list] = {}


@functools.cache
def execution_scripts() -> list:
    """The runs of the execution tests, collected once in this process by the tests that
    ask (not at collection: the replay optimizes every script they run)."""
    return accuracy.execution_scripts()


def _check(rows) -> int:
    checked = 0
    for row in rows:
        if row.excluded is not None:
            continue
        assert row.error is None, f"{row.script} ({row.version}) fails on the emulated server: {row.error}"
        checked += 1
        problem = accuracy.mismatch(row)
        assert problem is None, problem
    return checked


def test_there_are_scripts():
    assert len(SCRIPTS) >= 10
    assert {p.parent.name for p in SCRIPTS} == {"examples", "cost_scripts"}


@pytest.mark.parametrize("path", SCRIPTS, ids=[f"{p.parent.name}/{p.stem}" for p in SCRIPTS])
def test_prediction_matches_measurement(path):
    if "from nnterp" in path.read_text():
        pytest.importorskip("nnterp")  # nnterp needs nnsight 0.6.3: the nnterp venv runs it
    rows = accuracy.measure(path)  # the original runs once for both optimized forms
    ROWS[f"{path.parent.name}/{path.stem}"] = rows
    assert _check(rows)


def test_execution_test_runs_outside_the_harness_match_measurement():
    """The runs an execution test makes without the shared harness (a direct call of verify
    in a test_execution_*.py), measured here; the harness checks its own runs."""
    problems = []
    for script in execution_scripts():
        if script.harnessed:
            continue
        row = accuracy.measure_script(script)
        ROWS[script.id] = [row]
        problems.append(accuracy.execution_problem(row, script.id))
    problems = [problem for problem in problems if problem is not None]
    assert not problems, "\n".join(problems)


def test_the_harness_names_its_runs_as_the_collector_does(request):
    """The harness checks the runs it makes under the collector's names (their rows in
    EXCLUDED, NOT_PREDICTED and TRIPS): each name the collector gives a harnessed run is the
    name the harness gives a test of this session."""
    items = [item for item in request.session.items if fnmatch.fnmatch(item.path.name, accuracy.EXECUTION_TESTS)]
    if not items:
        pytest.skip("no execution test collected in this session")
    named = {
        accuracy.test_name(item.path, item.function, dict(item.callspec.params) if hasattr(item, "callspec") else {})
        for item in items
    }
    modules = {item.path.stem for item in items}
    harnessed = {s.name for s in execution_scripts() if s.harnessed and s.name.split("::")[0] in modules}
    assert harnessed, "the collector marks no run as the harness's"
    assert harnessed <= named, sorted(harnessed - named)[:5]


def test_execution_scripts_are_collected():
    """The collector finds the scripts of every execution test module, with their
    parametrizations, file names, helper files and optimizer options."""
    scripts = execution_scripts()
    modules = {s.name.split("::")[0] for s in scripts}
    paths = accuracy.execution_test_paths()
    present = {p.stem for p in paths}
    # each pass's execution tests, in tests/passes/<id>/ (test_execution.py runs the examples
    # only: their rows are the examples')
    assert {p.parent.name for p in paths} >= {"tests", "passes", "session_hoisting", "reduction_pushdown"}
    assert {"test_execution_compute", "test_execution_download", "test_execution_realworld"} <= present & modules
    # the modules that run their scripts through the shared harness (tests/execution.py): the
    # collector finds their runs, and knows them for the harness's (which checks them itself)
    calls = ("optimized_and_verified(", "verified(", "verified_sources(", "executed(")
    harnessed = {p.stem for p in paths if any(call in p.read_text() for call in calls)}
    assert harnessed and harnessed <= modules, harnessed - modules
    assert harnessed <= {s.name.split("::")[0] for s in scripts if s.harnessed}
    names = {s.name for s in scripts}
    # a test that writes the files its script reads into pytest's tmp_path
    assert any("test_prompts_read_from_files_are_read_before_the_session" in n for n in names)
    # the emulated run of `{mode: run_script(...) for mode in MODES}` after the local one
    assert any(s.id.startswith("test_execution_05_failures::test_reads_in_the_models_order") for s in scripts)
    assert sum("test_remote_flag_through_constants_and_config[" in n for n in names) == 3
    chunks = [s for s in scripts if s.filename == "chunks.py" and s.version == "optimized"]
    assert chunks and "_ndif_start + 4]" in chunks[0].source  # max_batch=4 reached the optimizer
    assert any(dict(s.extra_files).get("helpers.py") for s in scripts)
    assert not {s.source for s in scripts} & {p.read_text() for p in (ROOT / "examples").glob("*.py")}
    assert len({s.id for s in scripts}) == len(scripts)


def test_the_replay_starts_no_process(tmp_path):
    """A helper of a test that starts a process (a script run with NDIF unreachable) is
    never run by the collector, nor is the assignment of what it returns."""
    ran = tmp_path / "ran"
    module = tmp_path / "test_execution_spawning.py"
    command = f"open({str(ran)!r}, 'w')"
    module.write_text(textwrap.dedent(f"""\
        import subprocess
        import sys


        def _spawn():
            return subprocess.run([sys.executable, "-c", {command!r}]).returncode


        def test_spawning():
            code = _spawn()
            assert code == 0
        """))
    assert accuracy.execution_scripts([module]) == []
    assert not ran.exists()


def test_exclusions_name_collected_runs():
    ids = {s.id for s in execution_scripts()}
    ids |= {f"{p.stem}:original" for p in SCRIPTS}
    stale = [key for key in [*accuracy.EXCLUDED, *accuracy.NOT_PREDICTED] if key not in ids]
    assert not stale, f"EXCLUDED or NOT_PREDICTED names runs that no longer exist: {stale}"


def test_print_table(capsys):
    rows = [row for key in sorted(ROWS) for row in ROWS[key]]
    if not rows:
        pytest.skip("no rows measured in this run")
    with capsys.disabled():
        print("\n\ncost model: predicted vs measured (tiny models, emulated NDIF)\n")
        print(accuracy.table(rows))


def test_within_tolerance_rules():
    assert accuracy.within(1_250, 1_000)
    assert not accuracy.within(200_000, 100_000)
    assert accuracy.within(5_000, 1_261)  # small: ±4 KB
    assert not accuracy.within(1_000_000, 800_000 - 1)


def test_tiny_options_describe_the_tiny_models():
    import libcst as cst

    from ndif_opt.analysis.facts import analyze
    from ndif_opt.cost_model import explain

    source = 'from nnsight import LanguageModel\nmodel = LanguageModel("meta-llama/Llama-3.1-70B")\n'
    source += 'with model.trace("Hello world", remote=True):\n    h = model.model.layers[3].output.save()\n'
    options = accuracy.tiny_options(source)
    dims = options.cost["models"]["meta-llama/Llama-3.1-70B"]
    assert (dims["n_layers"], dims["hidden_size"], dims["dtype"]) == (80, 64, "float32")
    tokens = options.cost["prompt-tokens"]["Hello world"]
    cost = explain(analyze(cst.parse_module(source)), options).cost
    # [1, tokens, 64] fp32 + framing
    assert cost.download_bytes == 1261 + tokens * 64 * 4 + 225 + len("h") + 5
    assert (cost.forward_passes, cost.layer_evaluations) == (1, 80)
