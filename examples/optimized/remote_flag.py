"""Per-layer residual norms on Llama-3.1-8B, with remote execution behind a flag.

Real scripts keep `remote=` in a config so they can run locally on a small model too.
"""
from dataclasses import dataclass

from nnsight import LanguageModel


@dataclass
class Config:
    model_name: str = "meta-llama/Llama-3.1-8B"
    remote: bool = True
    prompt: str = "Interpretability research needs fast experiments."


CONFIG = Config()
model = LanguageModel(CONFIG.model_name)


def layer_norms(n_layers, remote=CONFIG.remote):
    with model.session(remote=remote):
        norms = dict().save()
        with model.trace(CONFIG.prompt):
            for layer in range(n_layers):
                hidden = model.model.layers[layer].output
                norms[layer] = hidden[0, -1].norm().item()
    return norms


norms = layer_norms(32)
print(max(norms, key=norms.get))
