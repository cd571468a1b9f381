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

for prompt in prompts:
    with model.trace(prompt, remote=REMOTE):
        pattern = model.attention_probabilities[40].save()  # [batch, heads, seq, seq]
        resid = model.layers_output[40].save()  # [batch, seq, hidden]
        probs = model.next_token_probs.save()  # [batch, vocab]
    top = probs[0].argmax().item()
    print(f"{prompt!r}: top token {top}, p={probs[0, top].item():.3f}, "
          f"|resid|={resid[0, -1].norm().item():.1f}, max attention {pattern[0, :, -1].max().item():.3f}")

# nnterp batches this one itself: one session for every prompt
acts = collect_token_activations_batched(model, prompts, batch_size=2, layers=[20, 40], remote=REMOTE)
print(acts.shape)
