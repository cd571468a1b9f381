"""nnterp's helpers that send their own requests, as the cost model counts them.

The counts are read from nnterp 1.3.0's source (``ndif_opt/cost/library_requests.py``);
``tests/nnterp_env/`` measures them with the real nnterp under the emulation of NDIF.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from ndif_opt import optimize
from ndif_opt.analysis.facts import analyze
from ndif_opt.cost.constants import RESULT_BASE
from ndif_opt.cost.model_registry import dims_for
from ndif_opt.cost.shape_values import Shape
from ndif_opt.cost.requests import serialized_size
from ndif_opt.cost_model import explain
from ndif_opt.options import Options

L8 = dims_for("meta-llama/Llama-3.1-8B")  # 32 layers, hidden 4096, vocab 128256, bf16
HEAD = """\
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import collect_token_activations_batched, get_token_activations
from nnterp.prompt_utils import run_prompts

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
prompts = ["a b c", "d e f", "g h i", "j k l", "m n o"]
"""


def requests_of(body: str):
    source = HEAD + textwrap.dedent(body)
    return explain(analyze(cst.parse_module(source)), Options()).requests


def one(body: str):
    [request] = requests_of(body)
    return request


def tensor(*dims: int) -> int:
    return serialized_size(Shape.tensor(dims, "bfloat16"))


@pytest.mark.parametrize(
    "call,count,method,passes",
    [
        # one session around every batch (use_session defaults to True)
        ("collect_token_activations_batched(model, prompts, 2, remote=True)", 1, "session", 3),
        ("collect_token_activations_batched(model, prompts, batch_size=5, remote=True)", 1, "session", 1),
        # without the session: a trace per batch
        ("collect_token_activations_batched(model, prompts, 2, remote=True, use_session=False)", 3, "trace", 3),
        ("get_token_activations(model, prompts, remote=True)", 1, "trace", 1),
        # a trace per batch of 32 (its default), so one for five prompts...
        ("run_prompts(model, prompts, remote=True)", 1, "trace", 1),
        # ... and one per batch when batches are smaller
        ("run_prompts(model, prompts, batch_size=2, remote=True)", 3, "trace", 3),
    ],
)
def test_requests_forward_passes_and_kind(call, count, method, passes):
    request = one(f"result = {call}\n")
    assert (request.count, request.kind, request.forward_passes) == (count, method, passes)
    assert request.block is None and request.library_call is not None


def test_downloads_are_what_the_helper_returns():
    layers = one("acts = collect_token_activations_batched(model, prompts, 2, layers=[3, 7], remote=True)\n")
    assert layers.download_bytes == RESULT_BASE + tensor(2, 5, L8.hidden_size)
    every = one("acts = get_token_activations(model, prompts, remote=True)\n")
    assert every.download_bytes == RESULT_BASE + tensor(L8.n_layers, 5, L8.hidden_size)
    probs = one("probs = run_prompts(model, prompts, batch_size=2, remote=True)\n")
    assert probs.download_bytes == 3 * RESULT_BASE + tensor(5, L8.vocab_size)


def test_tracer_stop_after_the_last_layer_read():
    request = one("acts = get_token_activations(model, prompts, layers=[3, 7], remote=True)\n")
    assert request.layer_evaluations == 8  # layers 0..7, then `tracer.stop()`


def test_local_calls_send_nothing():
    assert requests_of("acts = get_token_activations(model, prompts)\n") == []
    assert requests_of("acts = run_prompts(model, prompts, remote=False)\n") == []


def test_a_loop_of_calls_multiplies():
    request = one(
        """\
        for prompt in prompts:
            probs = run_prompts(model, [prompt], remote=True)
        """
    )
    assert request.count == 5


def test_a_same_named_function_of_another_library_is_not_counted():
    source = HEAD.replace("from nnterp.prompt_utils import run_prompts", "from mylib import run_prompts")
    source += "probs = run_prompts(model, prompts, remote=True)\n"
    assert explain(analyze(cst.parse_module(source)), Options()).requests == []


def test_the_report_counts_helper_requests_with_the_traces():
    result = optimize(
        HEAD
        + """\
with model.trace("a b c", remote=True):
    probs = model.next_token_probs.save()
acts = collect_token_activations_batched(model, prompts, 2, remote=True)
"""
    )
    first = result.costs[0].before
    assert first.requests == 2
