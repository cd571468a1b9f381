"""Last-token hidden states of Llama for several prompts: one trace per prompt, then the
same prompts batched as invokes of one trace."""
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.2-1B")
PROMPTS = ["The Eiffel Tower is in the city of", "The capital of Japan is", "Hello, my name is"]

last_hidden = {}
for prompt in PROMPTS:
    with model.trace(prompt, remote=True):
        last_hidden[prompt] = model.model.layers[-1].output[0, -1].save()

with model.trace(remote=True) as tracer:
    predictions = list().save()
    for prompt in PROMPTS:
        with tracer.invoke(prompt):
            predictions.append(model.lm_head.output[0, -1].argmax(dim=-1))

print(sorted(last_hidden), [int(p) for p in predictions])
