"""A function of the script runs on the server only when it goes there by its code, and a
call runs the `def` that stands above it (issue "Never wrong": a new user's scripts).

- a function wrapped by `@functools.cache` / `@lru_cache(...)` is an object that pickles by
  its name in `__main__`, which the server does not have (`Can't get attribute 'scale'`),
  and its cache would be the server's copy: its calls stay on your machine (the loop's
  session records what they need and replays them after it);
- a helper the script defines twice (a notebook cell that redefines `probe`) is not one
  function: the session used to add `remote=` to the last `def` and pass `remote=False` to
  calls of the first (`TypeError: probe() got an unexpected keyword argument 'remote'`).
"""

from __future__ import annotations

from execution import both, optimized_and_verified

CACHED_SCALE = '''
    from functools import cache
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    @cache
    def scale():
        return 2.0


    vals = []
    for prompt in ["The cat sat on the", "One two three"]:
        with model.trace(prompt, remote=True):
            m = LAYERS[0].output.mean().save()
        vals.append(m.item() * scale())
'''


@both
def test_a_cached_function_called_after_the_traces_stays_on_your_machine(family):
    result, report = optimized_and_verified(CACHED_SCALE, family, let_go=frozenset({"m", "prompt"}))
    assert report.after.requests == 1, report.to_text() + result.code
    after_session = result.code[result.code.index("with model.session"):].split("\n")[1:]
    inside = next(k for k, line in enumerate(after_session) if not line.startswith(" "))
    assert not any("scale()" in line for line in after_session[:inside]), result.code  # called after it


CACHED_TOKEN = '''
    from functools import lru_cache
    from nnsight import LanguageModel

    model = LanguageModel("REPO")


    @lru_cache(maxsize=None)
    def token_id(word):
        return model.tokenizer.encode(word)[0]


    with model.trace("The sun is", remote=True):
        logits = model.lm_head.output[0, -1].save()
    hot = logits[token_id(" hot")].item()
'''


@both
def test_a_cached_token_lookup_is_not_pushed_into_the_trace(family):
    result, report = optimized_and_verified(CACHED_TOKEN, family)
    assert "token_id(" not in result.code.split("with model.trace", 1)[1].split("\nhot", 1)[0], result.code


REDEFINED = '''
    from nnsight import LanguageModel

    model = LanguageModel("REPO")
    LAYER_IDS = [0, 1]


    def probe(prompt, layer):
        with model.trace(prompt, remote=True):
            out = LAYERS[layer].output.mean().save()
        return out.item()


    first = [probe("Tea is", l) for l in LAYER_IDS]


    def probe(prompt, layer):  # the same name, another metric
        with model.trace(prompt, remote=True):
            out = LAYERS[layer].output.max().save()
        return out.item()


    second = [probe("Coffee is", l) for l in LAYER_IDS]
'''


@both
def test_a_helper_defined_twice_keeps_each_call_on_its_own_def(family):
    result, report = optimized_and_verified(REDEFINED, family)
    assert "remote=False" not in result.code, result.code


MODULE_CACHE = '''\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
_CACHE = {}


def get_acts(prompt):
    if prompt not in _CACHE:
        with model.trace(prompt, remote=True):
            _CACHE[prompt] = model.transformer.h[4].output.save()
    return _CACHE[prompt]


norms = [get_acts(p).norm().item() for p in ["hello there", "general kenobi"]]
print(norms, len(_CACHE))
'''


def test_a_helper_that_fills_a_module_object_in_its_trace_is_not_hoisted():
    # in a session its block would fill the server's `_CACHE`: yours would stay empty, and
    # the finding used to call that "a correctness fix"
    from ndif_opt import Status, optimize

    result = optimize(MODULE_CACHE)
    assert "model.session(" not in result.code, result.code
    refused = [f for f in result.findings if f.pass_id == "session-hoisting" and f.status is Status.SKIPPED]
    assert refused and "`get_acts` fills `_CACHE` inside its nnsight block" in refused[0].reason
