"""The static cost model: requests, upload, download, forward passes, compute and time,
per script and per pass; trip counts, prompt lengths, model configs, the one-hour limit."""

from __future__ import annotations

import json
import math
import textwrap

import libcst as cst
import pytest

from ndif_opt import optimize
from ndif_opt.analysis.facts import analyze
from ndif_opt.cost.constants import RESULT_BASE, TENSOR_OVERHEAD
from ndif_opt.cost.model_registry import dims_for
from ndif_opt.cost_model import (
    UNKNOWN_TRIPS,
    assumptions,
    estimate,
    explain,
    session_budget,
)
from ndif_opt.frontends.config import ConfigError, load_model_config, load_options
from ndif_opt.options import Options
from ndif_opt.types import Count, UnknownLoop, is_known

HEAD = 'from nnsight import LanguageModel\nimport torch\nmodel = LanguageModel("{repo}")\n'


def script(body: str, repo: str = "meta-llama/Llama-3.1-8B") -> str:
    return HEAD.format(repo=repo) + textwrap.dedent(body)


def run(source: str, **cost):
    return explain(analyze(cst.parse_module(source)), Options(cost=cost))


def tokens(text: str) -> int:
    return max(1, round(len(text) / 4))


def framing(name: str) -> int:
    """What a result with one saved tensor under ``name`` adds beyond the tensor's data."""
    return RESULT_BASE + TENSOR_OVERHEAD + len(name) + 5


# -- acceptance: 64 prompts over Llama-3.1-70B ---------------------------------------------

SUBJECTS = ["France", "Japan", "Italy", "Spain", "Germany", "Canada", "Brazil", "Egypt"]
TEMPLATES = [
    "The capital of {} is", "The language spoken in {} is", "The currency of {} is",
    "The largest city in {} is", "A famous dish from {} is", "The flag of {} is",
    "The national sport of {} is", "The longest river in {} is",
]
PROMPTS = [t.format(s) for t in TEMPLATES for s in SUBJECTS]
NAIVE_70B = script(
    "PROMPTS = [\n" + "".join(f"    {p!r},\n" for p in PROMPTS) + "]\n"
    + """
answers = {}
for prompt in PROMPTS:
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    answers[prompt] = logits[0, -1].argmax().item()

print(answers)
""",
    repo="meta-llama/Llama-3.1-70B",
)


def test_64_prompts_on_70b_go_from_64_requests_of_full_logits_to_one_small_result():
    assert len(PROMPTS) == 64
    result = optimize(NAIVE_70B)
    before, after = result.costs[0].before, result.costs[-1].after
    assert (before.requests, after.requests) == (64, 1)
    logits = sum(tokens(p) * 128_256 * 2 for p in PROMPTS)  # [1, tokens, vocab] bf16 each
    assert before.download_bytes == logits + 64 * framing("logits")
    assert before.download_bytes > 100e6
    assert after.download_bytes < 10_000
    assert "argmax" in result.code and "logits = model.lm_head.output.save()" not in result.code
    assert before.forward_passes == after.forward_passes == 64
    assert before.seconds > 64 * 2.0 > after.seconds


# -- requests and trip counts ----------------------------------------------------------------


@pytest.mark.parametrize(
    "loop, trips",
    [
        ("for i in range(5):", 5),
        ("for i in range(2, 12, 3):", 4),
        ("for i in range(N):", 7),
        ("for i in range(N * 2 - 1):", 13),
        ("for p in ['a', 'b', 'c']:", 3),
        ("for i in range(len(ITEMS)):", 4),
        ("for i, x in enumerate(ITEMS):", 4),
        ("for x, y in zip(ITEMS, range(10)):", 4),
        ("for i in range(len(model.model.layers)):", 32),
        ("for layer in model.model.layers:", 32),
        ("for i in range(model.config.num_hidden_layers):", 32),
        ("for i in range(0, len(model.model.layers), 8):", 4),
        ("for name, prompt in PROMPTS.items():", 2),
        ("for name in PROMPTS:", 2),
        ("for prompt in PROMPTS.values():", 2),
    ],
)
def test_trip_counts(loop, trips):
    source = script(
        f"""\
        N = 7
        ITEMS = [1.0, 2.0, 3.0, 4.0]
        PROMPTS = {{"paris": "The Eiffel Tower is in", "rome": "The Colosseum is in"}}
        {loop}
            with model.trace("Hello world", remote=True):
                h = model.model.layers[0].output.save()
        """
    )
    estimate_ = run(source)
    assert estimate_.cost.requests == trips
    assert not estimate_.notes


def test_nested_loops_multiply():
    source = script(
        """\
        for layer in range(4):
            for scale in [0.5, 1.0, 2.0]:
                for _ in range(2):
                    with model.trace("Hello world", remote=True):
                        h = model.model.layers[layer].output.save()
        """
    )
    assert run(source).cost.requests == 24


def test_an_unknown_trip_count_stays_unknown():
    source = script(
        """\
        import sys
        for arg in sys.argv:
            with model.trace(arg, remote=True):
                h = model.model.layers[0].output.save()
        """
    )
    default = run(source)
    loop = UnknownLoop("for arg in sys.argv")
    n = Count.trips(loop)
    assert default.cost.requests == default.cost.forward_passes == n  # N, never a guessed 8
    assert default.cost.unknown_loops == (loop,)
    assert default.cost.download_bytes == n * default.cost.download_bytes.at(1)  # per iteration
    assert not any("assumed" in note and "sys.argv" in note for note in default.notes)
    assert any("`arg` is not a literal string" in note for note in default.notes)
    assert run(source, **{"unknown-trips": 3}).cost.requests == n  # a setting for plans only
    assert any("counted as N iterations" in line and f"taken as {UNKNOWN_TRIPS}" in line
               for line in assumptions(Options()))


def test_the_steps_of_tracer_iter_are_counted_from_its_index():
    # `tracer.iter[0:4]` runs its body at 4 steps of one request: the saves in it download 4
    # times, a known number (it was N, an unknown loop, and a ratio "(0.01 + 0.001·N)× more")
    def saved_per_step(index: str):
        source = script(
            f"""\
            with model.generate("Hello world", max_new_tokens=4, remote=True) as tracer:
                norms = list().save()
                for _ in tracer.iter{index}:
                    norms.append(model.model.layers[0].output[0, -1].norm())
            """
        )
        return run(source).cost

    four, one = saved_per_step("[0:4]"), saved_per_step("[2]")
    assert four.requests == one.requests == 1
    assert is_known(four.download_bytes) and is_known(one.download_bytes)
    assert four.download_bytes > one.download_bytes
    assert not four.unknown_loops


def test_a_same_file_function_counts_once_per_call():
    source = script(
        """\
        def probe(layer):
            with model.trace("Hello world", remote=True):
                h = model.model.layers[layer].output.save()
            return h

        def unused():
            with model.trace("Hello world", remote=True):
                h = model.model.layers[0].output.save()

        hs = []
        for layer in range(6):
            hs.append(probe(layer))
        """
    )
    found = run(source)
    assert found.cost.requests == 6  # six calls; the function no code calls costs nothing
    assert found.uncalled == {"unused": 1}
    assert any("no code here calls `unused`" in note and "a call sends 1 request" in note for note in found.notes)


def test_a_try_counts_what_a_run_without_failures_runs():
    source = script(
        """\
        try:
            with model.session(remote=True):
                for layer in range(4):
                    with model.trace("Hello world"):
                        h = model.model.layers[layer].output.save()
        except Exception:
            for layer in range(4):
                with model.trace("Hello world", remote=True):
                    h = model.model.layers[layer].output.save()
        else:
            with model.trace("Hello world", remote=True):
                last = model.model.layers[0].output.save()
        """
    )
    # the session and the `else:`; the handler runs only should the session fail
    assert run(source).cost.requests == 2


def test_a_session_is_one_request_and_local_traces_are_free():
    source = script(
        """\
        with model.trace("Hello world"):
            local = model.model.layers[0].output.save()
        with model.session(remote=True):
            out = list().save()
            for layer in range(32):
                with model.trace("Hello world"):
                    out.append(model.model.layers[layer].output[:, -1])
        """
    )
    cost = run(source).cost
    assert (cost.requests, cost.forward_passes) == (1, 32)
    # 32 × [1, 4096] bf16 plus framing
    assert cost.download_bytes == RESULT_BASE + 32 * (4096 * 2 + TENSOR_OVERHEAD + 1) + 4 + len("out") + 5


# -- download ------------------------------------------------------------------------------------


def test_saves_into_a_client_list_are_not_downloaded():
    # on NDIF the appends happen on the server's copy; only named saves come back
    source = script(
        """\
        results = []
        for layer in range(4):
            with model.trace("Hello world", remote=True):
                results.append(model.model.layers[layer].output.save())
        """
    )
    assert run(source).cost.download_bytes == 4 * RESULT_BASE


def test_a_name_saved_in_a_loop_downloads_its_last_value():
    source = script(
        """\
        with model.session(remote=True):
            for layer in range(32):
                with model.trace("Hello world"):
                    h = model.model.layers[layer].output.save()
        """
    )
    assert run(source).cost.download_bytes == tokens("Hello world") * 4096 * 2 + framing("h")


def test_views_compact_on_the_gpu_server_and_ship_their_storage_on_a_cpu_server():
    source = script(
        """\
        with model.trace("The Eiffel Tower is in the city of", remote=True):
            logits = model.lm_head.output
            last = logits[0, -1].save()
        """
    )
    n = tokens("The Eiffel Tower is in the city of")
    assert run(source).cost.download_bytes == 128_256 * 2 + framing("last")
    assert run(source, **{"view-storage": "storage"}).cost.download_bytes == n * 128_256 * 2 + framing("last")
    # a reduction makes a new tensor: no storage to ship
    reduced = source.replace("logits[0, -1].save()", "logits[0, -1].argmax().save()")
    assert run(reduced, **{"view-storage": "storage"}).cost.download_bytes == 8 + framing("last")


def test_prompt_tokens_override_and_lists_of_prompts():
    source = script(
        """\
        PROMPT = "Hello world"
        with model.trace(PROMPT, remote=True):
            h = model.model.layers[0].output.save()
        with model.trace(["a", "bb bb bb bb bb"], remote=True):
            g = model.model.layers[0].output.save()
        """
    )
    cost = run(source, **{"prompt-tokens": {"Hello world": 5, "a": 1, "bb bb bb bb bb": 6}}).cost
    assert cost.download_bytes == (5 * 4096 * 2 + framing("h")) + (2 * 6 * 4096 * 2 + framing("g"))


def test_each_prompt_of_a_loop_has_its_own_length():
    source = script(
        """\
        lengths = {}
        for prompt in ["a", "a much longer prompt than the first one"]:
            with model.trace(prompt, remote=True):
                h = model.model.layers[0].output.save()
        """
    )
    expected = sum(tokens(p) * 4096 * 2 + framing("h") for p in ["a", "a much longer prompt than the first one"])
    assert run(source).cost.download_bytes == expected


# -- forward passes, compute, time -----------------------------------------------------------


def test_invokes_of_one_trace_are_one_forward_pass():
    source = script(
        """\
        with model.trace(remote=True) as tracer:
            outs = list().save()
            for prompt in ["one two three", "four five six seven eight", "x"]:
                with tracer.invoke(prompt):
                    outs.append(model.lm_head.output[0, -1].argmax())
        """
    )
    estimate_ = run(source)
    assert estimate_.cost.forward_passes == 1
    params = dims_for("meta-llama/Llama-3.1-8B").n_params
    rows, padded = 3, tokens("four five six seven eight")
    assert estimate_.cost.compute_flops == pytest.approx(2 * params * rows * padded)


def test_generate_runs_max_new_tokens_passes():
    source = script(
        """\
        with model.generate("Once upon a time", max_new_tokens=12, remote=True):
            out = model.generator.output.save()
        """
    )
    cost = run(source).cost
    params = dims_for("meta-llama/Llama-3.1-8B").n_params
    assert cost.forward_passes == 12
    assert cost.compute_flops == pytest.approx(2 * params * (tokens("Once upon a time") + 11))
    assert cost.download_bytes == (tokens("Once upon a time") + 12) * 8 + framing("out")
    default = run(source.replace("max_new_tokens=12, ", "")).cost
    assert default.forward_passes == 20


@pytest.mark.parametrize("settings, passes", [
    ("dict(max_new_tokens=12, remote=True)", 12),
    ('{"max_new_tokens": 12, "remote": True}', 12),
    ("dict(remote=True)", 20),  # the default
])
def test_max_new_tokens_passed_through_a_dict_of_settings_is_read(settings, passes):
    source = script(
        f"""\
        settings = {settings}
        with model.generate("Once upon a time", **settings):
            out = model.generator.output.save()
        """
    )
    assert run(source).cost.forward_passes == passes


def test_server_time_is_memory_bound_for_small_batches():
    source = script(
        """\
        with model.trace("Hello world", remote=True):
            h = model.lm_head.output[0, -1].argmax().save()
        """,
        repo="meta-llama/Llama-3.1-405B",
    )
    estimate_ = run(source)
    (request,) = estimate_.requests
    dims = dims_for("meta-llama/Llama-3.1-405B")
    assert request.server_seconds == pytest.approx(dims.n_params * 2 / 2e12)
    assert estimate_.cost.seconds == pytest.approx(
        2.0 + request.upload_bytes / 20e6 + request.download_bytes / 50e6 + request.server_seconds, abs=1e-3
    )


# -- decoder-layer evaluations -----------------------------------------------------------------


def test_every_forward_pass_evaluates_every_layer():
    source = script(
        """\
        with model.trace("Hello world", remote=True):
            h = model.lm_head.output[0, -1].argmax().save()
        with model.generate("Once upon a time", max_new_tokens=5, remote=True):
            out = model.generator.output.save()
        """
    )
    cost = run(source).cost
    assert (cost.forward_passes, cost.layer_evaluations) == (6, 6 * 32)


SKIPPED_SWEEP = script(
    """\
    LAYER = 12
    with model.session(remote=True):
        probabilities = dict().save()
        _ndif_cache = list()
        with model.trace("I think this movie is") as _ndif_tracer:
            for _ndif_i in range(LAYER):
                _ndif_cache.append(model.model.layers[_ndif_i].output)
            _ndif_tracer.stop()
        for coefficient in [0.0, 1.0, 2.0, 4.0, 8.0, 16.0]:
            with model.trace("I think this movie is"):
                for _ndif_i in range(LAYER):
                    model.model.layers[_ndif_i].skip(_ndif_cache[_ndif_i])
                model.model.layers[LAYER].output = model.model.layers[LAYER].output * coefficient
                logits = model.lm_head.output
            probabilities[coefficient] = logits[0, -1].softmax(dim=-1)[0].item()
    """
)


def test_skipped_layers_and_layers_after_stop_are_not_evaluated():
    estimate_ = run(SKIPPED_SWEEP)
    # the caching trace stops after layer 11; each of the 6 iterations skips layers 0..11
    assert estimate_.cost.forward_passes == 7
    assert estimate_.cost.layer_evaluations == 12 + 6 * (32 - 12)


def test_compute_scales_with_the_layers_evaluated():
    from ndif_opt.cost.model_registry import estimate_n_params

    dims = dims_for("meta-llama/Llama-3.1-8B")
    per_layer = (estimate_n_params(dims) - estimate_n_params(dims.replace(n_layers=0))) / 32
    seq = tokens("I think this movie is")
    skipped = run(SKIPPED_SWEEP).cost.compute_flops
    full = run(SKIPPED_SWEEP.replace("_ndif_tracer.stop()", "pass").replace(
        "model.model.layers[_ndif_i].skip(_ndif_cache[_ndif_i])", "pass")).cost.compute_flops
    # 20 layers after the stop, and 12 layers in each of 6 iterations, are not computed
    assert full - skipped == pytest.approx(2 * seq * per_layer * (20 + 6 * 12), rel=1e-9)


@pytest.mark.parametrize(
    "read, layers",
    [
        ("model.model.layers[5].output", 6),
        ("model.model.layers[5].input", 5),
        ("model.model.layers[5].mlp.output", 6),
        ("model.model.layers[-1].output", 32),
        ("model.model.embed_tokens.output", 0),
        ("model.lm_head.output", 32),
    ],
)
def test_stop_ends_the_forward_pass_at_the_last_module_read(read, layers):
    source = script(
        f"""\
        with model.trace("Hello world", remote=True) as tracer:
            h = {read}.save()
            tracer.stop()
        """
    )
    cost = run(source).cost
    assert (cost.forward_passes, cost.layer_evaluations) == (1, layers)


def test_a_sweep_that_skips_more_layers_each_iteration_is_counted_per_iteration():
    source = script(
        """\
        with model.session(remote=True):
            diffs = list().save()
            for layer in range(4):
                with model.trace("Hello world"):
                    for i in range(layer):
                        model.model.layers[i].skip(model.model.layers[i].output)
                    diffs.append(model.lm_head.output[0, -1, 0].item())
        """
    )
    estimate_ = run(source)
    assert estimate_.cost.layer_evaluations == 4 * 32 - (0 + 1 + 2 + 3)
    assert not estimate_.notes  # range(layer) is known in every iteration


def test_range_zero_runs_no_iterations():
    source = script(
        """\
        for i in range(0):
            with model.trace("Hello world", remote=True):
                h = model.lm_head.output.save()
        """
    )
    assert run(source).cost.requests == 0


# -- invokes: every invoke's tokens ---------------------------------------------------------


def test_chunked_invokes_count_every_invoke_and_the_shorter_last_chunk():
    source = script(
        """\
        with model.session(remote=True):
            tops = list().save()
            _ndif_items = list(range(5))
            for _ndif_start in range(0, len(_ndif_items), 2):
                with model.trace() as tracer:
                    for i in _ndif_items[_ndif_start : _ndif_start + 2]:
                        with tracer.invoke(f"Number {i} is the best"):
                            tops.append(model.lm_head.output[0, -1].argmax().item())
        """
    )
    estimate_ = run(source)
    params = dims_for("meta-llama/Llama-3.1-8B").n_params
    assert (estimate_.cost.forward_passes, estimate_.cost.layer_evaluations) == (3, 3 * 32)
    # 2 + 2 + 1 rows of one f-string prompt each, evaluated per iteration
    assert estimate_.cost.compute_flops == pytest.approx(2 * params * 5 * tokens("Number 0 is the best"))
    assert not estimate_.notes


def test_a_value_inside_an_invoke_has_the_invoke_rows():
    source = script(
        """\
        with model.trace(remote=True) as tracer:
            with tracer.invoke(["one two three", "four five"]):
                pair = model.model.layers[3].output.save()
            with tracer.invoke("a much longer prompt than the others"):
                single = model.model.layers[3].output.save()
        """
    )
    estimate_ = run(source)
    seq = tokens("a much longer prompt than the others")  # every row is padded to it
    (request,) = estimate_.requests
    assert request.saved["pair"] == 2 * seq * 4096 * 2 + TENSOR_OVERHEAD
    assert request.saved["single"] == 1 * seq * 4096 * 2 + TENSOR_OVERHEAD
    params = dims_for("meta-llama/Llama-3.1-8B").n_params
    assert estimate_.cost.compute_flops == pytest.approx(2 * params * 3 * seq)


def test_views_of_one_batch_output_ship_its_storage_once_on_a_cpu_server():
    source = script(
        """\
        PROMPTS = ["one two three", "four five six seven", "eight", "nine ten"]
        with model.trace(remote=True) as tracer:
            last = list().save()
            for prompt in PROMPTS:
                with tracer.invoke(prompt):
                    last.append(model.lm_head.output[0, -1])
        """
    )
    seq = tokens("four five six seven")
    compact = run(source).cost.download_bytes
    assert compact == RESULT_BASE + len("last") + 5 + 4 + 4 * (128_256 * 2 + TENSOR_OVERHEAD + 1)
    storage = run(source, **{"view-storage": "storage"}).cost.download_bytes
    # every view is of the [4, seq, vocab] output of the batch: written once
    assert storage == pytest.approx(RESULT_BASE + 4 * seq * 128_256 * 2 + TENSOR_OVERHEAD, abs=300)


# -- upload ------------------------------------------------------------------------------------


def test_client_tensors_are_uploaded_by_every_request_that_reads_them():
    source = script(
        """\
        steering = torch.zeros(4096)
        for scale in [1.0, 2.0, 4.0]:
            with model.trace("Hello world", remote=True):
                model.model.layers[8].output[:] = model.model.layers[8].output + scale * steering
                top = model.lm_head.output[0, -1].argmax().save()
        """
    )
    with_tensor = run(source).cost.upload_bytes
    without = run(source.replace("+ scale * steering", "* scale")).cost.upload_bytes
    assert with_tensor - without == pytest.approx(3 * (4096 * 4 + 400), abs=3 * 8)


def test_upload_grows_with_the_module_tree():
    small = run(script('with model.trace("Hi", remote=True):\n    h = model.lm_head.output.save()\n',
                       repo="openai-community/gpt2")).cost.upload_bytes
    large = run(script('with model.trace("Hi", remote=True):\n    h = model.lm_head.output.save()\n',
                       repo="meta-llama/Llama-3.1-70B")).cost.upload_bytes
    assert 2_000 < small < 4_000 and 7_000 < large < 10_000  # measured: 2.5 KB and 8.3 KB


# -- per pass -------------------------------------------------------------------------------------


def test_per_pass_costs_chain(tmp_path):
    result = optimize(NAIVE_70B)
    rows = result.costs
    for previous, current in zip(rows, rows[1:]):
        assert previous.after == current.before
    hoisting = next(pc for pc in rows if pc.pass_id == "session-hoisting")
    assert (hoisting.before.requests, hoisting.after.requests) == (64, 1)
    assert hoisting.after.upload_bytes < hoisting.before.upload_bytes / 30


# -- model dimensions: registry, overrides, config.json ----------------------------------------------

LLAMA_CONFIG = {
    "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "vocab_size": 1000,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
    "torch_dtype": "float32", "tie_word_embeddings": False,
}


def test_model_config_applies_to_every_model_and_sets_the_dtype(tmp_path):
    source = script(
        """\
        other = LanguageModel("openai-community/gpt2")
        with model.trace("Hello world", remote=True):
            a = model.lm_head.output.save()
        with other.trace("Hello world", remote=True):
            b = other.lm_head.output.save()
        """
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_CONFIG))
    config = load_model_config(path)
    cost = run(source, **{"model-config": config}).cost
    n = tokens("Hello world")
    assert cost.download_bytes == (n * 1000 * 4 + framing("a")) + (n * 1000 * 4 + framing("b"))
    assert any("config.json (float32)" in a for a in assumptions(Options(cost={"model-config": config})))
    bf16 = dict(LLAMA_CONFIG, torch_dtype="bfloat16")
    assert run(source, **{"model-config": bf16}).cost.download_bytes == cost.download_bytes - 2 * n * 1000 * 2


def test_model_config_from_pyproject_and_errors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ndif-opt.cost]\nmodel-config = "config.json"\nsession-limit = 1800\nview-storage = "storage"\n'
    )
    options = load_options(tmp_path / "pyproject.toml")
    assert options.cost["model-config"]["hidden_size"] == 256
    assert options.cost["session-limit"] == 1800.0 and options.cost["view-storage"] == "storage"
    assert session_budget(options) == pytest.approx(1800 * 0.75)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_model_config(tmp_path / "bad.json")
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a usable model config"):
        load_model_config(tmp_path / "empty.json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_model_config(tmp_path / "missing.json")
    (tmp_path / "pyproject.toml").write_text('[tool.ndif-opt.cost]\nview-storage = "gpu"\n')
    with pytest.raises(ConfigError, match="'compact' or 'storage'"):
        load_options(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text("[tool.ndif-opt.cost]\nsession-margin = 2\n")
    with pytest.raises(ConfigError, match="between 0 and 0.95"):
        load_options(tmp_path / "pyproject.toml")


def test_pyproject_model_overrides_apply():
    source = script('with model.trace("Hello world", remote=True):\n    h = model.lm_head.output.save()\n')
    bf16 = run(source).cost.download_bytes
    fp32 = run(source, models={"meta-llama/Llama-3.1-8B": {"dtype": "float32"}}).cost.download_bytes
    n = tokens("Hello world")
    assert fp32 - bf16 == n * 128_256 * 2


# -- the one-hour limit -------------------------------------------------------------------------------


def test_sessions_over_the_limit_are_warned_about():
    source = script(
        """\
        with model.session(remote=True):
            out = list().save()
            for layer in range(126):
                for scale in range(64):
                    with model.trace("The Eiffel Tower is in the city of"):
                        model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                        out.append(model.lm_head.output[0, -1].argmax())
        """,
        repo="meta-llama/Llama-3.1-405B",
    )
    estimate_ = run(source)
    (request,) = estimate_.requests
    assert 3_000 < request.max_server_seconds < 3_600
    assert len(estimate_.warnings) == 1 and "3,600 s" in estimate_.warnings[0]
    assert request.profile.trips == 126
    assert request.profile.iteration_seconds == pytest.approx(request.max_server_seconds / 126)
    assert not run(source, **{"session-limit": 7200.0}).warnings


# -- robustness -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "for x in y:\n    with model.trace(x, remote=True):\n        a, b = model.output.save()\n",
        "while True:\n    with model.trace('a', remote=True):\n        break\n",
        "with model.trace(remote=True) as t:\n    with t.invoke():\n        pass\n",
        "with model.session(remote=True):\n    with model.session():\n        x = nnsight.save(1)\n",
        "def f():\n    return f()\nwith model.trace(f(), remote=True):\n    z = f().save()\n",
        "del model\nwith model.trace('a', remote=True):\n    x[0] += model.output.logits.save()\n",
    ],
)
def test_odd_code_never_raises(body):
    cost = estimate(analyze(cst.parse_module(script(body))), Options())
    requests, seconds = (value if is_known(value) else value.at(1) for value in (cost.requests, cost.seconds))
    assert requests >= 1 and math.isfinite(seconds)


def test_functions_called_only_by_other_functions_are_counted_at_their_calls():
    source = script(
        """\
        def probe(layer):
            with model.trace("Hello world", remote=True):
                h = model.model.layers[layer].output.save()
            return h

        def main():
            for layer in range(3):
                probe(layer)

        def cli():
            main()
        """
    )
    found = run(source)
    # a library (no code here calls any of its functions): each function no other calls is
    # an entry point, run once: cli() → main() → 3 × probe()
    assert found.cost.requests == 3 and not found.uncalled
    called = run(source + "\ncli()\n")
    assert called.cost.requests == 3 and not called.uncalled
    only_probe = run(source + "\nprobe(0)\n")  # a script: main and cli are dead code
    assert only_probe.cost.requests == 1
    assert only_probe.uncalled == {"main": 3, "cli": 3}
    assert any("`cli` (a call sends 3 requests)" in note for note in only_probe.notes)


def test_the_branch_that_sends_requests_is_counted():
    source = script(
        """\
        DEBUG = False
        if DEBUG:
            print("dry run")
        else:
            for layer in range(5):
                with model.trace("Hello world", remote=True):
                    h = model.model.layers[layer].output.save()
        """
    )
    estimate_ = run(source)
    assert estimate_.cost.requests == 5
    assert any("assumed false" in note for note in estimate_.notes)


def test_the_cost_model_follows_every_example_and_the_dense_script_to_the_end():
    # the cost model turns its own exceptions into a note, so that an estimate never
    # stops a rewrite: a bug in it would otherwise only show as a partial estimate
    from pathlib import Path

    from generators import dense_nnsight_script

    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))
    for name, source in [(p.name, p.read_text()) for p in examples] + [("dense", dense_nnsight_script(120))]:
        for unsafe in (False, True):
            notes = optimize(source, unsafe_fixes=unsafe).assumptions
            assert not [n for n in notes if "could not follow" in n or "partial" in n], (name, notes)


def test_shared_values_are_keyed_by_exact_values_not_equal_ones():
    # the walker shares an expression's value between tree versions when the names it
    # spells hold the same values: 1, 1.0 and True are equal in Python but not the same
    from ndif_opt.cost.shape_values import Shape
    from ndif_opt.cost.walk_values import exact

    keys = {exact(Shape(kind="python", value=v)) for v in (1, 1.0, True, 0.0, -0.0, (1,), (1.0,))}
    assert len(keys) == 7
    assert exact(Shape(kind="python", value=2)) == exact(Shape(kind="python", value=2))


@pytest.mark.parametrize("literal", ['["a", "b"]', "(1, 2.0, True)", "[[1, 2], [3]]", "([1], 2)", "-3", "'x'", "f(1)"])
def test_a_literal_assignment_binds_the_shape_of_its_value_and_shares_no_list(literal):
    from ndif_opt.cost.walk_values import NO_VALUE, literal_shape, python_literal, python_shape

    expr = cst.parse_expression(literal)
    value = python_literal(expr)
    expected = None if value is NO_VALUE else python_shape(value, True)
    first, second = literal_shape(expr), literal_shape(expr)
    assert first == expected and second == expected
    if first is not None and isinstance(first.value, tuple):
        # a list inside the value is the binding's own (a caller may change it)
        inner = [v for v in first.value if isinstance(v, list)]
        assert all(a is not b for a, b in zip(inner, [v for v in second.value if isinstance(v, list)]))


def test_code_after_return_or_continue_is_not_counted():
    source = script(
        """
        def check(prompt):
            with model.trace(prompt, remote=True):
                out = model.lm_head.output[0, -1].argmax().save()
            return int(out)
            with model.trace(prompt, remote=True):  # never runs
                dead = model.lm_head.output.save()


        for p in ["a", "b"]:
            check(p)
            continue
            with model.trace(p, remote=True):  # never runs either
                x = model.lm_head.output.save()
        """
    )
    assert run(source).cost.requests == 2


def test_a_retry_sends_its_request_once_and_a_wrapper_call_is_a_call():
    source = script(
        """
        import time


        def with_retries(fn, *args, tries=3):
            for attempt in range(tries):
                try:
                    return fn(*args)
                except Exception as err:
                    print(err)
                    time.sleep(1)
            raise RuntimeError("gave up")


        def top(prompt):
            with model.trace(prompt, remote=True):
                t = model.lm_head.output[0, -1].argmax().save()
            return t


        for p in ["a", "b", "c"]:
            for attempt in range(5):
                try:
                    with model.trace(p, remote=True):
                        x = model.lm_head.output[0, -1].argmax().save()
                    break
                except Exception:
                    time.sleep(1)
            with_retries(top, p)
        """
    )
    assert run(source).cost.requests == 6


# -- downloads of unknown size: their own part of the cost, not a number --------------------

TOPK_OF_UNKNOWN_K = script(
    """
    import sys

    k = int(sys.argv[1])
    for prompt in ["The cat sat on", "A dog ran to", "Birds fly over"]:
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].topk(k).indices.save()
    """
)


def test_a_download_of_unknown_size_is_listed_with_what_computes_it_and_why():
    cost = run(TOPK_OF_UNKNOWN_K).cost
    [(value, count)] = cost.download_unknown.counts
    assert (value.name, value.source, count) == ("top", "model.lm_head.output[0, -1].topk(k).indices", 3)
    assert "'k' is not a literal" in value.reason  # the shape model's words
    assert cost.download_bytes == 3 * (RESULT_BASE + len("top") + 5)  # of it, the framing only


def test_values_of_unknown_size_added_to_a_saved_list_count_once_per_addition():
    source = script(
        """
        import sys

        k = int(sys.argv[1])
        with model.trace("The cat sat on the", remote=True):
            tops = list().save()
            for i in range(4):
                tops.append(model.model.layers[i].output[0, -1].topk(k).indices)
                tops.append(model.model.layers[i].output[0, -1].norm())
        """
    )
    [(value, count)] = run(source).cost.download_unknown.counts
    assert (value.name, value.source, count) == ("tops", "model.model.layers[i].output[0, -1].topk(k).indices", 4)


def test_a_name_saved_again_with_a_known_size_is_no_longer_unknown():
    source = script(
        """
        import sys

        k = int(sys.argv[1])
        with model.trace("The cat sat on the", remote=True):
            top = model.lm_head.output[0, -1].topk(k).indices.save()
            top = model.lm_head.output[0, -1].argmax().save()
        """
    )
    assert not run(source).cost.download_unknown


# -- forward passes: every block that sends a request runs its traces -----------------------


def _passes_by_request(source: str) -> list[tuple[str, int, int]]:
    return [(r.kind, r.count, r.forward_passes) for r in run(source).requests]


def test_traces_of_a_model_the_analysis_does_not_know_run_their_forward_passes():
    # the model is a parameter (or an attribute) and the traces inside the session take
    # no remote=: the analysis lists only the session; its traces run all the same
    source = script(
        """
        def sweep(lm, prompts):
            with lm.session(remote=True):
                out = list().save()
                for p in prompts:
                    with lm.trace(p):
                        out.append(lm.lm_head.output[:, -1].argmax(dim=-1))
                with lm.generate("Once upon a time", max_new_tokens=5):
                    text = lm.generator.output.save()
            return out


        sweep(model, ["a b c", "d e f", "g h i"])
        """
    )
    assert _passes_by_request(source) == [("session", 1, 3 + 5)]


def test_a_helper_tracing_the_model_it_is_given_inside_a_session_counts_its_pass():
    source = script(
        """
        def logits_of(lm, prompt):
            with lm.trace(prompt):
                return lm.lm_head.output.save()


        with model.session(remote=True):
            a = logits_of(model, "hello there")
            b = logits_of(model, "general kenobi")
        """
    )
    assert _passes_by_request(source) == [("session", 1, 2)]


def test_a_loop_over_a_list_the_script_fills_runs_once_per_element():
    # `prompts = []` then appends: the loop over it ran 0 times (0 requests, a session of
    # 0 forward passes); its length follows the appends, its values where they are constants
    source = script(
        """
        prompts = []
        for name in ["Mary", "John", "Ann"]:
            prompts.append(f"Hello {name}, how are you")


        def load(rows):
            for row in rows:
                examples.append({"text": row})


        examples = []
        load(["x", "y"])

        for p in prompts:
            with model.trace(p, remote=True):
                h = model.lm_head.output[0, -1].save()
        with model.session(remote=True):
            for ex in examples:
                with model.trace(ex["text"]):
                    g = model.lm_head.output[0, -1].save()
        """
    )
    estimate_ = run(source)
    assert _passes_by_request(source) == [("trace", 3, 3), ("session", 1, 2)]
    assert not [n for n in estimate_.notes if "Hello" in n]  # the prompts' texts are known


def test_a_list_filled_an_unknown_number_of_times_has_an_unknown_length():
    source = script(
        """
        import sys

        prompts = []
        for line in open(sys.argv[1]):
            if line.strip():
                prompts.append(line.strip())
        for p in prompts:
            with model.trace(p, remote=True):
                h = model.lm_head.output[0, -1].save()
        """
    )
    estimate_ = run(source)
    n = Count.trips(UnknownLoop("for p in prompts"))
    assert estimate_.cost.requests == estimate_.cost.forward_passes == n


def test_a_session_whose_traces_are_out_of_sight_says_so():
    source = script(
        """
        from helpers import run_probe

        with model.session(remote=True):
            result = run_probe(model, "hello").save()
        """
    )
    estimate_ = run(source)
    assert estimate_.cost.forward_passes == 0
    assert any("runs no trace or generate the cost model can follow" in n for n in estimate_.notes)


@pytest.mark.parametrize(
    "body",
    [
        # a trace with input, one with invokes only, invokes in a loop, generate
        'with model.trace("a b", remote=True):\n    h = model.lm_head.output.save()\n',
        'with model.trace(remote=True) as t:\n    with t.invoke("a"):\n        h = model.lm_head.output.save()\n',
        'with model.trace(remote=True) as t:\n    for p in ["a", "b"]:\n        with t.invoke(p):\n'
        "            h = model.lm_head.output.save()\n",
        'with model.generate("a", max_new_tokens=3, remote=True):\n    h = model.generator.output.save()\n',
        'with model.session(remote=True):\n    with model.trace() as t:\n        with t.invoke("a"):\n'
        "            h = model.lm_head.output.save()\n",
    ],
    ids=["trace", "invokes", "invoke-loop", "generate", "session"],
)
def test_every_kind_of_block_runs_at_least_one_forward_pass(body):
    [(kind, count, passes)] = _passes_by_request(script(body))
    assert count == 1 and passes == (3 if kind == "generate" else 1)


def test_what_a_helper_saves_and_returns_comes_back_with_the_name_the_session_binds_it_to():
    # the session's frame ends holding the last value the helper returned: it downloads
    # (once, however often the loop ran), unless the session lets the name go
    body = """
        def logits_of(prompt):
            with model.trace(prompt):
                logits = model.lm_head.output.save()
            return logits


        with model.session(remote=True):
            for prompt in ["a b c", "d e f"]:
                logits = logits_of(prompt)
        """
    kept = run(script(body)).cost.download_bytes
    released = run(script(body + "        logits = None\n")).cost.download_bytes
    vocab = dims_for("meta-llama/Llama-3.1-8B").vocab_size
    assert kept - released >= vocab * 2  # at least one full row of bf16 logits
    assert released < kept / 100


# -- the bill is what runs ------------------------------------------------------------------


def test_a_retry_loop_costs_one_attempt_and_says_so():
    source = script(
        """\
        import time
        for prompt in ["The capital of France is", "The capital of Italy is"]:
            for attempt in range(3):
                try:
                    with model.trace(prompt, remote=True):
                        logits = model.lm_head.output[0, -1].save()
                    break
                except Exception as error:
                    print(f"attempt {attempt} failed: {error!r}")
                    time.sleep(5)
        """
    )
    found = run(source)
    assert found.cost.requests == found.cost.forward_passes == 2
    assert any("`for attempt in range(3)` is a retry loop: counted once; each failure costs another request"
               in note for note in found.notes)


@pytest.mark.parametrize("loop, header", [
    ("while True:", "while True"),
    ("while tries < 5:", "while tries < 5"),
    # a handler that counts the attempts itself: no retry a session can take, attempts all the same
    ("for attempt in range(5):", "for attempt in range(5)"),
])
def test_a_loop_that_tries_until_its_request_succeeds_costs_one_attempt(loop, header):
    # (`while True` was a loop of unknown length: 2·N requests where 2 run)
    source = script(
        f"""\
        import time
        for prompt in ["The capital of France is", "The capital of Italy is"]:
            tries = 0
            {loop}
                try:
                    with model.trace(prompt, remote=True):
                        logits = model.lm_head.output[0, -1].save()
                    break
                except Exception as error:
                    tries += 1
                    if tries >= 5:
                        raise
                    time.sleep(5)
        """
    )
    found = run(source)
    assert found.cost.requests == found.cost.forward_passes == 2
    assert any(f"`{header}` is a retry loop: counted once; each failure costs another request" in note
               for note in found.notes), found.notes


def test_a_while_retry_left_as_it_is_says_how_to_write_it_to_be_hoisted():
    source = script(
        """\
        import time
        tops = {}
        for prompt in ["The capital of France is", "The capital of Italy is"]:
            while True:
                try:
                    with model.trace(prompt, remote=True):
                        top = model.lm_head.output[0, -1].argmax().save()
                    break
                except Exception:
                    time.sleep(5)
            tops[prompt] = top.item()
        """
    )
    result = optimize(source)
    (found,) = [f for f in result.findings if f.pass_id == "session-hoisting"]
    assert "2 separate remote requests" in found.message, found.message
    assert "`while True:` tries its request again until one succeeds" in found.reason, found.reason
    assert "`for attempt in range(N):`" in found.reason, found.reason


def test_a_loop_given_its_length_is_counted_at_it():
    source = script(
        """\
        import sys
        rows = open(sys.argv[1]).read().splitlines()
        batch = list(rows)
        for row in rows:
            with model.trace(row, remote=True):
                h = model.model.layers[0].output[0, -1].save()
        for start in range(0, len(batch), 4):
            with model.trace(batch[start], remote=True):
                g = model.model.layers[0].output[0, -1].save()
        """
    )
    assert run(source).cost.requests.loops  # N and the chunks of N: unknown
    given = run(source, trips={"for row  in rows:": 10})  # as the footnote names it, spaced as one likes
    assert given.cost.requests == 10 + 3  # the loop, and the chunks of a copy of its list
    assert is_known(given.cost.download_bytes)


def test_a_function_handed_on_as_a_callback_runs_once_and_one_nothing_names_costs_nothing():
    source = script(
        """\
        import atexit

        def report():
            with model.trace("The capital of France is", remote=True):
                h = model.model.layers[0].output[0, -1].save()

        def unused():
            helper()

        def helper():
            with model.trace("The capital of Italy is", remote=True):
                h = model.model.layers[0].output[0, -1].save()

        atexit.register(report)
        """
    )
    found = run(source)
    assert found.cost.requests == 1  # report() runs (atexit calls it); unused() and helper() never do
    assert found.uncalled == {"unused": 1, "helper": 1}
    assert any("`unused` (a call sends 1 request)" in note for note in found.notes)


def test_a_library_module_costs_one_call_of_each_entry_point():
    source = script(
        """\
        def probe(prompt):
            with model.trace(prompt, remote=True):
                return model.lm_head.output[0, -1].save()

        def sweep(prompts):
            return [probe(p) for p in prompts]
        """
    )
    found = run(source)
    # sweep is the entry point (probe is counted at its calls): N requests
    assert str(found.cost.requests.loops[0].header) == "for p in prompts", found.cost.requests
    assert found.cost.requests.at(5) == 5 and not found.uncalled
    with_driver = run(source + "\nsweep(['a', 'b'])\n")  # a script: what it calls, as it calls it
    assert with_driver.cost.requests == 2


def test_a_script_whose_trace_is_in_the_else_of_an_elif_is_not_a_library():
    # its own code opens a block (in the last branch of an if/elif/else), so a public
    # function nothing calls is not an entry point: it costs nothing
    source = script(
        """\
        import sys

        def probe(prompt):
            with model.trace(prompt, remote=True):
                return model.lm_head.output[0, -1].save()

        if len(sys.argv) > 2:
            print("too many arguments")
        elif len(sys.argv) > 1:
            print(sys.argv[1])
        else:
            with model.trace("The Eiffel Tower is in", remote=True):
                top = model.lm_head.output[0, -1].argmax().save()
        """
    )
    found = run(source)
    assert found.cost.requests == 1, found.cost.requests
    assert found.uncalled == {"probe": 1}


def test_lists_of_a_saved_dict_filled_in_a_session_come_back_with_it():
    source = script(
        """\
        acts = {"early": [], "late": []}
        with model.session(remote=True):
            acts = nnsight.save(acts)
            for prompt in ["The Eiffel Tower is in", "Big Ben is in", "The Colosseum is in"]:
                with model.trace(prompt):
                    early = model.model.layers[0].output[0, -1]
                acts["early"].append(early)
        """
    ).replace("import torch", "import torch\nimport nnsight")
    found = run(source)
    hidden = dims_for("meta-llama/Llama-3.1-8B").hidden_size
    assert found.cost.download_bytes > 3 * hidden * 2  # three rows of the hidden state come back


def test_names_unpacked_from_displays_each_get_their_value():
    source = script(
        """\
        templates = [lambda day, k: f"{k} days after {day} is", lambda day, k: f"{day} plus {k} days is"]
        prompts, labels = [], []
        for day in ["Monday", "Tuesday", "Wednesday"]:
            for k in range(1, 7):
                for template in templates:  # functions: their values unknown, their number known
                    prompts.append(template(day, k))
                    labels.append(day)
        for prompt in prompts:
            with model.trace(prompt, remote=True):
                h = model.model.layers[0].output[0, -1].save()
        """
    )
    assert run(source).cost.requests == 36  # as it runs: 3 days × 6 offsets × 2 templates


def test_a_helper_runs_the_model_its_caller_passes():
    # two models of different depth; the helper names its model by a parameter: each
    # call evaluates the layers of the model passed to it (not the file's first model)
    source = textwrap.dedent(
        """\
        from nnsight import LanguageModel

        small = LanguageModel("openai-community/gpt2")
        big = LanguageModel("meta-llama/Llama-3.1-70B")

        def last_logits(lm, prompt):
            with lm.trace(prompt, remote=True):
                out = lm.lm_head.output[0, -1].save()
            return out

        a = last_logits(big, "Hello world")
        b = last_logits(small, "Hello world")
        """
    )
    cost = run(source).cost
    assert cost.requests == 2
    assert cost.layer_evaluations == dims_for("meta-llama/Llama-3.1-70B").n_layers + dims_for("openai-community/gpt2").n_layers
    # each call downloads one row of its own model's vocabulary: bf16 on 70B, fp32 on GPT-2
    rows = dims_for("meta-llama/Llama-3.1-70B").vocab_size * 2 + dims_for("openai-community/gpt2").vocab_size * 4
    assert rows <= cost.download_bytes < rows + 4096


def test_a_method_runs_the_model_the_constructor_stored_on_self():
    source = textwrap.dedent(
        """\
        from nnsight import LanguageModel

        small = LanguageModel("openai-community/gpt2")
        big = LanguageModel("meta-llama/Llama-3.1-70B")

        class Probe:
            def __init__(self, model, layer):
                self.model = model
                self.layer = layer

            def run(self, prompt):
                with self.model.trace(prompt, remote=True):
                    out = self.model.lm_head.output[0, -1].save()
                return out

        probe = Probe(big, 3)
        a = probe.run("Hello world")
        """
    )
    cost = run(source).cost
    assert (cost.requests, cost.layer_evaluations) == (1, dims_for("meta-llama/Llama-3.1-70B").n_layers)


def test_an_objects_state_is_what_its_constructor_and_methods_gave_it():
    # `exp.sweep(...)` runs Patching.sweep with its arguments; `Patching(...)` runs
    # `__init__`, so `self.n_layers`, `self.corrupt` and `self.clean_hidden` are known
    # where the methods read them: 1 clean run + 2 layers x 3 positions, each patch
    # downloading its full logits (six prompt tokens)
    source = textwrap.dedent(
        """\
        import torch
        from nnsight import LanguageModel

        class Patching:
            def __init__(self, model, clean, corrupt):
                self.model = model
                self.clean, self.corrupt = clean, corrupt
                self.n_layers = 2

            def run_clean(self):
                with self.model.trace(self.clean, remote=True):
                    hidden = torch.stack([self.model.transformer.h[i].output for i in range(self.n_layers)]).save()
                self.clean_hidden = hidden

            def patch(self, layer, pos):
                vec = self.clean_hidden[layer, 0, pos]
                with self.model.trace(self.corrupt, remote=True):
                    self.model.transformer.h[layer].output[0, pos, :] = vec
                    logits = self.model.lm_head.output.save()
                return (logits[0, -1, 5] - logits[0, -1, 7]).item()

            def sweep(self, positions):
                self.run_clean()
                for layer in range(self.n_layers):
                    for pos in positions:
                        self.patch(layer, pos)

        model = LanguageModel("openai-community/gpt2")
        exp = Patching(model, "The cat sat on the mat", "The dog sat on the mat")
        exp.sweep([0, 1, 2])
        """
    )
    cost = run(source).cost
    dims = dims_for("openai-community/gpt2")
    assert cost.requests == 7, cost
    assert is_known(cost.download_bytes), cost
    six_tokens = tokens("The dog sat on the mat")
    assert cost.download_bytes >= 6 * six_tokens * dims.vocab_size * 4, cost


def test_a_record_holding_a_string_slice_is_sized_whole():
    # session-hoisting's records hold what the client reads after the session: the trace's
    # values whole and, for a print, a slice of the prompt. A slice of a string is a string
    # (its text known when the prompt is): the record's size is known, tensors included
    source = script(
        """\
        with model.session(remote=True):
            rows = list().save()
            for prompt in ["Hello world", "The cat sat"]:
                with model.trace(prompt):
                    logits = model.lm_head.output
                rows.append({"head": prompt[:4], "logits": logits})
        """
    )
    cost = run(source).cost
    assert not cost.download_unknown, cost.download_unknown
    logits = sum(tokens(p) * 128_256 * 2 for p in ["Hello world", "The cat sat"])
    assert cost.download_bytes > logits, cost
    # each record holds four characters of its prompt: seven fewer than the whole prompt
    whole = run(source.replace("prompt[:4]", "prompt")).cost
    assert whole.download_bytes - cost.download_bytes == 2 * 7


def test_a_saved_list_of_saved_values_over_the_layers_ships_one_tensor_per_layer():
    # `[layer.output[0, -1].argmax().save() for layer in <layer list>]`: one element per
    # decoder layer, each a 0-d tensor with its own framing
    source = script(
        """\
        with model.trace("Hello world", remote=True):
            tops = nnsight.save([layer.output[0, -1].argmax().save() for layer in model.model.layers])
        """
    ).replace("import torch\n", "import torch\nimport nnsight\n")
    cost = run(source).cost
    assert not cost.download_unknown, cost.download_unknown
    n_layers = dims_for("meta-llama/Llama-3.1-8B").n_layers
    assert cost.download_bytes >= RESULT_BASE + n_layers * (8 + TENSOR_OVERHEAD), cost
    assert cost.download_bytes < RESULT_BASE + n_layers * (8 + TENSOR_OVERHEAD + 16), cost


def test_a_view_of_a_computed_tensor_ships_that_tensors_storage_on_a_cpu_server():
    # a view's storage is the tensor it views, a module's output or one computed in the
    # trace: `log_softmax` makes a new [1, n, vocab] tensor, and its row ships whole
    source = script(
        """\
        with model.trace("The Eiffel Tower is in the city of", remote=True):
            logits = model.lm_head.output
            top = logits.log_softmax(-1)[0, -1, :3].save()
        """
    )
    n = tokens("The Eiffel Tower is in the city of")
    storage = {"view-storage": "storage"}
    assert run(source).cost.download_bytes == 3 * 2 + framing("top")
    assert run(source, **storage).cost.download_bytes == n * 128_256 * 2 + framing("top")
    # a copy is a tensor of its own: only its elements
    copied = source.replace("[0, -1, :3].save()", "[0, -1, :3].clone().save()")
    assert run(copied, **storage).cost.download_bytes == 3 * 2 + framing("top")


def test_a_finding_sizes_a_generate_tracers_result_as_the_generated_ids():
    # it described `tracer.result` as the forward's output (logits and a KV cache, ~4.4 MB)
    source = textwrap.dedent(
        """\
        from nnsight import LanguageModel

        model = LanguageModel("openai-community/gpt2")
        with model.session(remote=True):
            with model.generate("I think that", max_new_tokens=5) as tracer:
                out = tracer.result.save()
        """
    )
    from ndif_opt.cost_model import saved_shape

    facts = analyze(cst.parse_module(source))
    block = next(b for b in facts.blocks if b.method == "generate")
    described = saved_shape(cst.parse_expression("tracer.result"), block, facts)
    assert described.startswith("[1, ") and "int64" in described and "logits" not in described, described


def test_items_of_a_config_dict_are_the_values_they_name():
    """`layers = CONFIG["layers"]`, `for layer in CONFIG["sweep"]`: an item of a dict the
    script spells out (bound once at module level) is the value it names — a module, a
    list of known length, a number — as the analysis reads it (`constant_item`)."""
    direct = run(script("""
        with model.trace("The Eiffel Tower is in", remote=True):
            last = model.model.layers[2].output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    through = run(script("""
        CONFIG = {"layers": model.model.layers, "probe": {"mid": 2}, "prompt": "The Eiffel Tower is in"}
        layers = CONFIG["layers"]
        layer = CONFIG["probe"]["mid"]
        with model.trace(CONFIG["prompt"], remote=True):
            last = layers[layer].output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    assert through.download_bytes == direct.download_bytes  # the view ships the layer's storage
    literal = run(script("""
        for layer in [0, 1, 3]:
            with model.trace("The Eiffel Tower is in", remote=True):
                last = model.model.layers[layer].output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    sweep = run(script("""
        CONFIG = {"layers": model.model.layers, "sweep": [0, 1, 3]}
        for layer in CONFIG["sweep"]:
            with model.trace("The Eiffel Tower is in", remote=True):
                last = CONFIG["layers"][layer].output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    assert (sweep.requests, sweep.forward_passes, sweep.layer_evaluations) == (3, 3, 3 * 32)
    assert sweep.download_bytes == literal.download_bytes


def test_token_ids_of_a_known_text_are_as_long_as_its_tokens():
    """`model.tokenizer(text, return_tensors="pt")["input_ids"]` of a text the walk knows
    (a literal, a loop's element, `text.lower()` of one) is int64 [1, tokens]: the trace
    given it runs that many positions, not the default prompt length."""
    texts = ["Paris is the capital of", "The quick brown fox jumps over the lazy dog and the cat"]
    literal = run(script(f"""
        for text in {[t.lower() for t in texts]!r}:
            with model.trace(text, remote=True):
                last = model.lm_head.output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    tokenized = run(script(f"""
        for text in {texts!r}:
            words = text.lower()
            encoded = model.tokenizer(words, return_tensors="pt")
            with model.trace(encoded["input_ids"], remote=True):
                last = model.lm_head.output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    assert tokenized.download_bytes == literal.download_bytes  # [1, tokens, vocab] logits each
    assert tokenized.compute_flops == literal.compute_flops


def test_a_loop_whose_body_ends_in_break_runs_once():
    """A loop body that leaves the loop at its own level (`break`, `return`, `raise`: not
    under a branch) runs its first iteration only: the form a retry loop takes in a session
    once its `try` is gone (`for attempt in range(3): ... trace ...; break`)."""
    source = script("""
        prompts = ["The cat sat on the", "Paris is the capital of", "One two three"]
        with model.session(remote=True):
            for prompt in prompts:
                for attempt in range(3):
                    with model.trace(prompt):
                        top = model.lm_head.output[0, -1].argmax().save()
                    break
        """)
    cost = run(source).cost
    assert (cost.requests, cost.forward_passes, cost.layer_evaluations) == (1, 3, 3 * 32)
    first = run(script("""
        for i in range(4):
            with model.trace("Hello", remote=True):
                h = model.model.layers[i].output.save()
            break
        """)).cost
    assert (first.requests, first.forward_passes) == (1, 1)


def test_a_test_known_before_running_decides_its_branch_and_its_break_or_continue():
    """In an unrolled loop the walk knows the loop variable: `if prompt == "skip":
    continue` skips that iteration's trace, `if prompt == "STOP": break` ends the loop. A
    test on anything else is not evaluated: a module-level flag counts the branch that
    sends requests (test_the_branch_that_sends_requests_is_counted), and so does a test
    on a model output."""
    cost = run(script("""
        prompts = ["The cat sat on the", "skip", "Paris is the capital of", "STOP", "One two three"]
        for prompt in prompts:
            if prompt == "skip":
                continue
            if prompt == "STOP":
                break
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().save()
        """)).cost
    assert (cost.requests, cost.forward_passes) == (2, 2)
    flag = run(script("""
        SKIP = "d e f"
        for prompt in ["a b c", "d e f", "g h"]:
            if prompt != SKIP:
                with model.trace(prompt, remote=True):
                    top = model.lm_head.output[0, -1].argmax().save()
        """)).cost
    assert flag.requests == 2
    guarded = run(script("""
        for prompt in ["a b c", "skip", "d e f"]:
            try:
                if prompt == "skip":
                    continue
            except ValueError:
                pass
            else:
                with model.trace(prompt, remote=True):
                    top = model.lm_head.output[0, -1].argmax().save()
            finally:
                with model.trace("x y", remote=True):
                    last = model.lm_head.output[0, -1].argmax().save()
        """)).cost
    assert guarded.requests == 2 + 3  # `continue` skips the `else:`, and `finally:` runs
    unknown = run(script("""
        for prompt in ["a b c", "d e f"]:
            with model.trace(prompt, remote=True):
                top = model.lm_head.output[0, -1].argmax().save()
            if top.item() > 3:
                break
        """)).cost
    assert unknown.requests == 2  # a test on a model output: every iteration is counted


def test_a_loop_over_records_knows_each_records_fields():
    """`for example in examples` over a list of dict displays: each iteration's
    `example["text"]` is that record's text, so the trace given it runs its tokens."""
    texts = ["The cat sat on the", "Paris is the capital of the country of France", "One two three"]
    literal = run(script(f"""
        for text in {texts!r}:
            with model.trace(text, remote=True):
                logits = model.lm_head.output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    records = run(script(f"""
        examples = {[{"id": i, "text": t, "label": "ab"[i % 2]} for i, t in enumerate(texts)]!r}
        for n, example in enumerate(examples):
            with model.trace(example["text"], remote=True):
                logits = model.lm_head.output[0, -1].save()
        """), **{"view-storage": "storage"}).cost
    assert records.download_bytes == literal.download_bytes
    assert records.compute_flops == literal.compute_flops


def test_a_helper_called_in_a_comprehension_over_prompts_runs_each_prompt():
    """`[top_token(p) for p in PROMPTS]`: one call per prompt, each tracing its own prompt
    (the walk unrolls the comprehension as it does a loop over strings), not one call of
    a prompt of unknown length counted len(PROMPTS) times."""
    prompts = ["The sky is", "Grass is usually green in the spring and in the summer", "Snow is"]
    loop = run(script(f"""
        for p in {prompts!r}:
            with model.trace(p, remote=True):
                logits = model.lm_head.output[0, -1].save()
        """), **{"view-storage": "storage"})
    comprehension = run(script(f"""
        PROMPTS = {prompts!r}


        def top_token(prompt):
            with model.trace(prompt, remote=True):
                logits = model.lm_head.output[0, -1].save()
            return logits.argmax().item()


        tops = [top_token(p) for p in PROMPTS]
        """), **{"view-storage": "storage"})
    assert comprehension.cost.requests == loop.cost.requests == 3
    assert comprehension.cost.download_bytes == loop.cost.download_bytes
    assert comprehension.cost.compute_flops == loop.cost.compute_flops
    assert not any("not a literal string" in note for note in comprehension.notes)



@pytest.mark.parametrize("mapped", ["map(top_token, PROMPTS)", "map(lambda p: top_token(p), PROMPTS)"])
def test_a_helper_mapped_over_prompts_runs_each_prompt(mapped):
    """`map(f, xs)` is `[f(x) for x in xs]` and `map(lambda p: E, xs)` is `[E for p in xs]`:
    one call per prompt, as the comprehension (a new user's `list(map(...))` was billed one
    request where three ran)."""
    prompts = ["The sky is", "Grass is usually green in the spring and in the summer", "Snow is"]
    helper = f"""
        PROMPTS = {prompts!r}


        def top_token(prompt):
            with model.trace(prompt, remote=True):
                logits = model.lm_head.output[0, -1].save()
            return logits.argmax().item()


        """
    comprehension = run(script(helper + "tops = [top_token(p) for p in PROMPTS]\n"), **{"view-storage": "storage"})
    mapped_run = run(script(helper + f"tops = list({mapped})\n"), **{"view-storage": "storage"})
    assert mapped_run.cost.requests == comprehension.cost.requests == 3
    assert mapped_run.cost.download_bytes == comprehension.cost.download_bytes
    assert mapped_run.cost.compute_flops == comprehension.cost.compute_flops

def test_a_finding_sizes_an_index_by_a_constant_of_the_script_as_that_int():
    # `SUBJ_POS = 1` at module level: `output[0, SUBJ_POS]` is one position's hidden state
    from ndif_opt.cost_model import saved_shape

    source = textwrap.dedent("""\
        from nnsight import LanguageModel

        model = LanguageModel("openai-community/gpt2")
        SUBJ_POS = 1
        with model.trace("The cat sat", remote=True):
            h = model.transformer.h[5].output[0, SUBJ_POS].save()
        """)
    facts = analyze(cst.parse_module(source))
    block = facts.blocks[0]
    value = block.node.body.body[0].body[0].value
    assert saved_shape(value, block, facts).startswith("[768] float32")  # not [1, 768]


@pytest.mark.parametrize("header, trips", [
    ("pbar = tqdm(range(6))\nfor layer in pbar:", 6),  # a progress bar bound to a name first
    ("for a, b in itertools.product(range(2), range(3)):", 6),
    ("for a, b in product([1, 2], [3, 4]):", 4),  # `from itertools import product`
])
def test_a_loop_over_a_known_length_through_a_name_or_a_product_is_counted(header, trips):
    """A new user's loops billed N requests: a `tqdm` bar bound to a name before the loop,
    and `itertools.product` of known lengths, run a known number of times."""
    body = textwrap.indent("with model.trace('hello there', remote=True):\n"
                           "    h = model.model.layers[1].output.save()\n", "    ")
    source = script("import itertools\nfrom itertools import product\nfrom tqdm import tqdm\n"
                    + header + "\n" + body)
    assert run(source).cost.requests == trips


@pytest.mark.parametrize("header, trips", [
    ("D = {i: i * 2 for i in range(5)}\nfor k, v in D.items():", 5),
    ("D = {p: len(p) for p in ['a', 'b', 'c']}\nfor k in D.keys():", 3),
    ("D = {p: len(p) for p in ['a', 'b', 'a']}\nfor k in D.values():", None),  # keys repeat: 2 entries
    ("D = {x: 0 for x in [1, 1.0]}\nfor k in D.keys():", None),  # one key, as Python compares them
    ("D = {i % 2: i for i in range(4)}\nfor k in D.keys():", None),  # not keyed by the loop variable
    ("D = {i: i for i in range(4) if i}\nfor k in D.keys():", None),  # a filter
])
def test_a_loop_over_a_dict_comprehension_keyed_by_distinct_items_is_counted(header, trips):
    """`{k: ... for k in range(3)}` has one entry per item, when the items are distinct and
    the key is the loop variable; otherwise its length is unknown (N), never a guess."""
    body = textwrap.indent("with model.trace('hello there', remote=True):\n"
                           "    h = model.model.layers[1].output.save()\n", "    ")
    requests = run(script(header + "\n" + body)).cost.requests
    assert requests == trips if trips is not None else not is_known(requests), requests


# -- a loop over itertools.product: as many iterations as the product of its lengths -----

@pytest.mark.parametrize("header", [
    "import itertools\nfor layer, head in itertools.product([0, 15], range(2)):",
    "from itertools import product\nfor layer, head in product([0, 15], range(2)):",
    "import itertools\nfor layer, head in itertools.product(range(2), repeat=2):",
])
def test_a_loop_over_itertools_product_runs_the_product_of_its_lengths(header):
    # (it was a loop of unknown length, billed `N`, where 4 requests run)
    source = script(header + """
    with model.trace("The chemical symbol for gold is", remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
""")
    assert run(source).cost.requests == 4


# -- a model config's numbers, and what the findings say of a loop over them ----------------

@pytest.mark.parametrize("attr, trips", [("num_attention_heads", 32), ("hidden_size", 4096),
                                         ("num_key_value_heads", 8), ("num_hidden_layers", 32)])
def test_a_loop_over_a_number_of_the_models_config_runs_that_many_times(attr, trips):
    # (only the layer count was known: `range(model.config.n_head)` was a loop of length N)
    source = script(f"""
for i in range(model.config.{attr}):
    with model.trace("The capital of France is", remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
""")
    assert run(source).cost.requests == trips


def test_a_batching_finding_counts_a_loop_the_cost_table_knows_the_length_of():
    # the analysis cannot tell `range(N_HEADS)`'s length, the cost table can (12 heads): the
    # finding said "one forward pass per iteration → one per 32 iterations (--max-batch 32)"
    source = script("""
N_HEADS = model.config.n_head
tops = []
for head in range(N_HEADS):
    with model.trace("The Colosseum is in the city of", remote=True):
        tops.append(model.lm_head.output[0, -1].argmax().save())
""", repo="openai-community/gpt2")
    result = optimize(source)
    assert result.costs[0].before.requests == 12
    (found,) = [f for f in result.findings if f.pass_id == "invoke-batching"]
    assert "this loop runs 12 forward passes, one per iteration; as invokes of one trace it would run 1" \
        in found.message, found.message


def test_an_edited_copy_of_a_model_has_the_model_s_dimensions():
    # `with model.edit() as (tracer, edited)`: `edited` is GPT-2 (12 layers, 50,257 logits),
    # not a name the bill does not know (it billed 32 layers and a download of unknown size)
    source = script(
        """\
        with model.edit() as (tracer, ablated):
            ablated.transformer.h[4].mlp.output[:] = 0
        with ablated.trace("Hello world", remote=True):
            probs = ablated.lm_head.output[0, -1].softmax(-1).save()
        """,
        repo="openai-community/gpt2",
    )
    estimate_ = run(source)
    assert (estimate_.cost.requests, estimate_.cost.layer_evaluations) == (1, 12)
    assert not estimate_.cost.download_unknown.counts
    assert estimate_.cost.download_bytes == 50257 * 4 + framing("probs")


@pytest.mark.parametrize("spelled", ["cfg.n_head", "cfg.num_attention_heads"])
def test_a_config_held_by_a_name_gives_the_model_s_numbers(spelled):
    # `cfg = model.config; N_HEADS = cfg.n_head`: GPT-2's 12 heads, as `model.config.n_head`
    # gives them (it was billed as a loop of unknown length)
    source = script(
        f"""\
        cfg = model.config
        N_HEADS = {spelled}
        for head in range(N_HEADS):
            with model.trace("Hello world", remote=True):
                p = model.lm_head.output[0, -1].max().save()
        """,
        repo="openai-community/gpt2",
    )
    assert run(source).cost.requests == 12


def test_a_function_defined_in_a_function_is_billed_at_its_calls():
    # trial48 min_02: a helper defined in `run`'s body, called per prompt by a
    # comprehension, sends one request per call (billed 1, 3 ran); after `run` returns, its
    # name is `run`'s no longer: the module's `hidden_at` (no request) is the one called
    source = script(
        """\
        def hidden_at(prompt):
            return prompt

        def run(prompts, layer):
            def hidden_at(prompt):
                with model.trace(prompt, remote=True):
                    h = model.model.layers[layer].output[:, -1].save()
                return h

            return [hidden_at(p).norm().item() for p in prompts]

        print(run(["a b c", "hello there", "one two three"], 7))
        print([hidden_at(p) for p in ["x", "y"]])
        """
    )
    assert run(source).cost.requests == 3


def test_a_loop_over_a_list_display_runs_its_length_whatever_its_items():
    # `[("small", small), ("medium", medium)]` holds models, which are no literals: its
    # length is still 2 (it was billed as a loop of unknown length, 2·N requests)
    source = (
        "from nnsight import LanguageModel\n"
        'small = LanguageModel("openai-community/gpt2")\n'
        'medium = LanguageModel("openai-community/gpt2-medium")\n'
        + textwrap.dedent(
            """\
            for name, m in [("small", small), ("medium", medium)]:
                for p in ["The capital of France is", "Two plus two is"]:
                    with m.trace(p, remote=True):
                        t = m.lm_head.output[0, -1].argmax().save()
            """
        )
    )
    assert run(source).cost.requests == 4


@pytest.mark.parametrize("header", ['for name, m in [("small", small), ("medium", medium)]:', "for m in (small, medium):"])
def test_a_loop_over_a_display_of_models_runs_each_model_in_turn(header):
    # each iteration's `m` is one of the models: GPT-2's 12 layers, then GPT-2 medium's 24
    # (both were billed at the default 32 layers, and their logits' size was unknown)
    source = (
        "from nnsight import LanguageModel\n"
        'small = LanguageModel("openai-community/gpt2")\n'
        'medium = LanguageModel("openai-community/gpt2-medium")\n'
        + header + "\n"
        + textwrap.indent(
            textwrap.dedent(
                """\
                with m.trace("The capital of France is", remote=True):
                    t = m.lm_head.output[0, -1].save()
                """
            ),
            "    ",
        )
    )
    cost = run(source).cost
    assert cost.requests == 2 and cost.layer_evaluations == 12 + 24, cost
    assert not cost.download_unknown.counts, cost


def test_a_model_whose_repo_is_not_written_is_of_the_family_its_layers_show():
    # `LanguageModel(args.model)`: no repo to go by; `model.transformer.h` is GPT-2's layer
    # list (12 layers, 768 wide, float32), not the default Llama-3.1-8B's (32, 4096, bf16)
    source = textwrap.dedent(
        """\
        import argparse
        from nnsight import LanguageModel

        parser = argparse.ArgumentParser()
        parser.add_argument("--model")
        args = parser.parse_args()
        model = LanguageModel(args.model)
        with model.trace("The history of science", remote=True):
            h = model.transformer.h[3].output.save()
        print(h.norm().item())
        """
    )
    assert run(source).cost.layer_evaluations == 12
    messages = [f.message for f in optimize(source).findings if f.pass_id == "reduction-pushdown"]
    assert any("float32" in m and ", 768]" in m for m in messages), messages
    llama = source.replace("model.transformer.h[3]", "model.model.layers[3]")
    assert run(llama).cost.layer_evaluations == 32
