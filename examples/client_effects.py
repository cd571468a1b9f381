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

for i, prompt in enumerate(tqdm(PROMPTS, desc="prompts")):
    with model.trace(prompt, remote=True):
        logits = model.lm_head.output[0, -1].save()
    top = logits.argmax().item()
    print(f"{i}: {prompt!r} -> {top}")
    with open("predictions.jsonl", "a") as f:
        f.write(json.dumps({"prompt": prompt, "top": top}) + "\n")
