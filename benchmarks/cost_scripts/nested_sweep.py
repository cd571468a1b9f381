"""Ablation sweep over layers and scales: the next-token distribution's top probability."""
import torch
from nnsight import LanguageModel

model = LanguageModel("meta-llama/Llama-3.1-8B")
PROMPT = "The capital of France is"
SCALES = [0.0, 0.5, 2.0]

top_prob = {}
for layer in range(0, 32, 8):
    for scale in SCALES:
        with model.trace(PROMPT, remote=True):
            model.model.layers[layer].output[:] = model.model.layers[layer].output * scale
            probs = torch.softmax(model.lm_head.output[0, -1], dim=-1).save()
        top_prob[(layer, scale)] = probs.max().item()

print(max(top_prob, key=top_prob.get))
