"""Which layer carries the answer? Zero-ablate the last token's residual stream at one
layer at a time on Llama-3.1-8B and measure how much the answer's probability drops."""
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
PROMPT = "The capital of France is"
N_LAYERS = 32
answer = model.tokenizer(" Paris")["input_ids"][-1]

with model.trace(PROMPT, remote=True):
    baseline = model.lm_head.output[0, -1].softmax(dim=-1)[answer].save()

drops = {}
for layer in range(N_LAYERS):
    with model.trace(PROMPT, remote=True):
        # remove everything the last token has gathered up to this layer
        model.model.layers[layer].output[:, -1] = 0
        probs = model.lm_head.output[0, -1].softmax(dim=-1).save()
    drops[layer] = (baseline - probs[answer]).item()

worst = max(drops, key=drops.get)
print(f"ablating layer {worst} hurts most: the answer loses {drops[worst]:.4f}")
