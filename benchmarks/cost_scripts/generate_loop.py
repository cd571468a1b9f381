"""Greedy continuations of a few prompts, one remote generate each."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The cat sat on the", "Water boils at a temperature of"]

continuations = []
for prompt in PROMPTS:
    with model.generate(prompt, max_new_tokens=4, remote=True):
        tokens = model.generator.output.save()
    continuations.append(tokens[0].tolist())

print(continuations)
