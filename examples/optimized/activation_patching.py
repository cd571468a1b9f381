"""Activation patching on GPT-2: patch the clean run's last-token residual stream into
the corrupted run, one layer at a time, and measure the logit difference."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
N_LAYERS = 12

CLEAN = "The Eiffel Tower is in the city of"
CORRUPT = "The Colosseum is in the city of"
target = model.tokenizer(" Paris")["input_ids"][0]
distractor = model.tokenizer(" Rome")["input_ids"][0]

with model.session(remote=True):
    # cache the clean activations
    clean_acts = dict().save()
    with model.trace(CLEAN):
        for layer in range(N_LAYERS):
            clean_acts[layer] = model.transformer.h[layer].output[:, -1]

    logit_diffs = list().save()
    # layers before the patched one are the same in every iteration: compute them once
    _ndif_cache = list()
    with model.trace(CORRUPT) as _ndif_tracer:
        for _ndif_i in range(N_LAYERS):
            _ndif_cache.append(model.transformer.h[_ndif_i].output)
        _ndif_tracer.stop()
    for layer in range(N_LAYERS):
        with model.trace(CORRUPT):
            for _ndif_i in range(layer):
                model.transformer.h[_ndif_i].skip(_ndif_cache[_ndif_i])
            model.transformer.h[layer].output[:, -1] = clean_acts[layer]
            logits = model.lm_head.output
        logit_diffs.append((logits[0, -1, target] - logits[0, -1, distractor]).item())

best_layer = max(range(N_LAYERS), key=lambda i: logit_diffs[i])
print(f"best layer: {best_layer}")
