"""Bills of loops the cost walk must count to what runs: a loop stopped by a `break` its
loop variable and constants decide, iterations a decided `continue` skips, lengths of
sequences the walk knows (`zip` of known lists, a `range` bound again later), a
threshold computed of known numbers (`statistics.median`, `max`, `round`), and a cached
helper called again with the same arguments."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from ndif_opt.analysis.facts import analyze
from ndif_opt.cost_model import explain
from ndif_opt.options import Options

HEAD = 'from nnsight import LanguageModel\nmodel = LanguageModel("openai-community/gpt2")\n'


def cost(body: str):
    return explain(analyze(cst.parse_module(HEAD + textwrap.dedent(body))), Options()).cost


TRACE = """\
        with model.trace("a b c", remote=True):
            v = model.transformer.h[layer].output.mean().save()
"""


@pytest.mark.parametrize(
    "header, requests",
    [
        ("for layer in range(12):\n    if layer > 3:\n        break\n", 4),
        ("for layer in range(12):\n    if layer >= MAX_LAYER:\n        break\n", 6),
        ("for layer in range(12):\n    if not layer < MAX_LAYER:\n        print('done')\n        break\n", 6),
        ("for layer in [0, 2, 4, 6, 8]:\n    if layer + 2 > 6:\n        break\n", 3),
        ("for layer in range(1000):\n    if layer == 10:\n        break\n", 10),
        ("for layer in range(12):\n    if layer < 9:\n        continue\n", 3),
        ("for layer in range(12):\n    if layer > 3 and layer < 10:\n        continue\n", 6),
        ("for layer in range(12):\n    if layer <= 3:\n        pass\n    else:\n        break\n", 4),
    ],
)
def test_a_loop_is_counted_to_the_break_its_variable_decides(header, requests):
    body = "MAX_LAYER = 6\n" + header + textwrap.indent(textwrap.dedent(TRACE), "    ")
    assert cost(body).requests == requests


@pytest.mark.parametrize(
    "header",
    [
        # the test reads a name the body binds: not known before running
        "for layer in range(12):\n    limit = layer * 2\n    if limit > 20:\n        break\n",
        # the `break` is an inner loop's
        "for layer in range(12):\n    for i in range(2):\n        if layer > 3:\n            break\n",
    ],
)
def test_a_break_the_walk_cannot_decide_leaves_the_count(header):
    body = header + textwrap.indent(textwrap.dedent(TRACE), "    ")
    assert cost(body).requests == 12


@pytest.mark.parametrize(
    "setup, requests",
    [
        ("import statistics\nLIMIT = statistics.median([2, 4, 9])\n", 4),  # 4: layers 0-3
        ("from statistics import mean\nLIMIT = mean([2, 4, 9])\n", 5),
        ("import statistics as st\nLIMIT = round(st.mean([2, 4, 9]))\n", 5),
        ("LIMIT = max(abs(-3), sum([1, 1]))\n", 3),
        # the script's own `max`, a value the walk does not know: not computed
        ("def max(*values):\n    return 0\nLIMIT = max(3, 8)\n", 12),
        ("import statistics\nLIMIT = statistics.median(open('f').read())\n", 12),
    ],
)
def test_a_threshold_computed_of_known_numbers_decides_the_break(setup, requests):
    body = setup + "for layer in range(12):\n    if layer >= LIMIT:\n        break\n" + \
        textwrap.indent(textwrap.dedent(TRACE), "    ")
    assert cost(body).requests == requests


def test_a_continue_on_a_known_string_skips_its_iterations():
    body = """\
    PROMPTS = ["hi", "The history of Rome is long", "ok", "Science advances by experiment"]
    for prompt in PROMPTS:
        if len(prompt.split()) < 3:
            continue
        for layer in range(12):
            if layer > 6:
                break
            with model.trace(prompt, remote=True):
                v = model.transformer.h[layer].output.mean().save()
    """
    found = cost(body)
    assert (found.requests, found.forward_passes, found.layer_evaluations) == (14, 14, 168)


# -- sequences whose length the walk knows -------------------------------------------------


def test_zip_of_a_list_and_a_comprehension_over_it_has_their_length():
    body = """\
    TEXTS = ["The bank of the river", "The bank approved the loan"]
    ids = [model.tokenizer(t, return_tensors="pt")["input_ids"] for t in TEXTS]
    for t, x in zip(TEXTS, ids):
        with model.trace(x, remote=True):
            v = model.transformer.h[6].output[0, 1].save()
    """
    assert cost(body).requests == 2


def test_a_range_bound_to_a_name_twice_keeps_each_length():
    body = """\
    LAYERS = range(0, 12, 4)
    def norms():
        for L in LAYERS:
            with model.trace("a b", remote=True):
                v = model.transformer.h[L].output.norm().save()
    norms()
    LAYERS = range(0, 12, 3)
    norms()
    """
    assert cost(body).requests == 3 + 4


# -- a cached helper ---------------------------------------------------------------------------

CACHED = """\
import functools
{decorator}
def norm_at(layer):
    with model.trace("a b", remote=True):
        n = model.transformer.h[layer].output.norm().save()
    return n.item()
"""


@pytest.mark.parametrize(
    "decorator, calls, requests",
    [
        ("@functools.lru_cache(maxsize=None)", "vals = [norm_at(0) for _ in range(5)]", 1),
        ("@functools.cache", "a = norm_at(0)\nb = norm_at(1)\nc = norm_at(0)", 2),
        ("@functools.lru_cache", "for layer in range(0, 12, 3):\n    a = norm_at(layer)\nb = norm_at(0)", 4),
        ("@functools.lru_cache(maxsize=1)", "a = norm_at(0)\nb = norm_at(1)\nc = norm_at(0)", 3),
        ("@functools.lru_cache(maxsize=2)", "a = norm_at(0)\nb = norm_at(1)\nc = norm_at(0)", 2),
        ("@functools.lru_cache(maxsize=0)", "a = norm_at(0)\nb = norm_at(0)", 2),
        ("", "a = norm_at(0)\nb = norm_at(0)", 2),
        ("@functools.cache", "a = norm_at(0)\nb = norm_at(layer=0)", 2),  # (a key of its own)
    ],
)
def test_a_cached_helper_called_again_with_the_same_arguments_sends_nothing(decorator, calls, requests):
    assert cost(CACHED.format(decorator=decorator) + calls + "\n").requests == requests


def test_a_cached_call_whose_arguments_are_not_known_is_counted_and_said():
    body = CACHED.format(decorator="@functools.lru_cache(maxsize=None)") + \
        "import random\nvals = [norm_at(random.randrange(12)) for _ in range(5)]\n"
    found = explain(analyze(cst.parse_module(HEAD + body)), Options())
    assert found.cost.requests == 5
    assert any("`norm_at` is cached" in note for note in found.notes)


def test_a_helper_called_in_a_while_test_sends_once_per_iteration():
    body = '''\
def next_piece(text):
    with model.trace(text, remote=True):
        top = model.lm_head.output[0, -1].argmax().save()
    return str(top.item())


text, steps = "Once", 0
while steps < 4 and (piece := next_piece(text)) != ".":
    text += piece
    steps += 1
'''
    requests = cost(body).requests
    assert not isinstance(requests, int) and [loop.header.split()[0] for loop in requests.loops] == ["while"], \
        requests


@pytest.mark.parametrize("prompt", ['"lorem ipsum " * 3000', 'PREFIX + "lorem ipsum " * 3000', '3000 * "lorem ipsum "'])
def test_a_prompt_made_longer_by_plus_and_times_has_its_length(prompt):
    # 100 traces of a ~9,000-token prompt on Llama-3.1-405B take ~2 hours of server time: one
    # session would pass NDIF's hour; counted as 16 tokens it was planned as one (42 s). (The
    # layer `layer % 126` keeps trace-fusion from running the loop in one forward pass.)
    source = f'''\
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-405B")
PREFIX = "Read this: "
doc = {prompt}
norms = []
for layer in range(100):
    with model.trace(doc, remote=True):
        n = model.model.layers[layer % 126].output.norm().save()
    norms.append(n.item())
'''
    found = explain(analyze(cst.parse_module(source)), Options())
    assert found.cost.seconds > 3600, found.cost
    assert not any("is not a literal string" in note for note in found.notes), found.notes
    from ndif_opt import optimize

    result = optimize(source)
    assert result.costs[-1].after.requests == 3, [f.message for f in result.findings]
