"""Which layer carries the answer? Zero-ablate the last token's residual stream at one
layer at a time on Llama-3.1-8B and measure how much the answer's probability drops."""
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
PROMPT = "The capital of France is"
N_LAYERS = 32
answer = model.tokenizer(" Paris")["input_ids"][-1]

with model.session(remote=True):
    with model.trace(PROMPT):
        baseline = model.lm_head.output[0, -1].softmax(dim=-1)[answer]

    drops = dict().save()
    # layers before the patched one are the same in every iteration: compute them once
    _ndif_cache = list()
    with model.trace(PROMPT) as _ndif_tracer:
        for _ndif_i in range(N_LAYERS):
            _ndif_cache.append(model.model.layers[_ndif_i].output)
        _ndif_tracer.stop()
    for layer in range(N_LAYERS):
        with model.trace(PROMPT):
            for _ndif_i in range(layer):
                model.model.layers[_ndif_i].skip(_ndif_cache[_ndif_i])
            # remove everything the last token has gathered up to this layer
            model.model.layers[layer].output[:, -1] = 0
            probs = model.lm_head.output[0, -1].softmax(dim=-1)
        drops[layer] = (baseline - probs[answer]).item()

worst = max(drops, key=drops.get)
print(f"ablating layer {worst} hurts most: the answer loses {drops[worst]:.4f}")
