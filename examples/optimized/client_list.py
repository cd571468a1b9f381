"""The classic gotcha: a client-side list appended inside a remote session.

It works locally. On NDIF the appends happen on the server's copy, and `results`
stays empty here.
"""
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
prompt = "The Eiffel Tower is in the city of"

with model.session(remote=True):
    results = list().save()
    with model.trace(prompt):
        for layer in range(4):
            results.append(model.model.layers[layer].output[:, -1])

print(len(results))
