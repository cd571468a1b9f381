"""session-chunking: sessions estimated over NDIF's one-hour limit are split, and the
split script computes exactly what the single session did (checked by execution)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

import ndif_opt.engine.pipeline as pipeline
from ndif_opt import Status, optimize
from ndif_opt.analysis.facts import analyze
from ndif_opt.cost_model import explain, session_budget
from ndif_opt.options import Options
from ndif_opt.passes.session_chunking import SessionChunking

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """Run with session-chunking in the pipeline (last), whether or not it is registered yet."""
    if SessionChunking not in pipeline.PASSES:
        monkeypatch.setattr(pipeline, "PASSES", pipeline.PASSES + (SessionChunking,))


def _findings(result, status=None):
    return [
        f for f in result.findings
        if f.pass_id == SessionChunking.id and (status is None or f.status is status)
    ]


@pytest.mark.parametrize("case", SessionChunking.cases, ids=[c.name for c in SessionChunking.cases])
def test_case(case):
    result = optimize(case.before, select=[SessionChunking.id])
    cst.parse_module(result.code)
    if case.after is None:
        assert result.code == case.before
        if case.reason:
            texts = [f"{f.message} {f.reason or ''}" for f in result.findings if not f.applied]
            assert any(case.reason in t for t in texts), texts
    else:
        assert result.code == case.after
        assert _findings(result, Status.APPLIED)
        assert optimize(result.code, select=[SessionChunking.id]).code == result.code


def test_docs_and_cases():
    doc = SessionChunking.__doc__
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
        assert heading in doc
    assert any(c.after is not None for c in SessionChunking.cases)
    assert any(c.after is None for c in SessionChunking.cases)


SWEEP_405B = '''\
"""How much does scaling each layer's residual stream change Llama-3.1-405B's prediction?"""
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
PROMPT = "The Eiffel Tower is in the city of"
SCALES = [0.25 * i for i in range(64)]

top = {}
for layer in range(len(model.model.layers)):
    for scale in SCALES:
        with model.trace(PROMPT, remote=True):
            model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
            logits = model.lm_head.output.save()
        top[(layer, scale)] = logits[0, -1].argmax().item()

print(len(top))
'''


def test_405b_sweep_over_an_hour_is_warned_about_and_split():
    result = optimize(SWEEP_405B)
    # the naive loop: 126 × 64 requests; hoisted: one session of 8,064 forward passes
    assert result.costs[0].before.requests == 126 * 64
    applied = _findings(result, Status.APPLIED)
    assert len(applied) == 1, result.findings
    message = applied[0].message
    assert "estimated at 3,2" in message and "3,600 s" in message and "split into 2" in message
    assert result.costs[-1].after.requests == 2
    assert result.code.count("with model.session(remote=True):") == 1
    assert "for _ndif_chunk in range(0, 126, 63):" in result.code
    assert "for layer in range(len(model.model.layers))[_ndif_chunk:_ndif_chunk + 63]:" in result.code
    assert "_ndif_top.update(top)" in result.code and result.code.rstrip().endswith("print(len(top))")
    # every chunk fits the budget
    facts = analyze(cst.parse_module(result.code))
    estimate = explain(facts, Options())
    (request,) = estimate.requests
    assert request.count == 2
    assert request.max_server_seconds < session_budget(Options())
    assert not estimate.warnings


def test_the_warning_is_in_the_estimate():
    facts = analyze(cst.parse_module(SWEEP_405B.replace(", remote=True", "")))
    assert not explain(facts, Options()).warnings  # local: nothing is sent
    hoisted = optimize(SWEEP_405B, select=["session-hoisting"]).code
    estimate = explain(analyze(cst.parse_module(hoisted)), Options())
    assert len(estimate.warnings) == 1 and "3,600 s" in estimate.warnings[0]
    profile = estimate.requests[0].profile
    assert profile.trips == 126 and profile.iteration_seconds > 20


def test_limit_is_configurable():
    relaxed = Options(cost={"session-limit": 7200.0})
    result = optimize(SWEEP_405B, options=relaxed)
    assert not _findings(result)
    assert result.costs[-1].after.requests == 1
    strict = Options(cost={"session-limit": 1200.0})
    result = optimize(SWEEP_405B, options=strict)
    (finding,) = _findings(result, Status.APPLIED)
    chunks = int(finding.message.split("split into ")[1].split()[0])
    assert chunks == result.costs[-1].after.requests >= 4


def test_a_suppression_comment_keeps_the_session():
    hoisted = optimize(SWEEP_405B, select=["session-hoisting"]).code
    suppressed = hoisted.replace(
        "with model.session(remote=True):", "with model.session(remote=True):  # ndif-opt: ignore[session-chunking]"
    )
    result = optimize(suppressed, select=[SessionChunking.id])
    assert result.code == suppressed
    assert all(f.status is not Status.APPLIED for f in _findings(result))


def test_unknown_length_or_one_shot_iterables_are_not_split():
    source = '''\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")


def prompts():
    yield from ["a b c"] * 10000


with model.session(remote=True):
    out = list().save()
    for prompt in prompts():
        with model.trace(prompt):
            out.append(model.lm_head.output[0, -1].argmax())
'''
    result = optimize(source, select=[SessionChunking.id], options=None)
    assert result.code == source
    options = Options(select=frozenset({SessionChunking.id}), cost={"unknown-trips": 100000})
    result = optimize(source, options=options)
    assert result.code == source
    (finding,) = _findings(result)
    assert "may not be iterable a second time" in finding.reason or "not known" in finding.reason


# ---------------------------------------------------------------------------------------
# Execution: forced by a tiny limit, the chunked script computes what the session did
# ---------------------------------------------------------------------------------------

verify = pytest.importorskip("ndif_opt.verify", exc_type=ImportError)

# gpt2 (124M parameters, fp32) reads its weights in ~0.25 ms a forward pass: a limit of
# 0.8 ms with no margin fits 3 iterations
TINY_LIMIT = Options(cost={"session-limit": 0.0008, "session-margin": 0.0})


def _verify_chunked(name: str, source: str, expected_requests: int, options: Options = TINY_LIMIT):
    result = optimize(source, filename=name, options=options)
    assert _findings(result, Status.APPLIED), [f.message + " " + str(f.reason) for f in result.findings]
    report = verify.verify_sources(source, result.code, filename=name, ignore_missing=result.unreturned,
                                   ignore=result.introduced)
    assert report.intended_ok, report.to_text() + "\n" + result.code
    assert not report.errors["optimized"], report.errors
    assert report.after.requests == expected_requests, report.to_text()
    assert result.costs[-1].after.requests == expected_requests
    return result, report


def test_chunked_dict_accumulator_gives_identical_results():
    source = (ROOT / "examples" / "prompt_loop.py").read_text()
    result, report = _verify_chunked("prompt_loop.py", source, 3)
    assert "_ndif_top_tokens.update(top_tokens)" in result.code
    assert "for prompt in PROMPTS[_ndif_chunk:_ndif_chunk + 3]:" in result.code


def test_chunked_list_accumulator_then_client_loop_gives_identical_output():
    source = (ROOT / "examples" / "client_effects.py").read_text()
    result, report = _verify_chunked("client_effects.py", source, 2)
    assert "list(enumerate(PROMPTS))[_ndif_chunk:_ndif_chunk + 2]" in result.code
    # the merged container is what the client loop reads; the chunk's copy is dropped so
    # that the next session does not upload it
    assert "del _ndif_rows" in result.code


def test_chunked_session_with_code_before_the_loop():
    source = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPT = "The quick brown fox jumps over the"
LAYERS = [0, 2, 4, 6, 8, 10]

with model.trace("The cat sat on the", remote=True):
    reference = model.transformer.h[5].output[:, -1].save()

shifted = {}
norms = []
for layer in LAYERS:
    with model.trace(PROMPT, remote=True):
        model.transformer.h[layer].output[:, -1] = reference
        logits = model.lm_head.output.save()
    shifted[layer] = logits[0, -1].argmax().item()
    norms.append(logits[0, -1].norm().item())

print(shifted, [round(n, 4) for n in norms])
'''
    # the code before the loop runs in every session: 1.1 ms fits it (the reference trace
    # and skip-insertion's caching trace, stopped after 10 of 12 layers: ~0.47 ms) and 3
    # iterations (~0.18 ms each on average: their skipped layers read no weights)
    options = Options(cost={"session-limit": 0.0011, "session-margin": 0.0})
    result, report = _verify_chunked("prefix.py", source, 2, options)
    assert "reference = model.transformer.h[5].output[:, -1]" in result.code  # replayed per session
    assert "_ndif_shifted.update(shifted)" in result.code and "_ndif_norms.extend(norms)" in result.code
    prefix_passes = (report.after.forward_passes - len([0, 2, 4, 6, 8, 10])) // 2
    assert prefix_passes >= 1 and report.after.forward_passes == 6 + 2 * prefix_passes



@pytest.mark.parametrize(
    "fill, reason",
    [
        ("top.insert(0, p)", "fills it out of order"),
        ("top[0] = p", "fills it out of order"),
        ("top.append(p)\n                if len(top) > 3:\n                    pass", "reads `top`"),
    ],
)
def test_containers_filled_out_of_order_are_not_split(fill, reason):
    source = f'''\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
with model.session(remote=True):
    top = list().save()
    for layer in range(126):
        for scale in range(64):
            with model.trace("Hello"):
                model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
                p = model.lm_head.output[0, -1].argmax()
                {fill}
'''
    result = optimize(source, select=[SessionChunking.id])
    assert result.code == source
    (finding,) = _findings(result)
    assert reason in finding.reason


def test_a_module_level_list_comprehension_is_sliced():
    source = SWEEP_405B.replace("for layer in range(len(model.model.layers)):", "for layer in LAYERS:").replace(
        'SCALES = [', 'LAYERS = [i for i in range(126)]\nSCALES = ['
    )
    result = optimize(source)
    assert "for _ndif_chunk in range(0, len(LAYERS), 63):" in result.code
    assert "for layer in LAYERS[_ndif_chunk:_ndif_chunk + 63]:" in result.code


def test_a_module_level_list_nothing_reads_after_comes_back_merged_across_sessions():
    # `norms` is filled and never read after, but the script ends with it (a result):
    # each chunk's session fills its own and the chunks are merged, as for `top`
    source = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The cat sat on the", "One two three", "Paris is the capital of",
           "The quick brown fox", "Once upon a time", "In the beginning"]
top = {}
norms = []
for prompt in PROMPTS:
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    norms.append(logits[0, -1].norm())
    top[prompt] = logits[0, -1].argmax().item()
print(top)
'''
    result, report = _verify_chunked("left.py", source, 2)
    assert "_ndif_norms.extend(norms)" in result.code and "_ndif_top.update(top)" in result.code, result.code
