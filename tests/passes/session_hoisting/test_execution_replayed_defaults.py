"""A statement replayed after the session that makes a function with a default argument
(`lambda x, w=w: x * w`) reads `w` where it stands: the records carry each iteration's `w`.
GPT-2 and Llama."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

SCORERS = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
scorers = {}
for layer in [0, 1]:
    with model.trace("one two three", remote=True):
        h = LAYERS[layer].output[0, -1].save()
    w = h.norm().item()
    scorers[layer] = lambda x, w=w: x * w
print({layer: round(f(1.0), 4) for layer, f in scorers.items()})
"""


@both
def test_a_default_argument_of_a_replayed_lambda_is_recorded_per_iteration(family):
    result, report = optimized_and_verified(SCORERS, family)
    assert report.after.requests == 1, report.to_text() + result.code
