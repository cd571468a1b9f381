"""nnterp scripts through ``ndif-opt verify``'s runner on nnsight 0.6.3 (the nnterp venv).

Every test runs a real script with the real libraries on the tiny seeded models: locally
(every ``remote=`` ignored: the intended values) and through the emulated NDIF (the
request serialized, deserialized on a fresh server thread with the user's modules hidden
and nnterp kept by reference, only saved values shipped back).
"""

from __future__ import annotations

import pathlib
import textwrap

import pytest

# nnterp 1.3.0 imports only with nnsight 0.6.3: these tests run in the second venv of
# .ci/run (requirements-nnterp.txt) and are skipped everywhere else
pytest.importorskip("nnterp")

import torch  # noqa: E402

from ndif_opt import optimize  # noqa: E402
from ndif_opt.passes import PASSES  # noqa: E402
from ndif_opt.verify import run_script, verify_result  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]

GPT2 = "openai-community/distilgpt2"  # 6 layers
LLAMA = "meta-llama/Llama-3.2-1B"  # 16 layers
FAMILIES = {"gpt2": (GPT2, 6), "llama": (LLAMA, 16)}


def _script(body: str, repo: str, **options: object) -> str:
    args = "".join(f", {k}={v!r}" for k, v in options.items())
    header = f"from nnterp import StandardizedTransformer\nmodel = StandardizedTransformer({repo!r}{args})\n"
    return header + textwrap.dedent(body)


def _both(source: str):
    local = run_script(source, mode="local")
    emulated = run_script(source, mode="emulated")
    assert local.error is None, local.traceback
    assert emulated.error is None, emulated.traceback
    assert local.requests == []
    return local, emulated


def _same_tensors(local, emulated, names):
    for name in names:
        a, b = local.namespace[name], emulated.namespace[name]
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), name
        assert a.shape == b.shape and torch.equal(a, b), name


# -- one test per accessor family, on both tiny families --------------------------

ACCESSORS = {
    "layers": (
        """
        with model.trace("The cat sat on the", remote=True):
            i = model.layers_input[1].save()
            o = model.layers[1].output.save()
            lo = model.layers_output[2].save()
        """,
        ["i", "o", "lo"],
        {},
    ),
    "attentions_mlps": (
        """
        with model.trace("The cat sat on the", remote=True):
            a = model.attentions_output[1].save()
            m = model.mlps_output[1].save()
        """,
        ["a", "m"],
        {},
    ),
    "logits_probs": (
        """
        with model.trace("The cat sat on the", remote=True):
            logits = model.logits.save()
            probs = model.next_token_probs.save()
        """,
        ["logits", "probs"],
        {},
    ),
    # nnterp 1.3.0 spells it model.attention_probabilities[i] (no
    # model.layers[i].self_attn.attention_probabilities); it needs an eager model.
    "attention_probabilities": (
        """
        with model.trace("The cat sat on the", remote=True):
            p = model.attention_probabilities[1].save()
        """,
        ["p"],
        {"enable_attention_probs": True},
    ),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("accessor", sorted(ACCESSORS))
def test_accessor_local_equals_emulated(family, accessor):
    repo, layers = FAMILIES[family]
    body, names, options = ACCESSORS[accessor]
    if family == "gpt2" and accessor == "attention_probabilities":
        pytest.xfail(
            "nnterp 1.3.0 looks GPT-2's attention probabilities up at "
            "attention_interface_0.source.module_attn_dropout_0; transformers 5.25's "
            "eager_attention_forward has nn_functional_dropout_0 (AttributeError at init)"
        )
    local, emulated = _both(_script(body, repo, **options))
    _same_tensors(local, emulated, names)
    assert len(emulated.requests) == 1
    request = emulated.requests[0]
    assert request.error is None and request.forward_passes == 1 and request.layer_calls == layers
    assert set(request.saved) == set(names)
    if accessor == "attention_probabilities":
        # rows of a causal attention pattern sum to 1
        assert torch.allclose(local.namespace["p"].sum(-1), torch.ones(1), atol=1e-5)


def test_newer_nnterp_accessors_are_absent_in_1_3_0():
    # model.layers[i].mlp.mlp_output / .self_attn.attention_probabilities / .layer_output
    # belong to later nnterp releases; 1.3.0 fails on them locally and remotely alike.
    for expr in ("model.layers[1].mlp.mlp_output", "model.layers[1].layer_output"):
        source = _script(f"with model.trace('The cat', remote=True):\n    v = {expr}.save()\n", GPT2)
        for mode in ("local", "emulated"):
            run = run_script(source, mode=mode)
            assert run.error is not None and "has no attribute" in run.error, (mode, run.error)


# -- the emulation is faithful where it matters --------------------------------------

FAITHFUL = """
seen = []
with model.trace("The cat sat on the", remote=True):
    seen.append(1)
    print("server says", model.layers_output[1].shape)
    top = model.next_token_probs[0].argmax().save()
with model.trace("The cat sat on the", remote=True):
    unsaved = model.logits.sum()
tops = []
for prompt in ["a b", "c d", "e f"]:
    with model.trace(prompt, remote=True):
        t = model.next_token_probs[0].argmax().save()
    tops.append(int(t))
with model.session(remote=True):
    in_session = list().save()
    for prompt in ["a b", "c d", "e f"]:
        with model.trace(prompt):
            in_session.append(model.next_token_probs[0].argmax())
print(len(seen), int(top), tops, [int(v) for v in in_session])
"""


def test_emulation_is_faithful_where_it_matters():
    source = _script(FAITHFUL, GPT2)
    local = run_script(source, mode="local")
    emulated = run_script(source, mode="emulated")
    assert local.error is None and emulated.error is None, emulated.traceback
    # the client-side list stays empty on the client; the server's print is a log line
    assert local.namespace["seen"] == [1] and emulated.namespace["seen"] == []
    assert local.stdout.startswith("server says torch.Size([1, 7, 64])\n1 ")
    assert emulated.stdout.startswith("0 ")
    assert emulated.requests[0].logs == ["server says torch.Size([1, 7, 64])"]
    assert local.stdout.splitlines()[1].split(" ", 1)[1] == emulated.stdout.splitlines()[0].split(" ", 1)[1]
    # requests: 1 + 1 + a loop of 3 traces + one session of 3 traces
    assert [r.kind for r in emulated.requests] == ["trace"] * 5 + ["session"]
    assert [r.forward_passes for r in emulated.requests] == [1, 1, 1, 1, 1, 3]
    assert [r.layer_calls for r in emulated.requests] == [6, 6, 6, 6, 6, 18]
    assert emulated.forward_passes == 8 and local.forward_passes == 8
    # only saved values come back: nothing for the trace without a save
    with_save, without = emulated.requests[0], emulated.requests[1]
    assert set(with_save.saved) == {"top"} and without.saved == {}
    assert "unsaved" not in emulated.namespace and "unsaved" not in local.namespace
    assert without.download_raw_bytes < with_save.download_raw_bytes
    assert all(0 < r.upload_bytes < r.upload_raw_bytes for r in emulated.requests)


def test_a_user_module_is_shipped_by_value_and_nnterp_by_reference():
    helper = "def last(x):\n    return x[:, -1]\n"
    body = """
    import helper
    with model.trace("The cat sat on the", remote=True):
        h = helper.last(model.layers_output[1]).save()
    """
    local = run_script(_script(body, GPT2), mode="local", extra_files={"helper.py": helper})
    emulated = run_script(_script(body, GPT2), mode="emulated", extra_files={"helper.py": helper})
    assert emulated.error is None, emulated.traceback
    _same_tensors(local, emulated, ["h"])


def test_nnterp_travels_by_reference():
    # The server has nnterp installed: the request's StandardizedTransformer and its
    # accessors resolve to the server's own classes (here: the very same objects), not
    # to a fresh copy imported while the user's modules are hidden.
    body = """
    client_class = id(StandardizedTransformer)
    with model.trace("The cat", remote=True):
        ids = [id(type(model)), id(type(model.layers_output))].save()
    from nnterp.rename_utils import LayerAccessor
    same = [client_class == ids[0], id(LayerAccessor) == ids[1]]
    """
    emulated = run_script(_script(body, GPT2), mode="emulated")
    assert emulated.error is None, emulated.traceback
    assert emulated.namespace["same"] == [True, True]


def test_a_server_error_reaches_the_client_as_remote_exception():
    body = """
    with model.trace("The cat sat on the", remote=True):
        x = model.layers_output[99].save()
    """
    emulated = run_script(_script(body, GPT2), mode="emulated")
    assert emulated.error is not None and len(emulated.requests) == 1
    assert emulated.requests[0].error is not None


# -- nnterp's remote helpers ----------------------------------------------------------

HELPERS = """
from nnterp.nnsight_utils import collect_token_activations_batched
from nnterp.prompt_utils import Prompt, run_prompts
prompts = ["The cat sat on the", "The dog slept by the", "The capital of Italy is", "One, two, three"]
acts = collect_token_activations_batched(model, prompts, batch_size=2, remote=True)
targets = [Prompt.from_strings(p, {"a": ["Paris"], "b": ["Rome"]}, model.tokenizer) for p in prompts]
probs = run_prompts(model, targets, batch_size=2, remote=True)
a, b = probs["a"], probs["b"]
"""


def test_nnterp_helpers_requests():
    local, emulated = _both(_script(HELPERS, GPT2))
    _same_tensors(local, emulated, ["acts", "a", "b"])
    kinds = [r.kind for r in emulated.requests]
    # collect_token_activations_batched(remote=True) is one session (nnterp 1.3.0 batches
    # it into model.session); run_prompts(remote=True) is one trace per batch.
    assert kinds == ["session", "trace", "trace"]
    assert emulated.requests[0].forward_passes == 2


# -- the optimizer's rewrite on nnsight 0.6.3 ---------------------------------------------

LOOP = """
prompts = ["The Eiffel Tower is in the city of", "The capital of Italy is", "The cat sat on the"]
for prompt in prompts:
    with model.trace(prompt, remote=True):
        probs = model.next_token_probs.save()
    print(prompt, probs[0].argmax().item())
"""


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_session_hoisting_is_valid_on_nnsight_0_6(family):
    repo, layers = FAMILIES[family]
    original = _script(LOOP, repo)
    result = optimize(original)
    assert "model.session(remote=True)" in result.code and "list().save()" in result.code
    report = verify_result(original, result)
    assert report.errors == {"local": None, "original": None, "optimized": None}
    assert report.intended_ok, report.mismatches
    assert (report.before.requests, report.after.requests) == (3, 1)
    assert report.before.forward_passes == report.after.forward_passes == 3
    assert report.after.layer_calls == 3 * layers
    assert all(r["error"] is None for r in report.before.records + report.after.records)


# -- the passes' own nnterp cases and the nnterp example, verified on nnsight 0.6.3 ---------

NNTERP_CASES = [
    pytest.param(cls.id, case, id=f"{cls.id}:{case.name}")
    for cls in PASSES
    for case in cls.cases
    if "from nnterp" in case.before and case.after is not None
]


@pytest.mark.parametrize("pass_id,case", NNTERP_CASES)
def test_each_nnterp_case_of_the_passes_keeps_its_results_on_nnsight_0_6(pass_id, case):
    # as tests/passes/test_cases.py runs a case: its pass alone
    result = optimize(case.before, select=[pass_id], unsafe_fixes=case.unsafe_fixes)
    assert result.code == case.after
    report = verify_result(case.before, result, filename="script.py")
    assert report.ok, report.to_text()
    assert report.after.requests <= report.before.requests
    assert report.after.download_raw_bytes < report.before.download_raw_bytes


def test_the_nnterp_example_verifies_on_nnsight_0_6():
    source = (ROOT / "examples" / "nnterp_probe.py").read_text()
    result = optimize(source)
    assert result.code == (ROOT / "examples" / "optimized" / "nnterp_probe.py").read_text()
    report = verify_result(source, result, filename="nnterp_probe.py")
    assert report.ok, report.to_text()
    # the loop of four traces becomes one session; nnterp's helper keeps its own session
    assert (report.before.requests, report.after.requests) == (5, 2)
    assert report.before.forward_passes == report.after.forward_passes == 6
    assert report.after.download_raw_bytes * 5 < report.before.download_raw_bytes
    # the static estimate says what crossed the (emulated) wire
    first, last = result.costs[0].before, result.costs[-1].after
    assert (first.requests, last.requests) == (report.before.requests, report.after.requests)
    assert (first.forward_passes, last.forward_passes) == (report.before.forward_passes, report.after.forward_passes)
    assert first.layer_evaluations == report.before.layer_calls and last.layer_evaluations == report.after.layer_calls
