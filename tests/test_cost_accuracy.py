"""The static cost model against measurement.

Every example and every script of ``benchmarks/cost_scripts/`` is run, original and
optimized, through the NDIF emulation on the tiny models; the cost model, evaluated at
the tiny models' dimensions (hidden 64, vocabulary 512, fp32, the real layer count, the
tiny tokenizer's token counts, views shipping their storage as on a CPU server), must
predict the number of requests exactly and the uncompressed download within ±25% (±4 KB
for small results). ``pytest -s`` prints the table (also ``python benchmarks/cost_accuracy.py``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("nnsight")
pytest.importorskip("ndif_opt.verify", exc_type=ImportError)

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("cost_accuracy", ROOT / "benchmarks" / "cost_accuracy.py")
accuracy = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("cost_accuracy", accuracy)
_spec.loader.exec_module(accuracy)

SCRIPTS = accuracy.scripts()
ROWS: dict[str, list] = {}


def test_there_are_scripts():
    assert len(SCRIPTS) >= 10
    assert {p.parent.name for p in SCRIPTS} == {"examples", "cost_scripts"}


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_prediction_matches_measurement(path):
    rows = accuracy.measure(path)
    ROWS[path.stem] = rows
    checked = 0
    for row in rows:
        if row.error is not None:
            # a naive original that fails on a server (a client container stays empty):
            # what it sent before failing is not what the script describes
            continue
        checked += 1
        assert row.requests_predicted == row.requests_measured, accuracy.table([row])
        assert row.download_ok, accuracy.table([row])
        assert row.forward_predicted == row.forward_measured, accuracy.table([row])
    if rows[1].error is not None:
        # whether the optimized script runs is the execution tests' business (a script
        # in the pre-0.5 API needs --migrate first); its cost cannot be measured
        pytest.skip(f"the optimized script fails remotely: {rows[1].error}")
    assert checked


def test_print_table(capsys):
    rows = [row for stem in sorted(ROWS) for row in ROWS[stem]]
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
    from ndif_opt.cost_model import explain
    from ndif_opt.analysis import analyze
    import libcst as cst

    source = 'from nnsight import LanguageModel\nmodel = LanguageModel("meta-llama/Llama-3.1-70B")\n'
    source += 'with model.trace("Hello world", remote=True):\n    h = model.model.layers[3].output.save()\n'
    options = accuracy.tiny_options(source)
    dims = options.cost["models"]["meta-llama/Llama-3.1-70B"]
    assert (dims["n_layers"], dims["hidden_size"], dims["dtype"]) == (80, 64, "float32")
    tokens = options.cost["prompt-tokens"]["Hello world"]
    cost = explain(analyze(cst.parse_module(source)), options).cost
    # [1, tokens, 64] fp32 + framing
    assert cost.download_bytes == 1261 + tokens * 64 * 4 + 225 + len("h") + 5
