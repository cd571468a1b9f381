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
    _ndif_rows = list().save()  # one record per iteration, replayed after the session
    for prompt in prompts:
        with model.trace(prompt):
            pattern = model.attention_probabilities[40]  # [batch, heads, seq, seq]
            resid = model.layers_output[40]  # [batch, seq, hidden]
            probs = model.next_token_probs  # [batch, vocab]
        top = probs[0].argmax().item()
        _ndif_rows.append({
            "prompt": prompt,
            "top": top,
            "probs_top": probs[0, top].item(),
            "resid_norm": resid[0, -1].norm().item(),
            "pattern_max": pattern[0, :, -1].max().item(),
        })

for _ndif_row in _ndif_rows:
    prompt = _ndif_row["prompt"]
    top = _ndif_row["top"]
    print(f"{prompt!r}: top token {top}, p={_ndif_row['probs_top']:.3f}, "
          f"|resid|={_ndif_row['resid_norm']:.1f}, max attention {_ndif_row['pattern_max']:.3f}")

# nnterp batches this one itself: one session for every prompt
acts = collect_token_activations_batched(model, prompts, batch_size=2, layers=[20, 40], remote=REMOTE)
print(acts.shape)
