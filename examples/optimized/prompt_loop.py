"""Next-token predictions of GPT-2 for a handful of prompts, one request each."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")

PROMPTS = [
    "The Eiffel Tower is in the city of",
    "The capital of Japan is",
    "The cat sat on the",
    "Water boils at a temperature of",
    "The first president of the United States was",
    "Hello, my name is",
    "The largest planet in the solar system is",
    "The quick brown fox jumps over the",
]

with model.session(remote=True):
    top_tokens = dict().save()
    for prompt in PROMPTS:
        with model.trace(prompt):
            logits = model.lm_head.output
        # the most likely next token for this prompt
        top_tokens[prompt] = logits[0, -1].argmax().item()

print(top_tokens)
