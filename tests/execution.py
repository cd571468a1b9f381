"""The execution harness new tests share: a script template, written once, run on a tiny
model of each family (GPT-2 and Llama): the original locally, the original and the
optimized script through verify's emulation of NDIF, every result compared.

A template names its model ``REPO`` and its decoder layers ``LAYERS``; ``FAMILY_KEYS``
lists the other words it may use (``SELFLAYERS`` inside a class holding the model as
``self.model``, ``LMLAYERS`` for a model named ``lm``).

    from execution import both, optimized_and_verified

    @both
    def test_something(family):
        result, report = optimized_and_verified(SCRIPT, family)
        assert report.after.requests == 1

In an execution test (a ``test_execution_*.py``), every emulated run the harness makes
also checks the cost model: the measured requests, forward passes, decoder-layer evaluations
and download must be what the cost model predicts at the tiny models' dimensions, compared
as ``benchmarks/cost_accuracy.py`` compares them, under the name its collector gives the
run (its ``EXCLUDED`` and ``NOT_PREDICTED`` tables name the runs left out). A test that
builds its script itself calls ``verified``, ``verified_sources`` or ``executed``: verify's
``verify_result``, ``verify_sources`` and ``run_script`` with that check.
``tests/cost/test_cost_accuracy.py`` measures only the runs the harness does not make.

Importing this module needs the verify extra (tests that import it are skipped without it).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nnsight")

from ndif_opt import optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402
from ndif_opt.verify import RunMetrics, run_script, verify_result, verify_sources  # noqa: E402

#: family -> (a model id verify builds tiny, the path of its decoder layers). Llama-3.2-1B,
#: the shallowest Llama checkpoint (16 layers): every run evaluates every layer, and
#: Llama-3.1-8B's 32 made a Llama test cost twice a GPT-2 one (12 layers)
FAMILIES = {
    "gpt2": ("openai-community/gpt2", "model.transformer.h"),
    "llama": ("meta-llama/Llama-3.2-1B", "model.model.layers"),
}
both = pytest.mark.parametrize("family", sorted(FAMILIES))

#: the running test (pytest's item), set by tests/conftest.py around each test; the runs
#: the harness has made in it, by version ("original", "optimized", "script"), for their names
running = None
runs: dict[str, int] = {}


def script(template: str, family: str) -> str:
    """The template, dedented, for one family."""
    repo, layers = FAMILIES[family]
    source = textwrap.dedent(template).replace("REPO", repo)
    source = source.replace("LMLAYERS", "lm" + layers[len("model"):]).replace("SELFLAYERS", "self." + layers)
    return source.replace("LAYERS", layers)


def optimized_and_verified(template: str, family: str, *, unsafe: bool = False, options: Options | None = None,
                           expect_ok: bool = True, let_go: frozenset[str] | None = None, **verify_options):
    """The template optimized (default mode, or ``unsafe``) and verified; unless
    ``expect_ok`` is False, the verdict must be OK and the optimized run must not raise.
    ``let_go``: the only module-level names the optimized script may leave unbound (by
    default those verify accepts: the optimizer's unreturned intermediates); every other
    name the original leaves bound is compared. Returns (Result, VerifyReport)."""
    source = script(template, family)
    options = options or Options(unsafe_fixes=unsafe)
    result = optimize(source, options=options)
    if unsafe:
        verify_options.setdefault("atol", 1e-5)  # batching: ~1e-7 in fp32 (its finding says so)
    if let_go is not None:
        verify_options["ignore_missing"] = let_go
    report = verify_result(source, result, filename="script.py", unsafe_fixes=options.unsafe_fixes, **verify_options)
    if expect_ok:
        assert report.intended_ok, report.to_text() + "\n" + result.code
        assert not report.errors["optimized"], report.errors
    check_cost_model(source, result.code, report)
    return result, report


def verified(source: str, result, **options):
    """``verify_result(source, result, **options)``, the cost model checked on its two
    emulated runs."""
    report = verify_result(source, result, **options)
    check_cost_model(source, result.code, report)
    return report


def verified_sources(original: str, optimized: str, **options):
    """``verify_sources(original, optimized, **options)``, the cost model checked on its two
    emulated runs."""
    report = verify_sources(original, optimized, **options)
    check_cost_model(original, optimized, report)
    return report


def executed(source: str, *, mode: str = "local", **options):
    """``run_script(source, mode=mode, **options)``, the cost model checked on an emulated run."""
    run = run_script(source, mode=mode, **options)
    if mode == "emulated":
        _check_run("script", source, RunMetrics.of(run))
    return run


def cost_accuracy():
    """``benchmarks/cost_accuracy.py``, imported once (as ``cost_accuracy``)."""
    if "cost_accuracy" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / "cost_accuracy.py"
        spec = importlib.util.spec_from_file_location("cost_accuracy", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["cost_accuracy"] = module
        spec.loader.exec_module(module)
    return sys.modules["cost_accuracy"]


def check_cost_model(original: str, optimized: str, report) -> None:
    """In an execution test, the cost model's prediction for the two emulated runs of a
    verify report (``report.before``: ``original``, ``report.after``: ``optimized``) against
    their measurement, as ``benchmarks/cost_accuracy.py`` checks the runs it collects
    (:func:`cost_accuracy.execution_problem`), under the names it gives them."""
    _check_run("original", original, report.before)
    _check_run("optimized", optimized, report.after)


def _check_run(version: str, code: str, measured) -> None:
    if running is None or not fnmatch.fnmatch(running.path.name, cost_accuracy().EXECUTION_TESTS):
        return
    accuracy = cost_accuracy()
    callspec = getattr(running, "callspec", None)
    name = accuracy.test_name(running.path, running.function, dict(callspec.params) if callspec else {})
    taken = runs[version] = runs.get(version, 0) + 1
    key = f"{name}:{version}" + (f"#{taken}" if taken > 1 else "")
    if accuracy.is_example(code):  # an example's own rows check it
        return
    row = accuracy.row_of(name, version, code, measured, accuracy.TRIPS.get(key))
    problem = accuracy.execution_problem(row, key)
    assert problem is None, f"the cost model against the emulated run {key}:\n{problem}"
