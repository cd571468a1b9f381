"""How fast does Llama-3.1-8B's last-token residual stream change from layer to layer?

Naive version: one remote forward pass per layer, each reading a single layer.
"""
import torch
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
PROMPT = "The Eiffel Tower is in the city of"
N_LAYERS = 32

with model.session(remote=True):
    residuals = list().save()
    with model.trace(PROMPT):
        for layer in range(N_LAYERS):
            # the residual stream at the last token, after this layer
            residuals.append(model.model.layers[layer].output[0, -1])

stacked = torch.stack(residuals)
similarity = torch.nn.functional.cosine_similarity(stacked[1:], stacked[:-1], dim=-1)
norms = stacked.norm(dim=-1)
print([round(s, 3) for s in similarity.tolist()])
print(f"norm grows {norms[-1] / norms[0]:.1f}x from the first layer to the last")
