"""Each trace under a retry: a run without failures sends each request once."""
import time

from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
PROMPTS = ["The capital of France is", "The capital of Italy is", "The capital of Spain is"]

tops = []
for prompt in PROMPTS:
    for attempt in range(3):
        try:
            with model.trace(prompt, remote=True):
                logits = model.lm_head.output[0, -1].save()
            break
        except Exception as error:
            print(f"attempt {attempt + 1} failed: {error!r}")
            time.sleep(1)
    tops.append(int(logits.argmax()))

print(tops)
