"""A helper that runs one remote trace, called once per layer of the module list."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPT = "Interpretability research needs fast experiments."


def residual(layer):
    with model.trace(PROMPT, remote=True):
        hidden = model.transformer.h[layer].output.save()
    return hidden


norms = []
for layer in range(len(model.transformer.h)):
    norms.append(residual(layer).norm().item())

print([round(n, 3) for n in norms])
