"""Logit lens on Llama-3.1-8B: which token does each layer predict next?

Naive version: one remote request per layer, and the predictions are collected in a
list that lives on this machine (so remotely it comes back empty).
"""
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B", device_map="auto")
PROMPT = "The Eiffel Tower is in the city of"
N_LAYERS = 32

with model.session(remote=True):
    predictions = list().save()
    with model.trace(PROMPT):
        for layer in range(N_LAYERS):
            hidden = model.model.layers[layer].output
            # decode the residual stream through the final norm and the unembedding
            logits = model.lm_head(model.model.norm(hidden))
            predictions.append(logits[0, -1].argmax(dim=-1))

top_tokens = [int(p) for p in predictions]
print(top_tokens)
