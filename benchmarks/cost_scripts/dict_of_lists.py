"""Activations gathered into a dict of lists, one list per layer, prompt by prompt."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The Eiffel Tower is in", "The Colosseum is in", "Big Ben is in", "The Alhambra is in"]

acts = {"early": [], "late": []}
for prompt in PROMPTS:
    with model.trace(prompt, remote=True):
        early = model.transformer.h[0].output[0, -1].save()
        late = model.transformer.h[-1].output[0, -1].save()
    acts["early"].append(early)
    acts["late"].append(late)

print({name: len(values) for name, values in acts.items()})
