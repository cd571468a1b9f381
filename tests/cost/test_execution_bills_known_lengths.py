"""Bills against measurement for calls and loops whose count the walk knows: a cached helper called
again with the same arguments, `zip` with a list a comprehension built, a range bound to a name
again, a loop over a literal of pairs holding lists by name, an instance called as a function, a
key function of `sorted` and `max`, a cached helper called in a comprehension over prompts that
repeat, a `continue` decided by a threshold computed of known numbers (`statistics.median`,
`round`). Each script runs on GPT-2 and Llama through the shared harness; the bill before and
after must be what verify measures."""

from __future__ import annotations

import pytest

pytest.importorskip("nnsight")

from execution import both, optimized_and_verified  # noqa: E402

CACHED = """\
import functools
from nnsight import LanguageModel
model = LanguageModel("REPO")

@functools.lru_cache(maxsize=None)
def norm_at(layer):
    with model.trace("a b", remote=True):
        n = LAYERS[layer].output.norm().save()
    return n.item()

vals = [norm_at(0) for _ in range(5)]
for layer in range(0, 4, 2):
    a = norm_at(layer)
again = norm_at(2)
print(vals, a, again)
"""

ZIPPED = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
TEXTS = ["The bank of the river", "The bank approved the loan"]
ids = [model.tokenizer(t, return_tensors="pt")["input_ids"] for t in TEXTS]
vecs = []
for t, x in zip(TEXTS, ids):
    with model.trace(x, remote=True):
        vecs.append(LAYERS[1].output[0, 1].sum().save())
print([v.item() for v in vecs])
"""

REBOUND = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
STEPS = range(0, 4, 2)

def norms():
    out = []
    for L in STEPS:
        with model.trace("a b c", remote=True):
            out.append(LAYERS[L].output.norm().save())
    return [o.item() for o in out]

first = norms()
STEPS = range(0, 6, 2)
second = norms()
print(first, second)
"""


# a loop over a literal of pairs holding names: the inner loop's length is the list's
NAMED_PAIRS = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
POS = ["good", "great", "nice"]
NEG = ["bad", "awful"]
norms = {"pos": [], "neg": []}
for key, words in (("pos", POS), ("neg", NEG)):
    for w in words:
        with model.trace(w, remote=True):
            n = LAYERS[1].output.norm().save()
        norms[key].append(n.item())
print(norms)
"""


# an instance called as a function runs its `__call__`
CALLED_INSTANCE = """\
from nnsight import LanguageModel


class Probe:
    def __init__(self, model):
        self.model = model

    def __call__(self, prompt):
        with self.model.trace(prompt, remote=True):
            top = self.model.lm_head.output[0, -1].argmax().save()
        return int(top)


model = LanguageModel("REPO")
probe = Probe(model)
print([probe(p) for p in ["a b", "c d", "e f"]])
"""


# a function `sorted` calls once per item, as its key
SORTED_BY_A_TRACE = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
PROMPTS = ["a b", "c d", "e f"]


def top(prompt):
    with model.trace(prompt, remote=True):
        t = model.lm_head.output[0, -1].argmax().save()
    return int(t)


print(sorted(PROMPTS, key=top), max(PROMPTS[:2], key=top))
"""


# a cached helper over prompts that repeat, in a comprehension: a prompt seen sends nothing
CACHED_COMPREHENSION = """\
import functools
from nnsight import LanguageModel
model = LanguageModel("REPO")


@functools.lru_cache(maxsize=None)
def next_token(prompt):
    with model.trace(prompt, remote=True):
        t = model.lm_head.output[0, -1].argmax().save()
    return int(t)


DATA = ["a cat", "a dog", "a cat", "a bird", "a dog"]
print([next_token(p) for p in DATA])
"""

# a threshold computed on the client from known numbers decides which iterations trace
THRESHOLD = """\
import statistics
from nnsight import LanguageModel
model = LanguageModel("REPO")
scores = [0.1, 0.7, 0.4, 0.9]
cutoff = round(statistics.median(scores), 2)
kept = []
for word, score in zip(["red", "green", "blue", "gray"], scores):
    if score < cutoff:
        continue
    with model.trace(f"I painted my house {word}", remote=True):
        n = LAYERS[1].output[0, -1].norm().save()
    kept.append((word, round(n.item(), 3)))
print(kept)
"""

# `tracer.stop()` after the layer the loop variable chooses: each trace evaluates the layers up
# to that one (1 + 3 here), in a loop and in nested comprehensions over a helper
STOPPED_SWEEP = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
tops = []
for L in [0, 2]:
    with model.trace("The tower is in", remote=True) as tracer:
        h = LAYERS[L].output
        top = model.lm_head(h)[0, -1].argmax().save()
        tracer.stop()
    tops.append(int(top))
print(tops)
"""

STOPPED_GRID = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")

def top_token(prompt, layer):
    with model.trace(prompt, remote=True) as tracer:
        top = model.lm_head(LAYERS[layer].output)[0, -1].argmax().save()
        tracer.stop()
    return int(top)

grid = [[top_token(p, L) for L in range(0, 4, 3)] for p in ["Hi there", "Good morning"]]
print(grid)
"""

# a comprehension's `if` decided for each known word: a trace only for the words it keeps
FILTERED = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")

def top(word):
    with model.trace(f"A {word} is a", remote=True):
        t = model.lm_head.output[0, -1].argmax().save()
    return int(t)

words = ["cat", "dog", "car", "tree"]
picked = [top(w) for w in words if w.startswith("c") and not w.isdigit()]
print(picked)
"""


@pytest.mark.parametrize("template, requests",
                         [(CACHED, 2), (ZIPPED, 2), (REBOUND, 5), (NAMED_PAIRS, 5), (CALLED_INSTANCE, 3),
                          (SORTED_BY_A_TRACE, 5), (CACHED_COMPREHENSION, 3), (THRESHOLD, 2), (STOPPED_SWEEP, 2),
                          (STOPPED_GRID, 4), (FILTERED, 2)],
                         ids=["cached", "zipped", "rebound", "named-pairs", "called-instance", "sorted-by-a-trace",
                              "cached-comprehension", "threshold", "stopped-sweep", "stopped-grid", "filtered"])
@both
def test_the_bill_is_what_runs(family, template, requests):
    result, report = optimized_and_verified(template, family)
    first, last = result.costs[0].before, result.costs[-1].after
    assert report.before.requests == requests
    assert (first.requests, first.forward_passes) == (report.before.requests, report.before.forward_passes)
    assert (last.requests, last.forward_passes) == (report.after.requests, report.after.forward_passes)


# a model a class makes of its constructor's parameter (`self.model = LanguageModel(name)`,
# `Runner("REPO")`): its repo was not known, and the bill took a default model's 32 layers
# a pass where GPT-2 evaluates 12 (a trial's script: 96 layer evaluations billed, 36 ran)
MODEL_OF_A_CONSTRUCTOR_PARAMETER = '''
from nnsight import LanguageModel


class Runner:
    def __init__(self, name, position=-1):
        self.model = LanguageModel(name)
        self.position = position

    def top(self, prompt):
        with self.model.trace(prompt, remote=True):
            t = self.model.lm_head.output[0, self.position].argmax().save()
        return t.item()


runner = Runner("REPO")
tops = [runner.top(p) for p in ["The cat sat on the", "A dog ran to the"]]
'''


@both
def test_a_model_a_class_makes_of_its_parameter_is_billed_as_that_model(family):
    result, report = optimized_and_verified(MODEL_OF_A_CONSTRUCTOR_PARAMETER, family)
    assert result.costs[0].before.layer_evaluations == report.before.layer_calls, report.to_text()


# a saved value appended to a list the session saves, and read after the loop by its own
# name: one object, written once in the result; the bill counted it twice and said the
# safe rewrite downloads 1.33x more where the download fell (a trial's script)
SAVED_AND_HELD_BY_A_LIST = '''
from nnsight import LanguageModel

model = LanguageModel("REPO")
acts = []
for p in ["The sky is", "Grass is", "Blood is"]:
    with model.trace(p, remote=True):
        logits = model.lm_head.output.save()
    acts.append(logits)
best = logits
'''


@both
def test_a_saved_value_a_saved_list_holds_is_billed_once(family):
    result, report = optimized_and_verified(SAVED_AND_HELD_BY_A_LIST, family)
    assert result.costs[-1].after.download_bytes <= result.costs[0].before.download_bytes, result.costs


CACHED_LAYERS = """\
from nnsight import LanguageModel
model = LanguageModel("REPO")
with model.trace("Caches are big", remote=True) as tracer:
    cache = tracer.cache(modules=[LAYERS[i] for i in range(2)])
norms = [cache[path].output.norm().item() for path in cache.keys()]
print(norms)
"""


@both
def test_what_a_trace_cache_records_is_billed(family):
    # `tracer.cache(modules=[...])` comes back with the request: each layer's output (the
    # bill counted none of it: 1.3 KB shown for 1.1 MB of Llama-3.1-8B's layers)
    result, report = optimized_and_verified(CACHED_LAYERS, family)
    first = result.costs[0].before
    assert not first.download_unknown.counts and first.download_bytes > 2 * 2 * 64, first
