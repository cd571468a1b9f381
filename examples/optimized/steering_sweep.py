"""Steering Llama-3.1-8B with a difference-of-means vector at several strengths."""
import torch
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
LAYER = 12
COEFFICIENTS = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0]
PROMPT = "I think this movie is"

with model.session(remote=True):
    with model.trace("I love this so much"):
        positive = model.model.layers[LAYER].output.mean(dim=1)
    with model.trace("I hate this so much"):
        negative = model.model.layers[LAYER].output.mean(dim=1)

    steering = (positive - negative).save()
    good = model.tokenizer(" great")["input_ids"][0].save()

    probabilities = dict().save()
    # layers before the patched one are the same in every iteration: compute them once
    _ndif_cache = list()
    with model.trace(PROMPT) as _ndif_tracer:
        for _ndif_i in range(LAYER):
            _ndif_cache.append(model.model.layers[_ndif_i].output)
        _ndif_tracer.stop()
    for coefficient in COEFFICIENTS:
        with model.trace(PROMPT):
            for _ndif_i in range(LAYER):
                model.model.layers[_ndif_i].skip(_ndif_cache[_ndif_i])
            model.model.layers[LAYER].output = model.model.layers[LAYER].output + coefficient * steering
            logits = model.lm_head.output
        probabilities[coefficient] = torch.softmax(logits[0, -1], dim=-1)[good].item()

print(probabilities)
