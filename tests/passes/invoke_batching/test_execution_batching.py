"""invoke-batching, by execution (--unsafe-fixes, tiny GPT-2 and Llama, the NDIF emulation).

The invokes' inputs are evaluated while the trace's body runs the loop, before any invoke
body runs (measured on nnsight 0.8.1; each invoke sees its own iteration's values). So the
statements of an iteration that its trace's input depends on — building the prompt,
tokenizing it, taking a dataset row — run before ``with tracer.invoke(...)``; an input
that needs what an earlier iteration's trace or the code after it did is not batched.
"""

from __future__ import annotations

import operator

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

from ndif_opt import Status  # noqa: E402


def _batching(result):
    return [f for f in result.findings if f.pass_id == "invoke-batching"]


def _batched(result, report) -> None:
    assert "tracer.invoke(" in result.code, result.code
    assert any(f.status is Status.APPLIED for f in _batching(result)), result.code
    assert report.after.forward_passes < report.before.forward_passes


def _declined(result, reason: str) -> None:
    assert "tracer.invoke(" not in result.code, result.code
    found = [f.reason or "" for f in _batching(result)]
    assert any(reason in text for text in found), found


# -- task: the statements the input depends on run before the invoke ----------------


PROMPT_BUILT = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
shoppers = ["Ada", "Grace Hopper", "Linus"]
bought = []
for shopper in shoppers:
    sentence = f"{shopper} went to the market and bought"
    with model.trace(sentence, remote=True):
        logits = model.lm_head.output.save()
    bought.append(logits[0, -1].argmax().item())
print(bought)
'''


@both
def test_a_prompt_built_in_the_loop_is_built_before_its_invoke(family):
    result, report = optimized_and_verified(PROMPT_BUILT, family, unsafe=True)
    _batched(result, report)
    lines = result.code.splitlines()
    built = next(i for i, line in enumerate(lines) if "sentence = f" in line)
    invoke = next(i for i, line in enumerate(lines) if "tracer.invoke(sentence)" in line)
    assert built < invoke


TOKENIZED = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
texts = ["Paris is the capital of", "The quick brown fox jumps over the lazy", "Water boils at"]
guesses = {}
for text in texts:
    words = text.lower()
    encoded = model.tokenizer(words, return_tensors="pt")
    token_ids = encoded["input_ids"]
    with model.trace(token_ids, remote=True):
        last = model.lm_head.output[0, -1].save()
    guesses[text] = last.argmax().item()
print(guesses)
'''


@both
def test_a_prompt_tokenized_in_the_loop_is_tokenized_before_its_invoke(family):
    result, report = optimized_and_verified(TOKENIZED, family, unsafe=True)
    _batched(result, report)


DATASET_ROW = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
rows = [
    {"question": "The color of the sky is", "answer": " blue"},
    {"question": "Two plus two equals", "answer": " four"},
    {"question": "The opposite of hot is", "answer": " cold"},
    {"question": "A baby cat is called a", "answer": " kitten"},
]
scores = []
for index in range(len(rows)):
    row = rows[index]
    scale = 2.0  # the input does not need it, nor it the invokes: it stays before them too
    question = row["question"] + ":"
    with model.trace(question, remote=True):
        probs = model.lm_head.output[0, -1].softmax(dim=-1)
        best = probs.max().save()
    scores.append((row["answer"], scale * best.item()))
print(len(scores))
'''


@both
def test_a_dataset_row_indexed_in_the_loop_is_read_before_its_invoke(family):
    result, report = optimized_and_verified(DATASET_ROW, family, unsafe=True)
    _batched(result, report)
    lines = [line.strip() for line in result.code.splitlines()]
    invoke = lines.index("with tracer.invoke(question):")
    scale = lines.index("scale = 2.0  # the input does not need it, nor it the invokes: it stays before them too")
    assert lines.index("row = rows[index]") < scale < invoke


HISTORY = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
turns = ["Hello there.", "How are you?", "Tell me a story."]
history = []
replies = []
for turn in turns:
    history.append(turn)
    conversation = " ".join(history)
    with model.trace(conversation, remote=True):
        reply = model.lm_head.output[0, -1].argmax().save()
    replies.append(reply.item())
print(replies)
'''


@both
def test_a_prompt_accumulated_before_the_trace_is_batched(family):
    """The history is filled by the statements the input depends on, in loop order, and
    no invoke reads it: batched (it was refused as a container earlier iterations fill)."""
    result, report = optimized_and_verified(HISTORY, family, unsafe=True)
    _batched(result, report)


# -- what cannot move before the invoke is refused with the reason ----------------------


FED_BY_THE_LOOP = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
with model.session(remote=True):
    prompts = ["The weather today is"]
    tops = list().save()
    for step in range(3):
        with model.trace(prompts[-1]):
            tops.append(model.lm_head.output[0, -1].argmax().item())
        prompts.append("The weather today is" + " very" * (step + 1))
print(tops)
'''


@both
def test_an_input_read_from_a_list_the_iterations_fill_is_not_batched(family):
    """Batched, every input would be `prompts[-1]` before any append (main did batch it:
    verify MISMATCH, tops[1] and tops[2] were the first prompt's)."""
    result, _ = optimized_and_verified(FED_BY_THE_LOOP, family, unsafe=True)
    _declined(result, "the trace's input depends on `prompts`, which the iteration changes after its trace")


HISTORY_READ_IN_THE_INVOKE = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
turns = ["Hello there.", "How are you?", "Tell me a story."]
history = []
replies = []
for turn in turns:
    history.append(turn)
    conversation = " ".join(history)
    with model.trace(conversation, remote=True):
        reply = model.lm_head.output[0, -1].argmax().save()
    replies.append((len(history), reply.item()))
print(replies)
'''


@both
def test_a_list_the_input_fills_and_the_iteration_reads_is_not_batched(family):
    result, _ = optimized_and_verified(HISTORY_READ_IN_THE_INVOKE, family, unsafe=True)
    _declined(result, "computing the trace's input changes `history`, which the rest of the iteration reads")


# -- issue 33, item 5: batching that reasons, not guesses ------------------------------
#
# Measured first (test_measured_*): what an invoke of a batch sees of shapes and of the
# generated tokens, against separate traces.


def _tiny(family: str):
    from execution import FAMILIES

    from ndif_opt.verify.tiny_models import tiny_model

    repo, layers = FAMILIES[family]
    model = tiny_model(repo)
    return model, operator.attrgetter(layers.removeprefix("model."))(model)


SHORT_AND_LONG = ["Hi", "The quick brown fox jumps over the lazy dog"]


@both
def test_measured_an_invoke_sees_its_own_rows_at_the_padded_length(family):
    model, layers = _tiny(family)
    alone, batched = {}, {}
    for prompt in SHORT_AND_LONG:
        with model.trace(prompt):
            alone[prompt, "layer"] = tuple(layers[1].output.shape)
            alone[prompt, "logits"] = tuple(model.lm_head.output.shape)
    with model.trace() as tracer:
        for prompt in SHORT_AND_LONG:
            with tracer.invoke(prompt):
                batched[prompt, "layer"] = tuple(layers[1].output.shape)
                batched[prompt, "logits"] = tuple(model.lm_head.output.shape)
    longest = alone[SHORT_AND_LONG[1], "layer"][1]
    for key, one in alone.items():
        many = batched[key]
        assert (many[0], many[-1]) == (1, one[-1])  # its own rows, the same width
        assert many[1] == longest  # the token count: the longest prompt's
    assert alone[SHORT_AND_LONG[0], "layer"][1] < longest


SHAPES_READ = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompts = ["Hi", "The quick brown fox jumps over the lazy dog", "Once upon a time"]
with model.session(remote=True):
    seen = list().save()
    for prompt in prompts:
        with model.trace(prompt):
            hidden = LAYERS[1].output
            width, rows, count, dims = hidden.shape[-1], hidden.size(0), len(hidden), hidden.ndim
            top = model.lm_head.output[0, -1].argmax().item()
            seen.append((width, rows, count, dims, str(hidden.dtype), top))
print(seen)
'''


@both
def test_shapes_an_invoke_reads_of_its_own_rows_are_batched(family):
    result, report = optimized_and_verified(SHAPES_READ, family, unsafe=True)
    _batched(result, report)


SHAPE_PRINTED = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompts = ["Hi", "The quick brown fox jumps over the lazy dog"]
with model.session(remote=True):
    tops = list().save()
    for prompt in prompts:
        with model.trace(prompt):
            hidden = LAYERS[1].output
            print(hidden.shape)
            tops.append(model.lm_head.output[0, -1].argmax().item())
print(tops)
'''


@both
def test_a_printed_shape_is_not_batched_for_the_true_reason(family):
    """Batched, `print(hidden.shape)` would print the longest prompt's token count. (A
    print in a remote block is a server log line: verify sees the original differ
    remotely, so only the verdict on the rewrite is asked for.)"""
    result, report = optimized_and_verified(SHAPE_PRINTED, family, unsafe=True, expect_ok=False)
    assert not report.errors["optimized"]
    _declined(result, "it reads `hidden.shape`, which holds the token count: in a batch it is the longest input's")


@both
def test_measured_the_last_generated_tokens_of_a_batch(family):
    """Each invoke's generator output is its row left-padded to the batch length; its last
    max_new_tokens tokens are the separate generation's, unless a generation stops early
    at an end-of-sequence token (forced here: the first token the short prompt repeats)."""
    import torch

    model, _ = _tiny(family)
    prompts = SHORT_AND_LONG + ["Once upon a time there"]
    k = 6

    def generate(**options):
        alone, batched = [], []
        for prompt in prompts:
            with model.generate(prompt, max_new_tokens=k, **options):
                alone.append(model.generator.output.save())
        with model.generate(max_new_tokens=k, **options) as tracer:
            for prompt in prompts:
                with tracer.invoke(prompt):
                    batched.append(model.generator.output.save())
        return alone, batched

    alone, batched = generate()
    assert all(torch.equal(a[0, -k:], b[0, -k:]) for a, b in zip(alone, batched))
    assert {b.shape[1] for b in batched} == {max(a.shape[1] for a in alone)}
    stop = int(alone[0][0, -k + 1])  # the short prompt's second generated token
    alone, batched = generate(eos_token_id=stop, pad_token_id=0)
    assert alone[0].shape[1] < alone[1].shape[1] - k  # it stopped early
    assert not torch.equal(alone[0][0, -k:], batched[0][0, -k:])
    alone, batched = generate(eos_token_id=stop, pad_token_id=0, min_new_tokens=k)
    assert all(torch.equal(a[0, -k:], b[0, -k:]) for a, b in zip(alone, batched))


GENERATED = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
prompts = ["Hi", "The quick brown fox jumps over the lazy dog", "Once upon a time there"]
K = 5
answers = []
for prompt in prompts:
    with model.generate(prompt, max_new_tokens=K, min_new_tokens=K, remote=True):
        tokens = model.generator.output.save()
    answers.append(tokens[0, -K:].tolist())
print(answers)
'''


@both
def test_a_full_length_generation_read_by_its_last_tokens_is_batched(family):
    result, report = optimized_and_verified(GENERATED, family, unsafe=True)
    _batched(result, report)
    assert "model.generate(max_new_tokens=K, min_new_tokens=K) as tracer" in result.code


@both
def test_a_generation_that_may_stop_early_is_not_batched_for_the_true_reason(family):
    source = GENERATED.replace(", min_new_tokens=K", "")
    result, _ = optimized_and_verified(source, family, unsafe=True)
    _declined(result, "a generation that stops early (end of sequence) is padded after it in a batch")


CONFIG_LAYERS = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
CONFIG = {"layers": LAYERS, "probe": {"mid": 2}, "sweep": [0, 1, 3]}
layers = CONFIG["layers"]
layer = CONFIG["probe"]["mid"]
prompts = ["Hi", "The quick brown fox jumps over the lazy dog", "Once upon a time"]
norms = []
for prompt in prompts:
    with model.trace(prompt, remote=True):
        last = layers[layer].output[0, -1].save()
    norms.append(round(last.norm().item(), 3))
print(len(norms))
'''


@both
def test_a_layer_list_from_a_config_dict_is_batched(family):
    result, report = optimized_and_verified(CONFIG_LAYERS, family, unsafe=True)
    _batched(result, report)


CONFIG_SWEEP = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
CONFIG = {"layers": LAYERS, "sweep": [0, 1, 3], "prompt": "The Eiffel Tower is in"}
layers = CONFIG["layers"]
norms = []
for layer in CONFIG["sweep"]:
    with model.trace(CONFIG["prompt"], remote=True):
        last = layers[layer].output[0, -1].save()
    norms.append(last)
print(len(norms))
'''


@both
def test_a_layer_sweep_through_a_config_dict_is_fused(family):
    """The same resolution serves trace-fusion (exact, default mode): 3 forward passes → 1."""
    result, report = optimized_and_verified(CONFIG_SWEEP, family)
    assert any(f.pass_id == "trace-fusion" and f.status is Status.APPLIED for f in result.findings), result.code
    assert (report.before.forward_passes, report.after.forward_passes) == (3, 1)


# a progress print before each trace: session-hoisting records its values in the loop,
# before the trace; that record stays before the invoke, in loop order, so the loop batches
PROGRESS_BEFORE_EACH_TRACE = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
PROMPTS = ["The Eiffel Tower is in", "The capital of Japan is", "My cat likes to"]
tops = {}
for i, prompt in enumerate(PROMPTS):
    print(f"prompt {i + 1} of {len(PROMPTS)}: {prompt}")
    with model.trace(prompt, remote=True):
        tops[prompt] = model.lm_head.output[0, -1].argmax().save()
print({p: t.item() for p, t in tops.items()})
'''


@both
def test_a_loop_that_prints_its_progress_before_each_trace_is_batched(family):
    result, report = optimized_and_verified(PROGRESS_BEFORE_EACH_TRACE, family, unsafe=True)
    batched = [f for f in result.findings if f.pass_id == "invoke-batching"]
    assert batched and all(f.status is Status.APPLIED for f in batched), [f.reason for f in batched]
    assert (report.before.requests, report.after.requests) == (3, 1)
    assert (report.before.forward_passes, report.after.forward_passes) == (3, 1)


# an iteration that `continue` ends before its trace runs no forward pass: the refusal
# quotes the passes that run (it said 3, one per iteration, where 2 run)
SKIPPED_PROMPT = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
PROMPTS = ["The cat sat on the", "", "One two three"]
tops = []
for prompt in PROMPTS:
    if not prompt:
        continue
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    tops.append(logits[0, -1].argmax().item())
print(tops)
'''


@both
def test_a_refusal_quotes_the_forward_passes_that_run_when_continue_skips_a_trace(family):
    result, report = optimized_and_verified(SKIPPED_PROMPT, family, unsafe=True)
    (found,) = _batching(result)
    assert report.before.forward_passes == 2
    assert found.message.startswith("this loop runs 2 forward passes in its 3 iterations;"), found.message


# the trace's input is built by a function that reads a dict the iteration changes after its
# trace (a trial's: batched, every prompt was built from the first prefix; MISMATCH)
INPUT_BUILT_BY_A_FUNCTION_READING_WHAT_THE_LOOP_CHANGES = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    state = {"prefix": "Start"}


    def make_prompt(q):
        return state["prefix"] + " " + q


    lens = []
    for q in ["one", "two", "three"]:
        prompt = make_prompt(q)
        with model.trace(prompt, remote=True):
            t = model.lm_head.output[0, -1].argmax().save()
        state["prefix"] = prompt
        lens.append(len(prompt))
    print(lens)
'''


@both
def test_an_input_a_function_builds_from_what_the_iteration_changes_is_not_batched(family):
    result, report = optimized_and_verified(INPUT_BUILT_BY_A_FUNCTION_READING_WHAT_THE_LOOP_CHANGES, family,
                                            unsafe=True)
    assert report.after.forward_passes == report.before.forward_passes == 3, report.to_text() + result.code
    batching, = _batching(result)
    assert "depends on `state`, which the iteration changes" in batching.reason, batching.reason
