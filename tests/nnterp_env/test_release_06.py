"""Rewrites for nnsight 0.6 (the release nnterp 1.3.0 needs), run on nnsight 0.6.3.

Two things 0.6 does differently from 0.8 (ndif_opt/analysis/releases.py): a remote block
sees none of the frame's local variables on the server, and invokes of one trace do not
each read their own row. Rewritten for 0.6 (``Options(nnsight="0.6")``, or any script that
imports nnterp), a script must give on 0.6.3 what the original gives locally; the same
rewrite made for 0.8 fails there, which is why the release matters.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nnterp")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

from test_releases import GREEDY, TAKEN_ALONG  # noqa: E402  (tests/analysis/test_releases.py)

from ndif_opt import optimize  # noqa: E402
from ndif_opt.options import Options  # noqa: E402
from ndif_opt.verify import verify_result  # noqa: E402

BATCHABLE = """
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
scores = {}
for review in ["The movie was wonderful and the acting was", "The food at this place is"]:
    with model.trace(review, remote=True):
        logits = model.lm_head.output.save()
    scores[review] = (logits[0, -1, 11] - logits[0, -1, 22]).item()
print(scores)
"""


def _verified(source: str, **options):
    result = optimize(source, options=Options(**options))
    return result, verify_result(source, result, filename="script.py")


@pytest.mark.parametrize("source", [TAKEN_ALONG, GREEDY], ids=["taken-along", "greedy"])
def test_a_session_that_reads_a_local_before_binding_it_is_lowered_for_0_6(source):
    for_08, report_08 = _verified(source)
    assert not report_08.ok, "the 0.8 rewrite must fail on nnsight 0.6.3, or this test proves nothing"
    assert "UnboundLocalError" in (report_08.errors["optimized"] or "")
    result, report = _verified(source, nnsight="0.6")
    assert report.ok, report.to_text() + "\n" + result.code
    assert (report.before.requests, report.after.requests) == (3, 1)
    assert "_2 = " in result.code.split("with model.session(remote=True):")[1]


def test_a_local_that_may_be_unbound_is_copied_only_if_bound_on_0_6():
    # `ids` is bound under an `if`: the copy is guarded (`try: ids_2 = ids`), and placed after
    # the block's first statement (0.6 cannot trace a block that opens with `try`)
    source = GREEDY.replace('ids = model.tokenizer(', 'if model is not None:\n    ids = model.tokenizer(')
    result, report = _verified(source, nnsight="0.6")
    assert report.ok, report.to_text() + "\n" + result.code
    assert "except NameError" in result.code and report.after.requests == 1


def test_a_session_that_cannot_be_lowered_is_left_out_for_0_6():
    # the guarded copy would open the block: left out, and still right
    source = TAKEN_ALONG.replace('results = {', 'if model is not None:\n    results = {')
    result, report = _verified(source, nnsight="0.6")
    assert report.ok, report.to_text() + "\n" + result.code
    assert "model.session" not in result.code
    assert any("left out for nnsight 0.6" in f.message for f in result.findings)


def test_a_script_that_imports_nnterp_is_rewritten_for_0_6():
    source = "import nnterp  # noqa: F401\n" + TAKEN_ALONG
    result, report = _verified(source)
    assert report.ok, report.to_text()
    assert "results_2 = results" in result.code and report.after.requests == 1


def test_invokes_are_not_batched_for_0_6():
    batched, report_08 = _verified(BATCHABLE, unsafe_fixes=True)
    assert "tracer.invoke" in batched.code
    assert not report_08.ok  # 0.6.3's batched invokes read other values
    result, report = _verified(BATCHABLE, unsafe_fixes=True, nnsight="0.6")
    assert "tracer.invoke" not in result.code
    assert report.ok, report.to_text()
    assert report.after.requests == 1
    assert any("nnsight 0.6" in (f.reason or "") for f in result.findings if f.pass_id == "invoke-batching")


def test_a_helper_that_sends_its_own_request_runs_on_the_client_after_the_session():
    # collect_token_activations_batched(..., remote=True) opens its own session: inside the
    # loop's session it would run on the server; it is replayed on your machine instead
    source = textwrap.dedent(
        """
        from nnterp import StandardizedTransformer
        from nnterp.nnsight_utils import collect_token_activations_batched

        model = StandardizedTransformer("meta-llama/Llama-3.2-1B")
        prompts = ["The Eiffel Tower is in", "The capital of Japan is", "Water boils at"]
        for prompt in prompts:
            with model.trace(prompt, remote=True):
                probs = model.next_token_probs.save()
            acts = collect_token_activations_batched(model, [prompt], batch_size=1, layers=[0, 1], remote=True)
            print(prompt, probs[0].argmax().item(), acts.shape, acts.sum().item())
        """
    )
    result, report = _verified(source)
    assert report.ok, report.to_text() + "\n" + result.code
    assert (report.before.requests, report.after.requests) == (6, 4)  # three traces → one session
    assert (result.costs[0].before.requests, result.costs[-1].after.requests) == (6, 4)  # as predicted
    assert report.before.forward_passes == report.after.forward_passes
