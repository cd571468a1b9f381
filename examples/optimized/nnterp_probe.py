"""Probing Llama-3.1-70B with nnterp's standardized names: one remote trace per prompt.

Each prompt's trace downloads the whole residual stream of a layer, the whole next-token
distribution and a whole attention pattern, and the loop prints as it goes.
"""
from nnterp import StandardizedTransformer
from nnterp.nnsight_utils import collect_token_activations_batched

REMOTE = True
model = StandardizedTransformer("meta-llama/Llama-3.1-70B", enable_attention_probs=True)

prompts = [
    "The Eiffel Tower is in the city of",
    "The capital of Japan is",
    "Water boils at a temperature of",
    "The first president of the United States was",
]

with model.session(remote=REMOTE):
    _ndif_rows = list().save()
    for prompt in prompts:
        with model.trace(prompt):
            pattern = model.attention_probabilities[40]  # [batch, heads, seq, seq]
            resid = model.layers_output[40]  # [batch, seq, hidden]
            probs = model.next_token_probs  # [batch, vocab]
        top = probs[0].argmax().item()
        _ndif_rows.append((prompt, top, probs[0, top].item(), resid[0, -1].norm().item(), pattern[0, :, -1].max().item()))

for prompt, top, probs_then, resid_then, pattern_then in _ndif_rows:
    print(f"{prompt!r}: top token {top}, p={probs_then:.3f}, "
          f"|resid|={resid_then:.1f}, max attention {pattern_then:.3f}")

# nnterp batches this one itself: one session for every prompt
acts = collect_token_activations_batched(model, prompts, batch_size=2, layers=[20, 40], remote=REMOTE)
print(acts.shape)
