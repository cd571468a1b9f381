"""A sweep the script defines and never calls: it sends nothing when the script runs."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The Colosseum is in"]


def full_sweep(prompts):
    """Every layer of every prompt: written for later, not called here."""
    found = {}
    for prompt in prompts:
        for layer in range(len(model.transformer.h)):
            with model.trace(prompt, remote=True):
                found[(prompt, layer)] = model.transformer.h[layer].output[0, -1].save()
    return found


last = []
for prompt in PROMPTS:
    with model.trace(prompt, remote=True):
        hidden = model.transformer.h[-1].output[0, -1].save()
    last.append(hidden.norm().item())

print([round(n, 3) for n in last])
