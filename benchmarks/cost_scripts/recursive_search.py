"""A function that calls itself, a remote trace in each call: a bisection over layers.

How deep the recursion goes depends on what the traces return (here it stops at a depth
of 3, four calls, whatever they return); the cost model counts its runs as ``N``, named
"the recursion of `search`". ``benchmarks/cost_accuracy.py`` gives it the depth (``TRIPS``).
"""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPT = "Water boils at a temperature of"


def search(lo, hi, depth=0):
    with model.trace(PROMPT, remote=True):
        norm = model.transformer.h[(lo + hi) // 2].output[0, -1].norm().save()
    if depth == 3:
        return lo
    mid = (lo + hi) // 2
    if norm.item() > 1.0:  # the half the search goes on in
        return search(lo, mid, depth + 1)
    return search(mid, hi, depth + 1)


print("layer", search(0, 12))
