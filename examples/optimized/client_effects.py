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
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for i, prompt in enumerate(PROMPTS):
        with model.trace(prompt):
            logits = model.lm_head.output[0, -1]
        top = logits.argmax().item()
        _ndif_rows.append((i, prompt, top))

for i, prompt, top in tqdm(_ndif_rows, desc="prompts"):
    print(f"{i}: {prompt!r} -> {top}")
    with open("predictions.jsonl", "a") as f:
        f.write(json.dumps({"prompt": prompt, "top": top}) + "\n")
