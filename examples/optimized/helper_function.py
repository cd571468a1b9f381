"""Top next-token per prompt, computed by a small helper that runs one remote trace.

The trace lives in `top_token`, which the loop calls once per prompt: one request each.
"""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = [
    "The Eiffel Tower is in the city of",
    "The capital of Japan is",
    "The cat sat on the",
    "Hello, my name is",
    "Water boils at a temperature of",
    "The largest planet in the solar system is",
]


def top_token(prompt, remote=True):
    """The model's most likely next token after `prompt`."""
    with model.trace(prompt, remote=remote):
        logits = model.lm_head.output.save()
    return logits[0, -1].argmax().item()


with model.session(remote=True):
    tops = list().save()
    for prompt in PROMPTS:
        tops.append(top_token(prompt, remote=False))  # one request per prompt

print(tops)
