"""Per-layer statistics of GPT-2's residual stream, kept in a dict keyed by layer."""
from nnsight import LanguageModel

model = LanguageModel("openai-community/gpt2")
prompt = "Interpretability research needs fast experiments."

with model.session(remote=True):
    stats = dict().save()
    with model.trace(prompt):
        for layer in range(12):
            hidden = model.transformer.h[layer].output
            stats[f"layer_{layer}"] = {
                "norm": hidden.norm().item(),
                "mean": hidden.mean().item(),
                "std": hidden.std().item(),
            }

print(stats["layer_11"])
