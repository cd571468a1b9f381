"""skip-insertion builds the statements it inserts node by node: they are the nodes a parse
of their code gives (ndif_opt/passes/skip_insertion.py, ``new_statements``); the comment
above them says what each iteration does at its layer."""

from __future__ import annotations

import libcst as cst
import pytest

from ndif_opt import optimize


@pytest.mark.parametrize(
    "model, prompt, layers, stop, index",
    [
        ("model", ["PROMPT"], "model.transformer.h", "6", "6"),
        ("model", ["PROMPT", "x.y", "0", "1"], "model.h", "10", "layer"),
        ("lm.inner", ["prompts[0]", "max_new_tokens = 3"], "lm.inner.model.layers", "max(LAYERS)", "layer"),
        ("model", ["( PROMPT )", "x "], "( model.model . layers )", "len( x ) - 1", "n"),
        ("model", ["None", "True"], "layers[0]", "0", "0x10"),
        ("model", ["(\n    PROMPT  # the prompt\n)", "x"], "(model.model\n  .layers)", "len(x) - 1", "n  # last\n"),
    ],
)
def test_skip_insertion_builds_what_its_code_parses_to(model, prompt, layers, stop, index):
    from ndif_opt.passes.skip_insertion import new_statements

    names = ("_ndif_cache", "_ndif_i", "_ndif_tracer")
    cache_code = (
        "_ndif_cache = list()\n"
        f"with {model}.trace({', '.join(prompt)}) as _ndif_tracer:\n"
        f"    for _ndif_i in range({stop}):\n"
        f"        _ndif_cache.append({layers}[_ndif_i].output)\n"
        "    _ndif_tracer.stop()\n"
    )
    skip_code = f"for _ndif_i in range({index}):\n    {layers}[_ndif_i].skip(_ndif_cache[_ndif_i])\n"
    parsed = [*cst.parse_module(cache_code).body, cst.parse_statement(skip_code)]
    built = new_statements(model, prompt, layers, stop, index, names)
    assert cst.Module(body=built).deep_equals(cst.Module(body=parsed))


READS_DESCENDING = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    norms = list().save()
    for layer in [11, 7, 3]:
        with model.trace("hello"):
            norms.append(model.transformer.h[layer].output[0, -1].norm())
'''


def test_the_comment_says_what_each_iteration_does_at_its_layer():
    """A loop that only reads its layer is not said to patch it."""
    read = optimize(READS_DESCENDING).code
    patching = ("model.transformer.h[layer].output[0, -1] = 0\n"
                "            norms.append(model.lm_head.output[0, -1].max())")
    patched = optimize(READS_DESCENDING.replace(
        "norms.append(model.transformer.h[layer].output[0, -1].norm())", patching)).code
    assert "# layers before the read one are the same in every iteration" in read, read
    assert "# layers before the patched one are the same in every iteration" in patched, patched
