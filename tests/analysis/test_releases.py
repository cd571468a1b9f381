"""The nnsight release a rewrite targets (ndif_opt/analysis/releases.py), statically;
tests/nnterp_env/test_release_06.py runs the same shapes on nnsight 0.6.3."""

from __future__ import annotations

import re

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


def test_a_session_that_reads_a_local_before_binding_it_works_on_a_copy_for_0_6():
    for_08 = optimize(TAKEN_ALONG)
    assert "results = nnsight.save(results)" in for_08.code
    result = optimize(TAKEN_ALONG, options=Options(nnsight="0.6"))
    session = result.code.split("with model.session(remote=True):\n")[1].split("\nprint(results)")[0]
    assert session.startswith("    results_2 = results\n    results_2 = nnsight.save(results_2)\n")
    assert "results[" not in session.split("\nresults = results_2")[0]
    assert session.endswith("\nresults = results_2")  # saved: it comes back under its own name
    assert "results_2" in result.introduced
    assert any(f.pass_id == "session-hoisting" and f.applied for f in result.findings)


GREEDY = """\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
ids = model.tokenizer("The cat sat on the", return_tensors="pt")["input_ids"]
for step in range(3):
    with model.trace(ids, remote=True):
        logits = model.lm_head.output.save()
    next_id = logits[0, -1].argmax()
    ids = torch.cat([ids, next_id.reshape(1, 1)], dim=1)
print(ids.tolist())
"""


def test_a_copy_whose_value_comes_back_otherwise_is_not_assigned_back():
    result = optimize(GREEDY, options=Options(nnsight="0.6"))
    assert "    ids_2 = ids\n" in result.code and "torch.cat([ids_2," in result.code
    assert 'ids = _ndif_log["ids"]' in result.code and "ids = ids_2" not in result.code


def test_a_local_that_may_be_unbound_before_the_session_is_copied_only_if_bound():
    source = GREEDY.replace("ids = model.tokenizer(", "if model is not None:\n    ids = model.tokenizer(")
    result = optimize(source, options=Options(nnsight="0.6"))
    session = result.code.split("with model.session(remote=True):\n")[1]
    # after the block's first statement: nnsight 0.6 cannot trace a block opening with `try`
    assert session.startswith(
        "    _ndif_log = dict().save()  # the values the replay after the session reads, by name\n"
        "    try:\n        ids_2 = ids\n    except NameError:\n        pass\n"
    )
    assert any(f.pass_id == "session-hoisting" and f.applied for f in result.findings)


def test_a_block_that_would_open_with_the_guarded_copy_is_left_out_with_the_reason():
    source = TAKEN_ALONG.replace('results = {"layer": [], "norm": []}', 'if model is not None:\n    results = {"layer": [], "norm": []}')
    result = optimize(source, options=Options(nnsight="0.6"))
    assert "model.session" not in result.code
    [finding] = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert finding.status is Status.SKIPPED and finding.message.startswith("left out for nnsight 0.6: would wrap ")
    assert "`results`" in finding.reason and "nnsight 0.6" in finding.reason
    assert any(f.pass_id == "reduction-pushdown" and f.applied for f in result.findings)  # the others still apply


@pytest.mark.parametrize("inside", ["n = len(locals())", "global ids", "from torch import ids"])
def test_a_block_that_names_the_local_in_other_ways_is_not_lowered(inside):
    source = GREEDY.replace("    next_id = ", f"    {inside}\n    next_id = ")
    result = optimize(source, options=Options(nnsight="0.6"))
    assert "ids_2" not in result.code


def test_the_release_is_decided_for_the_whole_file_not_per_window():
    source = "import nnterp  # noqa: F401\n" + TAKEN_ALONG + "\n" * 3 + TAKEN_ALONG.split("\n", 3)[3]
    result = optimize(source)
    assert len(re.findall(r"results_\d = results\n", result.code)) == 2  # both loops' sessions, in their windows


def test_configuration_and_command_line():
    assert parse_table({"nnsight": "0.6"}) == {"nnsight": "0.6"}
    # any 0.5+ release: 0.8.x by 0.8's rules, the others by 0.6's (the stricter)
    assert parse_table({"nnsight": "0.7"}) == {"nnsight": "0.6"}
    assert parse_table({"nnsight": "0.8.1"}) == {"nnsight": "0.8"}
    with pytest.raises(ConfigError, match="older than 0.5: run with --migrate"):
        parse_table({"nnsight": "0.4.11"})
