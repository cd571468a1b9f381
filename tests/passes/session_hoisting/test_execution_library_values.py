"""A value a library function of plain data computes on your machine (`statistics.median`)
travels to the session like any number: a loop whose `if` reads it is one session.
GPT-2 and Llama."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

THRESHOLD = """\
import statistics
from nnsight import LanguageModel
model = LanguageModel("REPO")
scores = [0.1, 0.7, 0.4, 0.9]
threshold = statistics.median(scores)
kept = []
for word, score in zip(["red", "green", "blue", "gray"], scores):
    if score > threshold * 10:
        continue
    with model.trace(f"I painted my house {word}", remote=True):
        n = LAYERS[1].output[0, -1].norm().save()
    kept.append((word, round(n.item(), 3)))
print(kept)
"""


@both
def test_a_median_computed_here_travels_to_the_session(family):
    result, report = optimized_and_verified(THRESHOLD, family)
    assert (report.before.requests, report.after.requests) == (4, 1), report.to_text() + result.code
