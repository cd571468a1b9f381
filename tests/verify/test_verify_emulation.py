"""The execution check: tiny models, the faithful NDIF emulation, the runner, compare.

Real nnsight 0.8 throughout (no mocks): each script below runs in-process against
tiny seeded models, once with every ``remote=`` ignored ("local", the intended
result) and/or once through the emulated NDIF service.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nnsight")
torch = pytest.importorskip("torch")

from ndif_opt.verify import (  # noqa: E402
    EmulatedNDIF,
    RequestRecord,
    RunResult,
    VerifyReport,
    build_tokenizer,
    compare_namespaces,
    run_script,
    tiny_model,
    verify_sources,
)

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = '["The Eiffel Tower is in", "The capital of France is", "Hello world"]'


def script(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


def both(source: str, **kwargs) -> tuple[RunResult, RunResult]:
    local = run_script(source, mode="local", **kwargs)
    emulated = run_script(source, mode="emulated", **kwargs)
    assert local.error is None, local.traceback
    return local, emulated


# ---------------------------------------------------------------------------
# Tiny models
# ---------------------------------------------------------------------------


def test_tokenizer_is_cached_byte_level_with_left_padding():
    tok = build_tokenizer()
    assert tok is build_tokenizer()
    assert len(tok) == 512
    assert tok.pad_token == tok.eos_token == "<|endoftext|>"
    assert tok.padding_side == "left"
    ids = tok(["a", "The Eiffel Tower is in"], padding=True)["input_ids"]
    assert ids[0][0] == tok.pad_token_id  # left padded
    assert tok.decode(tok("naïve ünïcode ✓")["input_ids"]) == "naïve ünïcode ✓"


@pytest.mark.parametrize(
    "repo_id, path, layers",
    [
        ("gpt2", "transformer.h", 12),
        ("openai-community/gpt2-xl", "transformer.h", 48),
        ("meta-llama/Llama-3.1-8B", "model.layers", 32),
        ("meta-llama/Llama-3.3-70B-Instruct", "model.layers", 80),
    ],
)
def test_tiny_model_family_and_real_depth(verify, repo_id, path, layers):
    model = tiny_model(repo_id)
    module = model._module
    node = module
    for part in path.split("."):
        node = getattr(node, part)
    assert len(node) == layers
    assert module.config.hidden_size == 64
    assert not module.training
    assert next(module.parameters()).dtype == torch.float32
    assert module.config.eos_token_id == module.config.pad_token_id == build_tokenizer().eos_token_id


def test_unknown_model_warns_and_falls_back_to_gpt2(verify):
    with pytest.warns(UserWarning, match="unknown model"):
        model = tiny_model("someone/mystery-model")
    assert len(model._module.transformer.h) == 12


def test_same_repo_id_same_weights_and_runs_are_isolated(gpt2):
    other = tiny_model("gpt2")
    a, b = gpt2._module.state_dict(), other._module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert other._module is not gpt2._module
    different = tiny_model("openai-community/gpt2-medium")._module.state_dict()
    assert not torch.equal(a["transformer.wte.weight"], different["transformer.wte.weight"])

    # A script that zeroes weights and leaves a hook must not poison the next run.
    poison = script(
        """
        import torch
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with torch.no_grad():
            model._module.lm_head.weight.zero_()
        model._module.register_forward_hook(lambda *a: None)
        with model.trace("Hello world"):
            top = model.output.logits[0, -1].abs().sum().save()
        """
    )
    probe = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.trace("Hello world"):
            top = model.output.logits[0, -1].abs().sum().save()
        hooks = len(model._module._forward_hooks)
        """
    )
    first = run_script(probe, mode="local")
    poisoned = run_script(poison, mode="local")
    again = run_script(probe, mode="local")
    assert poisoned.namespace["top"].item() == 0.0
    assert first.namespace["top"].item() > 0.0
    assert compare_namespaces(first.namespace, again.namespace) == []
    assert again.namespace["hooks"] == 0


def test_model_construction_kwargs_and_credentials_are_harmless(verify):
    source = script(
        """
        import os, torch, nnsight
        from nnsight import CONFIG, LanguageModel, TransformersModel
        CONFIG.set_default_api_key("not-a-real-key")
        CONFIG.API.APIKEY = "also-not-real"
        os.environ["HF_TOKEN"] = "hf_not_real"
        lm = LanguageModel("meta-llama/Llama-3.1-8B", device_map="auto", dispatch=True,
                           torch_dtype=torch.bfloat16)
        tm = TransformersModel("openai-community/gpt2", task="text-generation")
        kinds = [type(lm).__name__, type(tm).__name__, isinstance(lm, LanguageModel)]
        """
    )
    from nnsight.schema.config import CONFIG

    key_before = CONFIG.API.APIKEY
    result = run_script(source, mode="emulated")
    assert result.error is None, result.traceback
    assert result.namespace["kinds"] == ["LanguageModel", "TransformersModel", True]
    assert CONFIG.API.APIKEY == key_before
    import os

    assert os.environ.get("HF_TOKEN") != "hf_not_real"


# ---------------------------------------------------------------------------
# The emulated service
# ---------------------------------------------------------------------------


def test_naive_loop_makes_one_request_per_trace_with_local_values():
    source = script(
        f"""
        from nnsight import LanguageModel
        model = LanguageModel("openai-community/gpt2")
        tops = []
        for prompt in {PROMPTS}:
            with model.trace(prompt, remote=True):
                top = model.output.logits[0, -1].argmax().save()
            tops.append(top)
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert len(emulated.requests) == 3
    assert [r.kind for r in emulated.requests] == ["trace"] * 3
    assert all(r.model == "openai-community/gpt2" for r in emulated.requests)
    assert all(r.forward_passes == 1 and r.layer_calls == 12 for r in emulated.requests)
    assert all(0 < r.upload_bytes < r.upload_raw_bytes for r in emulated.requests)
    assert local.requests == []
    assert len(local.namespace["tops"]) == 3
    assert compare_namespaces(local.namespace, emulated.namespace) == []
    assert local.forward_passes == emulated.forward_passes == 3


def test_client_list_gotcha_is_reproduced():
    source = script(
        f"""
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        results = []
        for prompt in {PROMPTS}:
            with model.trace(prompt, remote=True):
                results.append(model.output.logits[0, -1].argmax().save())
        print(len(results))
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert len(local.namespace["results"]) == 3
    assert emulated.namespace["results"] == []
    assert local.stdout == "3\n" and emulated.stdout == "0\n"
    # The server did append: each request returned the saved argmax (unnamed, so
    # nothing came back under a name), and the values were computed remotely.
    assert len(emulated.requests) == 3
    assert all(r.saved == {} for r in emulated.requests)
    assert compare_namespaces(local.namespace, emulated.namespace) == [
        "results: expected list of 3, got list of 0"
    ]


def test_list_saved_inside_a_remote_session_comes_back_full_in_one_request():
    source = script(
        f"""
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.session(remote=True):
            results = list().save()
            for prompt in {PROMPTS}:
                with model.trace(prompt):
                    results.append(model.output.logits[0, -1].argmax())
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert len(emulated.requests) == 1
    request = emulated.requests[0]
    assert request.kind == "session"
    assert request.forward_passes == 3
    assert request.saved["results"]["type"] == "list"
    assert request.saved["results"]["len"] == 3
    assert len(emulated.namespace["results"]) == 3
    assert compare_namespaces(local.namespace, emulated.namespace) == []


def test_session_body_with_comments_and_blank_lines_between_traces():
    source = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.session(remote=True):
            # the clean run

            with model.trace("The Eiffel Tower is in"):
                clean = model.transformer.h[5].output[:, -1]

            # patch it into the corrupted run
            # (comments and blank lines shift the unparsed body's line numbers)

            with model.trace("The Colosseum is in"):
                model.transformer.h[5].output[:, -1] = clean
                patched = model.output.logits[0, -1].argmax().item().save()
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert len(emulated.requests) == 1
    assert emulated.requests[0].forward_passes == 2
    assert isinstance(emulated.namespace["patched"], int)
    assert compare_namespaces(local.namespace, emulated.namespace) == []
    assert "clean" not in emulated.namespace  # not saved: stays on the server


def test_print_inside_a_remote_block_is_a_server_log_line():
    source = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        print("client before")
        with model.trace("Hello world", remote=True):
            hidden = model.transformer.h[0].output
            print("server says", tuple(hidden.shape))
        print("client after")
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert emulated.stdout == "client before\nclient after\n"
    n = len(build_tokenizer()("Hello world")["input_ids"])
    assert emulated.requests[0].logs == [f"server says (1, {n}, 64)"]
    assert f"server says (1, {n}, 64)" in local.stdout  # locally it is ordinary output


def test_download_bytes_full_logits_versus_argmax():
    full = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.trace("The Eiffel Tower is in the city of", remote=True):
            logits = model.output.logits.save()
        top = logits[0, -1].argmax().item()
        """
    )
    reduced = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.trace("The Eiffel Tower is in the city of", remote=True):
            top = model.output.logits[0, -1].argmax().item().save()
        """
    )
    big = run_script(full, mode="emulated")
    small = run_script(reduced, mode="emulated")
    assert big.error is None and small.error is None
    saved = big.requests[0].saved["logits"]
    assert saved["type"] == "Tensor" and saved["dtype"] == "float32"
    assert saved["shape"][0] == 1 and saved["shape"][2] == 512
    numel = saved["numel"]
    assert numel == saved["shape"][1] * 512
    raw = big.requests[0].download_raw_bytes
    assert numel * 4 < raw < numel * 4 + 4096  # the tensor plus torch.save's envelope
    assert small.requests[0].download_raw_bytes < 4096
    assert small.requests[0].saved == {"top": {"type": "int", "value": repr(small.namespace["top"])}}
    assert small.download_bytes * 10 < big.download_bytes
    assert big.namespace["top"] == small.namespace["top"]


def test_saving_a_view_ships_its_whole_storage():
    view = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.trace("The Eiffel Tower is in the city of", remote=True):
            last = model.output.logits[0, -1].save()
        """
    )
    compact = view.replace("[0, -1].save()", "[0, -1].clone().save()")
    whole = run_script(view, mode="emulated").requests[0]
    small = run_script(compact, mode="emulated").requests[0]
    assert whole.saved["last"]["shape"] == small.saved["last"]["shape"] == [512]
    assert whole.download_raw_bytes > small.download_raw_bytes + 4 * 512 * 3


@pytest.mark.parametrize("mode", ["local", "emulated"])
def test_forward_passes_are_counted(mode):
    loop = script(
        f"""
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        for prompt in {PROMPTS}:
            with model.trace(prompt, remote=True):
                out = model.output.logits.save()
        """
    )
    one = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.trace("Hello world", remote=True):
            out = model.output.logits.save()
        """
    )
    generate = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.generate("Hello world", max_new_tokens=3, remote=True) as tracer:
            ids = tracer.result.save()
        """
    )
    counts = {}
    for name, source in [("loop", loop), ("one", one), ("generate", generate)]:
        result = run_script(source, mode=mode)
        assert result.error is None, result.traceback
        counts[name] = (result.forward_passes, result.layer_calls)
    assert counts == {"loop": (3, 36), "one": (1, 12), "generate": (3, 36)}
    if mode == "emulated":
        record = run_script(generate, mode=mode).requests[0]
        assert record.kind == "generate" and record.forward_passes == 3


def test_skipped_layers_are_not_counted_as_evaluations():
    source = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.session(remote=True):
            with model.trace("Hello world"):
                cached = model.transformer.h[3].output
            with model.trace("Hello world"):
                for i in range(4):
                    model.transformer.h[i].skip(cached)
                out = model.output.logits.save()
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert local.forward_passes == emulated.forward_passes == 2
    assert local.layer_calls == emulated.layer_calls == 12 + 8
    assert compare_namespaces(local.namespace, emulated.namespace) == []


def test_llama_and_gpt2_families_both_run():
    llama = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("meta-llama/Llama-3.1-8B")
        with model.session(remote=True):
            norms = list().save()
            with model.trace("The Eiffel Tower is in"):
                for layer in model.model.layers:
                    norms.append(layer.output[0, -1].norm())
                top = model.lm_head.output[0, -1].argmax().save()
        """
    )
    gpt2 = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2-medium")
        with model.session(remote=True):
            norms = list().save()
            with model.trace("The Eiffel Tower is in"):
                for layer in model.transformer.h:
                    norms.append(layer.output[0, -1].norm())
                top = model.lm_head.output[0, -1].argmax().save()
        """
    )
    for source, layers, name in [(llama, 32, "meta-llama/Llama-3.1-8B"), (gpt2, 24, "gpt2-medium")]:
        local, emulated = both(source)
        assert emulated.error is None, emulated.traceback
        assert len(emulated.namespace["norms"]) == layers
        assert emulated.requests[0].layer_calls == layers
        assert emulated.requests[0].model == name
        assert compare_namespaces(local.namespace, emulated.namespace) == []


def test_helper_function_defined_in_the_script_runs_on_the_server():
    source = script(
        f"""
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")

        def last_token_top(model, k=2):
            return model.output.logits[0, -1].topk(k).indices

        tops = []
        for prompt in {PROMPTS}:
            with model.trace(prompt, remote=True):
                top = last_token_top(model).save()
            tops.append(top.tolist())
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert len(emulated.namespace["tops"]) == 3
    assert all(len(t) == 2 for t in emulated.namespace["tops"])
    assert compare_namespaces(local.namespace, emulated.namespace) == []


def test_a_gradient_taken_in_a_trace_runs_locally_and_remotely():
    # a model from_pretrained leaves its parameters requiring grad: so must the tiny one, or
    # `metric.backward()` raises and verify blames the script (trial48 min_01)
    source = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.trace("When Mary and John went to the store", remote=True):
            h = model.transformer.h[1].output
            logits = model.lm_head.output
            metric = logits[0, -1, 5] - logits[0, -1, 7]
            with metric.backward():
                g = h.grad.save()
        total = float(g.abs().sum())
        """
    )
    local, emulated = both(source)
    assert emulated.error is None, emulated.traceback
    assert local.namespace["total"] > 0
    assert compare_namespaces(local.namespace, emulated.namespace) == []


def test_an_error_that_names_a_real_model_s_width_says_the_tiny_one_differs():
    # `torch.ones(768)` is GPT-2's width, and not its tiny stand-in's (trial48 min_14): the run
    # fails for the tiny model alone, and the warning says so, instead of only blaming the script
    source = script(
        """
        import torch
        from nnsight import LanguageModel
        model = LanguageModel("openai-community/gpt2")
        with model.trace("The movie was", remote=True):
            model.transformer.h[1].output[:, -1] += torch.ones(768)
            tok = model.lm_head.output[0, -1].argmax().save()
        """
    )
    run = run_script(source, mode="local")
    assert run.error is not None and "768" in run.error
    assert any(w.startswith("the error names 768, the width of openai-community/gpt2; the tiny model")
               for w in run.warnings), run.warnings
    fine = run_script(source.replace("768", "model.config.hidden_size"), mode="local")
    assert fine.error is None and not fine.warnings, fine.error


def test_stateful_local_helper_module_is_not_mutated_on_the_client():
    helper = "calls = []\n\ndef record(value):\n    calls.append(value)\n    return len(calls)\n"
    source = script(
        f"""
        import nnsight
        from nnsight import LanguageModel
        import tracker
        model = LanguageModel("gpt2")
        for prompt in {PROMPTS}:
            with model.trace(prompt, remote=True):
                n = nnsight.save(tracker.record(model.output.logits[0, -1].argmax().item()))
        calls = len(tracker.calls)
        """
    )
    local, emulated = both(source, extra_files={"tracker.py": helper})
    assert emulated.error is None, emulated.traceback
    assert local.namespace["calls"] == 3 and local.namespace["n"] == 3
    # Shipped by value: each request records on its own fresh copy of the module.
    assert emulated.namespace["calls"] == 0 and emulated.namespace["n"] == 1
    assert "tracker" not in sys.modules  # the run's helper modules do not leak


def test_a_helper_module_outside_the_run_directory_is_imported_afresh_by_each_run(tmp_path):
    # A fresh process imports the script's own modules anew; verify's runs share a process,
    # so a list such a module fills must not grow from one run to the next (it read 1, 2, 3).
    (tmp_path / "state_keeper.py").write_text("CALLS = []\n\ndef record(x):\n    CALLS.append(x)\n")
    source = script(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import state_keeper
        state_keeper.record(1)
        calls = len(state_keeper.CALLS)
        """
    )
    counts = [run_script(source, mode="local").namespace["calls"] for _ in range(2)]
    assert counts == [1, 1]
    assert "state_keeper" not in sys.modules


def test_the_modules_a_fresh_client_ships_by_value_are_those_nnsight_finds_local(tmp_path, monkeypatch):
    # The emulation reads the installed distributions once per process; what it registers
    # must still be what nnsight's own scan calls local, for a sys.path the process had not seen.
    from cloudpickle.cloudpickle import _PICKLE_BY_VALUE_MODULES
    from nnsight import ndif

    from ndif_opt.verify.emulation_parts import pull_env

    (tmp_path / "probe_helpers.py").write_text("X = 1\n")
    (tmp_path / "probe_package").mkdir()
    (tmp_path / "probe_package" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = {name for name, version in ndif.get_local_env()["packages"].items() if version == "local"}
    monkeypatch.setattr(ndif, "_PULLED_ENV", False)
    before = set(_PICKLE_BY_VALUE_MODULES)
    try:
        pull_env(ndif)
        registered = set(_PICKLE_BY_VALUE_MODULES) - before
    finally:
        _PICKLE_BY_VALUE_MODULES.clear()
        _PICKLE_BY_VALUE_MODULES.update(before)
    assert {"probe_helpers", "probe_package"} <= expected
    assert registered == expected - before


def test_nested_remote_trace_inside_a_remote_session_fails_like_a_server():
    source = script(
        """
        from nnsight import LanguageModel
        model = LanguageModel("gpt2")
        with model.session(remote=True):
            with model.trace("Hello world", remote=True):
                out = model.output.logits.save()
        """
    )
    local, emulated = both(source)
    assert "out" in local.namespace
    assert emulated.error is not None
    assert emulated.error.startswith("RemoteError: NestedRemoteRequestError")
    assert len(emulated.requests) == 1
    assert emulated.requests[0].error.startswith("NestedRemoteRequestError")
    assert "out" not in emulated.namespace


def test_emulated_ndif_as_a_context_manager(gpt2):
    from nnsight.modeling.mixins.remotable import Remotable

    original = Remotable.__dict__["_remote_backend"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: a contended OpenMP pool is very slow
    with EmulatedNDIF() as ndif:
        results = []
        with gpt2.trace("Hello world", remote=True):
            logits = gpt2.output.logits.save()
            results.append(logits)
        with gpt2.trace("Hello world", remote="https://ndif.example"):
            again = gpt2.output.logits.save()
    torch.set_num_threads(threads)
    assert Remotable.__dict__["_remote_backend"] is original
    assert results == []
    n = len(build_tokenizer()("Hello world")["input_ids"])
    assert torch.equal(logits, again) and logits.shape == (1, n, 512)
    assert [type(r) for r in ndif.requests] == [RequestRecord, RequestRecord]
    assert ndif.requests[0].saved["logits"]["shape"] == [1, n, 512]
    json.dumps([r.to_dict() for r in ndif.requests])


def test_script_errors_and_files_are_captured():
    source = script(
        """
        import json
        with open("results.json", "w") as f:
            json.dump({"answer": 42}, f)
        value = 1
        raise ValueError("boom")
        """
    )
    result = run_script(source, mode="local")
    assert result.error == "ValueError: boom"
    assert "ValueError" in result.traceback
    assert result.files == {"results.json": b'{"answer": 42}'}
    assert result.namespace == {"value": 1}
    assert run_script("!pip install nnsight\n", mode="local").error.startswith("SyntaxError")
    args = run_script("import os, sys\nargs = sys.argv[1:]\nhere = os.getcwd()\n", argv=["--n", "3"])
    assert args.namespace["args"] == ["--n", "3"] and args.error is None
    assert args.namespace["here"] != str(Path.cwd())


# ---------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------


def test_compare_namespaces():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    expected = {"t": t, "xs": [1, 2.5, "a"], "d": {"k": t[0]}, "f": print, "__name__": "x"}
    assert compare_namespaces(expected, {"t": t.clone(), "xs": [1, 2.5, "a"], "d": {"k": t[0].clone()}}) == []
    nudged = t.clone()
    nudged[1, 2] += 0.5
    assert compare_namespaces({"t": t}, {"t": nudged}) == [
        "t: Tensor values differ (max abs diff 0.5 at (1, 2); 1 of 6 elements differ)"
    ]
    assert compare_namespaces({"t": t}, {"t": nudged}, atol=0.6) == []
    assert compare_namespaces({"t": t}, {"t": nudged}, rtol=0.1) == []
    assert compare_namespaces({"t": t}, {"t": nudged}, rtol=0.05) != []
    assert compare_namespaces({"t": t}, {"t": t.double()}) == ["t: dtype torch.float32 != torch.float64"]
    assert compare_namespaces({"t": t}, {"t": t.T}) == ["t: shape [2, 3] != [3, 2]"]
    assert compare_namespaces({"x": 1}, {"x": 1.0}) == ["x: type int != float (expected 1, got 1.0)"]
    assert compare_namespaces({"x": 0.1}, {"x": 0.1 + 1e-12}, rtol=1e-9) == []
    assert compare_namespaces({"a": [t]}, {"b": []}) == [
        "a: missing (expected list of 1)",
        "b: unexpected name (list of 0)",
    ]
    assert compare_namespaces({"a": 1}, {"a": 1, "tmp": 2}, ignore_extra=True) == []
    assert compare_namespaces({"n": float("nan")}, {"n": float("nan")}) == []


# ---------------------------------------------------------------------------
# verify_sources
# ---------------------------------------------------------------------------


NAIVE = script(
    f"""
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    results = []
    for prompt in {PROMPTS}:
        with model.trace(prompt, remote=True):
            results.append(model.output.logits[0, -1].argmax().save())
    print([int(r) for r in results])
    """
)

OPTIMIZED = script(
    f"""
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    with model.session(remote=True):
        results = list().save()
        for prompt in {PROMPTS}:
            with model.trace(prompt):
                results.append(model.output.logits[0, -1].argmax())
    print([int(r) for r in results])
    """
)


def test_verify_sources_reports_fix_and_costs():
    report = verify_sources(NAIVE, OPTIMIZED, ignore_missing=["prompt"])
    assert isinstance(report, VerifyReport)
    assert report.intended_ok, report.mismatches
    assert report.original_remote_differs
    assert "results: expected list of 3, got list of 0" in report.original_remote_mismatches
    assert (report.before.requests, report.after.requests) == (3, 1)
    assert (report.before.forward_passes, report.after.forward_passes) == (3, 3)
    assert report.local_forward_passes == 3
    assert report.after.download_bytes > 0 and report.before.upload_bytes > report.after.upload_bytes
    assert report.errors == {"local": None, "original": None, "optimized": None}
    text = report.to_text()
    assert text.startswith("verify: OK")
    assert "requests" in text and "3 -> 1" in text
    json.dumps(report.to_dict())


def test_verify_sources_flags_a_wrong_optimization():
    wrong = OPTIMIZED.replace("argmax()", "argmin()")
    report = verify_sources(NAIVE, wrong, ignore_missing=["prompt"])
    assert not report.intended_ok
    assert any(m.startswith("results[") for m in report.mismatches)
    assert any(m.startswith("stdout") for m in report.mismatches)
    assert report.to_text().startswith("verify: MISMATCH")


def test_what_differs_between_two_runs_of_the_original_is_not_compared():
    # a value of the client's that no run can reproduce (here the OS's random bytes; in
    # trial48 a nondeterministic least-squares solve): two local runs of the original differ
    # on it, so the optimized run cannot be held to it; every other value still is
    drawn = "import os\nnonce = os.urandom(8).hex()\n"
    report = verify_sources(NAIVE + drawn, OPTIMIZED + drawn, ignore_missing=["prompt"])
    assert report.intended_ok, report.to_text()
    assert report.unstable == ("nonce",)
    assert "not compared: nonce (each differs between two runs of the original" in report.to_text()
    wrong = OPTIMIZED.replace("argmax()", "argmin()") + drawn
    report = verify_sources(NAIVE + drawn, wrong, ignore_missing=["prompt"])
    assert not report.intended_ok and report.unstable == ("nonce",)
    assert any(m.startswith("results[") for m in report.mismatches), report.mismatches


# a print inside a remote trace is a line of the server's log, not of your stdout: the
# original itself differs on NDIF; the rewrite keeps that difference and adds none
PRINTS_IN_ITS_TRACE = script(
    f"""
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    for prompt in {PROMPTS}:
        with model.trace(prompt, remote=True):
            print("width", model.transformer.h[0].output.shape[-1])
            norm = model.transformer.h[0].output.norm().save()
    print(round(norm.item(), 3))
    """
)
PRINTS_HOISTED = script(
    f"""
    from nnsight import LanguageModel
    model = LanguageModel("gpt2")
    with model.session(remote=True):
        for prompt in {PROMPTS}:
            with model.trace(prompt):
                print("width", model.transformer.h[0].output.shape[-1])
                norm = model.transformer.h[0].output.norm()
        norm = norm.save()
    print(round(norm.item(), 3))
    """
)


def test_differences_the_original_shows_on_ndif_too_are_the_originals():
    report = verify_sources(PRINTS_IN_ITS_TRACE, PRINTS_HOISTED, ignore_missing=["prompt"])
    assert report.status.value == "original-wrong" and not report.intended_ok, report.to_text()
    assert report.mismatches and all(m.startswith("stdout") for m in report.mismatches), report.mismatches
    assert report.to_text().startswith("verify: ORIGINAL WRONG — "), report.to_text()


@pytest.mark.parametrize("breaking", [
    ("norm = norm.save()", "norm = (norm + 1).save()"),  # a value the original gets right remotely
    ("print(round(norm.item(), 3))", "print(round(norm.item(), 3), 0)"),  # its stdout, otherwise wrong
], ids=["other-value", "same-subject"])
def test_a_difference_the_rewrite_adds_is_a_mismatch_beside_the_originals(breaking):
    report = verify_sources(PRINTS_IN_ITS_TRACE, PRINTS_HOISTED.replace(*breaking), ignore_missing=["prompt"])
    assert report.status.value == "mismatch", report.to_text()
    assert report.original_remote_differs


def test_import_error_without_nnsight_is_clear():
    code = (
        "import sys; sys.modules['nnsight'] = None\n"
        "try:\n"
        "    import ndif_opt.verify\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert "install the verify extra: pip install torch==2.13.0 'ndif-opt[verify]'" in out.stdout, out.stderr


SEEDED_DRAW = """
import torch
from nnsight import LanguageModel

torch.manual_seed(0)
model = LanguageModel("openai-community/gpt2")
scores = []
for trial in range(2):
    noise = torch.randn(model.config.n_embd)
    with model.trace("The Eiffel Tower is in", remote=True):
        model.transformer.wte.output[0, :2] += noise
        p = model.lm_head.output[0, -1].softmax(-1).max().save()
    scores.append(p.item())
"""

# the same draws moved into the session: on NDIF they come from the server's generator,
# where the client's seed does not apply
SEEDED_DRAW_ON_THE_SERVER = """
import torch
from nnsight import LanguageModel

torch.manual_seed(0)
model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    scores = list().save()
    for trial in range(2):
        noise = torch.randn(model.config.n_embd)
        with model.trace("The Eiffel Tower is in"):
            model.transformer.wte.output[0, :2] += noise
            p = model.lm_head.output[0, -1].softmax(-1).max()
        scores.append(p.item())
"""


def test_the_server_draws_from_its_own_random_generator():
    report = verify_sources(script(SEEDED_DRAW), script(SEEDED_DRAW_ON_THE_SERVER), filename="seeded.py",
                            atol=1e-6, rtol=1e-6, ignore_missing=("noise", "p", "trial"))
    assert not report.intended_ok, report.to_text()
    assert any("scores" in line for line in report.to_text().splitlines() if "mismatch" in line), report.to_text()
    # and the client's stream is the client's: the draws it makes itself are unchanged
    again = verify_sources(script(SEEDED_DRAW), script(SEEDED_DRAW), filename="seeded.py", atol=0.0, rtol=0.0)
    assert again.intended_ok, again.to_text()


def test_a_namedtuple_class_made_in_each_run_compares_by_its_fields():
    """Each run defines the script's namedtuple class anew: two classes of one name and fields
    hold equal rows; other fields, or other values, still differ."""
    from collections import namedtuple

    first, second, other = namedtuple("Row", ["prompt", "top"]), namedtuple("Row", ["prompt", "top"]), \
        namedtuple("Row", ["prompt", "rank"])
    assert compare_namespaces({"rows": [first("a", 1)]}, {"rows": [second("a", 1)]}) == []
    assert compare_namespaces({"rows": [first("a", 1)]}, {"rows": [second("a", 2)]}) != []
    assert compare_namespaces({"rows": [first("a", 1)]}, {"rows": [other("a", 1)]}) != []
