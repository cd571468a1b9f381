"""Predictions for a list of prompts, printed and appended to a file as they arrive."""
import json

from tqdm import tqdm
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = [
    "The Eiffel Tower is in the city of",
    "The capital of Japan is",
    "The cat sat on the",
    "Hello, my name is",
]

with model.session(remote=True):
    _ndif_carry = list().save()
    for i, prompt in enumerate(PROMPTS):
        with model.trace(prompt):
            logits = model.lm_head.output[0, -1]
        _ndif_carry.append(logits)
for (i, prompt), logits in zip(enumerate(tqdm(PROMPTS, desc="prompts")), _ndif_carry):
    top = logits.argmax().item()
    print(f"{i}: {prompt!r} -> {top}")
    with open("predictions.jsonl", "a") as f:
        f.write(json.dumps({"prompt": prompt, "top": top}) + "\n")
