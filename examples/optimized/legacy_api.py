"""Hidden-state norms, an ablation and a logit gap on GPT-2, written for nnsight 0.4.

Pre-0.5 API throughout: saved values are read with `.value`, the per-layer list is an
`nnsight.list()`, `scan=`/`validate=` are passed to the trace, code after the invokes
of a trace reads their values, and decoder layers are indexed with `output[0]` (a
tuple before transformers 5). On nnsight 0.8 it fails at the first `nnsight.list()`;
`ndif-opt --migrate` rewrites it, then optimizes it.
"""
import nnsight
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2", device_map="auto")
PROMPTS = ["The Eiffel Tower is in the city of", "The capital of Japan is", "Hello, my name is"]
LAYERS = [0, 4, 8, 11]

with model.session(remote=True):
    # last-token hidden-state norms at a few layers, one request per prompt
    norms = list().save()
    for prompt in PROMPTS:
        with model.trace(prompt):
            per_layer = list().save()
            for layer in LAYERS:
                per_layer.append(model.transformer.h[layer].output[:, -1].norm())
        norms.append(per_layer)

    # zero-ablate layer 6 at the last position: does the prediction change?
    with model.trace(PROMPTS[0]):
        clean = model.lm_head.output[0, -1].argmax(dim=-1)
        clean_item = clean.item().save()
    with model.trace(PROMPTS[0]):
        model.transformer.h[6].output[:, -1, :] = 0
        ablated_hidden = model.transformer.h[6].output.save()
        ablated = model.lm_head.output[0, -1].argmax(dim=-1)
        ablated_item = ablated.item().save()

# how far apart are the next-token logits of two prompts? (one batched forward pass)
with model.session(remote=True):
    with model.trace() as tracer:
        with tracer.invoke("The Eiffel Tower is in the city of"):
            paris = model.lm_head.output[0, -1]
        with tracer.invoke("The Colosseum is in the city of"):
            rome = model.lm_head.output[0, -1]
    gap = (paris - rome).abs().max().save()

print([[round(float(n), 3) for n in row] for row in norms])
print(clean_item, ablated_item, tuple(ablated_hidden.shape))
print(round(float(gap), 4))
