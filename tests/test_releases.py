"""The nnsight release a rewrite targets (ndif_opt/analysis/releases.py), statically;
tests/nnterp_env/test_release_06.py runs the same shapes on nnsight 0.6.3."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt import optimize
from ndif_opt.analysis.facts import analyze
from ndif_opt.analysis.releases import target_release, unbound_on_server
from ndif_opt.frontends.config import ConfigError, parse_table
from ndif_opt.options import Options
from ndif_opt.types import Status

TAKEN_ALONG = """\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
results = {"layer": [], "norm": []}
print("starting")
for layer in range(3):
    with model.trace("hello world", remote=True):
        h = model.transformer.h[layer].output.save()
    results["layer"].append(layer)
    results["norm"].append(h.norm().item())
print(results)
"""


def test_scripts_that_import_nnterp_target_0_6():
    assert target_release("", "from nnterp import StandardizedTransformer\n") == "0.6"
    assert target_release("", "import nnterp.prompt_utils as pu\n") == "0.6"
    assert target_release("", "from nnsight import LanguageModel\n# nnterp is not used\n") == "0.8"
    assert target_release("0.8", "import nnterp\n") == "0.8"  # asked for outright


@pytest.mark.parametrize(
    "body,unbound",
    [
        ("with model.trace(p, remote=True):\n    x = x + model.output\n", {"x"}),
        ("with model.session(remote=True):\n    for i in range(3):\n        ids = f(ids)\n", {"ids"}),
        ("with model.trace(p, remote=True):\n    x = model.output\n    y = x + 1\n", set()),
        ("with model.trace(p):\n    x = x + model.output\n", set()),  # local: the frame is real
        ("with model.trace(p, remote=True):\n    out = model.output + offset\n", set()),  # only read
    ],
)
def test_names_a_remote_block_reads_before_binding(body, unbound):
    source = 'from nnsight import LanguageModel\nmodel = LanguageModel("gpt2")\n' + body
    assert unbound_on_server(analyze(cst.parse_module(source))) == unbound


def test_a_rewrite_that_would_be_unbound_on_0_6_is_left_out_with_the_reason():
    for_08 = optimize(TAKEN_ALONG)
    assert "results = nnsight.save(results)" in for_08.code
    result = optimize(TAKEN_ALONG, options=Options(nnsight="0.6"))
    assert "model.session" not in result.code
    [finding] = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert finding.status is Status.SKIPPED and finding.message.startswith("left out for nnsight 0.6: ")
    assert "`results`" in finding.reason and "nnsight 0.6" in finding.reason
    # the other passes still apply
    assert any(f.pass_id == "reduction-pushdown" and f.applied for f in result.findings)


def test_the_release_is_decided_for_the_whole_file_not_per_window():
    source = "import nnterp  # noqa: F401\n" + TAKEN_ALONG + "\n" * 3 + TAKEN_ALONG.split("\n", 3)[3]
    result = optimize(source)
    assert "model.session" not in result.code


def test_configuration_and_command_line():
    assert parse_table({"nnsight": "0.6"}) == {"nnsight": "0.6"}
    with pytest.raises(ConfigError, match="must be one of '0.8', '0.6'"):
        parse_table({"nnsight": "0.7"})
