"""session-hoisting's cases of what crosses the session's edge: a failure handled per request,
inputs computed on your machine, results stored for the caller, names handed over or let go,
retries, progress bars, library functions that send their own requests (see cases.py)."""

from __future__ import annotations

from ndif_opt.passes.base import Case

# a value the session computes at module level and only the session reads (`shift`)
_PATCHED_TOP = """\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.trace("the cat sat on the", remote=True):
    clean = model.transformer.h[1].output.save()
shift = clean[0, -1] - clean[0, 0]
with model.trace("one two three", remote=True):
    model.transformer.h[1].output[0, -1] += shift
    top = model.lm_head.output[0, -1].argmax().save()
print("patched top", top.item())
"""

EDGE_CASES = (
    Case(
        name="a failure handled per request: the session falls back on the loop as written",
        before="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    try:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
    except Exception:
        time.sleep(1)
""",
        after="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
try:
    with model.session(remote=True):
        for prompt in ["a", "b"]:
            with model.trace(prompt):
                out = model.lm_head.output.save()
except Exception:  # the session failed: run the code as written, each failure handled on its own
    for prompt in ["a", "b"]:
        try:
            with model.trace(prompt, remote=True):
                out = model.lm_head.output.save()
        except Exception:
            time.sleep(1)
""",
    ),
    Case(
        name="an error record per request: the `try` runs in the session, each failure handled there",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
records = []
for prompt in ["a", "b"]:
    try:
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output.save()
        word = model.tokenizer.decode(logits[0, -1].argmax())
        record = {"prompt": prompt, "word": word}
    except Exception as err:
        record = {"prompt": prompt, "error": str(err)}
    records.append(record)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    records = list().save()
    _ndif_log = dict().save()  # the values the replay after the session reads, by name
    for prompt in ["a", "b"]:
        try:
            with model.trace(prompt):
                logits = model.lm_head.output.save()
            word = model.tokenizer.decode(logits[0, -1].argmax())
            record = {"prompt": prompt, "word": word}
        except Exception as err:
            record = {"prompt": prompt, "error": str(err)}
        records.append(record)
    try:
        _ndif_log["word"] = word
    except NameError:  # not bound on every path: left unbound, as the loop would leave it
        pass
    _ndif_log["record"] = record
if "word" in _ndif_log:
    word = _ndif_log["word"]
record = _ndif_log["record"]
""",
    ),
    Case(
        name="inputs computed on your machine run before the session, which takes them in turn",
        before="""\
import json
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for name in ["a", "b"]:
    scale = json.loads(json.dumps(len(name)))
    with model.trace(name, remote=True):
        model.transformer.h[0].output[:] *= scale
        out = model.lm_head.output.save()
""",
        after="""\
import json
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
_ndif_items = list(["a", "b"])  # the loop's items, listed once: both loops go over them
_ndif_inputs = []  # what the session needs from your machine, in the order it needs it
for name in _ndif_items:
    scale = json.loads(json.dumps(len(name)))
    _ndif_inputs.append(scale)
with model.session(remote=True):
    _ndif_feed = iter(_ndif_inputs)  # taken in turn where each was computed
    for name in _ndif_items:
        scale = next(_ndif_feed)
        with model.trace(name):
            model.transformer.h[0].output[:] *= scale
            out = model.lm_head.output.save()
""",
    ),
    Case(
        name="results stored into a dict the caller passes in: the replay stores them",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def probe(prompt):
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


def sweep(prompts, results):
    for p in prompts:
        results[p] = probe(p)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def probe(prompt, remote=True):
    with model.trace(prompt, remote=remote):
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


def sweep(prompts, results):
    with model.session(remote=True):
        _ndif_rows = list().save()  # one record per iteration, replayed after the session
        for p in prompts:
            results_value = probe(p, remote=False)
            _ndif_rows.append((p, results_value))
    for p, results_value in _ndif_rows:
        results[p] = results_value
""",
    ),
    Case(
        name="results appended to a list on `self`: the session computes them, the replay appends",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


class Sweep:
    def __init__(self):
        self.records = []

    def probe(self, prompt):
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].argmax().item().save()
        return top

    def run(self, prompts):
        for p in prompts:
            self.records.append(self.probe(p))
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


class Sweep:
    def __init__(self):
        self.records = []

    def probe(self, prompt, remote=True):
        with model.trace(prompt, remote=remote):
            top = model.lm_head.output[0, -1].argmax().item().save()
        return top

    def run(self, prompts):
        with model.session(remote=True):
            _ndif_rows = list().save()  # one record per iteration, replayed after the session
            for p in prompts:
                probe_result = self.probe(p, remote=False)
                _ndif_rows.append(probe_result)
        for probe_result in _ndif_rows:
            self.records.append(probe_result)
""",
    ),
    Case(
        name="an input computed on your machine from a remote result stays a request per iteration",
        before="""\
import json
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompt = "a"
for step in range(3):
    with model.trace(prompt, remote=True):
        top = model.lm_head.output[0, -1].argmax().item().save()
    prompt = json.dumps([prompt, top])
""",
        reason="`prompt` is computed by code that must run on your machine and is also used by the remote part",
    ),
    Case(
        name="a `try` whose local code runs before its remote work",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    try:
        print("sending", prompt)
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
    except Exception:
        print("failed")
""",
        reason="`print(\"sending\", prompt)` runs inside a `try` before remote work",
    ),
    Case(
        name="a handler that skips the rest of the iteration, before remote work",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    try:
        with model.trace(prompt, remote=True):
            out = model.lm_head.output.save()
        print(out.shape)
    except Exception:
        continue
    with model.trace(prompt, remote=True):
        more = model.lm_head.output.save()
""",
        reason="may end the iteration early, before remote work that follows it",
    ),
    Case(
        name="a handler that skips the rest of the iteration: the session records where it did",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    try:
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].argmax().save()
    except Exception:
        continue
    print(prompt, top.item())
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in ["a", "b"]:
        _ndif_it = list()  # this iteration's records, and which way its branches went, in order
        _ndif_rows.append(_ndif_it)
        try:
            with model.trace(prompt):
                top = model.lm_head.output[0, -1].argmax().save()
        except Exception:
            _ndif_it.append(True)
            continue
        _ndif_it.append(False)
        _ndif_it.append({"prompt": prompt, "top": top.item()})
for _ndif_it in _ndif_rows:
    _ndif_items = iter(_ndif_it)  # taken in the order the session recorded them
    if next(_ndif_items):
        continue
    _ndif_row = next(_ndif_items)  # what the session recorded for the statement below
    prompt = _ndif_row["prompt"]
    print(prompt, _ndif_row["top"])
""",
    ),
    Case(
        name="a function reading a name the session computes takes it as an argument",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top(prompt, alpha):
    with model.trace(prompt, remote=True):
        model.transformer.h[6].output[0, -1] += alpha * vec
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


with model.trace("I love it", remote=True):
    vec = model.transformer.h[6].output[0, -1].save()
tops = [steered_top("The movie was", alpha) for alpha in (1.0, 2.0, 4.0)]
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top(prompt, alpha, remote=True, *, vec):
    with model.trace(prompt, remote=remote):
        model.transformer.h[6].output[0, -1] += alpha * vec
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


with model.session(remote=True):
    with model.trace("I love it"):
        vec = model.transformer.h[6].output[0, -1].save()
    tops = [steered_top("The movie was", alpha, remote=False, vec=vec) for alpha in (1.0, 2.0, 4.0)].save()
""",
    ),
    Case(
        name="a function the session's functions call reads a name the session computes",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def push(alpha):
    return alpha * vec


def steered_top(prompt, alpha):
    with model.trace(prompt, remote=True):
        model.transformer.h[6].output[0, -1] += push(alpha)
        top = model.lm_head.output[0, -1].argmax().item().save()
    return top


for alpha in (1.0, 2.0):
    with model.trace("I love it", remote=True):
        vec = model.transformer.h[6].output[0, -1].save()
    print(steered_top("The movie was", alpha))
""",
        reason="it is called by `steered_top`, not by the session itself",
    ),
    Case(
        name="a module-level name the session computes comes back: it is a result of the script",
        before=_PATCHED_TOP,
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("the cat sat on the"):
        clean = model.transformer.h[1].output.save()
    shift = (clean[0, -1] - clean[0, 0]).save()
    with model.trace("one two three"):
        model.transformer.h[1].output[0, -1] += shift
        top = model.lm_head.output[0, -1].argmax().save()
print("patched top", top.item())
""",
    ),
    Case(
        name="a notebook's kernel keeps the module names the session binds",
        notebook=True,
        before=_PATCHED_TOP,
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    with model.trace("the cat sat on the"):
        clean = model.transformer.h[1].output.save()
    shift = (clean[0, -1] - clean[0, 0]).save()
    with model.trace("one two three"):
        model.transformer.h[1].output[0, -1] += shift
        top = model.lm_head.output[0, -1].argmax().save()
print("patched top", top.item())
""",
    ),
    Case(
        name="what a function saved and returned is let go when nothing after reads it",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def lens(prompt, layer):
    with model.trace(prompt, remote=True):
        logits = model.lm_head(model.transformer.ln_f(model.transformer.h[layer].output)).save()
    return logits


best = []
for layer in range(12):
    logits = lens("The Eiffel Tower is in", layer)
    best.append(logits[0, -1].argmax().item())
print(best)
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def lens(prompt, layer, remote=True):
    with model.trace(prompt, remote=remote):
        logits = model.lm_head(model.transformer.ln_f(model.transformer.h[layer].output)).save()
    return logits


with model.session(remote=True):
    best = list().save()
    for layer in range(12):
        logits = lens("The Eiffel Tower is in", layer, remote=False)
        best.append(logits[0, -1].argmax().item())
    logits = None  # nothing after the session reads it: let go here, not downloaded
print(best)
""",
    ),
    Case(
        name="retry loop: the same retry goes around the session",
        before="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in ["a", "b"]:
    for attempt in range(3):
        try:
            with model.trace(prompt, remote=True):
                outs.append(model.lm_head.output.save())
            break
        except Exception as err:
            print(f"{prompt}: attempt {attempt} failed: {err}")
            time.sleep(2 ** attempt)
print(len(outs))
""",
        after="""\
import time
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for _ndif_attempt in range(3):  # the requests' retry, now around the whole session
    try:
        with model.session(remote=True):
            outs = list().save()
            for prompt in ["a", "b"]:
                for attempt in range(3):
                    try:
                        with model.trace(prompt):
                            outs.append(model.lm_head.output)
                        break
                    except Exception as err:
                        print(f"{prompt}: attempt {attempt} failed: {err}")
                        time.sleep(2 ** attempt)
        break
    except Exception as err:
        print(f"attempt {_ndif_attempt} of the session failed: {err!r}")
        time.sleep(2 ** _ndif_attempt)
        if _ndif_attempt == 2:
            raise
print(len(outs))
""",
    ),
    Case(
        name="retry counted by a name: it gives up after its last attempt, computed again",
        before="""\
import time
from nnsight import LanguageModel

MAX_ATTEMPTS = 3
model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in ["a", "b"]:
    for attempt in range(MAX_ATTEMPTS):
        try:
            with model.trace(prompt, remote=True):
                outs.append(model.lm_head.output.save())
            break
        except ConnectionError:
            time.sleep(2 ** attempt)
print(len(outs))
""",
        after="""\
import time
from nnsight import LanguageModel

MAX_ATTEMPTS = 3
model = LanguageModel("openai-community/gpt2")
for _ndif_attempt in range(MAX_ATTEMPTS):  # the requests' retry, now around the whole session
    try:
        with model.session(remote=True):
            outs = list().save()
            for prompt in ["a", "b"]:
                for attempt in range(MAX_ATTEMPTS):
                    try:
                        with model.trace(prompt):
                            outs.append(model.lm_head.output)
                        break
                    except ConnectionError:
                        time.sleep(2 ** attempt)
        break
    except ConnectionError:
        time.sleep(2 ** _ndif_attempt)
        if _ndif_attempt == MAX_ATTEMPTS - 1:
            raise
print(len(outs))
""",
    ),
    Case(
        name="retry whose last attempt cannot be computed again: left as it is",
        before="""\
import time
from nnsight import LanguageModel

DELAYS = [1, 2, 4]
model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in ["a", "b"]:
    for attempt in range(len(DELAYS)):
        try:
            with model.trace(prompt, remote=True):
                outs.append(model.lm_head.output.save())
            break
        except ConnectionError:
            time.sleep(DELAYS[attempt])
print(len(outs))
""",
        reason="around the session it would never give up",
    ),
    Case(
        name="local traces stay local",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
for prompt in ["a", "b"]:
    with model.trace(prompt):
        out = model.lm_head.output.save()
""",
    ),
    Case(
        name="progress bar: replayed over the rows after the session",
        before="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in tqdm(["a", "b"]):
    with model.trace(prompt, remote=True):
        outs.append(model.lm_head.output.save())
print(len(outs))
""",
        after="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    outs = list().save()
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in ["a", "b"]:
        with model.trace(prompt):
            outs.append(model.lm_head.output)
        _ndif_rows.append(None)
for _ndif_row in tqdm(_ndif_rows):
    pass
print(len(outs))
""",
    ),
    Case(
        name="progress bar dropped with --unsafe-fixes",
        unsafe_fixes=True,
        before="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
outs = []
for prompt in tqdm(["a", "b"]):
    with model.trace(prompt, remote=True):
        outs.append(model.lm_head.output.save())
print(len(outs))
""",
        after="""\
from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    outs = list().save()
    for prompt in ["a", "b"]:
        with model.trace(prompt):
            outs.append(model.lm_head.output)
print(len(outs))
""",
    ),
    Case(
        name="nnterp: a loop of StandardizedTransformer traces that prints per prompt",
        before="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
prompts = ["The Eiffel Tower is in", "The capital of Japan is"]
for prompt in prompts:
    with model.trace(prompt, remote=True):
        resid = model.layers_output[20][:, -1].save()
        probs = model.next_token_probs.save()
    print(prompt, resid.norm().item(), probs[0].argmax().item())
""",
        after="""\
from nnterp import StandardizedTransformer

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
prompts = ["The Eiffel Tower is in", "The capital of Japan is"]
with model.session(remote=True):
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in prompts:
        with model.trace(prompt):
            resid = model.layers_output[20][:, -1]
            probs = model.next_token_probs
        _ndif_rows.append({
            "prompt": prompt,
            "resid_norm": resid.norm().item(),
            "probs_argmax": probs[0].argmax().item(),
        })
for _ndif_row in _ndif_rows:
    prompt = _ndif_row["prompt"]
    print(prompt, _ndif_row["resid_norm"], _ndif_row["probs_argmax"])
""",
    ),
    Case(
        name="a library function that sends its own request runs on your machine, after the session",
        before="""\
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import collect_token_activations_batched

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
for prompt in ["a b", "c d"]:
    with model.trace(prompt, remote=True):
        probs = model.next_token_probs[0].save()
    acts = collect_token_activations_batched(model, [prompt], batch_size=1, layers=[3], remote=True)
""",
        after="""\
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import collect_token_activations_batched

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
with model.session(remote=True):
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            probs = model.next_token_probs[0].save()
        _ndif_rows.append(prompt)
for prompt in _ndif_rows:
    acts = collect_token_activations_batched(model, [prompt], batch_size=1, layers=[3], remote=True)
""",
    ),
    Case(
        name="a library function that sends its own request, whose result the session needs",
        before="""\
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import get_token_activations

model = StandardizedTransformer("meta-llama/Llama-3.1-8B")
for prompt in ["a b", "c d"]:
    acts = get_token_activations(model, [prompt], layers=[3], remote=True)
    with model.trace(prompt, remote=True):
        model.layers_output[3][:, -1] += acts[0]
        probs = model.next_token_probs[0].save()
""",
        reason="`acts` is computed by code that must run on your machine and is also used by the remote part",
    ),
    Case(
        name="a list only the session reads is made there and not downloaded (a function's local)",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top():
    states = []
    for prompt in ["a b", "c d"]:
        with model.trace(prompt, remote=True):
            states.append(model.transformer.h[6].output[0, -1].save())
    mean = torch.stack(states).mean(dim=0)
    with model.trace("e f", remote=True):
        model.transformer.h[6].output[0, -1] += mean
        top = model.lm_head.output[0, -1].argmax().save()
    return top
""",
        after="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def steered_top():
    with model.session(remote=True):
        states = []
        for prompt in ["a b", "c d"]:
            with model.trace(prompt):
                states.append(model.transformer.h[6].output[0, -1])
        mean = torch.stack(states).mean(dim=0)
        with model.trace("e f"):
            model.transformer.h[6].output[0, -1] += mean
            top = model.lm_head.output[0, -1].argmax().save()
    return top
""",
    ),
    Case(
        name="a module-level list the session fills comes back: it is a result of the script",
        before="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
states = []
for prompt in ["a b", "c d"]:
    with model.trace(prompt, remote=True):
        states.append(model.transformer.h[6].output[0, -1].save())
mean = torch.stack(states).mean(dim=0)
with model.trace("e f", remote=True):
    model.transformer.h[6].output[0, -1] += mean
    top = model.lm_head.output[0, -1].argmax().save()
print(top)
""",
        after="""\
import torch
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
with model.session(remote=True):
    states = list().save()
    for prompt in ["a b", "c d"]:
        with model.trace(prompt):
            states.append(model.transformer.h[6].output[0, -1])
    mean = torch.stack(states).mean(dim=0).save()
    with model.trace("e f"):
        model.transformer.h[6].output[0, -1] += mean
        top = model.lm_head.output[0, -1].argmax().save()
print(top)
""",
    ),
    Case(
        name="a function that sends a request, mapped over prompts, is named",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


tops = list(map(top_token, ["The Eiffel Tower is in", "Water boils at"]))
print(tops)
""",
        reason="write it as a comprehension",
    ),
    Case(
        name="a retry whose loop has an `else:` clause names the clause",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
top = {}
for prompt in ["The Eiffel Tower is in", "Water boils at"]:
    for attempt in range(3):
        try:
            with model.trace(prompt, remote=True):
                ids = model.lm_head.output[0, -1].topk(5).indices.save()
            break
        except Exception:
            print("retrying", attempt)
    else:
        continue
    top[prompt] = ids.tolist()
""",
        reason="and remote work are both in a `for` loop with an `else:` clause",
    ),
    Case(
        name="a `return` whose value sends the requests: the value first, then one session",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


def top_tokens(prompts):
    return [top_token(p) for p in prompts]  # one request per prompt
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt, remote=True):
    with model.trace(prompt, remote=remote):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


def top_tokens(prompts):
    with model.session(remote=True):
        result = [top_token(p, remote=False) for p in prompts].save()  # one request per prompt
    return result
""",
    ),
    Case(
        name="a helper defined inside the function that calls it",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_tokens(prompts):
    def top_token(prompt):
        with model.trace(prompt, remote=True):
            logits = model.lm_head.output.save()
        return logits[0, -1].argmax().item()

    tops = [top_token(p) for p in prompts]
    return tops
""",
        after="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_tokens(prompts):
    def top_token(prompt, remote=True):
        with model.trace(prompt, remote=remote):
            logits = model.lm_head.output.save()
        return logits[0, -1].argmax().item()

    with model.session(remote=True):
        tops = [top_token(p, remote=False) for p in prompts].save()
    return tops
""",
    ),
    Case(
        name="a `return` in a branch stays: only one in the function's own body is computed first",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")


def top_token(prompt):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


def top_tokens(prompts, first_only):
    if first_only:
        return [top_token(p) for p in prompts[:1]]
    else:
        return [top_token(p) for p in prompts]
""",
        reason="the code returns from the function",
    ),
    Case(
        name="a `try` with only `finally:` handles no failure: no fallback on the code as written",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
tops = []
try:
    for prompt in ["The Eiffel Tower is in", "Water boils at"]:
        with model.trace(prompt, remote=True):
            top = model.lm_head.output[0, -1].argmax().save()
        tops.append(top.item())
finally:
    print("done")
""",
        after="""\
from nnsight import LanguageModel
import nnsight

model = LanguageModel("openai-community/gpt2")
tops = []
try:
    with model.session(remote=True):
        tops = nnsight.save(tops)
        for prompt in ["The Eiffel Tower is in", "Water boils at"]:
            with model.trace(prompt):
                top = model.lm_head.output[0, -1].argmax().save()
            tops.append(top.item())
finally:
    print("done")
""",
    ),
    Case(
        name="a statement whose calls trace two models names no one model's session",
        before="""\
from nnsight import LanguageModel

gpt2 = LanguageModel("openai-community/gpt2")
llama = LanguageModel("meta-llama/Llama-3.1-8B")


def top(lm, prompt):
    with lm.trace(prompt, remote=True):
        logits = lm.lm_head.output.save()
    return logits[0, -1].argmax().item()


def both(prompt):
    return top(gpt2, prompt), top(llama, prompt)
""",
        reason="not all to one model the code names",
    ),
    Case(
        name="a function defined in a loop is named, not left silent",
        before="""\
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
table = []
for layer in (0, 2):
    def hidden_at(prompt):
        with model.trace(prompt, remote=True):
            h = model.transformer.h[layer].output.save()
        return h

    table.append([hidden_at(p).shape for p in ["a b", "c d"]])
""",
        reason="is defined in a loop or a branch, more than once, or under a name other code binds too",
    ),
)
